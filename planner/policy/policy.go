package policy

import (
	"cmp"
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

// Waker is an Orderer whose order changes with time for the jobs that run
// (queue cuts, starvation); Wake is read after placement.
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
type Sizer interface {
	Name() string
	Size(s *Snapshot, r *Result)
}

// Policy is an Orderer, a Placer and an optional Sizer run in sequence.
type Policy struct {
	Name     string
	Order    Orderer
	Place    Placer
	Size     Sizer // nil: no sizing
	Blocking bool  // strict FIFO: stop at the first pending job that does not fit
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
}

// Plan runs the policy on s. Pass the previous round's Result (or a new
// one) to reuse its storage; Plan returns it filled.
func (p *Policy) Plan(s *Snapshot, r *Result) *Result {
	if r == nil {
		r = &Result{}
	}
	n := len(s.Jobs)
	if cap(r.Decisions) < n {
		r.Decisions = make([]Decision, n)
		r.Order = make([]int, n)
	}
	r.Decisions, r.Order = r.Decisions[:n], r.Order[:n]
	for i := range r.Decisions {
		r.Decisions[i] = Decision{Job: i, Speedup: 1}
		r.Order[i] = i
	}
	r.Wake = p.Order.Order(s, r.Decisions)
	sortOrder(s, r)
	p.Place.Place(s, r, p.Order.Preemptive(), p.Blocking)
	if w, ok := p.Order.(Waker); ok {
		r.Wake = min(r.Wake, w.Wake(s, r))
	}
	if p.Size != nil {
		p.Size.Size(s, r)
	}
	return r
}

// sortOrder sorts r.Order by the orderer's keys, then arrival, then job
// index, so that ties resolve the same way every run.
func sortOrder(s *Snapshot, r *Result) {
	ds := r.Decisions
	slices.SortFunc(r.Order, func(a, b int) int {
		da, db := &ds[a], &ds[b]
		if c := cmp.Compare(da.k1, db.k1); c != 0 {
			return c
		}
		if c := cmp.Compare(da.k2, db.k2); c != 0 {
			return c
		}
		if c := cmp.Compare(da.k3, db.k3); c != 0 {
			return c
		}
		if c := cmp.Compare(s.Jobs[a].Arrival, s.Jobs[b].Arrival); c != 0 {
			return c
		}
		return a - b
	})
	for rank, j := range r.Order {
		ds[j].Rank = rank
	}
}

var inf = math.Inf(1)
