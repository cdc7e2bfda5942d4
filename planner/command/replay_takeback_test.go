package command

import (
	"math"
	"testing"

	"github.com/caravan-gpu/caravan/planner/replay"
	"github.com/caravan-gpu/caravan/planner/sim"
	"github.com/shoenig/test/must"
)

func TestStartedAgain(t *testing.T) {
	cases := []struct {
		name                     string
		stops, decisions, starts []float64
		atOnce                   bool
		n                        int
	}{
		{"none", nil, nil, nil, false, 0},
		{"never started again", []float64{12}, []float64{10}, nil, false, 0},
		{"started again at the window's end is too late", []float64{12}, []float64{10}, []float64{130}, false, 0},
		{"started again just within it", []float64{12}, []float64{10}, []float64{129.9}, false, 1},
		{"started again before the stop ended counts: the stop goes on", []float64{25}, []float64{10}, []float64{20}, false, 1},
		{"a start before the decision is not its taking back", []float64{12}, []float64{10}, []float64{5}, false, 0},
		{"a stop with no decision before it", []float64{12}, []float64{20}, []float64{30}, false, 0},
		{"each stop with its latest decision", []float64{12, 55, 310}, []float64{10, 50, 300}, []float64{0, 40, 200, 305}, false, 2},
		{"a hold taken back before any stop is no preemption", []float64{400}, []float64{10, 390}, []float64{20, 600}, false, 0},
		{"a start at the stop's instant: live, none", []float64{10}, []float64{10}, []float64{10}, false, 0},
		{"a start at the stop's instant: simulated, once", []float64{10}, []float64{10}, []float64{10}, true, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			must.Eq(t, c.n, startedAgain(c.stops, c.decisions, c.starts, 120, c.atOnce))
		})
	}
}

// A replay at time scale 60 counts within 120 trace s, live from Nomad's
// stops and the planner's holds and releases, simulated from the rounds
// that preempted and started each job again; a side that did not record
// what it needs gives no count.
func TestTakeBacksCountsBothSides(t *testing.T) {
	live := func(holds [][]float64) *replay.Result {
		return &replay.Result{
			Sim: &sim.Result{Jobs: []sim.JobResult{
				{ID: "a", Stops: []float64{110, 420}},
				{ID: "b", Finish: math.NaN()},
				{ID: "c", Stops: []float64{40}}, // no holds kept for it
			}},
			Holds:    holds,
			Releases: [][]float64{{0, 150, 900}, {250}},
		}
	}
	simRes := &sim.Result{Jobs: []sim.JobResult{
		{ID: "a", Stops: []float64{100, 500}},
		{ID: "b", Stops: []float64{30}},
		{ID: "c"},
	}, Restarts: [][]float64{{150, 700}, {30}}}
	c := takeBacks(live([][]float64{{100, 400}, {200}}), simRes, 60)
	must.Eq(t, &takenBackCounts{Window: 120, LivePreemptions: 3, Live: 1, SimPreemptions: 3, Sim: 2}, c)

	must.Nil(t, takeBacks(live(nil), simRes, 60), must.Sprint("a timeline saved before the holds were kept"))
	unkept := *simRes
	unkept.Restarts = nil
	must.Nil(t, takeBacks(live([][]float64{{100, 400}, {200}}), &unkept, 60), must.Sprint("a simulator run without KeepRestarts"))
	quiet := &replay.Result{Sim: &sim.Result{Jobs: []sim.JobResult{{ID: "a"}}}, Holds: [][]float64{nil}}
	must.Nil(t, takeBacks(quiet, &sim.Result{Jobs: []sim.JobResult{{ID: "a"}}, Restarts: [][]float64{nil}}, 60))
}
