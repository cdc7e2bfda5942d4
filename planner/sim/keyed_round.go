package sim

// This file holds the keyed queue's round: its phases, from the jobs' keys now to the decisions carried out.

import (
	"math"
	"slices"

	"github.com/caravan-gpu/caravan/planner/policy"
)

// crossSlack is how far, in seconds, a job's wake may fall short of
// when it reaches its queue's cut: settling rounds its service in steps.
const crossSlack = 1e-6

// queueSpan says where the running jobs of run[from]'s queue end, and
// how many GPUs they hold.
func queueSpan(run []keyedItem, from int) (end, gpus int) {
	for end = from; end < len(run) && run[end].K1 == run[from].K1; end++ {
		gpus += int(run[end].gpus)
	}
	return end, gpus
}

// readyQueue readies the running jobs of run[from]'s queue for the walk
// to reach them with free GPUs not yet taken, and says where they end.
// With whole, the queue's outcome holds whatever their order, and the
// waiting jobs that start are in q.unordered (startWhateverTheOrder);
// otherwise they are sorted by their indices now (orderQueue).
func (q *keyedQueue) readyQueue(run []keyedItem, from, free int) (end int, whole bool) {
	end, gpus := queueSpan(run, from)
	if q.startWhateverTheOrder(run[from].K1, free, gpus) {
		return end, true
	}
	q.orderQueue(run[from:end])
	return end, false
}

// startedInQueue numbers a job a round starts, as it numbers every
// start, and says how long it takes to reach its queue's cut (RunWake).
func (q *keyedQueue) startedInQueue(it *keyedItem) float64 {
	s := q.sim
	js := &s.jobs[it.Job]
	js.seq = q.back
	q.back++
	w := q.rule.RunWake(&js.Job, int(it.K1))
	it.wake = s.now + w
	return w
}

// startWhateverTheOrder says whether a round's outcome in queue qi is the
// same whatever the order of its running jobs, which hold gpus of the
// free GPUs not yet taken: they all fit, and each waiting job of the
// queue, taken in rank order, either fits in what they leave over or
// does not fit even ahead of all of them. If so, it takes the waiting
// jobs that start off their heaps, into q.unordered. Ranked by Gittins
// index, running jobs carry the index they were last ranked by (their
// items rest between rounds), and this spares looking up the indices,
// which change every round: in most rounds no waiting job's place among
// the running jobs of a queue decides anything.
func (q *keyedQueue) startWhateverTheOrder(qi float64, free, gpus int) bool {
	started := q.unordered[:0]
	spare := free - gpus
	ok := spare >= 0
	for ok {
		k := q.first(spare + gpus) // ahead of every running job of the queue
		if k < 0 || q.waiting[k][0].K1 != qi {
			break
		}
		if it := q.waiting[k][0]; int(it.gpus) <= spare {
			started = append(started, it)
			q.pop(k)
			spare -= int(it.gpus)
			continue
		}
		ok = false // its place among the running jobs decides
	}
	q.unordered = started
	if !ok {
		for _, it := range started {
			q.reinsert(it)
		}
	}
	return ok
}

// orderQueue works out the Gittins index of each running job of one
// queue, which carried the index it was last ranked by, and sorts them.
func (q *keyedQueue) orderQueue(seg []keyedItem) {
	s := q.sim
	for k := range seg {
		s.settle(&s.jobs[seg[k].Job]) // settled lazily
		seg[k].K3 = q.indexKey(int(seg[k].Job))
	}
	insertionSort(seg)
}

// indexKey is job i's rank within its queue under 2D-Gittins now, its
// counters settled (QueueRule.Key), kept as the one it was last ranked by.
func (q *keyedQueue) indexKey(i int) float64 {
	s := q.sim
	ix := &q.indices[i]
	ix.key = q.rule.Key(q.ranked, &s.jobs[i].Job, &ix.hint)
	return ix.key
}

// insertionSort sorts items that are nearly in order: keys change little
// between rounds.
func insertionSort(items []keyedItem) {
	for a := 1; a < len(items); a++ {
		if !items[a].Before(&items[a-1].RankOf) {
			continue
		}
		it, b := items[a], a
		for ; b > 0 && it.Before(&items[b-1].RankOf); b-- {
			items[b] = items[b-1]
		}
		items[b] = it
	}
}

