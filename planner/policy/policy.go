package policy

import (
	"math"
	"slices"
)

// Orderer ranks jobs. Order fills Queue, Band, Reason and the sort key of
// ds[i] for every job i (ds is indexed like s.Jobs). It returns how many
// seconds from s.Now its order may change on its own (a job crossing a
// queue cut, a starving job being promoted); +Inf when only arrivals and
// completions can change it.
type Orderer interface {
	Name() string
	Order(s *Snapshot, ds []Decision) (wake float64)
	// Preemptive orderers may take GPUs from running jobs that rank lower;
	// the others let running jobs keep what they hold.
	Preemptive() bool
}

// bounder is an Orderer that derives its order from a relaxation and
// reports the relaxation's lower bound (Result.Bound) after sorting.
type bounder interface {
	bound(s *Snapshot, r *Result) float64
}

// Waker is an Orderer whose order changes with time for the jobs that run
// (queue cuts, starvation); Wake is read after placement and sizing.
type Waker interface {
	Wake(s *Snapshot, r *Result) float64
}

// Placer walks jobs in rank order and sets Run, GPUModel, Lane and Slots.
// When blocking is true the first pending job that does not fit stops the
// walk (strict FIFO's head-of-line blocking).
type Placer interface {
	Name() string
	Place(s *Snapshot, r *Result, preemptive, blocking bool)
}

// Sizer sets CPUs, MemoryGB and Speedup for the decisions with Run true.
// It may place them on concrete GPUs (Slots), start a job the placer left
// waiting or leave one it started waiting, when host resources decide
// where jobs fit; it preempts only under a preemptive order, and under a
// blocking one starts no job behind one that waits.
type Sizer interface {
	Name() string
	Size(s *Snapshot, r *Result, preemptive, blocking bool)
}

// Policy is an Orderer, a Placer and an optional Sizer run in sequence.
type Policy struct {
	Name  string
	Order Orderer
	Place Placer
	Size  Sizer // nil: no sizing
	// Migrate, when set, re-decides after placement which GPU model each
	// job that runs is on, moving running jobs (see Migration).
	Migrate  *Migration
	Blocking bool // strict FIFO: stop at the first pending job that does not fit
}

// remembersRounds is implemented by orderers whose order depends on the
// previous round's decisions (PrevQueue, PrevRank), not only on the
// Snapshot: 2D-LAS keeps each queue's order from round to round.
type remembersRounds interface {
	// settled says j still belongs in the queue the last round put it in.
	settled(s *Snapshot, j *Job) bool
	// entryQueue is the queue a new job enters.
	entryQueue() int
}

// countsOnly is implemented by placers that decide from GPU counts per
// model alone (walkByCount) and start every job there is room for.
type countsOnly interface{ countsOnly() }

// The arrival shortcut lets a caller (the simulator) start jobs that just
// arrived without a planning round. It holds on a cluster of one GPU model
// when nothing else waits and every job fits: a round could then only
// start them. Use it as
//
//	p.CanStartArrivals() && every planned job j has p.Settled(s, j)
//	then for each arrival j, in arrival order: p.Enter(j, rank++)
//
// with rank beyond every rank given so far.

// CanStartArrivals says p's placement counts GPUs only and nothing is
// sized, so a round in which every job fits on one model starts them all.
func (p *Policy) CanStartArrivals() bool {
	_, counts := p.Place.(countsOnly)
	return counts && p.Size == nil
}

// arrivalOrdered is implemented by orderers that rank jobs by arrival
// alone and never preempt.
type arrivalOrdered interface{ arrivalOrdered() }

// firstFit is implemented by count-only placers that, on one GPU model,
// start each pending job in rank order that the free GPUs hold.
type firstFit interface{ firstFit() }

// StartsInArrivalOrder says a round of p on a cluster of one GPU model,
// with no job limited to some models, only starts pending jobs, visiting
// them in arrival order (ties by their index in the Snapshot): each one
// that fits in the GPUs left free starts; when p is Blocking, up to the
// first one that does not fit. Running jobs keep their GPUs. A caller that
// knows the free GPUs and the pending jobs in that order may then carry
// out the round without a Snapshot of every job.
func (p *Policy) StartsInArrivalOrder() bool {
	_, ordered := p.Order.(arrivalOrdered)
	_, fits := p.Place.(firstFit)
	return ordered && fits && !p.Order.Preemptive() && p.CanStartArrivals()
}

// keyFallsWhileRunning is implemented by orderers without wake-ups that
// rank by a key which only falls while a job runs and stays while it
// waits: the remaining time.
type keyFallsWhileRunning interface{ keyFallsWhileRunning() }

