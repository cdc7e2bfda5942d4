package sim

import (
	"math"
	"slices"

	"github.com/caravan-gpu/caravan/planner/policy"
)

// keyedQueue holds the jobs of a run whose rounds are first-fit walks by
// key (Policy.RanksByKey): the waiting jobs in one heap per GPU count,
// ordered by their key, which does not change while they wait, and the
// running jobs in last round's rank order. A round then visits the
// running jobs and only the waiting jobs that start, rather than sorting
// every job.
type keyedQueue struct {
	sizes   []int                     // GPU counts, ascending
	waiting [][]keyedItem             // per size: a heap of waiting jobs, least first
	stamp   []int32                   // per job: its one current heap entry
	ran     []int                     // the jobs the last round kept running, in rank order
	started []int                     // the jobs started since
	waits   []int                     // the pending jobs, and some that no longer are
	items   []keyedItem               // round scratch
	fresh   []keyedItem               // round scratch
	merged  []keyedItem               // round scratch
	preempt []int                     // round scratch
	starts  []int                     // round scratch
	key     func(*policy.Job) float64 // the policy's RankKey
}

// keyedItem is a job with its rank: key, then arrival, then index.
type keyedItem struct {
	key     float64
	arrival float64
	job     int32
	gpus    int32
	stamp   int32
}

func (a *keyedItem) before(b *keyedItem) bool {
	switch {
	case a.key != b.key:
		return a.key < b.key
	case a.arrival != b.arrival:
		return a.arrival < b.arrival
	}
	return a.job < b.job
}

func compareKeyed(a, b keyedItem) int {
	if a.before(&b) {
		return -1
	}
	return 1
}

func newKeyedQueue(jobs []jobState, key func(*policy.Job) float64) *keyedQueue {
	q := &keyedQueue{stamp: make([]int32, len(jobs)), key: key}
	for i := range jobs {
		if g := jobs[i].GPUs; !slices.Contains(q.sizes, g) {
			q.sizes = append(q.sizes, g)
		}
	}
	slices.Sort(q.sizes)
	q.waiting = make([][]keyedItem, len(q.sizes))
	return q
}

// useKeyedQueue says rounds may be carried out on a keyedQueue: the
// policy ranks by key (Policy.RanksByKey), on one GPU model, with whole
// GPUs, and no job is limited to some models.
func (s *simulator) useKeyedQueue() bool {
	if !s.maySkipRounds() || s.cfg.noShortcut || s.model == "" || !s.cfg.Policy.RanksByKey() {
		return false
	}
	for i := range s.jobs {
		if len(s.jobs[i].Models) > 0 {
			return false
		}
	}
	return true
}

// appendKeyed appends job i with its key now. It fills the new item in
// place: an item returned by value and copied costs a stall every round.
func (s *simulator) appendKeyed(items []keyedItem, i int) []keyedItem {
	js := &s.jobs[i]
	setRemaining(&js.Job, js)
	items = append(items, keyedItem{})
	it := &items[len(items)-1]
	it.key, it.arrival, it.job, it.gpus = s.keyed.key(&js.Job), js.Arrival, int32(i), int32(js.GPUs)
	return items
}

// wait puts job i, which has just become pending, in its size's heap; an
// entry it may have from an earlier wait is dropped when it surfaces.
func (s *simulator) wait(i int) {
	q := s.keyed
	q.waits = append(q.waits, i)
	q.stamp[i]++
	k, _ := slices.BinarySearch(q.sizes, s.jobs[i].GPUs)
	h := s.appendKeyed(q.waiting[k], i)
	h[len(h)-1].stamp = q.stamp[i]
	for c := len(h) - 1; c > 0; {
		p := (c - 1) / 2
		if !h[c].before(&h[p]) {
			break
		}
		h[c], h[p] = h[p], h[c]
		c = p
	}
	q.waiting[k] = h
}

// waitingHead is the waiting job first in size k's heap, dropping entries of
// jobs that have started since, or nil.
func (s *simulator) waitingHead(k int) *keyedItem {
	q := s.keyed
	for h := q.waiting[k]; len(h) > 0; h = q.waiting[k] {
		top := &h[0]
		if js := &s.jobs[top.job]; top.stamp == q.stamp[top.job] && js.State == policy.Pending && !js.done {
			return top
		}
		q.pop(k)
	}
	return nil
}

// pop removes the first entry of size k's heap.
func (q *keyedQueue) pop(k int) {
	h := q.waiting[k]
	n := len(h) - 1
	h[0] = h[n]
	h = h[:n]
	for p := 0; ; {
		c := 2*p + 1
		if c >= n {
			break
		}
		if c+1 < n && h[c+1].before(&h[c]) {
			c++
		}
		if !h[c].before(&h[p]) {
			break
		}
		h[p], h[c] = h[c], h[p]
		p = c
	}
	q.waiting[k] = h
}

