package policy

import "math"

// This file holds what only the simulator's shortcuts need: whether a
// round of a policy may be skipped or carried out without sorting every
// job (the arrival shortcut, ranking by key, ranking by queue), and the
// marker interfaces that tell it; and IndexHint, which lets repeated
// Gittins index lookups of one job start where the last ended. Policy.Plan
// decides without any of it; the simulator's tests compare its shortcuts
// with Plan bit for bit.

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
// each job by a key of its own and the History alone, which stays the
// same while the job waits and the History is unchanged: the remaining
// (GPU-)time, known or predicted. The memo, nil or the job's own, only
// makes asking again cheaper (History.ExpectedRemainingMemo).
type keyed interface {
	key(h *History, j *Job, m *RemainingMemo) float64
}

// RanksByKey says a round of p on a cluster of one GPU model, with whole
// GPUs and no job limited to some models, runs exactly the jobs a
// first-fit walk picks: visiting every job, running or pending, in order
// of RankKey, then arrival, then index in the Snapshot, each one that the
// GPUs not yet taken hold runs (a running job keeps its GPUs, a pending
// one starts) and every other one waits (a running one is preempted). A
// job's key does not change while it waits and the History is unchanged
// (where the policy ReadsHistory, a memo says whether it did), so a
// caller may keep the pending jobs ordered from round to round and carry
// out the round without a Snapshot of every job.
func (p *Policy) RanksByKey() bool {
	_, keys := p.Order.(keyed)
	_, fits := p.Place.(firstFit)
	return keys && fits && p.Order.Preemptive() && !p.Blocking && p.Migrate == nil && p.CanStartArrivals()
}

// RankKey is the key of an order that ranks by one (lower ranks first;
// see RanksByKey), or nil. It reads h, the Snapshot's History, and the
// job's own memo m, which may be nil.
func (p *Policy) RankKey() func(h *History, j *Job, m *RemainingMemo) float64 {
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

// IndexHint remembers where one job's last Gittins index lookups ended,
// and the terms of its index there. A running job's next lookup, at a
// little more attained service, mostly ends at the same samples, or a few
// further on.
type IndexHint struct {
	lo, hi int32
	// The index's terms, which hold for distribution of and quantum delta
	// while the attained service a stays in [loFrom, loTo) and a+delta in
	// [hiFrom, hiTo): between the same samples.
	of                           *SizeDistribution
	delta                        float64
	loFrom, loTo, hiFrom, hiTo   float64
	between, beyondQuantum, done float64
}

// RisesUntil is the attained service below which the index last worked
// out with h, for the sizes d, does not fall: until then a job's index
// comes from the same terms, and the division's divisor only shrinks as
// its attained service grows. It is -Inf when h's terms are not of d,
// or when rounding could make the divisor reach zero first.
func (h *IndexHint) RisesUntil(d *SizeDistribution) float64 {
	if d == nil || h.of != d {
		return math.Inf(-1)
	}
	until := min(h.loTo, h.hiTo-h.delta)
	if h.done > 0 && gittinsOf(until, h.between, h.beyondQuantum, h.done) <= 0 {
		return math.Inf(-1)
	}
	return until
}

// FloorUntil is a floor under the index of a job whose lookups ended at
// h, for the sizes d, where index is the index they gave, and the attained
// service below which it holds. The index falls only as the attained
// service passes a sample, which leaves the quantum's window: while no
// more than a quarter of the samples the index counted have left it, it
// counts at least the other three quarters, and its divisor only shrinks.
// Where the index is worked out anew each time the attained service
// passes the next sample, that bounds it for many samples at once. The
// floor is lowered by the divisor's rounding (as PositiveUntil bounds it)
// and a few units in the last place. It is 0 and until -Inf where h's
// terms are not of d or count no sample, or where rounding could cancel
// a quantum.
func (h *IndexHint) FloorUntil(d *SizeDistribution, index float64) (floor, until float64) {
	none := math.Inf(-1)
	if d == nil || h.of != d || h.done <= 0 || !(index > 0) {
		return 0, none
	}
	n, counted := len(d.sorted), int(h.done)
	left := counted / 4 // samples that may leave the window
	rounding := d.divisorRounding()
	if h.delta <= rounding {
		return 0, none
	}
	divisor := h.done / index * (1 + 0x1p-50)
	floor = float64(counted-left) / (divisor + 2*rounding) * (1 - 0x1p-48)
	if !(floor > 0) {
		return 0, none
	}
	// Below sample h.lo+left, at most left samples have left the window;
	// below last-delta, the last sample lies beyond the window, so the
	// divisor keeps a quantum that rounding cannot cancel.
	last := d.sorted[n-1]
	return floor, min(d.sorted[int(h.lo)+left], last-h.delta) - 1e-9*(last+h.delta)
}

// PositiveUntil is the attained service below which the index of a job
// whose lookups ended at h, for the sizes d, stays above zero: the
// largest sample of its last quantum's window stays in the window, and a
// sample stays beyond it, so the divisor keeps at least a quantum that
// rounding cannot cancel. It is -Inf when that does not hold now.
func (h *IndexHint) PositiveUntil(d *SizeDistribution) float64 {
	if d == nil || h.of != d || h.done <= 0 || int(h.hi) >= len(d.sorted) || h.hi <= h.lo {
		return math.Inf(-1)
	}
	if h.delta <= d.divisorRounding() {
		return math.Inf(-1)
	}
	n := len(d.sorted)
	last := d.sorted[n-1]
	margin := 1e-9 * (last + h.delta)
	return min(d.sorted[h.hi-1], last-h.delta) - margin
}

// divisorRounding bounds the rounding of a Gittins index's divisor: its
// terms are each within the sum of all samples (prefix sums of n terms, a
// product, two sums).
func (d *SizeDistribution) divisorRounding() float64 {
	n := len(d.sorted)
	return 4 * float64(n+4) * 0x1p-52 * d.prefix[n]
}
