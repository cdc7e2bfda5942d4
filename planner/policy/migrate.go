package policy

import (
	"math"
	"slices"
)

// DefaultMigrationCost is the run time in seconds a job loses when it moves
// to another GPU model: saving a checkpoint, stopping, starting on the new
// GPUs and reloading. Gavel plans in rounds of 360 s and keeps preemption
// overhead a small part of a round; 30 s (a twelfth of a round) covers a
// checkpoint of a few GB to shared storage and a framework restart.
const DefaultMigrationCost = 30.0

// DefaultMigrationGain is the damping of migration: a move must raise the
// cluster's throughput by at least this many of the moved jobs' fastest
// GPUs per GPU moved, after paying its cost. Small gains are not worth the
// churn, and without the margin two jobs of nearly equal speedups would
// trade places back and forth as the jobs around them change.
const DefaultMigrationGain = 0.1

// Migration is a step after placement that re-decides, every round, which
// GPU model each job that runs should be on, as Gavel does with its
// effective throughput: the order still decides who runs; migration moves
// running jobs between models (and chooses the models of the jobs that
// start) so that the fast GPUs go to the jobs they speed up most. A running
// job moved to another model is a Decision with Migrate set: the caller
// stops it and starts it on the new model, and the job loses Cost seconds.
//
// It works on GPU counts per model: jobs on lanes, and jobs a placer starts
// on concrete GPUs, stay where they are; a running job that moves loses its
// Slots, and the caller finds it GPUs of the new model. Jobs with no known run time per model
// (Throughput and RemainingWork) have nothing to gain and stay too.
type Migration struct {
	// Cost is the run time in seconds a migrated job loses (0: the default).
	Cost float64
	// MinGain is the damping (0: DefaultMigrationGain).
	MinGain float64
	// Blind never reads a job's remaining work, which a live planner
	// does not know: a job is expected to run as long again as it has run
	// (Job.Executed, at least Horizon), at its speed now, and the cost of a
	// move is spread over that.
	Blind bool
	// Horizon is the least run time a blind Migration expects a job to
	// have left (0: DefaultRotationPeriod): a job that has just started is
	// worth a move once it has run a Gavel round, not sooner.
	Horizon float64
}

// orRound is horizon, or Gavel's round where it is 0.
func orRound(horizon float64) float64 {
	if horizon > 0 {
		return horizon
	}
	return DefaultRotationPeriod
}

// blindWork is the work a blind step expects a job on model at to have
// left: the time it has run, at least horizon, at its speed there.
func (j *Job) blindWork(at string, horizon float64) float64 {
	return max(j.Executed, horizon) * j.rateOn(at)
}

// blindTimeOn is the run time a planner that never reads remaining work
// expects the job to have left on model to: the time it has run, at least
// horizon, at its speed on model from (where it runs, or last ran; ""
// for a job that never ran: at its slowest), taken to to's speed. Without a
// profile every model is taken to be as fast.
func (j *Job) blindTimeOn(from, to string, horizon float64) float64 {
	t := max(j.Executed, horizon)
	if f, r := j.rateOn(from), j.rateOn(to); f > 0 && r > 0 {
		return t * f / r
	}
	return t
}

// rateOn is the job's rate on model: its throughput there, else its
// slowest known.
func (j *Job) rateOn(model string) float64 {
	if r := j.Throughput[model]; r > 0 {
		return r
	}
	return j.slowestRate()
}

// wake is, for a blind Migration, the end of the current period of its
// horizon while a job runs on a model slower than another it may use that
// has room for it after the round: its guess grows as it runs, so a move
// it is not worth now may be later, with nothing else happening. Its value
// needs no finer clock than the horizon it is guessed from.
func (m *Migration) wake(s *Snapshot, r *Result) float64 {
	c := s.capacity()
	if !m.Blind || len(c.models) < 2 {
		return inf
	}
	// The GPUs the round leaves free, counted as apply counts them.
	free := append([]int(nil), c.total...)
	takeLaneGPUs(s, r, c, free)
	type movable struct{ job, at int }
	var could []movable // jobs a move could speed up, and their models
	for i := range r.Decisions {
		d, j := &r.Decisions[i], &s.Jobs[i]
		if !d.Run || d.Lane {
			continue
		}
		at := c.decidedModel(s, j, d)
		if at < 0 {
			continue
		}
		free[at] -= max(j.GPUs, 1)
		if len(j.Throughput) > 0 {
			could = append(could, movable{i, at})
		}
	}
	for _, mv := range could {
		j := &s.Jobs[mv.job]
		for k, model := range c.models {
			if free[k] >= max(j.GPUs, 1) && j.allows(model) && j.rateOn(model) > j.rateOn(c.models[mv.at]) {
				return untilPeriodEnd(s.Now, orRound(m.Horizon))
			}
		}
	}
	return inf
}

