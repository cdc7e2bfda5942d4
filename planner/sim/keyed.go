package sim

import (
	"math"
	"slices"

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
	sizes     []int                     // GPU counts, ascending
	waiting   [][]keyedItem             // per size: a heap of waiting jobs, least first
	stamp     []int32                   // per job: its one current heap entry (see waitingHead)
	ran       []keyedItem               // the jobs the last round kept running (but the tail), in rank order
	started   []int                     // the jobs started since, out of a round
	pend      []waitCounters            // the pending jobs' counters
	arrived   []int                     // arrivals not in the heaps yet: most start before a round
	items     []keyedItem               // round scratch
	fresh     []keyedItem               // round scratch
	merged    []keyedItem               // round scratch
	preempt   []int                     // round scratch
	unordered []keyedItem               // round scratch
	starts    []int                     // round scratch
	key       func(*policy.Job) float64 // the policy's RankKey, or nil
	byQueue   bool                      // rule is the order (RanksByQueue)
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
	// something (see keyedRound, splitTail). Rounds settle neither them,
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
}

// tailItem is a running job of the last queue. Ranked by Gittins index,
// until expire its index has not fallen below the one its k2 was worked
// out from: it ranks no later than k2 says; until positive its index is
// above zero.
type tailItem struct {
	keyedItem
	expire, positive float64
}

// rankGPUs is a running job's key within its queue, and its GPUs.
type rankGPUs struct {
	k2   float64
	gpus int32
}

// gittinsIndex is a job's Gittins index lookups' hint and its last key.
type gittinsIndex struct {
	hint policy.IndexHint
	key  float64
}

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

// keyedItem is a job with its rank: key, then group, then k2, then
// arrival, then index.
type keyedItem struct {
	key     float64
	k2      float64
	arrival float64
	// wake is, under RanksByQueue, when a running job reaches its queue's
	// cut: no later than that (see RunWake, crossing, nextWake).
	wake  float64
	job   int32
	gpus  int32
	stamp int32 // a waiting job's heap entry (waitingHead); resting: a running job's item is ready (rest)
	group int32
}

// The groups of a queue under RanksByQueue, in rank order.
const (
	ranInQueue   = 0 // running jobs the last round planned in this queue
	waitsInQueue = 1 // waiting jobs
	enteredQueue = 2 // running jobs that crossed into it since, by arrival
)

