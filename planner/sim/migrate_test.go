package sim

import (
	"strings"
	"testing"

	"github.com/caravan-gpu/caravan/planner/policy"
	"github.com/caravan-gpu/caravan/planner/trace"
	"github.com/shoenig/test/must"
)

// TestMigrationCost works a migration by hand on one V100 and one K80. Two
// jobs of a type that runs 10 steps/s on a V100 and 1 on a K80 start at 0:
// A (10,000 steps) on the V100, B on the K80. A ends at 1,000 s, when B
// has done 1,000 steps: B moves to the V100 if what is left takes longer
// on the K80 than on the V100 plus the 30 s the move costs.
func TestMigrationCost(t *testing.T) {
	tputs, err := trace.ParseThroughputs(strings.NewReader(
		`{"v100": {"('steep', 1)": {"null": 10}}, "k80": {"('steep', 1)": {"null": 1}}}`), "test")
	must.NoError(t, err)
	cases := []struct {
		name       string
		policy     string
		stepsB     float64
		finishB    float64
		migrations int
	}{
		// 2,000 steps left: 2,000 s on the K80, or 30 s + 200 s on the
		// V100, the 30 s charged as 300 steps of work there.
		{"moves when a faster GPU frees", "fjf+migrate", 3000, 1000 + 30 + 200, 1},
		{"stays without the migrate step", "fjf", 3000, 3000, 0},
		// 10 steps left: 10 s on the K80 is less than the move costs.
		{"stays when less is left than the move costs", "fjf+migrate", 1010, 1010, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			jobs := []trace.Job{
				{ID: "A", GPUs: 1, JobType: "steep", Steps: 10000},
				{ID: "B", GPUs: 1, JobType: "steep", Steps: tc.stepsB},
			}
			res, err := Run(Config{Cluster: cluster(t, "1xV100,1xK80"), Throughputs: tputs,
				MigrationCost: policy.DefaultMigrationCost,
				Policy:        mustPolicy(t, tc.policy, policy.Config{})}, jobs)
			must.NoError(t, err)
			must.Eq(t, 1000, res.Jobs[0].Finish)
			must.Eq(t, "V100", res.Jobs[0].GPUModel)
			must.EqFunc(t, tc.finishB, res.Jobs[1].Finish, func(a, b float64) bool { return a-b < 1e-6 && b-a < 1e-6 })
			must.Eq(t, tc.migrations, res.Jobs[1].Migrations)
			must.Eq(t, tc.migrations, res.Summary.Migrations)
			must.Eq(t, 0, res.Summary.Preemptions, must.Sprint("a migration is not a preemption"))
		})
	}
}
