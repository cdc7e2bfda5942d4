package replay

import "github.com/caravan-gpu/caravan/planner/sim"

// Costs are what a start, a run and a stop cost on the live cluster, in
// trace seconds, as the simulator is charged them (sim.Config's
// StartLatency, StartSpread, GangSpread, RunOverhead, StopLatency and
// AbortLatency), and how many of each they were measured on.
type Costs struct {
	StartLatency, StartSpread, GangSpread, RunOverhead, StopLatency, AbortLatency float64
	// RoundDelay is the planner's wait before the round that decided a
	// start (StartParts.Round), or where its decisions were not read its
	// whole part of a start (StartParts.Planner), charged as the delay of
	// every round (sim.Config.RoundDelay) rather than in StartLatency, so
	// that the simulator decides on what the live planner saw: the
	// service running jobs had when it decided, and the events of its
	// delay together. Given negative, it is measured where the start
	// latency is; 0 charges the planner's part in StartLatency.
	RoundDelay float64
	// CompletionLag is how much longer than an arrival the planner took to
	// answer a completion (sim.Config.CompletionLag): the wait of the
	// starts that answered one less that of the starts that answered
	// their arrival (StartParts), which RoundDelay then is. Given
	// negative, it is measured with RoundDelay; 0 charges every round
	// the mean wait.
	CompletionLag float64
	// UnblockLatency is how much longer a start that waited for a
	// preemption's stop took to be placed after the stop than Nomad's
	// part of a start with free GPUs (sim.Config.UnblockLatency), measured
	// on Unblocks placements; given negative, it is measured.
	UnblockLatency                                       float64
	Starts, Events, Gangs, Runs, Stops, Aborts, Unblocks int
	// Shared models the clients' starts as a shared set-up
	// (sim.Config.StartsShared) rather than a queue: the simulator is
	// charged so, and where the costs are fitted, they are fitted so.
	// Costs read from the gaps between starts are a queue's.
	Shared bool
	// From says where the start latency and spread came from: "the
	// clients' queue" or "the clients' shared set-up" fitted to the
	// placements and starts, the "gaps between starts" where Nomad kept
	// too few placement times, or "flags".
	From string
	// Parts splits a first start's delay where the live run shows where
	// it went; nil where it does not.
	Parts *StartParts
	// Delays are the live start delays whose median is StartLatency, when
	// it was measured from the gaps between starts.
	Delays []float64
}

// MinFittedTasks is the fewest task starts the clients' queue is fitted
// on; with fewer the gaps between starts give the start costs.
const MinFittedTasks = 10