// CanStartArrivalsPastWaiting says the arrival shortcut (see
// CanStartArrivals) holds even while other jobs wait, for p's first-fit
// placement: if since the last round no job has finished, started or
// grown its remaining work, arrivals that together fit the GPUs the
// round left free start, and nothing else changes. Every job that waits
// did not fit where it ranked; the running jobs have only moved ahead of
// it since, and the arrivals take GPUs from what was free.
func (p *Policy) CanStartArrivalsPastWaiting() bool {
	_, falls := p.Order.(keyFallsWhileRunning)
	_, fits := p.Place.(firstFit)
	return falls && fits && p.CanStartArrivals()
}

// keyed is implemented by preemptive orderers without wake-ups that rank
// each job by a key of its own alone, which stays the same while the job
// waits: the remaining (GPU-)time.
type keyed interface{ key(j *Job) float64 }

// RanksByKey says a round of p on a cluster of one GPU model, with whole
// GPUs and no job limited to some models, runs exactly the jobs a
// first-fit walk picks: visiting every job, running or pending, in order
// of RankKey, then arrival, then index in the Snapshot, each one that the
// GPUs not yet taken hold runs (a running job keeps its GPUs, a pending
// one starts) and every other one waits (a running one is preempted). A
// job's key does not change while it waits, so a caller may keep the
// pending jobs ordered from round to round and carry out the round without
// a Snapshot of every job.
func (p *Policy) RanksByKey() bool {
	_, keys := p.Order.(keyed)
	_, fits := p.Place.(firstFit)
	return keys && fits && p.Order.Preemptive() && !p.Blocking && p.Migrate == nil && p.CanStartArrivals()
}

// RankKey is the key of an order that ranks by one (lower ranks first;
// see RanksByKey), or nil.
func (p *Policy) RankKey() func(j *Job) float64 {
	if o, ok := p.Order.(keyed); ok {
		return o.key
	}
	return nil
}

// queueRanked is implemented by the orderers that rank by multi-level
// queue first: 2D-LAS and 2D-Gittins.
type queueRanked interface{ queueRule() QueueRule }

// QueueRule is what a caller needs to carry out the rounds of a policy
// that ranks by queue (see Policy.RanksByQueue).
type QueueRule struct {
	q *queues
	g *gittinsOrder // 2D-Gittins; nil for 2D-LAS
}

// Sizes is the size distribution 2D-Gittins ranks by in a round of s, or
// nil while it has none (and ranks as 2D-LAS does), and under 2D-LAS.
func (r QueueRule) Sizes(s *Snapshot) *SizeDistribution {
	if r.g == nil {
		return nil
	}
	return r.g.ranksBy(s)
}

// Key is j's rank within its queue under 2D-Gittins with the sizes d
// (lower first): its Gittins index at its attained service, negated. The
// index's lookups start from h, which a caller keeps per job (nil: none).
func (r QueueRule) Key(d *SizeDistribution, j *Job, h *IndexHint) float64 {
	if h == nil {
		return -r.g.index(d, j.Attained)
	}
	return -r.g.indexFrom(d, j.Attained, h)
}

// Queue is the queue j's attained service puts it in.
func (r QueueRule) Queue(j *Job) int { return r.q.queueOf(j.Attained) }

// Last is the last queue: a running job in it stays there (RunWake is
// +Inf), and so keeps its place relative to the other jobs there under
// 2D-LAS.
func (r QueueRule) Last() int { return len(r.q.cuts) }

// Entry is the queue a new job enters.
func (r QueueRule) Entry() int { return r.q.queueOf(0) }

// RunWake is how many seconds j, running this round in queue qi (its
// Queue), takes to reach the queue's cut; +Inf in the last queue. A
// round's wake-up is the least.
func (r QueueRule) RunWake(j *Job, qi int) float64 {
	if qi >= len(r.q.cuts) {
		return inf
	}
	return max(r.q.toCut(j.Attained, float64(max(j.GPUs, 1)), qi), 0)
}

// RanksByQueue says a round of p on a cluster of one GPU model, with
// whole GPUs and no job limited to some models, runs exactly the jobs a
// first-fit walk picks (each job that the GPUs not yet taken hold runs),
// visiting the queues in turn and, within queue q (QueueRule.Queue):
// first the jobs the last round put in q that run, then those that wait,
// each in the last round's rank order (PrevRank); then the jobs new to q,
// arrivals first, each group by arrival, then index in the Snapshot.
// Under 2D-Gittins with sizes (QueueRule.Sizes), the jobs of a queue go
// by QueueRule.Key instead, then arrival, then index. Its wake-up is the
// least RunWake of the jobs it runs. The rule is returned with ok; a
// job's queue and key do not change while it waits, nor while the sizes
// stay the same.
func (p *Policy) RanksByQueue() (rule QueueRule, ok bool) {
	o, ranked := p.Order.(queueRanked)
	_, fits := p.Place.(firstFit)
	if !ranked || !fits || !p.Order.Preemptive() || p.Blocking || p.Migrate != nil || !p.CanStartArrivals() {
		return QueueRule{}, false
	}
	rule = o.queueRule()
	if rule.q.promoteKnob > 0 || rule.q.compat {
		return QueueRule{}, false
	}
	return rule, true
}