// first is the size whose head ranks first among the sizes of at most
// free GPUs, or -1.
func (s *simulator) first(free int) int {
	best := -1
	var bestItem *keyedItem
	for k, g := range s.keyed.sizes {
		if g > free {
			break
		}
		if it := s.waitingHead(k); it != nil && (bestItem == nil || it.before(bestItem)) {
			best, bestItem = k, it
		}
	}
	return best
}

// settleWaiting brings the pending jobs' counters up to date, or only
// those of jobs planned before (PrevQueue) with plannedOnly, as the
// arrival shortcut does; after a round every job has been planned. It
// drops the jobs that are no longer pending.
func (s *simulator) settleWaiting(plannedOnly bool) {
	q := s.keyed
	w := 0
	for _, i := range q.waits {
		js := &s.jobs[i]
		if js.done || js.State != policy.Pending {
			continue
		}
		q.waits[w] = i
		w++
		if plannedOnly && js.PrevQueue < 0 {
			continue
		}
		s.settle(js)
		js.PrevQueue = 0
	}
	q.waits = q.waits[:w]
}

// settleRunning settles job i if it still runs, and says whether it does.
func (s *simulator) settleRunning(i int) bool {
	js := &s.jobs[i]
	if js.done || js.State != policy.Running {
		return false
	}
	s.settle(js)
	return true
}

// settlePlanned settles every planned job, as the arrival shortcut does.
func (s *simulator) settlePlanned() {
	s.settleWaiting(true)
	for _, i := range s.keyed.ran {
		s.settleRunning(i)
	}
	for _, i := range s.keyed.started {
		s.settleRunning(i)
	}
}

// keyedRound is a planning round of a policy that ranks by key (see
// Policy.RanksByKey): it walks the running jobs, in order of their key
// now, together with the waiting jobs that rank among them, and each one
// the GPUs not yet taken hold runs. Waiting jobs that do not start are
// not visited, as none of them fits once a round's walk reaches them.
func (s *simulator) keyedRound() {
	s.rounds++
	q := s.keyed
	s.settleWaiting(false)
	// The running jobs' keys now, each job settled as a round's Snapshot
	// brings it up to date: those the last round kept, in its order, and
	// those started since.
	run := q.items[:0]
	for _, i := range q.ran {
		if s.settleRunning(i) {
			run = s.appendKeyed(run, i)
		}
	}
	// Keys change little between rounds: insertion sort of the old order
	// is near linear. Jobs started since are sorted apart and merged in.
	for a := 1; a < len(run); a++ {
		for b := a; b > 0 && run[b].before(&run[b-1]); b-- {
			run[b], run[b-1] = run[b-1], run[b]
		}
	}
	fresh := q.fresh[:0]
	for _, i := range q.started {
		if s.settleRunning(i) {
			fresh = s.appendKeyed(fresh, i)
		}
	}
	q.started = q.started[:0]
	if len(fresh) > 0 {
		slices.SortFunc(fresh, compareKeyed)
		merged := q.merged[:0]
		a, b := 0, 0
		for a < len(run) || b < len(fresh) {
			if b == len(fresh) || (a < len(run) && run[a].before(&fresh[b])) {
				merged = append(merged, run[a])
				a++
			} else {
				merged = append(merged, fresh[b])
				b++
			}
		}
		q.merged, run = run, merged
	}

	kept, preempt, starts := q.ran[:0], q.preempt[:0], q.starts[:0]
	free := s.gpus
	best := s.first(free)
	for r := 0; r < len(run) || best >= 0; {
		if r < len(run) && (best < 0 || run[r].before(&q.waiting[best][0])) {
			it := run[r]
			r++
			if g := int(it.gpus); g <= free {
				free -= g
				kept = append(kept, int(it.job))
				if best >= 0 && q.sizes[best] > free {
					best = s.first(free)
				}
			} else {
				preempt = append(preempt, int(it.job))
			}
			continue
		}
		it := q.waiting[best][0]
		q.pop(best)
		free -= int(it.gpus)
		starts = append(starts, int(it.job))
		best = s.first(free)
	}
	q.ran, q.items, q.fresh = kept, run, fresh

	// As a round carries out its decisions: preemptions first, then the
	// starts in the order of the Snapshot.
	for _, i := range preempt {
		s.preempt(i)
	}
	slices.Sort(starts)
	start := policy.Decision{Job: -1, Run: true, GPUModel: s.model, Speedup: 1}
	for _, i := range starts {
		s.start(i, &start)
	}
	q.preempt, q.starts = preempt, starts
	s.blocked = s.pending > 0
	s.head = -1
	s.wakeAt = math.Inf(1)
}