func (m *Migration) cost() float64 {
	if m.Cost > 0 {
		return m.Cost
	}
	return DefaultMigrationCost
}

func (m *Migration) minGain() float64 {
	if m.MinGain > 0 {
		return m.MinGain
	}
	return DefaultMigrationGain
}

// mover is one job the step may put on another model.
type mover struct {
	job     int
	g       int
	from    int       // model before the step
	at      int       // model now
	running bool      // moving it is a migration
	value   []float64 // per model: throughput less cost and damping; -Inf where it may not run
}

// apply values every job that runs on every model, improves where they run
// (improve), and writes the moves into the decisions.
func (m *Migration) apply(s *Snapshot, r *Result) {
	c := s.capacity()
	if len(c.models) < 2 {
		return
	}
	free := append([]int(nil), c.total...)
	takeLaneGPUs(s, r, c, free)
	movers, values := r.movers[:0], r.moverValues[:0]
	defer func() { r.movers, r.moverValues = movers, values }()
	for i := range s.Jobs {
		d := &r.Decisions[i]
		if !d.Run || d.Lane {
			continue
		}
		j := &s.Jobs[i]
		at := c.decidedModel(s, j, d)
		if at < 0 {
			continue
		}
		g := max(j.GPUs, 1)
		free[at] -= g
		running := j.State == Running
		known := !math.IsInf(j.bestTime(), 1) && j.RemainingWork > 0
		if (!running && len(d.Slots) > 0) || len(j.Throughput) == 0 || j.slowestRate() <= 0 || !m.Blind && !known {
			continue
		}
		base := len(values)
		for range c.models {
			values = append(values, 0)
		}
		mv := mover{job: i, g: g, from: at, at: at, running: running, value: values[base:len(values):len(values)]}
		if m.Blind {
			// The same times, over the work it is expected to have left.
			guess := *j
			guess.RemainingWork = j.blindWork(c.models[at], orRound(m.Horizon))
			j = &guess
		}
		best := j.bestTime()
		for k, model := range c.models {
			t := j.timeOn(model)
			if !j.allows(model) || g > c.total[k] || math.IsInf(t, 1) || t <= 0 {
				mv.value[k] = math.Inf(-1)
				continue
			}
			// Throughput in fastest-GPU units; a migration pays, spread
			// over the run it buys, the work it loses, and the damping.
			norm := best / t
			v := float64(g) * norm
			if running && k != at {
				v -= float64(g)*norm*m.cost()/t + float64(g)*m.minGain()
			}

			mv.value[k] = v
		}
		if math.IsInf(mv.value[at], -1) {
			values = values[:base]
			continue // placed where its own values do not allow: leave it
		}
		movers = append(movers, mv)
	}
	if len(movers) == 0 {
		return
	}
	m.improve(movers, free, &r.migrationGains)
	for _, mv := range movers {
		if mv.at == mv.from {
			continue
		}
		d := &r.Decisions[mv.job]
		d.GPUModel = c.models[mv.at]
		d.Slots = nil
		if mv.running {
			d.Migrate = true
			d.Reason = r.join(d.Reason, "; migrates to "+d.GPUModel+": more throughput there, worth the restart")
		} else {
			d.Reason = r.join(d.Reason, "; starts on "+d.GPUModel+" instead, where it adds more throughput")
		}
	}
}