// Settled says job j, planned in an earlier round, keeps the place in the
// order that round gave it, so a round that only starts arrivals leaves
// its order be.
func (p *Policy) Settled(s *Snapshot, j *Job) bool {
	o, ok := p.Order.(remembersRounds)
	return !ok || o.settled(s, j)
}

// AlwaysSettled says Settled holds for every job of s: p's order keeps
// no place from one round to the next, or none now (2D-Gittins once it
// ranks by index).
func (p *Policy) AlwaysSettled(s *Snapshot) bool {
	o, ok := p.Order.(remembersRounds)
	if !ok {
		return true
	}
	a, ok := o.(settlesAll)
	return ok && a.settledAll(s)
}

// settlesAll is implemented by orders that remember rounds only at times.
type settlesAll interface {
	// settledAll says settled holds for every job of s.
	settledAll(s *Snapshot) bool
}

// Enter gives an arriving job started without a round the PrevQueue and
// PrevRank that round would have: last in the queue of a new job.
func (p *Policy) Enter(j *Job, rank int) {
	j.PrevQueue, j.PrevRank = 0, rank
	if o, ok := p.Order.(remembersRounds); ok {
		j.PrevQueue = o.entryQueue()
	}
}

// ReadsHistory says p reads Snapshot.History, so that a caller with no
// other use for it may leave finished jobs unrecorded. Only the predict
// order reads it; it is told by name, which an orderer that wraps another
// keeps.
func (p *Policy) ReadsHistory() bool {
	return p.Order.Name() == predictOrder{}.Name()
}

// Result is the outcome of one planning round.
type Result struct {
	// Decisions has one entry per job, indexed like Snapshot.Jobs.
	Decisions []Decision
	// Order lists job indices in rank order: Decisions[Order[0]] ranks first.
	Order []int
	// Wake is the number of seconds until the policy wants to plan again
	// even if no job arrives or completes; +Inf for never.
	Wake float64
	// Bound, for an order derived from a relaxation (hare), is the
	// relaxation's lower bound on Σ weight × (completion − Now) over the
	// snapshot's jobs of known run time: no schedule of them does better.
	// 0 for other orders.
	Bound float64

	items    []sortItem // sort scratch, reused across rounds
	misfits  []sortItem
	fresh    []sortItem
	reasons  map[[2]string]string
	lastJoin [3]string // reason, note, joined

	timeline timeline // the earliest placer's, reused across rounds

	movers         []mover   // migration scratch
	moverValues    []float64 // backs movers' values
	migrationGains []gainTo
}

// Plan runs the policy on s. Pass the previous round's Result (or a new
// one) to reuse its storage; Plan returns it filled.
func (p *Policy) Plan(s *Snapshot, r *Result) *Result {
	if r == nil {
		r = &Result{}
	}
	n := len(s.Jobs)
	if cap(r.Decisions) < n {
		// With room to grow: a simulator's rounds add a job or two at a
		// time, and growing to n exactly would copy them every round.
		c := n + n/4 + 16
		r.Decisions = make([]Decision, n, c)
		r.Order = make([]int, n, c)
	}
	r.Decisions, r.Order = r.Decisions[:n], r.Order[:n]
	for i := range r.Decisions {
		r.Decisions[i] = Decision{Job: i, Speedup: 1}
	}
	r.Wake = p.Order.Order(s, r.Decisions)
	sortOrder(s, r)
	r.Bound = 0
	if b, ok := p.Order.(bounder); ok {
		r.Bound = b.bound(s, r)
	}
	p.Place.Place(s, r, p.Order.Preemptive(), p.Blocking)
	if p.Migrate != nil {
		p.Migrate.apply(s, r)
	}
	if p.Size != nil {
		p.Size.Size(s, r, p.Order.Preemptive(), p.Blocking)
	}
	// After sizing, which may start or stop jobs: the wake-up is for the
	// jobs that run.
	if w, ok := p.Order.(Waker); ok {
		r.Wake = min(r.Wake, w.Wake(s, r))
	}
	return r
}