// keep adds a job the round keeps running, or starts, to those the next
// round walks: to kept, or, in the last queue, to the tail. Under
// RanksByQueue the next round takes its item as it is: until the job
// reaches its queue's cut (wake) its queue and place stay, and it is
// settled lazily.
func (q *keyedQueue) keep(kept []keyedItem, it *keyedItem) []keyedItem {
	if q.byQueue {
		return q.keepQueued(kept, it)
	}
	return append(kept, *it)
}

// keepQueued is keep under RanksByQueue.
func (q *keyedQueue) keepQueued(kept []keyedItem, it *keyedItem) []keyedItem {
	if it.K1 == q.lastQ {
		q.toTail(it)
		return kept
	}
	if it.stamp != resting {
		q.rest(it)
	}
	q.firstWake = min(q.firstWake, it.wake)
	return append(kept, *it)
}

// resting marks the item of a job that rest has readied.
const resting = -1

// rest readies the item of a job a round keeps running under
// RanksByQueue for the next round, and settles the job lazily from now.
func (q *keyedQueue) rest(it *keyedItem) {
	s := q.sim
	js := &s.jobs[it.Job]
	if q.ranked == nil {
		// Under 2D-LAS the job ran in its queue: it ranks by its number.
		it.K2, it.K3 = ranInQueue, float64(js.seq)
	}
	if !js.lazy {
		js.lazy, js.logAt = true, int32(len(q.log))
	}
	it.stamp = resting
}

// crossing brings the item of a job that ran, and may have reached its
// queue's cut since, up to date: it settles the job, and gives it its
// queue now (new to it: LAS ranks it after the jobs there) and its wake.
func (q *keyedQueue) crossing(it *keyedItem) {
	s := q.sim
	js := &s.jobs[it.Job]
	s.settle(js)
	qi := q.rule.Queue(&js.Job)
	if float64(qi) != it.K1 {
		it.K1 = float64(qi)
		if q.ranked == nil {
			it.K2, it.K3, it.stamp = enteredQueue, 0, 0 // numbered by the walk
		}
		js.PrevQueue = qi
	}
	it.wake = s.now + q.rule.RunWake(&js.Job, qi)
}

// nextWake is the least RunWake of the jobs a round keeps running, the
// least of those it starts being least: it works each out only for the
// jobs whose wake could be the least, as wakes are never late (but for
// rounding, far below crossSlack).
func (q *keyedQueue) nextWake(kept []keyedItem, least float64) float64 {
	s := q.sim
	first := q.firstWake // the least wake of kept (keep)
	if math.IsInf(first, 1) {
		return least
	}
	exact := func(from, to float64) {
		for k := range kept {
			if it := &kept[k]; it.wake > from && it.wake <= to {
				js := &s.jobs[it.Job]
				s.settle(js)
				least = min(least, q.rule.RunWake(&js.Job, int(it.K1)))
			}
		}
	}
	exact(math.Inf(-1), first+crossSlack)
	if s.now+least > first+crossSlack/2 {
		// A job in its start-up latency reaches the cut later than its
		// wake; another may reach it first.
		exact(first+crossSlack, s.now+least+crossSlack)
	}
	return least
}

// round is a planning round of a policy that ranks by key or by
// queue (see Policy.RanksByKey, RanksByQueue): it walks the running jobs,
// in their order now, together with the waiting jobs that rank among
// them, and each one the GPUs not yet taken hold runs. Waiting jobs that
// do not start are not visited, as none of them fits once a round's walk
// reaches them.
func (q *keyedQueue) round() {
	q.sim.rounds++
	q.relearn()
	q.admitArrivals()
	q.checkKeys()
	kept, wake := q.walk(q.runningInOrder())
	q.carryOut(kept, wake)
}

// relearn takes the size distribution 2D-Gittins ranks by now, and when
// it changed, keys the waiting jobs anew.
func (q *keyedQueue) relearn() {
	s := q.sim
	if q.byQueue {
		s.learnSizes()
		if d := q.rule.Sizes(&s.snap); d != q.ranked {
			q.ranked = d
			if q.indices == nil {
				q.indices = make([]gittinsIndex, len(s.jobs))
			}
			q.rekey()
			for k := range q.tail {
				// Worked out with other sizes.
				t := &q.tail[k]
				t.expire, t.positive, t.floorUntil = math.Inf(-1), math.Inf(-1), math.Inf(-1)
			}
			for k := range q.ran {
				// Ranked by index, running jobs carry the one they were
				// last ranked by.
				it := &q.ran[k]
				it.K2, it.K3 = 0, q.indices[it.Job].key
			}
		}
	}
}

