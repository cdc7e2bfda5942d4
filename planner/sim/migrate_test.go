package sim

import (
	"strconv"
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
		ranOnB     []string
	}{
		// 2,000 steps left: 2,000 s on the K80, or 30 s + 200 s on the
		// V100, the 30 s charged as 300 steps of work there.
		{"moves when a faster GPU frees", "fjf+migrate", 3000, 1000 + 30 + 200, 1, []string{"K80", "V100"}},
		{"stays without the migrate step", "fjf", 3000, 3000, 0, []string{"K80"}},
		// 10 steps left: 10 s on the K80 is less than the move costs.
		{"stays when less is left than the move costs", "fjf+migrate", 1010, 1010, 0, []string{"K80"}},
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
			must.Eq(t, tc.ranOnB, res.Jobs[1].RanOn)
			must.Eq(t, []string{"V100"}, res.Jobs[0].RanOn)
			must.Eq(t, tc.migrations, res.Summary.Migrations)
			must.Eq(t, 0, res.Summary.Preemptions, must.Sprint("a migration is not a preemption"))
		})
	}
}

// With StartsShared a move sets its tasks up again beside the other starts
// under way. On two V100s and two K80s, four jobs of TestMigrationCost's
// type start at 0, the first and third on the V100s, and share the set-up
// (1 s a task): all run from 4. Of 10,000 steps on the V100s and 3,000 on
// the K80s, the first two end at 1,004, and the K80s' jobs, 1,000 steps
// done, move there together: 2 s of set-up shared, 30 s of move, 200 s of
// work, ending at 1,236. With the sizes swapped, the 3,000-step job on a
// V100 ends at 304 and the 10,000-step job on a K80 moves alone: 1 s of
// set-up, 30 s, 970 s; the other K80 job moves alone at 1,004.
func TestMigrationJoinsTheSharedSetUp(t *testing.T) {
	tputs, err := trace.ParseThroughputs(strings.NewReader(
		`{"v100": {"('steep', 1)": {"null": 10}}, "k80": {"('steep', 1)": {"null": 1}}}`), "test")
	must.NoError(t, err)
	cfg := Config{Cluster: cluster(t, "2xV100,2xK80"), Throughputs: tputs, MigrationCost: policy.DefaultMigrationCost,
		Policy: mustPolicy(t, "fjf+migrate", policy.Config{}), StartSpread: 1, StartsShared: true}
	jobs := func(steps ...float64) []trace.Job {
		var js []trace.Job
		for k, n := range steps {
			js = append(js, trace.Job{ID: strconv.Itoa(k), GPUs: 1, JobType: "steep", Steps: n})
		}
		return js
	}
	res, err := Run(cfg, jobs(10000, 3000, 10000, 3000))
	must.NoError(t, err)
	mustFinishAt(t, res, 1004, 1236, 1004, 1236)
	must.Eq(t, 2, res.Summary.Migrations)

	res, err = Run(cfg, jobs(10000, 10000, 3000, 3000))
	must.NoError(t, err)
	mustFinishAt(t, res, 1004, 304+1+30+970, 304, 1004+1+30+200)
	must.Eq(t, 2, res.Summary.Migrations)

	// A start latency of 2: every task joins the set-up 2 s after its
	// start, the first ones' too (all run from 6), and the moves at 1,006
	// join it at 1,008.
	cfg.StartLatency = 2
	res, err = Run(cfg, jobs(10000, 3000, 10000, 3000))
	must.NoError(t, err)
	mustFinishAt(t, res, 1006, 1008+2+30+200, 1006, 1008+2+30+200)
}

// A job's models are told on a cluster of several only: on one model they
// say nothing, and the full traces' results carry none.
func TestRanOnOnlyOnSeveralModels(t *testing.T) {
	jobs := []trace.Job{{ID: "A", GPUs: 1, Duration: 100}, {ID: "B", GPUs: 1, Duration: 50}}
	res, err := Run(Config{Cluster: cluster(t, "2xV100"), Policy: mustPolicy(t, "fifo", policy.Config{})}, jobs)
	must.NoError(t, err)
	for _, j := range res.Jobs {
		must.Nil(t, j.RanOn)
	}
}

// A start taken back before its task ran names no model: the job never ran
// there, and a live replay, which counts only the tasks that started,
// would not name it either. On two V100s and a K80, A starts on the V100s
// (the most free) at 0 with a start latency of 10; B, shorter and two GPUs
// wide, arrives at 5 and fits only on the V100s, so srtf takes A's start
// back; at C's arrival, at 7, A starts again on the K80.
func TestRanOnLeavesOutAStartTakenBack(t *testing.T) {
	jobs := []trace.Job{{ID: "A", GPUs: 1, Duration: 1000}, {ID: "B", GPUs: 2, Arrival: 5, Duration: 50},
		{ID: "C", GPUs: 1, Arrival: 7, Duration: 2000}}
	res, err := Run(Config{Cluster: cluster(t, "2xV100,1xK80"), StartLatency: 10,
		Policy: mustPolicy(t, "srtf", policy.Config{})}, jobs)
	must.NoError(t, err)
	must.Eq(t, 0, res.Jobs[0].Preemptions, must.Sprint("a start taken back is no preemption"))
	must.Eq(t, 2, res.Jobs[0].Queueing, must.Sprint("A waited from 5 to 7"))
	must.Eq(t, []string{"K80"}, res.Jobs[0].RanOn)
	must.Eq(t, []string{"V100"}, res.Jobs[1].RanOn)
}
