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
// where jobs fit; it preempts only under a preemptive order or at the end
// of a lease it keeps (Synergy's), and under a blocking order starts no
// job behind one that waits.
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
	Migrate *Migration
	// Rotate, when set, draws again once a period which GPU model each job
	// that runs is on, blind to speed: the agnostic baseline as Gavel
	// re-allocates it every round (see Rotation).
	Rotate   *Rotation
	Blocking bool // strict FIFO: stop at the first pending job that does not fit
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

	items    []Rank // sort scratch, reused across rounds
	misfits  []Rank
	fresh    []Rank
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
	nameLaneStarts(s, r)
	if p.Migrate != nil {
		p.Migrate.apply(s, r)
	}
	if p.Rotate != nil {
		p.Rotate.apply(s, r)
	}
	if p.Size != nil {
		p.Size.Size(s, r, p.Order.Preemptive(), p.Blocking)
	}
	// After sizing, which may start or stop jobs: the wake-up is for the
	// jobs that run.
	if w, ok := p.Order.(Waker); ok {
		r.Wake = min(r.Wake, w.Wake(s, r))
	}
	if w, ok := p.Size.(Waker); ok {
		r.Wake = min(r.Wake, w.Wake(s, r))
	}
	if p.Rotate != nil {
		r.Wake = min(r.Wake, p.Rotate.wake(s, r))
	}
	if p.Migrate != nil {
		r.Wake = min(r.Wake, p.Migrate.wake(s, r))
	}
	return r
}

// ReplacesRunning says the policy places running jobs again on a clock of
// its own (Synergy's lease, a Rotation, a blind Migration, whose guess of
// a job's remaining work grows as the job runs), so that its wake-ups call
// for a round even when no job waits.
func (p *Policy) ReplacesRunning() bool {
	return p.KeepsLease() || p.Rotate != nil || p.Migrate != nil && p.Migrate.Blind
}

// KeepsLease says the policy has a Synergy sizer with a lease.
func (p *Policy) KeepsLease() bool {
	z, ok := p.Size.(synergySizer)
	return ok && z.lease > 0
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
		it := Rank{K1: d.k1, K2: d.k2, K3: d.k3, Arrival: j.Arrival, Job: i}
		pr := j.PrevRank
		if pr < 0 || pr >= limit {
			fresh = append(fresh, it)
			continue
		}
		for len(slots) <= pr {
			slots = append(slots, Rank{Job: -1})
		}
		if slots[pr].Job >= 0 {
			fresh = append(fresh, it)
			continue
		}
		slots[pr] = it
	}
	items := r.sortNearlySorted(append(slots, fresh...))
	for rank, it := range items {
		r.Order[rank] = it.Job
		ds[it.Job].Rank = rank
	}
	r.items, r.fresh = items, fresh
}

// sortNearlySorted sorts items that are mostly in order already, in
// O(n + k log k) for k items out of place: it keeps the in-order run, sorts
// the misfits aside and merges the two. Items with job < 0 are holes
// (ranks no job held last round) and are dropped: the result is the other
// items, sorted, at the front of items.
func (r *Result) sortNearlySorted(items []Rank) []Rank {
	misfits := r.misfits[:0]
	defer func() { r.misfits = misfits }()
	kept := 0 // the in-order run, compacted to the front of items
	next := 0 // the first item after i that is no hole
	for next < len(items) && items[next].Job < 0 {
		next++
	}
	for next < len(items) {
		i := next
		it := items[i]
		for next = i + 1; next < len(items) && items[next].Job < 0; next++ {
		}
		// An item is out of place if it is below the run kept so far, or
		// above its successor (it jumped ahead: keeping it would push every
		// item after it out). Writes go to kept <= i, so items after i are
		// still as laid out.
		if (kept > 0 && it.Before(&items[kept-1])) ||
			(next < len(items) && !it.Before(&items[next])) {
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
	slices.SortFunc(misfits, CompareRanks[float64, int])
	// Merge from the back, so the kept run is read before it is
	// overwritten. No two items compare equal (the job index decides).
	a, b := kept-1, len(misfits)-1
	for k := len(items) - 1; b >= 0; k-- {
		if a >= 0 && misfits[b].Before(&items[a]) {
			items[k] = items[a]
			a--
		} else {
			items[k] = misfits[b]
			b--
		}
	}
	return items
}

// RankOf is a job's place in a round's order: by K1, K2 and K3 in turn,
// then by arrival, then by the job's index. G and J are the widths of the
// group key K2 and of the index: Plan sorts its jobs by Rank, and the
// simulator's keyed queue ranks them by RankOf[int32, int32], which keeps
// its items small; both order by the one Before, so that the two orders
// agree to the bit. The fields are laid out for size, not in the order
// they are compared.
type RankOf[G int32 | float64, J int32 | int] struct {
	K1, K3, Arrival float64
	K2              G
	Job             J
}

// Rank is Plan's RankOf.
type Rank = RankOf[float64, int]

// Before says a ranks before b, cheap enough to inline; it reads b's
// fields only as far as they decide. Ranks of two jobs never compare
// equal, so !a.Before(b) is b before a.
func (a *RankOf[G, J]) Before(b *RankOf[G, J]) bool {
	switch {
	case a.K1 != b.K1:
		return a.K1 < b.K1
	case a.K2 != b.K2:
		return a.K2 < b.K2
	case a.K3 != b.K3:
		return a.K3 < b.K3
	case a.Arrival != b.Arrival:
		return a.Arrival < b.Arrival
	}
	return a.Job < b.Job
}

// CompareRanks is Before as a comparison for slices.SortFunc.
func CompareRanks[G int32 | float64, J int32 | int](a, b RankOf[G, J]) int {
	// Two calls of Before, both inlined, rather than a struct compare,
	// which is a call of its own.
	switch {
	case a.Before(&b):
		return -1
	case b.Before(&a):
		return 1
	}
	return 0
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