func (a *keyedItem) before(b *keyedItem) bool {
	switch {
	case a.key != b.key:
		return a.key < b.key
	case a.group != b.group:
		return a.group < b.group
	case a.k2 != b.k2:
		return a.k2 < b.k2
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

func newKeyedQueue(jobs []jobState, p *policy.Policy) *keyedQueue {
	q := &keyedQueue{stamp: make([]int32, len(jobs)), key: p.RankKey()}
	q.rule, q.byQueue = p.RanksByQueue()
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
func (s *simulator) appendKeyed(items []keyedItem, i int) []keyedItem {
	q, js := s.keyed, &s.jobs[i]
	items = append(items, keyedItem{})
	it := &items[len(items)-1]
	it.arrival, it.job, it.gpus = js.Arrival, int32(i), int32(js.GPUs)
	if !q.byQueue {
		setRemaining(&js.Job, js)
		it.key = q.key(&js.Job)
		return items
	}
	qi := q.rule.Queue(&js.Job)
	it.key = float64(qi)
	if js.State == policy.Running {
		it.wake = s.now + q.rule.RunWake(&js.Job, qi)
	}
	if q.ranked != nil {
		if js.State == policy.Running {
			js.PrevQueue = qi
		}
		it.k2 = s.indexKey(i)
		return items
	}
	it.group, it.k2 = waitsInQueue, float64(js.seq)
	if js.State == policy.Running {
		it.group = ranInQueue
		if js.PrevQueue != qi {
			it.group, it.k2 = enteredQueue, 0
		}
		js.PrevQueue = qi
	}
	return items
}

// wait keeps job i, which has just become pending: its counters in the
// dense list, and itself in its size's heap (an arrival, by the next
// round).
func (s *simulator) wait(i int) {
	q, js := s.keyed, &s.jobs[i]
	js.pendAt = int32(len(q.pend))
	q.pend = append(q.pend, waitCounters{lastUpdate: js.lastUpdate, wait: js.Wait, queued: js.queued, promoWait: js.promoWait,
		job: int32(i), logAt: int32(len(q.log)), ran: js.Executed > 0, planned: js.PrevQueue >= 0})
	if js.PrevQueue < 0 { // an arrival: in the heaps by the next round
		js.seq = q.back
		q.back++
		q.arrived = append(q.arrived, i)
		return
	}
	s.push(i)
}

// rekey puts the waiting jobs in the heaps again, with their keys now:
// 2D-Gittins has new sizes.
func (s *simulator) rekey() {
	q := s.keyed
	for k := range q.waiting {
		q.waiting[k] = q.waiting[k][:0]
	}
	for _, c := range q.pend {
		s.push(int(c.job))
	}
	q.arrived = q.arrived[:0]
}

// push puts waiting job i in its size's heap.
func (s *simulator) push(i int) {
	q := s.keyed
	q.stamp[i]++
	k, _ := slices.BinarySearch(q.sizes, s.jobs[i].GPUs)
	h := s.appendKeyed(q.waiting[k], i)
	h[len(h)-1].stamp = q.stamp[i]
	q.waiting[k] = siftUp(h)
}

// reinsert puts an entry taken off its size's heap back.
func (s *simulator) reinsert(it keyedItem) {
	q := s.keyed
	k, _ := slices.BinarySearch(q.sizes, int(it.gpus))
	q.waiting[k] = siftUp(append(q.waiting[k], it))
}

// siftUp moves a heap's last entry up to its place.
func siftUp(h []keyedItem) []keyedItem {
	for c := len(h) - 1; c > 0; {
		p := (c - 1) / 2
		if !h[c].before(&h[p]) {
			break
		}
		h[c], h[p] = h[p], h[c]
		c = p
	}
	return h
}

// waitingHead is the waiting job first in size k's heap, or nil. Today a
// job leaves the heaps only by being popped there (jobs the arrival
// shortcut starts have not entered them, and rekey empties them), so no
// entry goes stale; the check keeps a job that started another way, or
// was pushed again, from being started twice.
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

// unwait gives job i, which starts, its counters back.
func (s *simulator) unwait(i int) {
	q, js := s.keyed, &s.jobs[i]
	k := js.pendAt
	c := &q.pend[k]
	s.catchUpWaiting(c)
	js.lastUpdate, js.Wait, js.queued, js.promoWait = c.lastUpdate, c.wait, c.queued, c.promoWait
	last := len(q.pend) - 1
	q.pend[k] = q.pend[last]
	s.jobs[q.pend[k].job].pendAt = k
	q.pend = q.pend[:last]
}

// flushWaiting gives every pending job its counters back, for the
// results.
func (s *simulator) flushWaiting() {
	for k := range s.keyed.pend {
		c := &s.keyed.pend[k]
		s.catchUpWaiting(c)
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
func (s *simulator) catchUpWaiting(c *waitCounters) {
	q := s.keyed
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

// entry is the queue a new job enters (0 for orders without queues).
func (q *keyedQueue) entry() int {
	if q.byQueue {
		return q.rule.Entry()
	}
	return 0
}

// settleRunning settles job i, of started (or of ran, ranked by key), if
// it still runs, and says whether it does. Jobs that run under
// RanksByQueue are settled lazily (catchUp).
func (s *simulator) settleRunning(i int) bool {
	js := &s.jobs[i]
	if js.done || js.State != policy.Running {
		return false
	}
	settleAt(js, s.now)
	return true
}

// settlePlanned settles every planned job, as the arrival shortcut does,
// and says whether each one keeps its place (Policy.Settled). Jobs keep
// their queue while they wait. It drops the jobs that no longer run from
// the running lists: on a cluster with room, rounds are rare and the
// shortcut starts most jobs.
func (s *simulator) settlePlanned() bool {
	settled, always := true, s.cfg.Policy.AlwaysSettled(&s.snap)
	q := s.keyed
	// Pending jobs and those that rest are settled lazily. The tail's
	// jobs stay in the last queue and keep their place there; the other
	// jobs that ran keep theirs until they reach their queue's cut.
	q.logSettle(s.now)
	w := 0
	for _, it := range q.ran {
		js := &s.jobs[it.job]
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

// crossSlack is how far, in seconds, a job's wake may fall short of
// when it reaches its queue's cut: settling rounds its service in steps.
const crossSlack = 1e-6

// keyedRound is a planning round of a policy that ranks by key or by
// queue (see Policy.RanksByKey, RanksByQueue): it walks the running jobs,
// in their order now, together with the waiting jobs that rank among
// them, and each one the GPUs not yet taken hold runs. Waiting jobs that
// do not start are not visited, as none of them fits once a round's walk
// reaches them.
func (s *simulator) keyedRound() {
	s.rounds++
	q := s.keyed
	if q.byQueue {
		s.learnSizes()
		if d := q.rule.Sizes(&s.snap); d != q.ranked {
			q.ranked = d
			if q.indices == nil {
				q.indices = make([]gittinsIndex, len(s.jobs))
			}
			s.rekey()
			for k := range q.tail {
				// Worked out with other sizes.
				q.tail[k].expire, q.tail[k].positive = math.Inf(-1), math.Inf(-1)
			}
			for k := range q.ran {
				// Ranked by index, running jobs carry the one they were
				// last ranked by.
				it := &q.ran[k]
				it.group, it.k2 = 0, q.indices[it.job].key
			}
		}
	}
	for _, i := range q.arrived {
		if js := &s.jobs[i]; js.State == policy.Pending && !js.done {
			s.push(i)
		}
	}
	q.arrived = q.arrived[:0]
	s.tidyTail()
	// The running jobs' keys now, each job settled as a round's Snapshot
	// brings it up to date: those the last round kept (or started), in its
	// order.
	run := q.items[:0]
	for k := range q.ran {
		it := &q.ran[k]
		js := &s.jobs[it.job]
		switch {
		case js.done || js.State != policy.Running:
		case !q.byQueue:
			settleAt(js, s.now)
			run = s.appendKeyed(run, int(it.job))
		default:
			run = append(run, *it)
			if it.wake <= s.now+crossSlack {
				s.crossing(&run[len(run)-1])
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
	q.fresh = fresh

	// Under RanksByQueue, jobs preempted in the queue they ran in are
	// numbered in rank order below every number given so far; jobs that
	// start, and those new to their queue, above every one.
	q.front -= int64(len(run) + len(q.tail))
	seq := q.front
	wake := math.Inf(1)
	kept, preempt, starts := q.ran[:0], q.preempt[:0], q.starts[:0]
	q.firstWake = math.Inf(1)
	free := s.gpus
	best := s.first(free)
	// Ranked by Gittins index, the running jobs of each queue are readied
	// as the walk reaches them (startWhateverTheOrder, orderQueue); other
	// orders' keys are whole already.
	queueEnd := -1 // where the running jobs of the queue being walked end
	if q.ranked != nil {
		queueEnd = 0
	}
	tailLeft := len(q.tail) > 0
	for r := 0; r < len(run) || best >= 0 || tailLeft; {
		if tailLeft && (r == len(run) || run[r].key == q.lastQ) && (best < 0 || q.waiting[best][0].key == q.lastQ) {
			// The walk has reached the last queue, where the tail is.
			tailLeft = false
			extra := 0 // the GPUs of the last queue's other running jobs
			for k := r; k < len(run); k++ {
				extra += int(run[k].gpus)
			}
			switch {
			case q.ranked == nil && q.tailGPUs <= free, best < 0 && q.tailGPUs+extra <= free:
				// The tail's jobs all keep running, ahead of whatever
				// starts there: under 2D-LAS they rank first in the
				// queue; otherwise nothing waiting fits.
				free -= q.tailGPUs
				if best >= 0 && q.sizes[best] > free {
					best = s.first(free)
				}
				continue
			case q.ranked != nil && best >= 0:
				var ahead int
				run, ahead = s.splitTail(run, r, free, &q.waiting[best][0])
				if ahead >= 0 {
					// The jobs ahead of the first waiting job that fits
					// keep running; the walk goes on from there.
					free -= ahead
					queueEnd = len(run)
					if q.sizes[best] > free {
						best = s.first(free)
					}
				}
				continue
			}
			run = s.spliceTail(run, r)
			continue
		}
		if r == queueEnd && r < len(run) && (best < 0 || q.waiting[best][0].key >= run[r].key) {
			var whole bool
			queueEnd, whole = s.readyQueue(run, r, free)
			if whole {
				// Every running job of the queue keeps running, and the
				// waiting ones that start fit beside them anyway.
				for ; r < queueEnd; r++ {
					free -= int(run[r].gpus)
					kept = s.keep(kept, &run[r])
				}
				for k := range q.unordered {
					it := &q.unordered[k]
					free -= int(it.gpus)
					starts = append(starts, int(it.job))
					wake = min(wake, s.startedInQueue(it))
					kept = s.keep(kept, it)
				}
				best = s.first(free)
				continue
			}
		}
		if r < len(run) && (best < 0 || run[r].before(&q.waiting[best][0])) {
			it := &run[r]
			r++
			g := int(it.gpus)
			if q.byQueue {
				switch {
				case it.group == enteredQueue:
					s.jobs[it.job].seq = q.back
					q.back++
				case g > free:
					s.jobs[it.job].seq = seq
					seq++
				}
			}
			if g <= free {
				free -= g
				kept = s.keep(kept, it)
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
		if q.byQueue {
			wake = min(wake, s.startedInQueue(&it))
		}
		kept = s.keep(kept, &it) // runs next round in this order
		best = s.first(free)
	}
	if q.byQueue {
		wake = s.nextWake(kept, wake)
	}
	q.ran, q.items = kept, run

	// As a round carries out its decisions: preemptions first, then the
	// starts, each in the order of the Snapshot.
	slices.Sort(preempt)
	for _, i := range preempt {
		s.preempt(i)
	}
	slices.Sort(starts)
	start := policy.Decision{Job: -1, Run: true, GPUModel: s.model, Speedup: 1}
	for _, i := range starts {
		s.start(i, &start)
	}
	q.started = q.started[:0] // they are in q.ran already
	q.preempt, q.starts = preempt, starts
	s.blocked = s.pending > 0
	s.head = -1
	s.wakeAt = math.Inf(1)
	if !math.IsInf(wake, 1) {
		s.wakeAt = s.now + max(wake, 1e-3)
	}
}

// queueSpan says where the running jobs of run[from]'s queue end, and
// how many GPUs they hold.
func queueSpan(run []keyedItem, from int) (end, gpus int) {
	for end = from; end < len(run) && run[end].key == run[from].key; end++ {
		gpus += int(run[end].gpus)
	}
	return end, gpus
}

// readyQueue readies the running jobs of run[from]'s queue for the walk
// to reach them with free GPUs not yet taken, and says where they end.
// With whole, the queue's outcome holds whatever their order, and the
// waiting jobs that start are in q.unordered (startWhateverTheOrder);
// otherwise they are sorted by their indices now (orderQueue).
func (s *simulator) readyQueue(run []keyedItem, from, free int) (end int, whole bool) {
	end, gpus := queueSpan(run, from)
	if s.startWhateverTheOrder(run[from].key, free, gpus) {
		return end, true
	}
	s.orderQueue(run[from:end])
	return end, false
}

// startedInQueue numbers a job a round starts, as it numbers every
// start, and says how long it takes to reach its queue's cut (RunWake).
func (s *simulator) startedInQueue(it *keyedItem) float64 {
	q, js := s.keyed, &s.jobs[it.job]
	js.seq = q.back
	q.back++
	w := q.rule.RunWake(&js.Job, int(it.key))
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
func (s *simulator) startWhateverTheOrder(qi float64, free, gpus int) bool {
	q := s.keyed
	started := q.unordered[:0]
	spare := free - gpus
	ok := spare >= 0
	for ok {
		k := s.first(spare + gpus) // ahead of every running job of the queue
		if k < 0 || q.waiting[k][0].key != qi {
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
			s.reinsert(it)
		}
	}
	return ok
}

// orderQueue works out the Gittins index of each running job of one
// queue, which carried the index it was last ranked by, and sorts them.
func (s *simulator) orderQueue(seg []keyedItem) {
	for k := range seg {
		s.settle(&s.jobs[seg[k].job]) // settled lazily
		seg[k].k2 = s.indexKey(int(seg[k].job))
	}
	insertionSort(seg)
}

// indexKey is job i's rank within its queue under 2D-Gittins now, its
// counters settled (QueueRule.Key), kept as the one it was last ranked by.
func (s *simulator) indexKey(i int) float64 {
	q := s.keyed
	ix := &q.indices[i]
	ix.key = q.rule.Key(q.ranked, &s.jobs[i].Job, &ix.hint)
	return ix.key
}

// bound sets until when a tail job's key bounds its rank (expire), and
// until when its index is surely above zero (positive), from the lookups
// its key was last worked out with.
func (s *simulator) bound(t *tailItem) {
	q, js := s.keyed, &s.jobs[t.job]
	h := &q.indices[t.job].hint
	t.expire = s.reaches(js, h.RisesUntil(q.ranked))
	t.positive = s.reaches(js, h.PositiveUntil(q.ranked))
}

// insertionSort sorts items that are nearly in order: keys change little
// between rounds.
func insertionSort(items []keyedItem) {
	for a := 1; a < len(items); a++ {
		if !items[a].before(&items[a-1]) {
			continue
		}
		it, b := items[a], a
		for ; b > 0 && it.before(&items[b-1]); b-- {
			items[b] = items[b-1]
		}
		items[b] = it
	}
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

// done takes js, settled lazily and now done, out of the tail's count;
// its entry there goes at the next round (tidyTail).
func (q *keyedQueue) done(js *jobState) {
	js.lazy = false
	if js.inTail {
		js.inTail = false
		q.tailGPUs -= js.GPUs
		q.tailDone++
	}
}

// tidyTail drops the tail's entries of jobs done since, and logs now, at
// the start of a round, as a time the round settles every job at.
func (s *simulator) tidyTail() {
	q := s.keyed
	if q.tailDone > 0 {
		q.tail = slices.DeleteFunc(q.tail, func(t tailItem) bool { return s.jobs[t.job].done })
		q.tailDone = 0
	}
	if len(q.tail) == 0 && len(q.ran) == 0 && len(q.pend) == 0 {
		q.log = q.log[:0] // no job is settled lazily
		return
	}
	q.logSettle(s.now)
}

// flushLazy settles the jobs settled lazily as the rounds have, for the
// results.
func (s *simulator) flushLazy() {
	q := s.keyed
	for _, t := range q.tail {
		if js := &s.jobs[t.job]; js.lazy {
			q.catchUp(js)
		}
	}
	for _, it := range q.ran {
		if js := &s.jobs[it.job]; js.lazy {
			q.catchUp(js)
		}
	}
}

// keep adds a job the round keeps running, or starts, to those the next
// round walks: to kept, or, in the last queue, to the tail. Under
// RanksByQueue the next round takes its item as it is: until the job
// reaches its queue's cut (wake) its queue and place stay, and it is
// settled lazily.
func (s *simulator) keep(kept []keyedItem, it *keyedItem) []keyedItem {
	if s.keyed.byQueue {
		return s.keepQueued(kept, it)
	}
	return append(kept, *it)
}

// keepQueued is keep under RanksByQueue.
func (s *simulator) keepQueued(kept []keyedItem, it *keyedItem) []keyedItem {
	q := s.keyed
	if it.key == q.lastQ {
		s.toTail(it)
		return kept
	}
	if it.stamp != resting {
		s.rest(it)
	}
	q.firstWake = min(q.firstWake, it.wake)
	return append(kept, *it)
}

// resting marks the item of a job that rest has readied.
const resting = -1

// rest readies the item of a job a round keeps running under
// RanksByQueue for the next round, and settles the job lazily from now.
func (s *simulator) rest(it *keyedItem) {
	q, js := s.keyed, &s.jobs[it.job]
	if q.ranked == nil {
		// Under 2D-LAS the job ran in its queue: it ranks by its number.
		it.group, it.k2 = ranInQueue, float64(js.seq)
	}
	if !js.lazy {
		js.lazy, js.logAt = true, int32(len(q.log))
	}
	it.stamp = resting
}

// crossing brings the item of a job that ran, and may have reached its
// queue's cut since, up to date: it settles the job, and gives it its
// queue now (new to it: LAS ranks it after the jobs there) and its wake.
func (s *simulator) crossing(it *keyedItem) {
	q, js := s.keyed, &s.jobs[it.job]
	s.settle(js)
	qi := q.rule.Queue(&js.Job)
	if float64(qi) != it.key {
		it.key = float64(qi)
		if q.ranked == nil {
			it.group, it.k2, it.stamp = enteredQueue, 0, 0 // numbered by the walk
		}
		js.PrevQueue = qi
	}
	it.wake = s.now + q.rule.RunWake(&js.Job, qi)
}

// nextWake is the least RunWake of the jobs a round keeps running, the
// least of those it starts being least: it works each out only for the
// jobs whose wake could be the least, as wakes are never late (but for
// rounding, far below crossSlack).
func (s *simulator) nextWake(kept []keyedItem, least float64) float64 {
	q := s.keyed
	first := q.firstWake // the least wake of kept (keep)
	if math.IsInf(first, 1) {
		return least
	}
	exact := func(from, to float64) {
		for k := range kept {
			if it := &kept[k]; it.wake > from && it.wake <= to {
				js := &s.jobs[it.job]
				s.settle(js)
				least = min(least, q.rule.RunWake(&js.Job, int(it.key)))
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

// toTail adds a job of the last queue that a round keeps running, or
// starts, to the tail.
func (s *simulator) toTail(it *keyedItem) {
	q := s.keyed
	js := &s.jobs[it.job]
	t := tailItem{keyedItem: *it, expire: math.Inf(-1), positive: math.Inf(-1)}
	t.wake = math.Inf(1) // it stays in the last queue (RunWake)
	if q.ranked == nil {
		// Under 2D-LAS the tail is in rank order: by its jobs' numbers.
		t.group, t.k2 = ranInQueue, float64(js.seq)
	} else {
		s.bound(&t)
	}
	if !js.lazy {
		js.lazy, js.logAt = true, int32(len(q.log))
	}
	js.inTail = true
	q.tail = append(q.tail, t)
	q.tailGPUs += int(it.gpus)
}

// reaches is the earliest time running job js's attained service may
// reach until (from IndexHint.RisesUntil or PositiveUntil): it grows by
// at most its GPUs each second.
func (s *simulator) reaches(js *jobState, until float64) float64 {
	if math.IsInf(until, 1) {
		return until
	}
	// Settling adds the service up in rounded steps: keep well clear of
	// the bound.
	until -= 1e-8 * math.Abs(until)
	if !(until > js.Attained) {
		return math.Inf(-1)
	}
	return s.now + (until-js.Attained)/float64(max(js.GPUs, 1))
}

// spliceTail puts the tail's jobs in run, as the last queue's running
// jobs that rank first there, ahead of run[r:], for the walk to visit
// them one by one; the tail is left empty, for the jobs the walk keeps.
func (s *simulator) spliceTail(run []keyedItem, r int) []keyedItem {
	q := s.keyed
	rest := append(q.spliced[:0], run[r:]...)
	run = run[:r]
	for k := range q.tail {
		t := &q.tail[k]
		js := &s.jobs[t.job]
		js.inTail = false
		if q.ranked != nil {
			s.settle(js) // its index is worked out anew
		}
		run = append(run, t.keyedItem)
	}
	q.spliced = rest
	q.tail, q.tailGPUs = q.tail[:0], 0
	return append(run, rest...)
}

// splitTail readies the last queue for the walk under 2D-Gittins, with
// free GPUs not yet taken there and h the waiting job that ranks first
// among those that fit in them: before h only running jobs rank, and if
// they all fit, they keep running whatever their order. If they do not
// all fit, it tries again from the running job some way up, whose ahead
// do fit. It leaves the jobs ahead in the tail, says how many GPUs they
// hold (ahead), and puts the other running jobs of the queue in run[r:],
// sorted, for the walk to go on from there. A tail job that ranks ahead
// for sure (see rankTail) needs no new index. Otherwise ahead is -1, and
// every running job of the queue is in run[r:], to be ordered there.
func (s *simulator) splitTail(run []keyedItem, r, free int, h *keyedItem) ([]keyedItem, int) {
	q := s.keyed
	extra := run[r:] // the queue's other running jobs, new to it
	for k := range extra {
		extra[k].k2 = s.indexKey(int(extra[k].job))
	}
	ahead := s.rankTail(extra, h)
	if ahead > free {
		// Some of them do not fit. Those whose keys are below some key,
		// at most free less the widest job's GPUs, mostly still do: the
		// walk goes on from that key.
		keys := q.keys[:0]
		for k := range q.tail {
			if q.isAhead[k] {
				keys = append(keys, rankGPUs{q.tail[k].k2, q.tail[k].gpus})
			}
		}
		for k := range extra {
			if q.isAhead[len(q.tail)+k] {
				keys = append(keys, rankGPUs{extra[k].k2, extra[k].gpus})
			}
		}
		slices.SortFunc(keys, func(a, b rankGPUs) int {
			if a.k2 < b.k2 {
				return -1
			}
			if a.k2 > b.k2 {
				return 1
			}
			return 0
		})
		q.keys = keys
		widest := q.sizes[len(q.sizes)-1]
		held, at := 0, -1
		for k := range keys {
			if held += int(keys[k].gpus); held > free-widest {
				break
			}
			at = k
		}
		if at >= 0 && at+1 < len(keys) {
			// Ahead of every job of key keys[at+1].k2.
			pivot := keyedItem{key: q.lastQ, k2: keys[at+1].k2, arrival: math.Inf(-1), job: -1}
			ahead = s.rankTail(extra, &pivot)
		}
		if ahead > free {
			return s.spliceTail(run, r), -1 // the walk visits them all, in order
		}
	}
	behind, n := q.spliced[:0], len(q.tail)
	if q.tailBehind > 0 {
		w := 0
		for k := range q.tail {
			t := &q.tail[k]
			if q.isAhead[k] {
				if w != k {
					q.tail[w] = *t
				}
				w++
			} else {
				s.jobs[t.job].inTail = false
				q.tailGPUs -= int(t.gpus)
				behind = append(behind, t.keyedItem)
			}
		}
		q.tail = q.tail[:w]
	}
	for k := range extra {
		if q.isAhead[n+k] {
			s.toTail(&extra[k])
		} else {
			behind = append(behind, extra[k])
		}
	}
	q.spliced = behind
	slices.SortFunc(behind, compareKeyed)
	return append(run[:r], behind...), ahead
}

// rankTail marks in q.isAhead which of the tail's jobs, then extra's,
// rank before th, and says how many GPUs those hold. A tail job is given
// its index now only where it may not rank before th. It surely does if
// its index has not fallen since it ranked before th (expire); or if th's
// index is zero, and its own is above zero (positive) or it arrived first
// (no index is below zero). On a congested cluster the first waiting job
// of the last queue is mostly one past every learned size, of index zero.
func (s *simulator) rankTail(extra []keyedItem, th *keyedItem) int {
	q := s.keyed
	q.isAhead = slices.Grow(q.isAhead[:0], len(q.tail)+len(extra))[:len(q.tail)+len(extra)]
	ahead, zero, now := 0, th.k2 == 0, s.now
	q.tailBehind = 0
	for k := range q.tail {
		t := &q.tail[k]
		// Every job of the tail, and th, are of the last queue and of no
		// group: they rank by index, then arrival, then index in the
		// trace.
		var before bool
		if zero && now < t.positive {
			before = true
		} else {
			first := t.arrival < th.arrival || t.arrival == th.arrival && t.job < th.job
			before = now < t.expire && (t.k2 < th.k2 || t.k2 == th.k2 && first) || zero && first
		}
		if !before {
			s.settle(&s.jobs[t.job])
			t.k2 = s.indexKey(int(t.job))
			s.bound(t)
			before = t.before(th)
		}
		q.isAhead[k] = before
		if before {
			ahead += int(t.gpus)
		} else {
			q.tailBehind++
		}
	}
	for k := range extra {
		before := extra[k].before(th)
		q.isAhead[len(q.tail)+k] = before
		if before {
			ahead += int(extra[k].gpus)
		}
	}
	return ahead
}
