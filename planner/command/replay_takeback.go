package command

// This file counts the preemptions a replay's planner took back, live and
// simulated: a policy whose order changes between the simulator's rounds
// shows it live as holds soon released again.

import (
	"slices"
	"sort"
	"time"

	"github.com/caravan-gpu/caravan/planner/replay"
	"github.com/caravan-gpu/caravan/planner/sim"
)

// takeBackWindow is how soon after a hold, in real time, a start of the
// same job counts as the hold taken back: two of a replay's planning
// rounds (its planning.interval is 1 s).
const takeBackWindow = 2 * time.Second

// takenBackCounts counts the holds followed by a start of the same job
// within Window trace seconds, live and simulated. Live, a hold taken back
// before Nomad stopped the job's tasks costs nothing, and one taken back
// after pays a start again; every simulated preemption stopped a task.
type takenBackCounts struct {
	Window         float64 `json:"window_s"`
	LiveHolds      int     `json:"live_holds"`
	Live           int     `json:"live"`
	LiveAfterStop  int     `json:"live_after_stop"`
	SimPreemptions int     `json:"sim_preemptions"`
	Sim            int     `json:"sim"`
}

// takenBack counts, of holds, those followed by one of starts within
// window, and among those, the ones with one of stops between the two.
// Each list is in ascending order.
func takenBack(holds, starts, stops []float64, window float64) (n, afterStop int) {
	for _, h := range holds {
		k := sort.Search(len(starts), func(i int) bool { return starts[i] > h })
		if k == len(starts) || starts[k]-h >= window {
			continue
		}
		n++
		if slices.ContainsFunc(stops, func(s float64) bool { return s >= h && s <= starts[k] }) {
			afterStop++
		}
	}
	return n, afterStop
}

// takeBacks counts the run's holds and preemptions taken back within
// takeBackWindow at time scale S: live from the planner's holds and
// releases and Nomad's stops, simulated from the rounds that preempted
// each job and started it again (sim.Result.Restarts). nil where
// neither side held a job.
func takeBacks(res *replay.Result, simRes *sim.Result, timeScale float64) *takenBackCounts {
	c := &takenBackCounts{Window: takeBackWindow.Seconds() * timeScale}
	for i, j := range res.Sim.Jobs {
		if i >= len(res.Holds) {
			break
		}
		var releases []float64
		if i < len(res.Releases) {
			releases = res.Releases[i]
		}
		c.LiveHolds += len(res.Holds[i])
		n, after := takenBack(res.Holds[i], releases, j.Stops, c.Window)
		c.Live, c.LiveAfterStop = c.Live+n, c.LiveAfterStop+after
	}
	for i, j := range simRes.Jobs {
		c.SimPreemptions += len(j.Stops)
		var restarts []float64
		if i < len(simRes.Restarts) {
			restarts = simRes.Restarts[i]
		}
		n, _ := takenBack(j.Stops, restarts, j.Stops, c.Window)
		c.Sim += n
	}
	if c.LiveHolds == 0 && c.SimPreemptions == 0 {
		return nil
	}
	return c
}
