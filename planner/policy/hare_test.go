package policy

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/shoenig/test/must"
)

// Hare's greedy step gives a job the GPUs on which it finishes earliest,
// counting when busy GPUs free up: here the waiting job takes 20 s on a
// V100 and 100 s on the free K80, and the V100's job ends in freeIn.
// hare+fastest, the placement before, took the free K80 whatever the wait.
func TestHareWaitsForAFasterGPUThatFreesSoon(t *testing.T) {
	cases := []struct {
		name    string
		freeIn  float64 // -1: the running job's time is unknown
		runs    bool
		planned string
	}{
		{"frees in 10 s: waits, done at 30", 10, false, "V100"},
		{"frees in 79 s: waits, done at 99", 79, false, "V100"},
		{"frees in 81 s: K80 now, done at 100", 81, true, "K80"},
		{"unknown end: K80 now", -1, true, "K80"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			busy := job("busy", 0, 1)
			busy.State, busy.GPUModel, busy.Remaining = Running, "V100", tc.freeIn
			next := job("next", 1, 1)
			next.RemainingWork, next.Throughput = 100, map[string]float64{"V100": 5, "K80": 1}
			s := &Snapshot{Nodes: alloxCluster("V100", "K80"), Jobs: []Job{busy, next}}
			r := plan(t, "hare", Config{}, s)
			must.Eq(t, tc.runs, r.Decisions[1].Run)
			must.Eq(t, tc.planned, r.Decisions[1].GPUModel)
			if !tc.runs {
				must.StrContains(t, r.Decisions[1].Reason, "waits for a V100 to free up")
			}
		})
	}
}

// A job waiting for GPUs that free up later does not hold the free ones
// idle: a job ranked below it starts on them now if it ends before the
// planned start, and waits otherwise.
func TestHareFillsTheGapBeforeAPlannedStart(t *testing.T) {
	busy := job("busy", 0, 1)
	busy.State, busy.GPUModel, busy.Remaining = Running, "V100", 10
	// big needs both V100s: it starts at 10, when busy ends. Its weight
	// ranks it first.
	big := job("big", 1, 2)
	big.Remaining, big.Weight = 50, 100
	fits, long := job("fits", 2, 1), job("long", 3, 1)
	fits.Remaining, long.Remaining = 8, 12
	s := &Snapshot{Nodes: alloxCluster("V100", "V100"), Jobs: []Job{busy, big, fits, long}}
	r := plan(t, "hare", Config{}, s)
	must.Eq(t, []string{"big", "fits", "busy", "long"}, ranked(s, r))
	must.Eq(t, []string{"fits", "busy"}, running(s, r))
	must.Eq(t, "V100", r.Decisions[1].GPUModel)
	must.StrContains(t, r.Decisions[3].Reason, "waits")
}

// Weights reach the order: of two jobs of the same size the heavier ranks
// first, and a job twice as heavy ranks like one half as long.
func TestHareOrdersByWeightedGPUTime(t *testing.T) {
	cases := []struct {
		name    string
		weights [2]float64
		first   string
	}{
		{"unweighted: the shorter first", [2]float64{0, 0}, "short"},
		{"the long job three times as heavy", [2]float64{1, 3}, "long"},
		{"twice as heavy ties, arrival breaks it", [2]float64{1, 2}, "short"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			short, long := job("short", 0, 1), job("long", 1, 1)
			short.Remaining, long.Remaining = 100, 200
			short.Weight, long.Weight = tc.weights[0], tc.weights[1]
			s := &Snapshot{Nodes: alloxCluster("V100"), Jobs: []Job{short, long}}
			r := plan(t, "hare", Config{}, s)
			must.Eq(t, tc.first, ranked(s, r)[0])
		})
	}
}

// WeightedFlowBound worked by hand on one GPU and on two.
func TestWeightedFlowBound(t *testing.T) {
	cases := []struct {
		name string
		jobs []RelaxedJob
		gpus int
		want float64
	}{
		// Smith's order: a (10 s) then b (20 s); flows 10 and 30.
		{"together", []RelaxedJob{{0, 1, 10, 1}, {0, 1, 20, 1}}, 1, 40},
		// b runs 0..5, a (released at 5, higher w/p) 5..15, b 15..30:
		// a's mean busy time 10, + 5 = 15, flow 10; b's mean busy time
		// (12.5 + 337.5)/20 = 17.5, + 10 = 27.5, flow 27.5. The best
		// schedule (b, a preempting, b) has flows 10 and 30.
		{"released apart", []RelaxedJob{{0, 1, 20, 1}, {5, 1, 10, 1}}, 1, 37.5},
		// Weight 3 on b puts it first: flows 20 and 30, weighted 60 + 30.
		{"weighted", []RelaxedJob{{0, 1, 10, 1}, {0, 1, 20, 3}}, 1, 90},
		// On two GPUs each runs alone: the bound is their run times.
		{"two GPUs", []RelaxedJob{{0, 1, 10, 1}, {0, 1, 10, 1}}, 2, 20},
		// A 2-GPU job fills both: 10 + (10 + 20 = 30) as on one machine.
		{"gang", []RelaxedJob{{0, 2, 5, 1}, {0, 2, 10, 1}}, 2, 20},
		{"unknown time left out", []RelaxedJob{{0, 1, 10, 1}, {0, 1, inf, 1}}, 1, 10},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			must.InDelta(t, tc.want, WeightedFlowBound(tc.jobs, tc.gpus), 1e-9)
		})
	}
}

// Each round's Result.Bound under hare is WeightedFlowBound with every job
// released now, taken in one pass over the order.
func TestHareRoundBoundIsTheRelaxation(t *testing.T) {
	for seed := range uint64(50) {
		rng := rand.New(rand.NewPCG(seed, 2))
		s := &Snapshot{Now: 1000, Nodes: append(alloxCluster("V100", "V100", "V100"), alloxCluster("K80", "K80")...)}
		var relaxed []RelaxedJob
		for k := range 1 + rng.IntN(30) {
			j := job(fmt.Sprint(k), float64(k), 1+rng.IntN(3))
			j.Weight = float64(1 + rng.IntN(4))
			j.RemainingWork, j.Throughput = float64(1+rng.IntN(1000)), map[string]float64{"V100": 2, "K80": 1}
			s.Jobs = append(s.Jobs, j)
			relaxed = append(relaxed, RelaxedJob{Release: 0, GPUs: j.GPUs, Time: j.RemainingWork / 2, Weight: j.Weight})
		}
		r := plan(t, "hare", Config{}, s)
		must.InDelta(t, WeightedFlowBound(relaxed, 5), r.Bound, 1e-6*r.Bound, must.Sprintf("seed %d", seed))
	}
}

// TestFloatHeapKthWithReusedScratch checks kth against a sort, with one
// scratch front reused across heaps and calls, as the timeline reuses it.
func TestFloatHeapKthWithReusedScratch(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	var scratch []int
	for range 200 {
		var h floatHeap
		var vals []float64
		for range rng.IntN(40) + 1 {
			v := float64(rng.IntN(20)) // ties included
			h.push(v)
			vals = append(vals, v)
		}
		slices.Sort(vals)
		for k := 0; k <= len(vals)+1; k++ {
			want := inf
			if k >= 1 && k <= len(vals) {
				want = vals[k-1]
			}
			must.EqOp(t, want, h.kth(k, &scratch), must.Sprintf("k=%d of %v", k, vals))
		}
	}
}
