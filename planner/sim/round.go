package sim

import (
	"container/heap"
	"math"

	"github.com/caravan-gpu/caravan/planner/policy"
)

// planRound builds the Snapshot, asks the policy, and carries out its
// decisions.
func (s *simulator) planRound() {
	if s.arrivals != nil {
		s.arrivalRound()
		return
	}
	s.rounds++
	s.dropFinished()
	snapJobs := s.snap.Jobs[:0]
	for _, i := range s.active {
		js := &s.jobs[i]
		s.settle(js)
		snapJobs = append(snapJobs, js.Job)
		j := &snapJobs[len(snapJobs)-1]
		if js.rates != nil {
			j.RemainingWork = max(js.work, 0)
			j.Remaining = j.RemainingWork / maxRate(js.rates)
		} else {
			j.Remaining = max(js.work, 0)
		}
		if s.cfg.Compat {
			j.Wait = js.promoWait
		}
	}
	s.snap.Jobs = snapJobs
	s.snap.Now = s.now
	s.learnSizes()

	r := s.cfg.Policy.Plan(&s.snap, &s.plan)
	for k, i := range s.active {
		d := &r.Decisions[k]
		js := &s.jobs[i]
		js.PrevQueue, js.PrevRank = d.Queue, d.Rank
		if d.Promoted {
			js.Attained, js.Executed, js.Wait, js.promoWait = 0, 0, 0, 0
		}
		if js.State == policy.Running && !d.Run {
			s.preempt(i)
		}
	}
	for k, i := range s.active {
		d := &r.Decisions[k]
		js := &s.jobs[i]
		switch {
		case js.State == policy.Pending && d.Run:
			s.start(i, d)
		case js.State == policy.Running && d.Speedup != js.speedup:
			js.speedup = d.Speedup
			s.reschedule(i)
		}
	}
	if s.anyLanes {
		s.refreshLaneRates()
	}
	s.nextRank = len(s.active)
	s.blocked = s.pending > 0
	s.head = -1
	if s.blocked && s.cfg.Policy.Blocking {
		for _, k := range r.Order {
			if i := s.active[k]; s.jobs[i].State == policy.Pending {
				s.head = i
				break
			}
		}
	}
	s.wakeAt = math.Inf(1)
	if !math.IsInf(r.Wake, 1) {
		s.wakeAt = s.now + max(r.Wake, 1e-3)
	}
}

// dropFinished removes finished jobs from the active set, keeping its
// arrival order.
func (s *simulator) dropFinished() {
	w := 0
	for _, i := range s.active {
		if !s.jobs[i].done {
			s.active[w] = i
			w++
		}
	}
	s.active = s.active[:w]
}

func maxRate(rates map[string]float64) float64 {
	best := 0.0
	for _, r := range rates {
		best = max(best, r)
	}
	return best
}

// learnSizes refreshes the completed-size distribution 2D-Gittins may learn
// from, whenever it has grown by a tenth.
func (s *simulator) learnSizes() {
	if s.cfg.Policy.Order.Name() != "gittins" {
		return // only 2D-Gittins reads the completed sizes
	}
	if n := len(s.sizes); n >= 10 && float64(n) >= 1.1*float64(s.sizesBuilt) {
		s.snap.CompletedSizes = policy.NewSizeDistribution(s.sizes)
		s.sizesBuilt = n
	}
}

func (s *simulator) gpuUse(js *jobState) float64 {
	if js.laneShare > 0 {
		return 0 // lanes count their GPU once, in occupyLane
	}
	return float64(js.GPUs)
}

func (s *simulator) start(i int, d *policy.Decision) {
	js := &s.jobs[i]
	s.settle(js)
	js.State = policy.Running
	js.Wait = 0
	js.GPUModel = d.GPUModel
	js.Placement = d.Slots
	js.speedup = d.Speedup
	s.pending--
	if !js.started {
		js.started, js.start = true, s.now
	} else if s.cfg.PreemptionCost > 0 {
		js.work += s.cfg.PreemptionCost * s.baseRate(js)
	}
	if idle := s.cfg.StartLatency + s.cfg.RunOverhead; idle > 0 {
		js.work += idle * s.baseRate(js)
	}
	js.latency = s.cfg.StartLatency
	js.laneShare = 0
	if d.Lane && len(d.Slots) == 1 {
		s.occupyLane(i, d.Slots[0])
	}
	s.setBusy(s.gpuUse(js))
	s.reschedule(i)
}

func (s *simulator) preempt(i int) {
	js := &s.jobs[i]
	s.settle(js)
	s.setBusy(-s.gpuUse(js))
	if js.laneShare > 0 {
		s.releaseLane(i)
	}
	js.State = policy.Pending
	js.pendingFrom = s.now
	js.Wait = 0
	js.preempts++
	js.version++
	js.Placement = nil
	s.pending++
}

// baseRate is the job's solo speed on its current model.
func (s *simulator) baseRate(js *jobState) float64 {
	if js.rates == nil {
		return 1
	}
	if r := js.rates[js.GPUModel]; r > 0 {
		return r
	}
	slow := math.Inf(1)
	for _, r := range js.rates {
		slow = min(slow, r)
	}
	return slow
}

// reschedule recomputes a running job's rate and finish event.
func (s *simulator) reschedule(i int) {
	js := &s.jobs[i]
	s.settle(js)
	rate := s.baseRate(js) * js.speedup
	if js.laneShare > 0 {
		rate *= s.laneFactor(i)
	}
	js.rate = rate
	js.version++
	if rate <= 0 {
		js.finishAt = math.Inf(1)
		return
	}
	js.finishAt = s.now + max(js.work, 0)/rate
	heap.Push(&s.heap, finishEvent{t: js.finishAt, job: i, version: js.version})
}

type finishEvent struct {
	t       float64
	job     int
	version int
}

type finishHeap []finishEvent

func (h finishHeap) Len() int { return len(h) }
func (h finishHeap) Less(a, b int) bool {
	if h[a].t != h[b].t {
		return h[a].t < h[b].t
	}
	return h[a].job < h[b].job
}
func (h finishHeap) Swap(a, b int) { h[a], h[b] = h[b], h[a] }
func (h *finishHeap) Push(x any)   { *h = append(*h, x.(finishEvent)) }
func (h *finishHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
