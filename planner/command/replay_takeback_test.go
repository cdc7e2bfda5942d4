package command

import (
	"math"
	"testing"

	"github.com/caravan-gpu/caravan/planner/replay"
	"github.com/caravan-gpu/caravan/planner/sim"
	"github.com/shoenig/test/must"
)

func TestTakenBack(t *testing.T) {
	cases := []struct {
		name                string
		holds, starts, stop []float64
		n, afterStop        int
	}{
		{"none", nil, nil, nil, 0, 0},
		{"never started again", []float64{10}, nil, []float64{12}, 0, 0},
		{"started again too late", []float64{10}, []float64{130}, []float64{12}, 0, 0},
		{"at the window's end is too late", []float64{10}, []float64{130.0001, 140}, nil, 0, 0},
		{"before the stop", []float64{10}, []float64{20}, []float64{25}, 1, 0},
		{"after the stop", []float64{10}, []float64{20}, []float64{15}, 1, 1},
		{"a start before the hold is not its taking back", []float64{10}, []float64{5}, nil, 0, 0},
		{"each hold with the first start after it", []float64{10, 50, 300}, []float64{0, 40, 100, 305}, []float64{30, 310}, 3, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n, after := takenBack(c.holds, c.starts, c.stop, 120)
			must.Eq(t, c.n, n)
			must.Eq(t, c.afterStop, after)
		})
	}
}

// A replay at time scale 60 counts within 120 trace s, live from the
// planner's holds and releases and Nomad's stops, simulated from the
// rounds that preempted and restarted each job.
func TestTakeBacksCountsBothSides(t *testing.T) {
	res := &replay.Result{
		Sim: &sim.Result{Jobs: []sim.JobResult{
			{ID: "a", Stops: []float64{110}},
			{ID: "b", Finish: math.NaN()},
		}},
		Holds:    [][]float64{{100, 400}, {200}},
		Releases: [][]float64{{0, 150, 900}, {250}},
	}
	simRes := &sim.Result{Jobs: []sim.JobResult{
		{ID: "a", Stops: []float64{100, 500}},
		{ID: "b"},
	}, Restarts: [][]float64{{150, 700}, nil}}
	c := takeBacks(res, simRes, 60)
	must.Eq(t, &takenBackCounts{Window: 120, LiveHolds: 3, Live: 2, LiveAfterStop: 1, SimPreemptions: 2, Sim: 1}, c)

	none := &replay.Result{Sim: &sim.Result{Jobs: []sim.JobResult{{ID: "a"}}}, Holds: [][]float64{nil}}
	must.Nil(t, takeBacks(none, &sim.Result{Jobs: []sim.JobResult{{ID: "a"}}}, 60))
}
