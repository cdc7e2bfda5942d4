package command

// This file counts the preemptions a replay's planner took back, live and
// simulated: a policy whose order changes between the simulator's rounds
// shows it live as jobs stopped and soon started again.

import (
	"sort"
	"time"

	"github.com/caravan-gpu/caravan/planner/replay"
	"github.com/caravan-gpu/caravan/planner/sim"
)

// takeBackWindow is how soon after the decision that preempted a job, in
// real time, a start of it counts as the preemption taken back: two of a
// replay's planning rounds (its planning.interval is 1 s).
const takeBackWindow = 2 * time.Second

// takenBackCounts counts, live and simulated, the preemptions (a job's
// tasks stopped) whose job was started again within Window trace seconds
// of the decision that preempted it. Each such job pays a start again.
type takenBackCounts struct {
	Window          float64 `json:"window_s"`
	LivePreemptions int     `json:"live_preemptions"`
	Live            int     `json:"live"`
	SimPreemptions  int     `json:"sim_preemptions"`
	Sim             int     `json:"sim"`
}

// startedAgain counts, of a job's preemptions, those it was started again
// within window of the decision that preempted it. Each stop is matched
// with the latest decision at or before it, and that decision with the
// first start after it (at or after it where atOnce: the simulator may
// start a job again in the round after the one that stopped it, at the
// same instant). Every list is in ascending order; a stop with no decision
// before it counts as none.
func startedAgain(stops, decisions, starts []float64, window float64, atOnce bool) int {
	n := 0
	for _, s := range stops {
		k := sort.Search(len(decisions), func(i int) bool { return decisions[i] > s }) - 1
		if k < 0 {
			continue
		}
		d := decisions[k]
		m := sort.Search(len(starts), func(i int) bool { return starts[i] > d || atOnce && starts[i] >= d })
		if m < len(starts) && starts[m]-d < window {
			n++
		}
	}
	return n
}

// takeBacks counts the run's preemptions started again within
// takeBackWindow at time scale S: live from Nomad's stops and the
// planner's holds and releases, simulated from the rounds that preempted
// each job (its stops) and started it again (sim.Result.Restarts). nil
// where a side did not record what it needs: a timeline saved before the
// holds were kept, or a simulator run without Config.KeepRestarts.
func takeBacks(res *replay.Result, simRes *sim.Result, timeScale float64) *takenBackCounts {
	c := &takenBackCounts{Window: takeBackWindow.Seconds() * timeScale}
	holds := 0
	for i, j := range res.Sim.Jobs {
		c.LivePreemptions += len(j.Stops)
		if i >= len(res.Holds) {
			continue
		}
		holds += len(res.Holds[i])
		var releases []float64
		if i < len(res.Releases) {
			releases = res.Releases[i]
		}
		c.Live += startedAgain(j.Stops, res.Holds[i], releases, c.Window, false)
	}
	for i, j := range simRes.Jobs {
		c.SimPreemptions += len(j.Stops)
		if i < len(simRes.Restarts) {
			c.Sim += startedAgain(j.Stops, j.Stops, simRes.Restarts[i], c.Window, true)
		}
	}
	switch {
	case c.LivePreemptions > 0 && holds == 0, c.SimPreemptions > 0 && simRes.Restarts == nil:
		return nil
	case c.LivePreemptions == 0 && c.SimPreemptions == 0:
		return nil
	}
	return c
}
