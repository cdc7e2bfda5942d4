package sim

import (
	"math"
	"slices"

	"github.com/caravan-gpu/caravan/internal/minheap"
	"github.com/caravan-gpu/caravan/planner/policy"
)

// keyedQueue holds the jobs of a run whose rounds are first-fit walks in
// an order where a waiting job keeps its place among the other waiting
// jobs: by a key of each job (Policy.RanksByKey), or by queue and the
// last round's order in it (Policy.RanksByQueue). It keeps the waiting
// jobs in one heap per GPU count and the running jobs in the last round's
// rank order. A round then visits the running jobs and only the waiting
// jobs that start, rather than sorting every job.
//
// Under RanksByQueue an item's key is its queue, then its group there
// (those that ran in it, those that wait, those that entered it while
// running), then a sequence number (jobState.seq) whose order is the last
// round's rank order within the group. A round numbers, in rank order, the
// jobs it preempts in the queue they ran in from a block below every
// number given so far (they ranked before every job that waited there),
// and the jobs it starts and those that entered a queue while running
// from a counter that only rises (they ranked after the jobs that kept
// running, and after those that waited), as an arrival is numbered when
// it arrives. Jobs that keep running keep their numbers.
type keyedQueue struct {
	sizes     []int                                                             // GPU counts, ascending
	waiting   [][]keyedItem                                                     // per size: a heap of waiting jobs, least first
	stamp     []int32                                                           // per job: its one current heap entry (see waitingHead)
	ran       []keyedItem                                                       // the jobs the last round kept running (but the tail), in rank order
	started   []int                                                             // the jobs started since, out of a round
	pend      []waitCounters                                                    // the pending jobs' counters
	arrived   []int                                                             // arrivals not in the heaps yet: most start before a round
	items     []keyedItem                                                       // round scratch
	fresh     []keyedItem                                                       // round scratch
	merged    []keyedItem                                                       // round scratch
	preempt   []int                                                             // round scratch
	unordered []keyedItem                                                       // round scratch
	starts    []int                                                             // round scratch
	key       func(*policy.History, *policy.Job, *policy.RemainingMemo) float64 // the policy's RankKey, or nil
	// memos are, per job, what its key's History lookups found, where the
	// key reads the History (predict); nil otherwise.
	memos []policy.RemainingMemo
	// historyAt is the History's length when the waiting jobs' keys were
	// last checked against it (checkKeys).
	historyAt int
	stale     []int // round scratch
	byQueue   bool  // rule is the order (RanksByQueue)
	rule      policy.QueueRule
	// ranked is the size distribution 2D-Gittins ranks by (the waiting
	// jobs' keys were worked out with it), or nil while it ranks as
	// 2D-LAS does.
	ranked *policy.SizeDistribution
	// indices are, per job, where its Gittins index lookups ended and the
	// key it was last ranked by; made once 2D-Gittins ranks by index, and
	// kept apart from the jobs, which every policy walks.
	indices []gittinsIndex
	front   int64 // falls: numbers for the jobs a round preempts in their queue
	back    int64 // rises: numbers for arrivals, starts and jobs new to a queue

	// tail holds, under RanksByQueue, the running jobs the last round kept
	// in the last queue, apart from ran: they stay in that queue, so a
	// round visits them one by one only where their order decides
	// something (see keyedQueue.reachTail, splitTail). Rounds settle neither them,
	// nor the other jobs that rest in ran, nor the pending jobs: log holds
	// the times since at which a round, or the arrival shortcut, settled
	// every job, for catchUp and catchUpWaiting to settle each at the same
	// times, to the bit.
	tail     []tailItem
	tailGPUs int         // the GPUs the tail's jobs hold
	tailDone int         // tail entries of jobs done since
	log      []float64   // settle times, while jobs are settled lazily
	lastQ    float64     // the last queue (QueueRule.Last); NaN: no queues
	spliced  []keyedItem // round scratch
	isAhead  []bool      // round scratch
	// tailBehind counts the tail's jobs rankTail found behind.
	tailBehind int
	// firstWake is the least wake of the jobs a round keeps running but
	// the tail's, as keep adds them.
	firstWake float64
	keys      []rankGPUs // round scratch
	// sim is whose jobs, clock and settling the queue uses; last, so
	// that the fields a round reads first share a cache line.
	sim *simulator
}

