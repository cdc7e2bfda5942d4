package policy

import (
	"hash/fnv"
	"math"
	"slices"
)

// DefaultRotationPeriod is how often Rotation draws every running job's
// GPU model again: Gavel's round, 360 s.
const DefaultRotationPeriod = 360.0

// Rotation is the heterogeneity-agnostic baseline as Gavel runs it: an
// agnostic policy re-allocates every round, so over many rounds a job runs
// on every GPU model, each in proportion to its GPUs, where a placer alone
// would keep it on the model it started on (a long job stranded on the
// slowest GPUs for its whole run). Once a period, each job that runs on
// whole GPUs is put on a model drawn afresh, blind to throughputs, with
// chances in proportion to each model's GPUs among those with room. A job
// drawn onto another model moves (Decision.Migrate) and the caller charges
// the move; one that stays renews (Decision.Renewed). The draw is a hash
// of the job's ID and the period's number, so a round is a pure function
// of its Snapshot.
type Rotation struct {
	// Period is the seconds between draws (0: DefaultRotationPeriod).
	Period float64
}

func (o *Rotation) period() float64 {
	if o.Period > 0 {
		return o.Period
	}
	return DefaultRotationPeriod
}

// drawn is one job Rotation places on a model again.
type drawn struct {
	job, g int
	u      float64 // its draw in [0, 1)
}

// apply draws the models of the jobs that run and were not drawn in this
// period yet: those starting now, and those running since before it began.
// Jobs on lanes or concrete GPUs, and jobs limited to some models, stay. If
// the draws do not all fit (GPU counts per model), nothing moves this round.
func (o *Rotation) apply(s *Snapshot, r *Result) {
	c := s.capacity()
	if len(c.models) < 2 {
		return
	}
	epoch := math.Floor(s.Now / o.period())
	from := epoch * o.period() // this period's start
	free := append([]int(nil), c.total...)
	var draws []drawn
	for i := range s.Jobs {
		d, j := &r.Decisions[i], &s.Jobs[i]
		if !d.Run || d.Lane {
			continue
		}
		at := c.find(d.GPUModel)
		if at < 0 {
			continue
		}
		g := max(j.GPUs, 1)
		redraw := len(d.Slots) == 0 && len(j.Models) == 0 &&
			(j.State == Pending || j.State == Running && j.Placed < from && !d.Migrate)
		if !redraw {
			free[at] -= g
			continue
		}
		draws = append(draws, drawn{job: i, g: g, u: unitHash(j.ID, epoch)})
	}
	if len(draws) == 0 {
		return
	}
	// The widest first, so that they find room; ties in draw order.
	slices.SortFunc(draws, func(a, b drawn) int {
		if a.g != b.g {
			return b.g - a.g
		}
		if a.u != b.u {
			if a.u < b.u {
				return -1
			}
			return 1
		}
		return a.job - b.job
	})
	to := make([]int, len(draws))
	for k, dr := range draws {
		total := 0
		for m := range free {
			if free[m] >= dr.g {
				total += c.total[m]
			}
		}
		if total == 0 {
			return // a draw that fits nowhere: every job stays this round
		}
		pick := dr.u * float64(total)
		m := -1
		for mi := range free {
			if free[mi] < dr.g {
				continue
			}
			m = mi
			if pick < float64(c.total[mi]) {
				break
			}
			pick -= float64(c.total[mi])
		}
		free[m] -= dr.g
		to[k] = m
	}
	for k, dr := range draws {
		d, j := &r.Decisions[dr.job], &s.Jobs[dr.job]
		model := c.models[to[k]]
		switch {
		case j.State == Pending:
			if model != d.GPUModel {
				d.GPUModel = model
				d.Reason = r.join(d.Reason, "; starts on "+model+", drawn blind to speed (rotation)")
			}
		case model == d.GPUModel:
			d.Renewed = true
		default:
			d.GPUModel, d.Migrate, d.Renewed = model, true, true
			d.Reason = r.join(d.Reason, "; moves to "+model+", drawn blind to speed (rotation)")
		}
	}
}

// wake is the seconds until the next period, while any job runs.
func (o *Rotation) wake(s *Snapshot, r *Result) float64 {
	for i := range r.Decisions {
		if r.Decisions[i].Run {
			p := o.period()
			return (math.Floor(s.Now/p)+1)*p - s.Now
		}
	}
	return inf
}

// unitHash maps a job's ID and a period's number to [0, 1).
func unitHash(id string, epoch float64) float64 {
	h := fnv.New64a()
	h.Write([]byte(id))
	var b [8]byte
	e := math.Float64bits(epoch)
	for k := range b {
		b[k] = byte(e >> (8 * k))
	}
	h.Write(b[:])
	// splitmix64's finaliser spreads the last bytes over every bit; the
	// top 53 bits make a float64 in [0, 1).
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return float64(x>>11) / (1 << 53)
}
