package policy

import (
	"math"
	"strconv"
)

// DefaultQueueCuts are the 2D-LAS queue thresholds in GPU-seconds of
// Tiresias' public simulator.
var DefaultQueueCuts = []float64{3250, 7200}

// queues is the multi-level queue both Tiresias policies share: a job's
// queue is the number of cuts its attained GPU-seconds have reached, new
// jobs start in queue 0, and the promote knob moves a pending job that has
// waited K × its executed time back to queue 0.
type queues struct {
	cuts        []float64
	promoteKnob float64 // 0: off
	compat      bool    // follow the reference simulator's arithmetic
	reasons     []string
}

func newQueues(cuts []float64, knob float64, compat bool) queues {
	if len(cuts) == 0 {
		cuts = DefaultQueueCuts
	}
	q := queues{cuts: cuts, promoteKnob: knob, compat: compat}
	for i := 0; i <= len(cuts); i++ {
		switch {
		case i == 0:
			q.reasons = append(q.reasons, "queue 0: attained below "+gpuSeconds(cuts[0]))
		default:
			q.reasons = append(q.reasons, "queue "+strconv.Itoa(i)+": attained at least "+gpuSeconds(cuts[i-1]))
		}
	}
	return q
}

func gpuSeconds(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) + " GPU-s" }

// queueOf is the queue a job's attained service puts it in.
func (q *queues) queueOf(attained float64) int {
	n := 0
	for _, c := range q.cuts {
		if attained >= c-1e-9 {
			n++
		}
	}
	return n
}

// settled says a job planned before is still in its last round's queue;
// for a pending job, also that the promote knob has not lifted it.
func (q *queues) settled(j *Job) bool {
	qi := q.queueOf(j.Attained)
	return j.PrevQueue == qi && !q.starving(j, qi)
}

// starving says whether the promote knob lifts a pending job to queue 0.
func (q *queues) starving(j *Job, queue int) bool {
	if q.promoteKnob <= 0 || queue == 0 || j.State != Pending || j.Executed <= 0 {
		return false
	}
	limit := j.Executed * q.promoteKnob
	if q.compat {
		limit = math.Trunc(limit)
	}
	return j.Wait >= limit
}

// assign sets Queue, Band, Promoted and Reason, and the first two sort
// keys: queue, then the job's place within it. Within a queue, jobs that
// were already there keep their previous order with running jobs first
// (so a queue does not thrash), and jobs that just entered it go to the
// end: arrivals before promoted or demoted jobs, each in arrival order.
// This is also exactly how the reference simulator orders its queue lists.
func (q *queues) assign(s *Snapshot, ds []Decision) {
	for i := range ds {
		j, d := &s.Jobs[i], &ds[i]
		qi := q.queueOf(j.Attained)
		d.Reason = q.reasons[qi]
		if q.starving(j, qi) {
			qi, d.Promoted = 0, true
			d.Reason = "promoted to queue 0: waited at least " +
				strconv.FormatFloat(q.promoteKnob, 'f', -1, 64) + "× its executed time"
		}
		d.Queue, d.Band, d.k1 = qi, qi, float64(qi)
		switch {
		case j.PrevQueue == qi && !d.Promoted:
			d.k2 = 1
			if j.State == Running {
				d.k2 = 0
			}
			d.k3 = float64(j.PrevRank)
		case j.PrevQueue < 0:
			d.k2, d.k3 = 2, 0
		default:
			d.k2, d.k3 = 2, 1
		}
	}
}

// wake is how long until a running job crosses its next cut or a pending
// one starts to starve, given this round's Run decisions.
func (q *queues) wake(s *Snapshot, r *Result) float64 {
	w := inf
	last := len(q.cuts)
	for i := range r.Decisions {
		j, d := &s.Jobs[i], &r.Decisions[i]
		attained, executed, wait := counters(j, d)
		switch {
		case d.Run && d.Queue < last:
			g := float64(max(j.GPUs, 1))
			var t float64
			if q.compat {
				// The reference takes executed seconds (not GPU-seconds)
				// from the GPU-second cut and floors the division, so
				// multi-GPU jobs are checked early and demote late.
				t = math.Floor((q.cuts[d.Queue] - executed) / g)
			} else {
				t = q.toCut(attained, g, d.Queue)
			}
			w = min(w, max(t, 0))
		case !d.Run && q.promoteKnob > 0 && d.Queue > 0 && executed > 0:
			t := executed*q.promoteKnob - wait
			if q.compat {
				t = math.Trunc(t)
			}
			if t > 0 {
				w = min(w, t)
			}
		}
	}
	return w
}

// toCut is how long a job with the attained service on g GPUs takes to
// reach queue qi's cut.
func (q *queues) toCut(attained, g float64, qi int) float64 {
	return (q.cuts[qi] - attained) / g
}

// counters are a job's attained service, executed time and wait as the
// round leaves them: a promotion resets all three (the caller zeroes them
// after the round), so a promoted job's wake-up and rank are timed from
// zero, as the reference simulator times them.
func counters(j *Job, d *Decision) (attained, executed, wait float64) {
	if d.Promoted {
		return 0, 0, 0
	}
	return j.Attained, j.Executed, j.Wait
}

// lasOrder is Tiresias' 2D-LAS: discretised least attained service, where
// service counts both time and GPUs.
type lasOrder struct{ q queues }

func (lasOrder) Name() string     { return "las" }
func (lasOrder) Preemptive() bool { return true }

// settled: within a queue, jobs keep the order of the last round, so a job
// keeps its place while its attained service stays in the same queue.
func (o lasOrder) settled(_ *Snapshot, j *Job) bool { return o.q.settled(j) }
func (o lasOrder) entryQueue() int                  { return o.q.queueOf(0) }

func (o lasOrder) queueRule() QueueRule { return QueueRule{q: &o.q} }

func (o lasOrder) Order(s *Snapshot, ds []Decision) float64 {
	o.q.assign(s, ds)
	return inf // the queue wake depends on who runs; see Wake
}

func (o lasOrder) Wake(s *Snapshot, r *Result) float64 { return o.q.wake(s, r) }
