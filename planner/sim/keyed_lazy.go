package sim

// This file settles lazily what rounds do not settle: the jobs that rest between rounds and the pending jobs' counters, at each time a round settled every job, to the bit.

import (
	"github.com/caravan-gpu/caravan/planner/policy"
)

// waitCounters are a pending job's counters, kept out of its jobState
// while it waits (jobState.pendAt says where). Rounds do not settle them:
// catchUpWaiting settles them, when the job starts, at every time logged
// since, with the same arithmetic as settle's.
type waitCounters struct {
	lastUpdate, wait, queued, promoWait float64
	job                                 int32
	logAt                               int32 // settled up to q.log[logAt] (catchUpWaiting)
	ran                                 bool  // Executed > 0: promoWait counts
	planned                             bool  // PrevQueue >= 0
}

// unwait gives job i, which starts, its counters back.
func (q *keyedQueue) unwait(i int) {
	s := q.sim
	js := &s.jobs[i]
	k := js.pendAt
	c := &q.pend[k]
	q.catchUpWaiting(c)
	js.lastUpdate, js.Wait, js.queued, js.promoWait = c.lastUpdate, c.wait, c.queued, c.promoWait
	last := len(q.pend) - 1
	q.pend[k] = q.pend[last]
	s.jobs[q.pend[k].job].pendAt = k
	q.pend = q.pend[:last]
}

// flushWaiting gives every pending job its counters back, for the
// results.
func (q *keyedQueue) flushWaiting() {
	s := q.sim
	for k := range q.pend {
		c := &q.pend[k]
		q.catchUpWaiting(c)
		js := &s.jobs[c.job]
		js.lastUpdate, js.Wait, js.queued, js.promoWait = c.lastUpdate, c.wait, c.queued, c.promoWait
	}
}

// catchUpWaiting settles a pending job's counters at each time logged
// since, as the rounds would have: every round settles every pending job,
// and a job not planned before becomes planned (PrevQueue). The arrival
// shortcut settles only jobs planned before, but a job left waiting when
// it arrives meets a round at that moment first (the shortcut starts
// every arrival or none), so every logged time settles it. Replayed in
// one go, the steps round alike, and every result is the same to the bit.
func (q *keyedQueue) catchUpWaiting(c *waitCounters) {
	s := q.sim
	if !c.planned && int(c.logAt) < len(q.log) {
		c.planned = true
		s.jobs[c.job].PrevQueue = q.entry()
	}
	last, wait, queued, promoWait := c.lastUpdate, c.wait, c.queued, c.promoWait
	for k := int(c.logAt); k < len(q.log); k++ {
		dt := q.log[k] - last
		if dt <= 0 {
			continue
		}
		last = q.log[k]
		wait += dt
		queued += dt
		if c.ran {
			promoWait += dt
		}
	}
	c.lastUpdate, c.wait, c.queued, c.promoWait = last, wait, queued, promoWait
	c.logAt = int32(len(q.log))
}

// settlePlanned settles every planned job, as the arrival shortcut does,
// and says whether each one keeps its place (Policy.Settled). Jobs keep
// their queue while they wait. It drops the jobs that no longer run from
// the running lists: on a cluster with room, rounds are rare and the
// shortcut starts most jobs.
func (q *keyedQueue) settlePlanned() bool {
	s := q.sim
	settled, always := true, s.cfg.Policy.AlwaysSettled(&s.snap)
	// Pending jobs and those that rest are settled lazily. The tail's
	// jobs stay in the last queue and keep their place there; the other
	// jobs that ran keep theirs until they reach their queue's cut.
	q.logSettle(s.now)
	w := 0
	for _, it := range q.ran {
		js := &s.jobs[it.Job]
		if js.done || js.State != policy.Running {
			continue
		}
		q.ran[w] = it
		w++
		if !q.byQueue {
			settleAt(js, s.now)
		} else if it.wake > s.now+crossSlack {
			continue
		} else {
			s.settle(js)
		}
		if !always && !s.cfg.Policy.Settled(&s.snap, &js.Job) {
			settled = false
		}
	}
	q.ran = q.ran[:w]
	w = 0
	for _, i := range q.started {
		if !s.settleRunning(i) {
			continue
		}
		q.started[w] = i
		w++
		if !always && !s.cfg.Policy.Settled(&s.snap, &s.jobs[i].Job) {
			settled = false
		}
	}
	q.started = q.started[:w]
	return settled
}

// logSettle notes now as a time the jobs settled lazily are settled at
// (catchUp, catchUpWaiting), by a round or by the arrival shortcut.
func (q *keyedQueue) logSettle(now float64) {
	if n := len(q.log); n > 0 && q.log[n-1] == now {
		return
	}
	q.log = append(q.log, now)
}

// catchUp settles a job of the tail at each time logged since it was
// last settled, as the rounds would have settled it: rounding each step
// alike keeps every result the same to the bit.
func (q *keyedQueue) catchUp(js *jobState) {
	times := q.log[js.logAt:]
	js.logAt = int32(len(q.log))
	if js.State != policy.Running || js.latency > 0 || js.laneShare > 0 {
		for _, t := range times {
			settleAt(js, t)
		}
		return
	}
	// settleAt's steps for a job that runs: in registers, as a job is
	// mostly caught up over many rounds at once.
	last, work, executed, attained := js.lastUpdate, js.work, js.Executed, js.Attained
	rate, share := js.rate, float64(js.GPUs)
	for _, t := range times {
		dt := t - last
		if dt <= 0 {
			continue
		}
		last = t
		work -= dt * rate
		executed += dt
		attained += dt * share
	}
	js.lastUpdate, js.work, js.Executed, js.Attained = last, work, executed, attained
}

// flushLazy settles the jobs settled lazily as the rounds have, for the
// results.
func (q *keyedQueue) flushLazy() {
	s := q.sim
	for _, t := range q.tail {
		if js := &s.jobs[t.Job]; js.lazy {
			q.catchUp(js)
		}
	}
	for _, it := range q.ran {
		if js := &s.jobs[it.Job]; js.lazy {
			q.catchUp(js)
		}
	}
}