// admitArrivals puts the jobs that arrived since the last round, and
// still wait, in their sizes' heaps, and tidies the tail.
func (q *keyedQueue) admitArrivals() {
	s := q.sim
	for _, i := range q.arrived {
		if js := &s.jobs[i]; js.State == policy.Pending && !js.done {
			q.push(i)
		}
	}
	q.arrived = q.arrived[:0]
	q.tidyTail()
}

// runningInOrder is the running jobs with their keys now, each job settled
// as a round's Snapshot brings it up to date, in rank order.
func (q *keyedQueue) runningInOrder() []keyedItem {
	s := q.sim
	// Those the last round kept (or started), in its order.
	run := q.items[:0]
	for k := range q.ran {
		it := &q.ran[k]
		js := &s.jobs[it.Job]
		switch {
		case js.done || js.State != policy.Running:
		case !q.byQueue:
			settleAt(js, s.now)
			run = q.appendKeyed(run, int(it.Job))
		default:
			run = append(run, *it)
			if it.wake <= s.now+crossSlack {
				q.crossing(&run[len(run)-1])
			}
		}
	}
	// Keys change little between rounds: insertion sort of the old order
	// is near linear. Jobs started out of a round (the arrival shortcut)
	// are sorted apart and merged in.
	insertionSort(run)
	fresh := q.fresh[:0]
	for _, i := range q.started {
		if s.settleRunning(i) {
			fresh = q.appendKeyed(fresh, i)
		}
	}
	q.started = q.started[:0]
	if len(fresh) > 0 {
		slices.SortFunc(fresh, compareRanks)
		merged := q.merged[:0]
		a, b := 0, 0
		for a < len(run) || b < len(fresh) {
			if b == len(fresh) || (a < len(run) && run[a].Before(&fresh[b].RankOf)) {
				merged = append(merged, run[a])
				a++
			} else {
				merged = append(merged, fresh[b])
				b++
			}
		}
		q.merged, run = run, merged
	}
	q.fresh = fresh
	return run
}

// walk visits the running jobs in rank order, with the waiting jobs that
// rank among them, and keeps running or starts each one the GPUs not yet
// taken hold. It returns the jobs that run next (kept), those it preempts
// and those it starts, and the least time until a running job reaches its
// queue's cut (wake). It leaves run, as walked, in q.items for the next
// round's scratch.
func (q *keyedQueue) walk(run []keyedItem) (kept []keyedItem, wake float64) {
	s := q.sim
	// Under RanksByQueue, jobs preempted in the queue they ran in are
	// numbered in rank order below every number given so far; jobs that
	// start, and those new to their queue, above every one.
	q.front -= int64(len(run) + len(q.tail))
	seq := q.front
	wake = math.Inf(1)
	// The jobs preempted and started go straight to q.preempt and
	// q.starts: as locals they would stay live, in registers or spilled,
	// through every step of the walk's hot loop.
	kept, q.preempt, q.starts = q.ran[:0], q.preempt[:0], q.starts[:0]
	q.firstWake = math.Inf(1)
	free := s.gpus
	best := q.first(free)
	// Ranked by Gittins index, the running jobs of each queue are readied
	// as the walk reaches them (startWhateverTheOrder, orderQueue); other
	// orders' keys are whole already.
	queueEnd := -1 // where the running jobs of the queue being walked end
	if q.ranked != nil {
		queueEnd = 0
	}
	tailLeft := len(q.tail) > 0
	for r := 0; r < len(run) || best >= 0 || tailLeft; {
		if tailLeft && (r == len(run) || run[r].K1 == q.lastQ) && (best < 0 || q.waiting[best][0].K1 == q.lastQ) {
			// The walk has reached the last queue, where the tail is.
			tailLeft = false
			run, free, best, queueEnd = q.reachTail(run, r, free, best, queueEnd)
			continue
		}
		if r == queueEnd && r < len(run) && (best < 0 || q.waiting[best][0].K1 >= run[r].K1) {
			var whole bool
			queueEnd, whole = q.readyQueue(run, r, free)
			if whole {
				// Every running job of the queue keeps running, and the
				// waiting ones that start fit beside them anyway.
				for ; r < queueEnd; r++ {
					free -= int(run[r].gpus)
					kept = q.keep(kept, &run[r])
				}
				free, kept, wake = q.startUnordered(free, kept, wake)
				best = q.first(free)
				continue
			}
		}
		if r < len(run) && (best < 0 || run[r].Before(&q.waiting[best][0].RankOf)) {
			it := &run[r]
			r++
			g := int(it.gpus)
			if q.byQueue {
				switch {
				case it.K2 == enteredQueue:
					s.jobs[it.Job].seq = q.back
					q.back++
				case g > free:
					s.jobs[it.Job].seq = seq
					seq++
				}
			}
			if g <= free {
				free -= g
				kept = q.keep(kept, it)
				if best >= 0 && q.sizes[best] > free {
					best = q.first(free)
				}
			} else {
				q.preempt = append(q.preempt, int(it.Job))
			}
			continue
		}
		it := q.waiting[best][0]
		q.pop(best)
		free -= int(it.gpus)
		q.starts = append(q.starts, int(it.Job))
		if q.byQueue {
			wake = min(wake, q.startedInQueue(&it))
		}
		kept = q.keep(kept, &it) // runs next round in this order
		best = q.first(free)
	}
	if q.byQueue {
		wake = q.nextWake(kept, wake)
	}
	q.items = run
	return kept, wake
}