// MeasureCosts measures on the live run each cost that given leaves
// negative, against ideal, the simulator's run without costs. Where the
// run shows where its starts' time went (each allocation's placement),
// the clients' queue fitted to it gives the start latency and spread;
// otherwise the gaps between starts do.
func (r *Result) MeasureCosts(ideal *sim.Result, given Costs) Costs {
	live := r.Live()
	c := given
	c.Parts = live.StartParts(ideal)
	fitted := c.Parts != nil && c.Parts.ClientTasks >= MinFittedTasks
	c.From = "gaps between starts"
	switch {
	case given.StartLatency >= 0 && given.StartSpread >= 0:
		c.From = "flags"
	case !fitted:
		// The gaps between starts read a queue's latency and spread:
		// charged as a shared set-up, each start would pay a spread
		// more than the gaps showed.
		c.Shared = false
	case fitted && c.Shared:
		c.From = "the clients' shared set-up"
	case fitted:
		c.From = "the clients' queue"
	}
	if c.StartSpread < 0 {
		switch {
		case fitted && c.Shared:
			c.StartSpread, c.Events = c.Parts.SharedService, c.Parts.ClientTasks
		case fitted:
			c.StartSpread, c.Events = c.Parts.ClientService, c.Parts.ClientTasks
		default:
			within, _ := live.StartLatency(ideal, 0)
			c.StartSpread, c.Events = live.StartSpread(ideal, within)
		}
	}
	if c.StartLatency < 0 {
		if fitted {
			c.StartLatency, c.Starts = c.Parts.StartLatency(c.Shared), c.Parts.MeasuredOn
			if c.RoundDelay < 0 {
				// The planner's part leaves the start latency for the
				// rounds; where they were read, the round's reads and
				// writes stay in it, as they delay the start after it.
				if c.Parts.RoundMeasuredOn > 0 {
					c.StartLatency += c.Parts.Write - c.Parts.Planner
				} else {
					c.StartLatency -= c.Parts.Planner
				}
				c.chargeRoundWait()
			}
		} else {
			c.Delays = live.StartDelays(ideal, c.StartSpread)
			c.StartLatency, c.Starts = Median(c.Delays), len(c.Delays)
		}
	}
	if c.RoundDelay < 0 {
		// The start latency came from flags or from the gaps between
		// starts, which cover the planner's part.
		c.RoundDelay = 0
	}
	if c.CompletionLag < 0 {
		c.CompletionLag = 0
	}
	if c.GangSpread < 0 {
		// Workers on their own courses wait for no peer: the start
		// spread stands for them, as before gangs.
		c.GangSpread = 0
		if !live.IndependentWorkers {
			c.GangSpread, c.Gangs = live.GangSpread()
		}
	}
	if c.RunOverhead < 0 {
		c.RunOverhead, c.Runs = live.RunOverhead(ideal)
	}
	if c.StopLatency < 0 {
		c.StopLatency, c.Stops = Median(r.StopDelays), len(r.StopDelays)
	}
	if c.UnblockLatency < 0 {
		// Beyond what the start latency charges every start: Nomad's
		// part where no stop held it back, or, without placement times,
		// nothing known.
		c.UnblockLatency = 0
		if delays := live.UnblockDelays(); len(delays) > 0 && c.Parts != nil {
			c.UnblockLatency, c.Unblocks = max(0, Mean(delays)-c.Parts.NomadUnblocked), len(delays)
		}
	}
	if c.AbortLatency < 0 {
		// The mean: a client gives up a task it had not begun to set up
		// at once and one in its set-up after seconds, and a start taken
		// back holds its GPUs, over all of them, for the mean.
		c.AbortLatency, c.Aborts = Mean(r.AbortDelays), len(r.AbortDelays)
	}
	return c
}

// chargeRoundWait charges each round the mean wait of the live starts'
// rounds after their event; where the live run had starts of both kinds,
// the rounds that arrivals call for wait the arrivals' wait, and a
// completion is seen the completions' longer wait later, as its lag.
// Live, an arrival is the replay's own register call, which Nomad's
// events bring the planner at once; a completion reaches it once the
// client reports the task's end. The start latency has had the planner's
// wait taken out. Policies that preempt answer few completions (one to
// eight in 2D-Gittins' 60-job runs); the lag is split over them all the
// same: in 56 of the 57 kept runs with ten or more of each kind a
// completion waited longer than an arrival, so the arrivals' wait, or
// the mean, would charge completions too little.
func (c *Costs) chargeRoundWait() {
	p := c.Parts
	c.RoundDelay = p.RoundWait
	if c.CompletionLag >= 0 || p.ArrivalWaits == 0 || p.CompletionWaits == 0 || p.CompletionWait <= p.ArrivalWait {
		return
	}
	c.RoundDelay, c.CompletionLag = p.ArrivalWait, p.CompletionWait-p.ArrivalWait
}

// Any says whether any cost is charged.
func (c Costs) Any() bool {
	return c.StartLatency > 0 || c.RoundDelay > 0 || c.CompletionLag > 0 || c.StartSpread > 0 || c.GangSpread > 0 || c.RunOverhead > 0 || c.StopLatency > 0 || c.UnblockLatency > 0 || c.AbortLatency > 0
}

// Charge sets the costs on cfg.
func (c Costs) Charge(cfg *sim.Config) {
	cfg.StartLatency, cfg.StartSpread, cfg.RunOverhead, cfg.StopLatency = c.StartLatency, c.StartSpread, c.RunOverhead, c.StopLatency
	cfg.AbortLatency, cfg.RoundDelay, cfg.UnblockLatency = c.AbortLatency, c.RoundDelay, c.UnblockLatency
	cfg.CompletionLag = c.CompletionLag
	cfg.GangSpread = c.GangSpread
	cfg.StartsShared = c.Shared
}
