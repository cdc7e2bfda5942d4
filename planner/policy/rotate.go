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
// of its Snapshot. A running job is drawn once a period: when it took its
// GPUs (Job.Placed) says whether it was drawn in this one.
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
	job, g, at int     // at: its model before the draw
	u, turn    float64 // its draw, and its turn among drawn jobs as wide, in [0, 1)
}

// apply draws the models of the jobs that run and were not drawn in this
// period yet: those starting now, and those running since before it began.
// Jobs on lanes, jobs a placer starts on concrete GPUs and jobs limited to
// some models stay; a running job that moves loses its Slots, and the
// caller finds it GPUs of the new model. Wider jobs are drawn first, so
// that they find room; a job whose draw fits nowhere keeps its model if it
// still has room there, and if not, nothing moves this round.
func (o *Rotation) apply(s *Snapshot, r *Result) {
	c := s.capacity()
	if len(c.models) < 2 {
		return
	}
	epoch := math.Floor(s.Now / o.period())
	from := epoch * o.period() // this period's start
	free := append([]int(nil), c.total...)
	takeLaneGPUs(s, r, c, free)
	var draws []drawn
	for i := range s.Jobs {
		d, j := &r.Decisions[i], &s.Jobs[i]
		if !d.Run || d.Lane {
			continue
		}
		at := c.decidedModel(s, j, d)
		if at < 0 {
			continue
		}
		g := max(j.GPUs, 1)
		redraw := len(j.Models) == 0 &&
			(j.State == Pending && len(d.Slots) == 0 || j.State == Running && j.Placed < from && !d.Migrate)
		if !redraw {
			free[at] -= g
			continue
		}
		// The turn is a hash of its own: ordered by their draws, the jobs
		// that overflow a model would all land on the model listed next.
		draws = append(draws, drawn{job: i, g: g, at: at, u: unitHash(j.ID, epoch, 0), turn: unitHash(j.ID, epoch, 1)})
	}
	if len(draws) == 0 {
		return
	}
	slices.SortFunc(draws, func(a, b drawn) int {
		if a.g != b.g {
			return b.g - a.g
		}
		if a.turn != b.turn {
			if a.turn < b.turn {
				return -1
			}
			return 1
		}
		return a.job - b.job
	})
	to := make([]int, len(draws))
	for k, dr := range draws {
		m := drawModel(c, free, dr.g, dr.u)
		if m < 0 {
			if free[dr.at] < dr.g {
				return // the draws do not fit: every job stays this round
			}
			m = dr.at
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
		case to[k] == dr.at:
			d.Renewed = true
		default:
			d.GPUModel, d.Migrate, d.Renewed, d.Slots = model, true, true, nil
			d.Reason = r.join(d.Reason, "; moves to "+model+", drawn blind to speed (rotation)")
		}
	}
}

// drawModel is the model that draw u in [0, 1) picks for a job of g GPUs,
// with chances in proportion to the models' GPUs among those with g free;
// -1 where none has.
func drawModel(c *capacity, free []int, g int, u float64) int {
	total := 0
	for m := range free {
		if free[m] >= g {
			total += c.total[m]
		}
	}
	pick, m := u*float64(total), -1
	for mi := range free {
		if free[mi] < g {
			continue
		}
		m = mi // the last with room, should rounding carry pick past every model
		if pick < float64(c.total[mi]) {
			break
		}
		pick -= float64(c.total[mi])
	}
	return m
}

// wake is the seconds until the next period, while any job runs on a
// cluster of several models.
func (o *Rotation) wake(s *Snapshot, r *Result) float64 {
	if len(s.capacity().models) < 2 {
		return inf
	}
	for i := range r.Decisions {
		if r.Decisions[i].Run {
			return untilPeriodEnd(s.Now, o.period())
		}
	}
	return inf
}

// untilPeriodEnd is the time from now to the end of the period of length
// p that now falls in.
func untilPeriodEnd(now, p float64) float64 { return (math.Floor(now/p)+1)*p - now }

// unitHash maps a job's ID, a period's number and a salt to [0, 1).
func unitHash(id string, epoch float64, salt byte) float64 {
	h := fnv.New64a()
	h.Write([]byte(id))
	var b [9]byte
	e := math.Float64bits(epoch)
	for k := range 8 {
		b[k] = byte(e >> (8 * k))
	}
	b[8] = salt
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