// gittinsIndex is a job's Gittins index lookups' hint and its last key.
type gittinsIndex struct {
	hint policy.IndexHint
	key  float64
}

// keyedItem is a job with its rank: key, then group, then k2, then
// arrival, then index.
type keyedItem struct {
	// RankOf is the job's rank: K1 its key (under RanksByQueue, its
	// queue), K2 its group there, K3 its place in the group, then its
	// arrival, then its index (Job).
	policy.RankOf[int32, int32]
	// wake is, under RanksByQueue, when a running job reaches its queue's
	// cut: no later than that (see RunWake, crossing, nextWake).
	wake  float64
	gpus  int32
	stamp int32 // a waiting job's heap entry (waitingHead); resting: a running job's item is ready (rest)
}

// The groups of a queue under RanksByQueue, in rank order.
const (
	ranInQueue   = 0 // running jobs the last round planned in this queue
	waitsInQueue = 1 // waiting jobs
	enteredQueue = 2 // running jobs that crossed into it since, by arrival
)

func newKeyedQueue(s *simulator) *keyedQueue {
	jobs, p := s.jobs, s.cfg.Policy
	q := &keyedQueue{sim: s, stamp: make([]int32, len(jobs)), key: p.RankKey()}
	q.rule, q.byQueue = p.RanksByQueue()
	if q.key != nil && s.recordHistory {
		q.memos = make([]policy.RemainingMemo, len(jobs))
	}
	q.lastQ = math.NaN() // equal to no key
	if q.byQueue {
		q.lastQ = float64(q.rule.Last())
	}
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
// policy ranks by key or by queue (Policy.RanksByKey, RanksByQueue), on
// one GPU model, with whole GPUs, and no job is limited to some models.
func (s *simulator) useKeyedQueue() bool {
	// checkSnapshot tests the kept Snapshot, which keyed rounds do not use.
	if !s.maySkipRounds() || s.cfg.noShortcut || s.cfg.noKeyed || s.cfg.checkSnapshot || s.model == "" {
		return false
	}
	if _, byQueue := s.cfg.Policy.RanksByQueue(); !byQueue && !s.cfg.Policy.RanksByKey() {
		return false
	}
	for i := range s.jobs {
		if len(s.jobs[i].Models) > 0 {
			return false
		}
	}
	return true
}

// appendKeyed appends job i with its key now; a running job takes its
// queue now as the one it was planned in (PrevQueue). It fills the new
// item in place: an item returned by value and copied costs a stall every
// round.
func (q *keyedQueue) appendKeyed(items []keyedItem, i int) []keyedItem {
	s := q.sim
	js := &s.jobs[i]
	items = append(items, keyedItem{})
	it := &items[len(items)-1]
	it.Arrival, it.Job, it.gpus = js.Arrival, int32(i), int32(js.GPUs)
	if !q.byQueue {
		var memo *policy.RemainingMemo
		if q.memos != nil {
			memo = &q.memos[i] // predict: no duration read
		} else {
			setRemaining(&js.Job, js)
		}
		it.K1 = q.key(s.snap.History, &js.Job, memo)
		return items
	}
	qi := q.rule.Queue(&js.Job)
	it.K1 = float64(qi)
	if js.State == policy.Running {
		it.wake = s.now + q.rule.RunWake(&js.Job, qi)
	}
	if q.ranked != nil {
		if js.State == policy.Running {
			js.PrevQueue = qi
		}
		it.K3 = q.indexKey(i)
		return items
	}
	it.K2, it.K3 = waitsInQueue, float64(js.seq)
	if js.State == policy.Running {
		it.K2 = ranInQueue
		if js.PrevQueue != qi {
			it.K2, it.K3 = enteredQueue, 0
		}
		js.PrevQueue = qi
	}
	return items
}

// wait keeps job i, which has just become pending: its counters in the
// dense list, and itself in its size's heap (an arrival, by the next
// round).
func (q *keyedQueue) wait(i int) {
	s := q.sim
	js := &s.jobs[i]
	js.pendAt = int32(len(q.pend))
	q.pend = append(q.pend, waitCounters{lastUpdate: js.lastUpdate, wait: js.Wait, queued: js.queued, promoWait: js.promoWait,
		job: int32(i), logAt: int32(len(q.log)), ran: js.Executed > 0, planned: js.PrevQueue >= 0})
	if js.PrevQueue < 0 { // an arrival: in the heaps by the next round
		js.seq = q.back
		q.back++
		q.arrived = append(q.arrived, i)
		return
	}
	q.push(i)
}

// rekey puts the waiting jobs in the heaps again, with their keys now:
// 2D-Gittins has new sizes.
func (q *keyedQueue) rekey() {
	for k := range q.waiting {
		q.waiting[k] = q.waiting[k][:0]
	}
	for _, c := range q.pend {
		q.push(int(c.job))
	}
	q.arrived = q.arrived[:0]
}

// checkKeys puts again in the heaps, with their keys now, the waiting
// jobs whose keys read windows of the History that jobs finished since
// have changed (or that a lookup now reads where it did not: a window
// made for any group or GPU count breaks every memo). Each one pushed again
// leaves a stale entry behind (waitingHead skips it); where the heaps'
// entries would pass twice the waiting jobs (and 64), they are made anew.
func (q *keyedQueue) checkKeys() {
	s := q.sim
	h := s.snap.History
	if q.memos == nil || h.Len() == q.historyAt {
		return
	}
	q.historyAt = h.Len()
	stale := q.stale[:0]
	for _, c := range q.pend {
		if i := int(c.job); !q.memos[i].Holds(h, s.jobs[i].Attained) {
			stale = append(stale, i)
		}
	}
	q.stale = stale
	entries := 0
	for _, w := range q.waiting {
		entries += len(w)
	}
	if entries+len(stale) > 2*len(q.pend)+64 {
		q.rekey()
		return
	}
	for _, i := range stale {
		q.push(i)
	}
}

// push puts waiting job i in its size's heap.
func (q *keyedQueue) push(i int) {
	s := q.sim
	q.stamp[i]++
	k, _ := slices.BinarySearch(q.sizes, s.jobs[i].GPUs)
	h := q.appendKeyed(q.waiting[k], i)
	h[len(h)-1].stamp = q.stamp[i]
	minheap.UpFunc(h, len(h)-1, ranksBefore)
	q.waiting[k] = h
}

// reinsert puts an entry taken off its size's heap back.
func (q *keyedQueue) reinsert(it keyedItem) {
	k, _ := slices.BinarySearch(q.sizes, int(it.gpus))
	q.waiting[k] = minheap.PushFunc(q.waiting[k], it, ranksBefore)
}

// ranksBefore orders a size's heap of waiting jobs.
func ranksBefore(a, b *keyedItem) bool { return a.Before(&b.RankOf) }

// waitingHead is the waiting job first in size k's heap, or nil. A job
// leaves the heaps only by being popped there (jobs the arrival shortcut
// starts have not entered them, and rekey empties them); an entry goes
// stale where checkKeys pushes its job again with a new key. The check
// skips those, and keeps a job that started another way from being
// started twice.
func (q *keyedQueue) waitingHead(k int) *keyedItem {
	s := q.sim
	for h := q.waiting[k]; len(h) > 0; h = q.waiting[k] {
		top := &h[0]
		if js := &s.jobs[top.Job]; top.stamp == q.stamp[top.Job] && js.State == policy.Pending && !js.done {
			return top
		}
		q.pop(k)
	}
	return nil
}

// pop removes the first entry of size k's heap.
func (q *keyedQueue) pop(k int) {
	_, q.waiting[k] = minheap.PopFunc(q.waiting[k], ranksBefore)
}

// first is the size whose head ranks first among the sizes of at most
// free GPUs, or -1.
func (q *keyedQueue) first(free int) int {
	best := -1
	var bestItem *keyedItem
	for k, g := range q.sizes {
		if g > free {
			break
		}
		if it := q.waitingHead(k); it != nil && (bestItem == nil || it.Before(&bestItem.RankOf)) {
			best, bestItem = k, it
		}
	}
	return best
}

// entry is the queue a new job enters (0 for orders without queues).
func (q *keyedQueue) entry() int {
	if q.byQueue {
		return q.rule.Entry()
	}
	return 0
}

// compareRanks orders items by rank, for slices.SortFunc.
func compareRanks(a, b keyedItem) int { return policy.CompareRanks(a.RankOf, b.RankOf) }