// takeLaneGPUs takes off free (per model) the GPUs the lane jobs that run
// hold. Lanes count their GPU once, however many jobs share it; lane jobs
// placed by model only fill whole GPUs' worth of lanes, which may count
// more GPUs than they hold, never fewer.
func takeLaneGPUs(s *Snapshot, r *Result, c *capacity, free []int) {
	var lanes map[[2]int]bool
	var unplaced []int // lane jobs counted by model only
	for i := range s.Jobs {
		d := &r.Decisions[i]
		if !d.Run || !d.Lane {
			continue
		}
		if len(d.Slots) == 0 {
			if mi := c.find(d.GPUModel); mi >= 0 {
				if unplaced == nil {
					unplaced = make([]int, len(c.models))
				}
				unplaced[mi]++
			}
		}
		for _, sl := range d.Slots {
			if k := [2]int{sl.Node, sl.GPU}; !lanes[k] {
				if lanes == nil {
					lanes = map[[2]int]bool{}
				}
				lanes[k] = true
				if mi := c.find(s.Nodes[sl.Node].GPUs[sl.GPU].Model); mi >= 0 {
					free[mi]--
				}
			}
		}
	}
	for mi, n := range unplaced {
		free[mi] -= (n + c.lanes[mi] - 1) / c.lanes[mi]
	}
}

// gainTo is one mover's gain from going to another model.
type gainTo struct {
	gain  float64
	mover int
	to    int
}

// improve moves movers while a move into free GPUs, or a swap of two
// movers of the same GPU count between two models, raises the total value.
// It works in passes: each pass takes the moves into free GPUs best first,
// then, for each pair of models, pairs the movers that gain most from
// going one way with those that gain most from going the other, while a
// pair gains; a mover changes at most once a pass. Every change raises the
// total, so the passes end; they are also bounded. A pass costs a sort of
// the movers' gains, so a round that moves hundreds of jobs stays cheap.
func (m *Migration) improve(movers []mover, free []int, scratch *[]gainTo) {
	const eps = 1e-9
	nm := len(free)
	moved := make([]bool, len(movers))
	gains := (*scratch)[:0]
	defer func() { *scratch = gains }()
	sortGains := func(g []gainTo) {
		slices.SortFunc(g, func(x, y gainTo) int {
			switch {
			case x.gain > y.gain:
				return -1
			case x.gain < y.gain:
				return 1
			}
			return x.mover - y.mover
		})
	}
	for range 16 {
		changed := false
		clear(moved)
		// Moves into free GPUs.
		gains = gains[:0]
		for a := range movers {
			mv := &movers[a]
			for k := 0; k < nm; k++ {
				if k != mv.at && free[k] >= mv.g && !math.IsInf(mv.value[k], -1) {
					if gain := mv.value[k] - mv.value[mv.at]; gain > eps {
						gains = append(gains, gainTo{gain, a, k})
					}
				}
			}
		}
		sortGains(gains)
		for _, x := range gains {
			mv := &movers[x.mover]
			if moved[x.mover] || free[x.to] < mv.g {
				continue
			}
			free[mv.at] += mv.g
			free[x.to] -= mv.g
			mv.at, moved[x.mover], changed = x.to, true, true
		}
		// Swaps between each pair of models a < b, one GPU count at a time.
		for a := 0; a < nm; a++ {
			for b := a + 1; b < nm; b++ {
				gains = gains[:0]
				for i := range movers {
					mv := &movers[i]
					if moved[i] || (mv.at != a && mv.at != b) {
						continue
					}
					to := b + a - mv.at
					if math.IsInf(mv.value[to], -1) {
						continue
					}
					gains = append(gains, gainTo{mv.value[to] - mv.value[mv.at], i, to})
				}
				sortGains(gains)
				// Best first within each (direction, GPU count): pair the
				// k-th of one way with the k-th of the other.
				next := map[[2]int]int{} // (to, GPUs) → next index into gains
				for _, gx := range gains {
					mv := &movers[gx.mover]
					if moved[gx.mover] || gx.to != b {
						continue
					}
					// Its partner: the best not yet moved going to a with
					// the same GPU count.
					key := [2]int{a, mv.g}
					y := next[key]
					for y < len(gains) && (moved[gains[y].mover] || gains[y].to != a || movers[gains[y].mover].g != mv.g) {
						y++
					}
					next[key] = y
					if y == len(gains) || gx.gain+gains[y].gain <= eps {
						continue
					}
					o := &movers[gains[y].mover]
					o.at, mv.at = mv.at, o.at
					moved[gx.mover], moved[gains[y].mover], changed = true, true, true
				}
			}
		}
		if !changed {
			break
		}
	}
}
