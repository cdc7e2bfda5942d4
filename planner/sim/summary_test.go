package sim

import (
	"math"
	"testing"

	"github.com/caravan-gpu/caravan/planner/policy"
	"github.com/caravan-gpu/caravan/planner/trace"
	"github.com/shoenig/test/must"
)

func TestBusyArea(t *testing.T) {
	cases := []struct {
		name string
		util []UtilPoint
		end  float64
		want float64
	}{
		{"none", nil, 10, 0},
		{"steps", []UtilPoint{{0, 2}, {5, 4}, {8, 0}}, 10, 2*5 + 4*3},
		{"cut at end", []UtilPoint{{0, 2}, {5, 4}}, 6, 2*5 + 4*1},
		{"still busy at end", []UtilPoint{{1, 3}}, 4, 9},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			must.Eq(t, tc.want, BusyArea(tc.util, tc.end))
		})
	}
}

// Summarize leaves unfinished jobs out of the JCTs but counts them, and
// takes the makespan from the first arrival, an unfinished job's included.
func TestSummarize(t *testing.T) {
	nan := math.NaN()
	jobs := []JobResult{
		{ID: "a", GPUs: 1, Weight: 1, Arrival: 0, Start: 0, Finish: 100, JCT: 100, Isolated: 100},
		{ID: "b", GPUs: 2, Weight: 3, Arrival: 10, Start: 40, Finish: 90, JCT: 80, Queueing: 30, Isolated: 50, Preemptions: 2},
		{ID: "c", GPUs: 1, Weight: 1, Arrival: 20, Start: nan, Finish: nan, JCT: nan},
	}
	s := Summarize("las", 4, jobs, 200)
	must.Eq(t, 3, s.Jobs)
	must.Eq(t, 1, s.Unfinished)
	must.Eq(t, 90.0, s.AvgJCT)
	must.Eq(t, (100+3*80)/4.0, s.WeightedJCT)
	must.Eq(t, 15.0, s.AvgQueueing)
	must.Eq(t, 100.0, s.Makespan)
	must.Eq(t, 200/(4*100.0), s.Utilization)
	must.Eq(t, (1+80/50.0)/2, s.FTFMean)
	must.Eq(t, 80/50.0, s.FTFMax)
	must.Eq(t, 2, s.Preemptions)
}

// No policy beats the relaxation's bound on weighted JCT, on a congested
// trace with weights, on one GPU model and on two.
func TestWeightedJCTBoundHolds(t *testing.T) {
	jobs := trace.Synthetic(trace.SyntheticOptions{Jobs: 400, Seed: 5, Load: 60})
	trace.AssignWeights(jobs, []float64{1, 2, 4}, 5)
	for _, spec := range []string{"n4g8", "16xV100,16xP100"} {
		for _, name := range []string{"fifo", "fjf", "srtf", "las", "allox", "hare"} {
			t.Run(spec+"/"+name, func(t *testing.T) {
				res, err := Run(Config{Cluster: cluster(t, spec), Policy: mustPolicy(t, name, policy.Config{})}, jobs)
				must.NoError(t, err)
				must.Eq(t, 0, res.Summary.Unfinished)
				bound := WeightedJCTBound(res.Jobs, res.GPUs)
				must.Positive(t, bound)
				must.GreaterEq(t, bound, res.Summary.WeightedJCT)
			})
		}
	}
}