// carryOut carries out a round's decisions as a round does: preemptions
// first, then the starts, each in the order of the Snapshot.
func (q *keyedQueue) carryOut(kept []keyedItem, wake float64) {
	s := q.sim
	q.ran = kept
	slices.Sort(q.preempt)
	for _, i := range q.preempt {
		s.preempt(i)
	}
	slices.Sort(q.starts)
	start := policy.Decision{Job: -1, Run: true, GPUModel: s.model, Speedup: 1}
	for _, i := range q.starts {
		s.start(i, &start)
	}
	q.started = q.started[:0] // they are in q.ran already
	s.blocked = s.pending > 0
	s.head = -1
	s.wakeAt = math.Inf(1)
	if !math.IsInf(wake, 1) {
		s.wakeAt = s.now + max(wake, 1e-3)
	}
}

// reachTail is the walk reaching the last queue, where the tail is, at
// run[r] with free GPUs not yet taken and best the size whose head ranks
// first among those that fit: the tail's jobs keep running where they
// surely do, or are readied for the walk to visit.
func (q *keyedQueue) reachTail(run []keyedItem, r, free, best, queueEnd int) ([]keyedItem, int, int, int) {
	extra := 0 // the GPUs of the last queue's other running jobs
	for k := r; k < len(run); k++ {
		extra += int(run[k].gpus)
	}
	switch {
	case q.ranked == nil && q.tailGPUs <= free, best < 0 && q.tailGPUs+extra <= free:
		// The tail's jobs all keep running, ahead of whatever starts
		// there: under 2D-LAS they rank first in the queue; otherwise
		// nothing waiting fits.
		free -= q.tailGPUs
		if best >= 0 && q.sizes[best] > free {
			best = q.first(free)
		}
		return run, free, best, queueEnd
	case q.ranked != nil && best >= 0:
		var ahead int
		run, ahead = q.splitTail(run, r, free, &q.waiting[best][0])
		if ahead >= 0 {
			// The jobs ahead of the first waiting job that fits keep
			// running; the walk goes on from there.
			free -= ahead
			queueEnd = len(run)
			if q.sizes[best] > free {
				best = q.first(free)
			}
		}
		return run, free, best, queueEnd
	}
	return q.spliceTail(run, r), free, best, queueEnd
}

// startUnordered starts the waiting jobs of a queue whose outcome holds
// whatever its running jobs' order (q.unordered, from readyQueue).
func (q *keyedQueue) startUnordered(free int, kept []keyedItem, wake float64) (int, []keyedItem, float64) {
	for k := range q.unordered {
		it := &q.unordered[k]
		free -= int(it.gpus)
		q.starts = append(q.starts, int(it.Job))
		wake = min(wake, q.startedInQueue(it))
		kept = q.keep(kept, it)
	}
	return free, kept, wake
}