// sortOrder sorts r.Order by the orderer's keys, then arrival, then job
// index, so that ties resolve the same way every run. It sorts a compact
// copy of the keys: planning rounds are dominated by this sort.
func sortOrder(s *Snapshot, r *Result) {
	ds := r.Decisions
	// Lay the items out in last round's order first: orders change little
	// between rounds, and the sort runs in near-linear time on input that
	// is already nearly sorted. Each job's key goes straight to the slot of
	// its previous rank, in one pass over the jobs; jobs without a usable
	// previous rank (none, out of range or taken) go after them. The
	// layout only sets the speed: the sort's order is total.
	slots, fresh := r.items[:0], r.fresh[:0]
	limit := 4 * len(ds)
	for i := range ds {
		d, j := &ds[i], &s.Jobs[i]
		it := sortItem{d.k1, d.k2, d.k3, j.Arrival, i}
		pr := j.PrevRank
		if pr < 0 || pr >= limit {
			fresh = append(fresh, it)
			continue
		}
		for len(slots) <= pr {
			slots = append(slots, sortItem{job: -1})
		}
		if slots[pr].job >= 0 {
			fresh = append(fresh, it)
			continue
		}
		slots[pr] = it
	}
	items := r.sortNearlySorted(append(slots, fresh...))
	for rank, it := range items {
		r.Order[rank] = it.job
		ds[it.job].Rank = rank
	}
	r.items, r.fresh = items, fresh
}

// sortNearlySorted sorts items that are mostly in order already, in
// O(n + k log k) for k items out of place: it keeps the in-order run, sorts
// the misfits aside and merges the two. Items with job < 0 are holes
// (ranks no job held last round) and are dropped: the result is the other
// items, sorted, at the front of items.
func (r *Result) sortNearlySorted(items []sortItem) []sortItem {
	misfits := r.misfits[:0]
	defer func() { r.misfits = misfits }()
	kept := 0 // the in-order run, compacted to the front of items
	next := 0 // the first item after i that is no hole
	for next < len(items) && items[next].job < 0 {
		next++
	}
	for next < len(items) {
		i := next
		it := items[i]
		for next = i + 1; next < len(items) && items[next].job < 0; next++ {
		}
		// An item is out of place if it is below the run kept so far, or
		// above its successor (it jumped ahead: keeping it would push every
		// item after it out). Writes go to kept <= i, so items after i are
		// still as laid out.
		if (kept > 0 && before(&it, &items[kept-1])) ||
			(next < len(items) && !before(&it, &items[next])) {
			misfits = append(misfits, it)
			continue
		}
		items[kept] = it
		kept++
	}
	items = items[:kept+len(misfits)]
	if len(misfits) == 0 {
		return items
	}
	slices.SortFunc(misfits, compareItems)
	// Merge from the back, so the kept run is read before it is
	// overwritten. No two items compare equal (the job index decides).
	a, b := kept-1, len(misfits)-1
	for k := len(items) - 1; b >= 0; k-- {
		if a >= 0 && before(&misfits[b], &items[a]) {
			items[k] = items[a]
			a--
		} else {
			items[k] = misfits[b]
			b--
		}
	}
	return items
}

func compareItems(a, b sortItem) int {
	switch {
	case a.k1 != b.k1:
		return less(a.k1, b.k1)
	case a.k2 != b.k2:
		return less(a.k2, b.k2)
	case a.k3 != b.k3:
		return less(a.k3, b.k3)
	case a.arrival != b.arrival:
		return less(a.arrival, b.arrival)
	}
	return a.job - b.job
}

// before is compareItems(*a, *b) < 0, cheap enough to inline. No two
// items compare equal, so !before is compareItems > 0.
func before(a, b *sortItem) bool {
	switch {
	case a.k1 != b.k1:
		return a.k1 < b.k1
	case a.k2 != b.k2:
		return a.k2 < b.k2
	case a.k3 != b.k3:
		return a.k3 < b.k3
	case a.arrival != b.arrival:
		return a.arrival < b.arrival
	}
	return a.job < b.job
}

type sortItem struct {
	k1, k2, k3, arrival float64
	job                 int
}

func less(a, b float64) int {
	if a < b {
		return -1
	}
	return 1
}

var inf = math.Inf(1)

// join appends a placement note to a reason. Rounds repeat the same few
// notes for thousands of jobs, so joined strings are kept and reused.
func (r *Result) join(reason, note string) string {
	// Runs of jobs get the same note: check the last pair before hashing.
	if reason == r.lastJoin[0] && note == r.lastJoin[1] && r.reasons != nil {
		return r.lastJoin[2]
	}
	k := [2]string{reason, note}
	if s, ok := r.reasons[k]; ok {
		r.lastJoin = [3]string{reason, note, s}
		return s
	}
	if r.reasons == nil || len(r.reasons) > 4096 {
		r.reasons = map[[2]string]string{}
	}
	s := reason + note
	r.reasons[k] = s
	r.lastJoin = [3]string{reason, note, s}
	return s
}
