package sim

import (
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/caravan-gpu/caravan/planner/policy"
	"github.com/caravan-gpu/caravan/planner/trace"
	"github.com/shoenig/test/must"
)

func mustPolicy(t *testing.T, name string, cfg policy.Config) *policy.Policy {
	t.Helper()
	p, err := policy.Parse(name, cfg)
	must.NoError(t, err)
	return p
}

func cluster(t *testing.T, spec string) trace.Cluster {
	t.Helper()
	c, err := trace.ParseShorthand(spec)
	must.NoError(t, err)
	return c
}

// TestDemotionTiming works one contended case by hand. A 4-GPU job A
// (2,000 s) holds the whole n1g4 cluster from t=0; a 1-GPU job B (500 s)
// arrives at t=100 and waits in queue 0 until A's attained service reaches
// the 3,250 GPU-s cut, when A drops to queue 1 and B preempts it.
//
// Exact: A crosses at 3250/4 = 812.5 s, so B runs 812.5..1312.5 and A
// resumes with 2000-812.5 s left: A ends at 2500, B's JCT is 1212.5.
//
// Reference arithmetic: at t=100 the reference schedules A's demotion
// check at floor((3250-100)/4)+100 = 887 (it subtracts executed seconds,
// not GPU-seconds, and floors), where A has 887 s × 4 = 3548 GPU-s and is
// demoted. B runs 887..1387 (JCT 1287); A ends at 1387+1113 = 2500.
func TestDemotionTiming(t *testing.T) {
	jobs := []trace.Job{
		{ID: "A", Arrival: 0, GPUs: 4, Duration: 2000},
		{ID: "B", Arrival: 100, GPUs: 1, Duration: 500},
	}
	cases := []struct {
		name        string
		compat      bool
		jctA, jctB  float64
		preemptsOfA int
		stopOfA     float64
	}{
		{"exact", false, 2500, 1212.5, 1, 812.5},
		{"reference", true, 2500, 1287, 1, 887},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Run(Config{Cluster: cluster(t, "n1g4"), Compat: tc.compat,
				Policy: mustPolicy(t, "las", policy.Config{Compat: tc.compat})}, jobs)
			must.NoError(t, err)
			must.Eq(t, tc.jctA, res.Jobs[0].JCT)
			must.Eq(t, tc.jctB, res.Jobs[1].JCT)
			must.Eq(t, tc.preemptsOfA, res.Jobs[0].Preemptions)
			must.Eq(t, []float64{tc.stopOfA}, res.Jobs[0].Stops)
			must.Nil(t, res.Jobs[1].Stops)
		})
	}
}

// TestPromoteKnob: one GPU, one queue cut at 1,000 GPU-s. A (2,000 s)
// arrives at 0 and drops to queue 1 at t=1000. Short jobs C1..C5 (900 s,
// below the cut) arrive every 900 s from t=1100, so without the knob A
// waits until C5 ends at 5600 and finishes at 6500. With K=1, A (executed
// 1,100 s) is promoted once it has waited 1,100 s, at 2200. C2 is running
// in queue 0 and, already being there, stays ahead; at 2900 C2 ends, and A
// (in queue 0 since 2200) ranks before the newly arrived C3, so A runs its
// last 900 s to 3800. C3 then runs 3800..4700, C4 4700..5600, C5
// 5600..6500.
func TestPromoteKnob(t *testing.T) {
	jobs := []trace.Job{{ID: "A", Arrival: 0, GPUs: 1, Duration: 2000}}
	for k := 0; k < 5; k++ {
		jobs = append(jobs, trace.Job{ID: fmt.Sprintf("C%d", k+1), Arrival: 1100 + 900*float64(k), GPUs: 1, Duration: 900})
	}
	cases := []struct {
		name string
		knob float64
		jct  []float64
	}{
		{"off", 0, []float64{6500, 900, 900, 900, 900, 900}},
		{"K=1", 1, []float64{3800, 900, 900, 1800, 1800, 1800}},
	}
	for _, tc := range cases {
		for _, compat := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/compat=%v", tc.name, compat), func(t *testing.T) {
				res, err := Run(Config{Cluster: cluster(t, "n1g1"), Compat: compat,
					Policy: mustPolicy(t, "las", policy.Config{QueueCuts: []float64{1000}, PromoteKnob: tc.knob, Compat: compat})}, jobs)
				must.NoError(t, err)
				for i, want := range tc.jct {
					must.Eq(t, want, res.Jobs[i].JCT, must.Sprintf("job %s", res.Jobs[i].ID))
				}
			})
		}
	}
}

func TestFIFOHeadOfLineBlocking(t *testing.T) {
	// On 4 GPUs: X holds 2 GPUs for 100 s, Y wants 4 and must wait for X,
	// Z wants 1 and arrives just after Y. Strict FIFO keeps Z behind Y;
	// fjf lets Z use a free GPU at once.
	jobs := []trace.Job{
		{ID: "X", Arrival: 0, GPUs: 2, Duration: 100},
		{ID: "Y", Arrival: 1, GPUs: 4, Duration: 100},
		{ID: "Z", Arrival: 2, GPUs: 1, Duration: 10},
	}
	cases := []struct {
		policy string
		jctZ   float64
	}{
		{"fifo", 100 + 100 + 10 - 2}, // Z starts when Y ends at 200
		{"fjf", 10},
	}
	for _, tc := range cases {
		t.Run(tc.policy, func(t *testing.T) {
			res, err := Run(Config{Cluster: cluster(t, "n1g4"), Policy: mustPolicy(t, tc.policy, policy.Config{})}, jobs)
			must.NoError(t, err)
			must.Eq(t, tc.jctZ, res.Jobs[2].JCT)
		})
	}
}

func TestDeterministic(t *testing.T) {
	jobs := trace.Synthetic(trace.SyntheticOptions{Jobs: 400, Seed: 7, Load: 40})
	run := func() Summary {
		res, err := Run(Config{Cluster: cluster(t, "n4g8"), Policy: mustPolicy(t, "las", policy.Config{})}, jobs)
		must.NoError(t, err)
		return res.Summary
	}
	a, b := run(), run()
	must.Eq(t, a, b)
	must.Eq(t, 0, a.Unfinished)
	must.True(t, a.Utilization > 0 && a.Utilization <= 1)
}

// TestWorkConservation checks invariants that hold for every policy on a
// congested synthetic trace: every job finishes, no job beats its isolated
// run time, and busy GPU-time equals the work done.
func TestWorkConservation(t *testing.T) {
	jobs := trace.Synthetic(trace.SyntheticOptions{Jobs: 300, Seed: 3, Load: 60})
	work := 0.0
	for _, j := range jobs {
		work += j.Duration * float64(j.GPUs)
	}
	for _, name := range []string{"fifo", "fjf", "srtf", "srsf", "las", "gittins", "hare", "allox", "las+consolidated", "predict"} {
		t.Run(name, func(t *testing.T) {
			res, err := Run(Config{Cluster: cluster(t, "n4g8"), KeepUtil: true, Policy: mustPolicy(t, name, policy.Config{})}, jobs)
			must.NoError(t, err)
			must.Eq(t, 0, res.Summary.Unfinished)
			for _, j := range res.Jobs {
				must.True(t, j.JCT >= j.Isolated-1e-6, must.Sprintf("job %s JCT %v < %v", j.ID, j.JCT, j.Isolated))
			}
			busy := res.Summary.Utilization * float64(res.GPUs) * res.Summary.Makespan
			must.True(t, math.Abs(busy-work)/work < 1e-6, must.Sprintf("busy %v work %v", busy, work))
		})
	}
}

// TestShortcutsChangeNothing runs each policy with and without the rounds
// the simulator skips (startArrivals, queuedBehind), on clusters from
// congested to idle, with rounds that decide at their event and after a
// delay (RoundDelay): every job must end the same.
func TestShortcutsChangeNothing(t *testing.T) {
	jobs := trace.Synthetic(trace.SyntheticOptions{Jobs: 2000, Seed: 11, Load: 60})
	knobs := policy.Config{PromoteKnob: 2, QueueCuts: []float64{500, 5000, 50000}}
	for _, spec := range []string{"n8g8", "n12g8", "n64g8"} {
		for _, name := range []string{"fifo", "fjf", "srtf", "srsf", "gittins", "las", "las/knobs", "gittins/knobs", "hare", "predict",
			"fifo/delay", "las/delay", "predict/delay", "hare/delay"} {
			t.Run(spec+"/"+name, func(t *testing.T) {
				cfg := policy.Config{}
				if strings.HasSuffix(name, "/knobs") {
					cfg = knobs
				}
				delay := 0.0
				if strings.HasSuffix(name, "/delay") {
					delay = 30
				}
				base, _, _ := strings.Cut(name, "/")
				run := func(noShortcut bool) *Result {
					res, err := Run(Config{Cluster: cluster(t, spec), Policy: mustPolicy(t, base, cfg),
						RoundDelay: delay, noShortcut: noShortcut}, jobs)
					must.NoError(t, err)
					return res
				}
				with, without := run(false), run(true)
				for i := range with.Jobs {
					must.Eq(t, without.Jobs[i], with.Jobs[i], must.Sprintf("job %d", i))
				}
				must.Eq(t, without.Summary, with.Summary)
			})
		}
	}
}

// Rounds carried out on the keyed queue (Policy.RanksByKey,
// RanksByQueue) start, keep and preempt what full rounds do, with the
// costs a start adds (whose order the spread depends on), drawn per start
// too (StartJitter, drawn in the order of the starts), and a preemption
// cost, and 2D-LAS and 2D-Gittins with three cuts as well as their
// default two.
func TestKeyedRoundsChangeNothing(t *testing.T) {
	jobs := trace.Synthetic(trace.SyntheticOptions{Jobs: 2000, Seed: 5, Load: 70})
	for _, spec := range []string{"n6g8", "n8g8"} {
		for _, name := range []string{"srsf", "srtf", "srsf+fastest", "las", "las+fastest", "las/cuts", "gittins", "gittins/cuts"} {
			for _, costs := range []Config{{}, {StartLatency: 3, StartSpread: 0.5, RunOverhead: 2}, {PreemptionCost: 7},
				{StartLatency: 3, StartSpread: 0.5, RunOverhead: 2, StartJitter: 0.9, JitterSeed: 5},
				{StartLatency: 2, StartSpread: 0.5, RunOverhead: 2, RoundDelay: 1, CompletionLag: 4, StopLatency: 3, UnblockLatency: 2}} {
				t.Run(fmt.Sprintf("%s/%s/%v/%v/%v/%v", spec, name, costs.StartLatency, costs.PreemptionCost, costs.StartJitter, costs.RoundDelay), func(t *testing.T) {
					pcfg := policy.Config{}
					if strings.HasSuffix(name, "/cuts") {
						pcfg.QueueCuts = []float64{500, 5000, 50000}
					}
					run := func(noShortcut bool) *Result {
						cfg := costs
						cfg.Cluster, cfg.Policy, cfg.noShortcut = cluster(t, spec), mustPolicy(t, strings.TrimSuffix(name, "/cuts"), pcfg), noShortcut
						cfg.KeepRestarts = true
						res, err := Run(cfg, jobs)
						must.NoError(t, err)
						return res
					}
					with, without := run(false), run(true)
					must.Positive(t, with.Summary.Preemptions)
					for i := range with.Jobs {
						must.Eq(t, without.Jobs[i], with.Jobs[i], must.Sprintf("job %d", i))
						must.Eq(t, without.Restarts[i], with.Restarts[i], must.Sprintf("job %d's restarts", i))
					}
					must.Eq(t, without.Summary, with.Summary)
				})
			}
		}
	}
}

// The same on the head of the Philly trace, whose arrivals come in bursts
// and whose jobs take 1 to 16 GPUs, on clusters where queues grow long.
func TestShortcutsChangeNothingOnPhilly(t *testing.T) {
	all, err := trace.LoadJobs(sharedData(t, "philly/philly.csv"), "philly")
	must.NoError(t, err)
	jobs := all[:3000]
	for _, spec := range []string{"n4g8", "n16g8"} {
		for _, name := range []string{"fifo", "fjf", "srsf", "las", "gittins"} {
			t.Run(spec+"/"+name, func(t *testing.T) {
				run := func(noShortcut bool) *Result {
					res, err := Run(Config{Cluster: cluster(t, spec), Policy: mustPolicy(t, name, policy.Config{}), noShortcut: noShortcut}, jobs)
					must.NoError(t, err)
					return res
				}
				with, without := run(false), run(true)
				for i := range with.Jobs {
					must.Eq(t, without.Jobs[i], with.Jobs[i], must.Sprintf("job %d", i))
				}
				must.Eq(t, without.Summary, with.Summary)
			})
		}
	}
}

// Every start, the first and one after a preemption, holds its GPUs for
// StartLatency and then runs RunOverhead before the job makes progress,
// as on a real cluster.
func TestStartLatencyAndRunOverhead(t *testing.T) {
	// Under strict FIFO on 4 GPUs: X (2 GPUs, 100 s) runs, Y (4 GPUs)
	// waits for it, Z (1 GPU) waits behind Y. Each start costs 2 + 3 s.
	jobs := []trace.Job{
		{ID: "X", Arrival: 0, GPUs: 2, Duration: 100},
		{ID: "Y", Arrival: 1, GPUs: 4, Duration: 100},
		{ID: "Z", Arrival: 2, GPUs: 1, Duration: 10},
	}
	res, err := Run(Config{Cluster: cluster(t, "n1g4"), Policy: mustPolicy(t, "fifo", policy.Config{}), StartLatency: 2, RunOverhead: 3}, jobs)
	must.NoError(t, err)
	must.Eq(t, 105.0, res.Jobs[0].Finish)
	must.Eq(t, 210.0, res.Jobs[1].Finish)
	must.Eq(t, 225.0, res.Jobs[2].Finish)

	// 2D-LAS preempts A for B at A's cut (3250 GPU-s, 812.5 s on 4 GPUs);
	// A's resume costs the delay again.
	jobs = []trace.Job{{ID: "A", Arrival: 0, GPUs: 4, Duration: 2000}, {ID: "B", Arrival: 100, GPUs: 1, Duration: 500}}
	las := func(latency, overhead float64) *Result {
		res, err := Run(Config{Cluster: cluster(t, "n1g4"), Policy: mustPolicy(t, "las", policy.Config{}),
			StartLatency: latency, RunOverhead: overhead}, jobs)
		must.NoError(t, err)
		return res
	}
	plain, overhead, latency := las(0, 0), las(0, 5), las(5, 0)
	must.Eq(t, 1, overhead.Jobs[0].Preemptions)
	must.Eq(t, 812.5, plain.Jobs[1].Start)
	must.Eq(t, plain.Jobs[0].Finish+15, overhead.Jobs[0].Finish, must.Sprint("A starts twice, and waits for B's start"))
	// The overhead is executed time, so A crosses its cut as without it;
	// the latency is not, so A crosses (and B starts) 5 s later.
	must.Eq(t, 812.5, overhead.Jobs[1].Start)
	must.Eq(t, 817.5, latency.Jobs[1].Start)
	must.Eq(t, 1, latency.Jobs[0].Preemptions)
	// A's one preemption and the round that started it again, after B.
	must.Eq(t, []float64{812.5}, plain.Jobs[0].Stops)
	must.Nil(t, plain.Restarts, must.Sprint("kept only when asked"))
	kept, err := Run(Config{Cluster: cluster(t, "n1g4"), Policy: mustPolicy(t, "las", policy.Config{}), KeepRestarts: true}, jobs)
	must.NoError(t, err)
	must.Eq(t, [][]float64{{kept.Jobs[1].Finish}, nil}, kept.Restarts)
}

// StartJitter draws each start's latency within ±StartJitter of
// StartLatency: the same seed gives the same run, another seed another
// one, and no start pays outside the band.
func TestStartJitter(t *testing.T) {
	var jobs []trace.Job
	for k := range 40 {
		jobs = append(jobs, trace.Job{ID: fmt.Sprint(k), Arrival: float64(k * 50), GPUs: 1, Duration: 10})
	}
	run := func(jitter float64, seed uint64) *Result {
		res, err := Run(Config{Cluster: cluster(t, "n1g4"), Policy: mustPolicy(t, "fifo", policy.Config{}),
			StartLatency: 20, StartJitter: jitter, JitterSeed: seed}, jobs)
		must.NoError(t, err)
		return res
	}
	latencies := func(res *Result) []float64 {
		var out []float64
		for _, j := range res.Jobs {
			out = append(out, j.Finish-j.Start-10) // each runs alone, at once
		}
		return out
	}
	for _, l := range latencies(run(0, 1)) {
		must.Eq(t, 20.0, l)
	}
	a, again, b := latencies(run(0.3, 1)), latencies(run(0.3, 1)), latencies(run(0.3, 2))
	must.Eq(t, a, again)
	must.NotEq(t, a, b)
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, l := range append(a, b...) {
		must.Between(t, 14.0, l, 26.0)
		lo, hi = min(lo, l), max(hi, l)
	}
	// 80 uniform draws spread over most of the band.
	must.Less(t, 16.0, lo)
	must.Greater(t, 24.0, hi)

	for _, bad := range []float64{-0.1, 1, math.NaN()} {
		_, err := Run(Config{Cluster: cluster(t, "n1g4"), Policy: mustPolicy(t, "fifo", policy.Config{}), StartJitter: bad}, jobs)
		must.ErrorContains(t, err, "StartJitter")
	}
}

// Jobs started at one moment are spread by StartSpread, in the order they
// start, as a real cluster places and starts them one after another; a
// later moment starts its own count from the base latency.
func TestStartSpread(t *testing.T) {
	jobs := []trace.Job{
		{ID: "A", Arrival: 0, GPUs: 1, Duration: 10},
		{ID: "B", Arrival: 0, GPUs: 1, Duration: 10},
		{ID: "C", Arrival: 0, GPUs: 1, Duration: 10},
		{ID: "D", Arrival: 50, GPUs: 1, Duration: 10},
	}
	res, err := Run(Config{Cluster: cluster(t, "n1g4"), Policy: mustPolicy(t, "fifo", policy.Config{}), StartLatency: 2, StartSpread: 0.5}, jobs)
	must.NoError(t, err)
	must.Eq(t, []float64{12, 12.5, 13, 62}, []float64{res.Jobs[0].Finish, res.Jobs[1].Finish, res.Jobs[2].Finish, res.Jobs[3].Finish})
}

// A start of a later moment queues behind the tasks earlier rounds are
// still starting: E, decided at 0.2, gets the starter at 1.5, after A, B
// and C's three tasks.
func TestStartSpreadQueuesBehindEarlierStarts(t *testing.T) {
	jobs := []trace.Job{
		{ID: "A", Arrival: 0, GPUs: 1, Duration: 10},
		{ID: "B", Arrival: 0, GPUs: 1, Duration: 10},
		{ID: "C", Arrival: 0, GPUs: 1, Duration: 10},
		{ID: "E", Arrival: 0.2, GPUs: 1, Duration: 10},
	}
	res, err := Run(Config{Cluster: cluster(t, "n1g4"), Policy: mustPolicy(t, "fifo", policy.Config{}), StartLatency: 2, StartSpread: 0.5}, jobs)
	must.NoError(t, err)
	must.Eq(t, 13.5, res.Jobs[3].Finish, must.Sprint("1.3 s in the queue of starts, 2 s of latency and 10 s of run from 0.2"))
}

// The spread counts tasks, one per GPU: a gang runs once its last task has
// started, and the job after it starts after all of its tasks.
func TestStartSpreadCountsAGangsTasks(t *testing.T) {
	jobs := []trace.Job{
		{ID: "gang", Arrival: 0, GPUs: 3, Duration: 10},
		{ID: "after", Arrival: 0, GPUs: 1, Duration: 10},
	}
	res, err := Run(Config{Cluster: cluster(t, "n1g4"), Policy: mustPolicy(t, "fifo", policy.Config{}), StartLatency: 2, StartSpread: 0.5}, jobs)
	must.NoError(t, err)
	must.Eq(t, []float64{13, 13.5}, []float64{res.Jobs[0].Finish, res.Jobs[1].Finish})
}

// GangSpread spaces a gang's own tasks in place of StartSpread: the gang
// runs (3-1)·2 s after its first task's turn, while the queue of starts
// still moves on by 3·0.5 s, so the job after it keeps its turn.
func TestGangSpreadSpacesOnlyAGangsOwnTasks(t *testing.T) {
	jobs := []trace.Job{
		{ID: "gang", Arrival: 0, GPUs: 3, Duration: 10},
		{ID: "after", Arrival: 0, GPUs: 1, Duration: 10},
	}
	res, err := Run(Config{Cluster: cluster(t, "n1g4"), Policy: mustPolicy(t, "fifo", policy.Config{}), StartLatency: 2, StartSpread: 0.5,
		GangSpread: 2}, jobs)
	must.NoError(t, err)
	must.Eq(t, []float64{16, 13.5}, []float64{res.Jobs[0].Finish, res.Jobs[1].Finish})

	// A gang spread below the queue's pace does not start a gang's tasks
	// closer: (3-1)·0.5 s, as without it.
	for _, gang := range []float64{0, 0.2} {
		res, err = Run(Config{Cluster: cluster(t, "n1g4"), Policy: mustPolicy(t, "fifo", policy.Config{}), StartLatency: 2, StartSpread: 0.5,
			GangSpread: gang}, jobs)
		must.NoError(t, err)
		must.Eq(t, []float64{13, 13.5}, []float64{res.Jobs[0].Finish, res.Jobs[1].Finish}, must.Sprintf("gang spread %v", gang))
	}
}

// mustFinishAt checks each job's finish, in the trace's order, to within
// rounding.
func mustFinishAt(t *testing.T, res *Result, want ...float64) {
	t.Helper()
	must.Eq(t, len(want), len(res.Jobs))
	for k, w := range want {
		must.Between(t, w-1e-9, res.Jobs[k].Finish, w+1e-9, must.Sprintf("job %s", res.Jobs[k].ID))
	}
}

// With StartsShared the tasks under way share the clients' set-up: the
// gang joins at 2 and alone would end it at 2 + 8·1; the lone job joins at
// 6, when each of the gang's tasks still needs 0.5, and the nine tasks
// share it from then: the gang ends at 6 + 0.5·9 = 10.5, the lone job
// needs 0.5 more alone and ends at 11. A lone job after them pays the
// latency and one task's set-up.
func TestSharedStartsShareTheSetUp(t *testing.T) {
	jobs := []trace.Job{
		{ID: "gang", Arrival: 0, GPUs: 8, Duration: 10},
		{ID: "lone", Arrival: 4, GPUs: 1, Duration: 10},
		{ID: "later", Arrival: 50, GPUs: 1, Duration: 10},
	}
	res, err := Run(Config{Cluster: cluster(t, "n2g8"), Policy: mustPolicy(t, "fifo", policy.Config{}), StartLatency: 2, StartSpread: 1,
		StartsShared: true}, jobs)
	must.NoError(t, err)
	mustFinishAt(t, res, 20.5, 21, 63)

	// A start that joins the moment another's set-up ends: A ends at 3
	// (1 s alone, then 2 s beside B), and C joins then, beside B's last
	// 1: B ends at 5, C at 6. (The set-up once looped forever here.)
	jobs = []trace.Job{
		{ID: "A", Arrival: 0, GPUs: 1, Duration: 10},
		{ID: "B", Arrival: 1, GPUs: 1, Duration: 10},
		{ID: "C", Arrival: 3, GPUs: 1, Duration: 10},
	}
	res, err = Run(Config{Cluster: cluster(t, "n1g4"), Policy: mustPolicy(t, "fifo", policy.Config{}), StartSpread: 2, StartsShared: true}, jobs)
	must.NoError(t, err)
	mustFinishAt(t, res, 13, 15, 16)

	// No spread, no set-up: the latency alone, and no gang spread
	// either, which the shared set-up does not use.
	res, err = Run(Config{Cluster: cluster(t, "n1g4"), Policy: mustPolicy(t, "fifo", policy.Config{}), StartLatency: 2, GangSpread: 5,
		StartsShared: true}, []trace.Job{{ID: "gang", Arrival: 0, GPUs: 4, Duration: 10}})
	must.NoError(t, err)
	must.Eq(t, 12, res.Jobs[0].Finish)
}

// A start taken back before its tasks ran leaves the set-up, and the
// starts it shared it with end sooner. A and C join at 0, each task needing
// 1 of it; at 1, B (5 s) arrives and srtf takes A (100 s) back. C, with 0.5
// left, and B, with 1, share it from then: C ends at 2 and B at 2.5. Had A
// stayed, C would have ended at 2.5. A lost no run, so it counts no
// preemption, and starts again alone after B.
func TestSharedStartsLeavingFreesTheSetUp(t *testing.T) {
	jobs := []trace.Job{
		{ID: "A", Arrival: 0, GPUs: 1, Duration: 100},
		{ID: "C", Arrival: 0, GPUs: 1, Duration: 50},
		{ID: "B", Arrival: 1, GPUs: 1, Duration: 5},
	}
	res, err := Run(Config{Cluster: cluster(t, "n1g2"), Policy: mustPolicy(t, "srtf", policy.Config{}), StartSpread: 1, StartsShared: true}, jobs)
	must.NoError(t, err)
	mustFinishAt(t, res, 7.5+1+100, 52, 7.5)
	must.Eq(t, 0, res.Jobs[0].Preemptions)
}

// The sizes the policies learn are what a job attained, as the live
// planner records them: each run's overhead counts, here twice for a job
// preempted once.
func TestLearnedSizesCountEachRunsOverhead(t *testing.T) {
	jobs := []trace.Job{
		{ID: "long", Arrival: 0, GPUs: 2, Duration: 100},
		{ID: "short", Arrival: 10, GPUs: 2, Duration: 10},
	}
	for _, name := range []string{"srtf", "predict"} {
		s, err := newSimulator(Config{Cluster: cluster(t, "n1g2"), Policy: mustPolicy(t, name, policy.Config{}), RunOverhead: 5}, jobs)
		must.NoError(t, err)
		s.run()
		res := s.result()
		must.Eq(t, []float64{(10 + 5) * 2, (100 + 2*5) * 2}, s.sizes, must.Sprint(name))
		if name == "srtf" {
			must.Eq(t, 1, res.Jobs[0].Preemptions)
		}
	}
}

// A gang taken back while its last task is still starting has tasks to
// stop: its first task ran at 2 and its last would at 3, so srtf's take
// back at 2.5 is a preemption, and the short job waits for its stop (5 s)
// before its own start (2 s, then 1 s to its second task). Taken back
// before 2, it would have been free.
func TestAGangTakenBackWithSomeTasksRunningIsPreempted(t *testing.T) {
	jobs := []trace.Job{
		{ID: "gang", Arrival: 0, GPUs: 2, Duration: 100},
		{ID: "short", Arrival: 2.5, GPUs: 2, Duration: 10},
	}
	cfg := Config{Cluster: cluster(t, "n1g2"), Policy: mustPolicy(t, "srtf", policy.Config{}), StartLatency: 2, GangSpread: 1, StopLatency: 5}
	res, err := Run(cfg, jobs)
	must.NoError(t, err)
	must.Eq(t, 1, res.Jobs[0].Preemptions)
	must.Eq(t, 20.5, res.Jobs[1].Finish, must.Sprint("2.5 + 5 of stop + 2 of latency + 1 to the last task + 10"))

	jobs[1].Arrival = 1.5
	res, err = Run(cfg, jobs)
	must.NoError(t, err)
	must.Eq(t, 0, res.Jobs[0].Preemptions, must.Sprint("taken back before its first task ran"))
	must.Eq(t, 14.5, res.Jobs[1].Finish)
}

// Synergy's sizing on nodes with 3 cores per GPU, Synergy's own server
// (8 GPUs, 24 cores, 500 GB): every job finishes (a job left on no CPU
// would make no progress), and TUNE beats the proportional share on
// average JCT.
func TestSynergySizingFinishesEveryJob(t *testing.T) {
	sens, err := trace.LoadSensitivity(sharedData(t, "synergy/sensitivity.csv"))
	must.NoError(t, err)
	jobs := trace.Synthetic(trace.SyntheticOptions{Jobs: 600, Seed: 9, Load: 28})
	trace.AssignModels(jobs, sens.Models(), 9)
	cl := trace.Cluster{Name: "4x8", Groups: []trace.NodeGroup{{Count: 4, GPUModel: "V100", GPUs: 8, CPUs: 24, MemoryGB: 500}}}
	avg := map[string]float64{}
	for _, name := range []string{"fjf", "fjf+count+synergy-greedy", "fjf+count+synergy-tune", "las+count+synergy-greedy", "las+count+synergy-tune"} {
		t.Run(name, func(t *testing.T) {
			res, err := Run(Config{Cluster: cl, Policy: mustPolicy(t, name, policy.Config{Sensitivity: sens})}, jobs)
			must.NoError(t, err)
			must.Eq(t, 0, res.Summary.Unfinished)
			avg[name] = res.Summary.AvgJCT
		})
	}
	must.Less(t, avg["fjf"], avg["fjf+count+synergy-tune"])
}

// Synergy's lease in the simulator: two servers of 2 GPUs and 8 cores (4
// per GPU). Flat jobs X (short) and Y take server 0; cpu job A takes 6
// cores of server 1 at 10, and when B arrives at 20 TUNE shrinks A to its
// share of 4 for B: a running task keeps what it started with, so A
// restarts (30 s) to shrink. X finishes at 100 with nothing waiting. With
// a lease of 300 s, a round comes at 300 all the same: A moves to X's
// GPU, where its 6 cores fit, and B grows to the 6 A left, each a restart
// paid once. With no lease A keeps its 4 cores.
func TestSynergyLeaseMovesASqueezedJobWhenNothingWaits(t *testing.T) {
	jobs := []trace.Job{
		{ID: "X", Arrival: 0, GPUs: 1, Duration: 100, Model: "flat"},
		{ID: "Y", Arrival: 0, GPUs: 1, Duration: 10000, Model: "flat"},
		{ID: "A", Arrival: 10, GPUs: 1, Duration: 6000, Model: "cpu"},
		{ID: "B", Arrival: 20, GPUs: 1, Duration: 6000, Model: "cpu"},
	}
	run := func(lease float64) *Result { return runSynergyLease(t, jobs, lease) }
	kept, leased := run(0), run(300)
	for k, want := range []int{0, 0, 1, 0} {
		must.Eq(t, want, kept.Jobs[k].Migrations, must.Sprintf("no lease: job %s", jobs[k].ID))
	}
	for k, want := range []int{0, 0, 2, 1} {
		must.Eq(t, want, leased.Jobs[k].Migrations, must.Sprintf("lease: job %s", jobs[k].ID))
	}
	// A: 15 s of work by 20 at 1.5×, then a 30 s restart and the rest at
	// 1×; with the lease, from 300 a 30 s move and the rest at 1.5×. B:
	// at 1× from 20, and with the lease from 300 a 30 s restart and the
	// rest at 1.5×.
	must.InDelta(t, 20+30+6000-15, kept.Jobs[2].Finish, 1e-6)
	must.InDelta(t, 20+6000, kept.Jobs[3].Finish, 1e-6)
	must.InDelta(t, 300+30+(6000-15+30-280)/1.5, leased.Jobs[2].Finish, 1e-6)
	must.InDelta(t, 300+30+(6000-280)/1.5, leased.Jobs[3].Finish, 1e-6)
	must.Eq(t, kept.Jobs[1].Finish, leased.Jobs[1].Finish, must.Sprint("Y keeps its GPU"))
}

// A job that stays where it was at a lease's end has its lease renewed:
// rounds before the next end leave it alone. Flat jobs R and Q start at 0
// on server 0, Z at 1 on server 1, and nothing moves at 300. Q ends at
// 350 and W arrives at 400: had Z's lease not been renewed at 300, that
// round would place it again, on Q's old GPU beside R (the server with
// fewer free GPUs). Z ends at 501, before the next lease.
func TestSynergyLeaseRenewsAJobThatStays(t *testing.T) {
	jobs := []trace.Job{
		{ID: "R", Arrival: 0, GPUs: 1, Duration: 5000, Model: "flat"},
		{ID: "Q", Arrival: 0, GPUs: 1, Duration: 350, Model: "flat"},
		{ID: "Z", Arrival: 1, GPUs: 1, Duration: 500, Model: "flat"},
		{ID: "W", Arrival: 400, GPUs: 1, Duration: 1000, Model: "flat"},
	}
	res := runSynergyLease(t, jobs, 300)
	for k := range jobs {
		must.Eq(t, 0, res.Jobs[k].Migrations, must.Sprintf("job %s", jobs[k].ID))
	}
	must.Eq(t, 501, res.Jobs[2].Finish)
}

// runSynergyLease runs jobs under fjf+count+synergy-tune with a lease on
// two servers of 2 GPUs and 8 cores (4 per GPU), a move costing 30 s,
// checking the kept Snapshot every round. Model "cpu" trains in
// proportion to its cores up to 6 per GPU, "flat" wants 1.
func runSynergyLease(t *testing.T, jobs []trace.Job, lease float64) *Result {
	t.Helper()
	var rows []policy.SensitivityRow
	for _, c := range []float64{1, 3, 6} {
		for _, m := range []float64{62.5, 125} {
			rows = append(rows, policy.SensitivityRow{Model: "cpu", GPUs: 1, CPUsPerGPU: c, MemGBPerGPU: m, Throughput: c / 3},
				policy.SensitivityRow{Model: "flat", GPUs: 1, CPUsPerGPU: c, MemGBPerGPU: m, Throughput: 1})
		}
	}
	sens, err := policy.NewSensitivity(rows)
	must.NoError(t, err)
	cl := trace.Cluster{Name: "2x2", Groups: []trace.NodeGroup{{Count: 2, GPUModel: "V100", GPUs: 2, CPUs: 8, MemoryGB: 250}}}
	p := mustPolicy(t, "fjf+count+synergy-tune", policy.Config{Sensitivity: sens, SynergyLease: lease})
	res, err := Run(Config{Cluster: cl, Policy: p, MigrationCost: 30, checkSnapshot: true}, jobs)
	must.NoError(t, err)
	must.NoError(t, res.snapErr)
	return res
}

func init() {
	compareKeptSnapshot = func(s *simulator) error {
		for k, i := range s.active {
			js := &s.jobs[i]
			want, got := js.Job, s.snap.Jobs[k]
			// Set from the simulator's own counters, not kept.
			want.Remaining, want.RemainingWork = got.Remaining, got.RemainingWork
			if s.cfg.Compat {
				want.Wait = js.promoWait
			}
			if !reflect.DeepEqual(want, got) {
				return fmt.Errorf("round %d: job %s in the Snapshot is %+v, want %+v", s.rounds, want.ID, got, want)
			}
		}
		return nil
	}
}

// The simulator keeps the Snapshot's jobs from round to round and writes
// only what changed: every round, each kept entry must equal a fresh copy
// of the job, under every kind of policy (preemptive, lanes, compat
// arithmetic with promotions, heterogeneous placement).
func TestKeptSnapshotMatchesACopy(t *testing.T) {
	jobs := trace.Synthetic(trace.SyntheticOptions{Jobs: 800, Seed: 5, Load: 60})
	knobs := policy.Config{PromoteKnob: 2, QueueCuts: []float64{500, 5000}}
	for _, tc := range []struct {
		name, policy, cluster string
		cfg                   policy.Config
		lanes, laneMB         int
		compat                bool
	}{
		{name: "las", policy: "las", cluster: "n4g8"},
		{name: "las/knobs/compat", policy: "las", cluster: "n4g8", cfg: policy.Config{PromoteKnob: 2, QueueCuts: []float64{500, 5000}, Compat: true}, compat: true},
		{name: "gittins/knobs", policy: "gittins", cluster: "n4g8", cfg: knobs},
		{name: "srsf", policy: "srsf", cluster: "n4g8"},
		{name: "fjf/mixed", policy: "fjf", cluster: "2xV100,2xK80"},
		{name: "hare/mixed", policy: "hare", cluster: "16xV100,16xK80"},
		{name: "allox/mixed", policy: "allox", cluster: "16xV100,16xK80"},
		{name: "las+pack/lanes", policy: "las+pack", cluster: "n4g8", lanes: 2, laneMB: 16000},
		{name: "fifo/lanes", policy: "fifo", cluster: "n4g8", lanes: 2, laneMB: 16000},
		{name: "srtf/lanes", policy: "srtf", cluster: "n4g8", lanes: 2, laneMB: 16000},
		{name: "las+consolidated", policy: "las+consolidated", cluster: "n4g8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Run(Config{Cluster: cluster(t, tc.cluster), Policy: mustPolicy(t, tc.policy, tc.cfg),
				Lanes: tc.lanes, LaneMemoryMB: tc.laneMB, Compat: tc.compat, checkSnapshot: true}, jobs)
			must.NoError(t, err)
			must.Positive(t, res.Rounds)
			must.NoError(t, res.snapErr)
		})
	}
}

// Two one-GPU jobs on a GPU cut into two lanes share it, whichever placer
// started them: each keeps the co-location factor (0.6) of its solo speed
// while the other runs, so 60 s of work take 100 s. A count placer that
// named no lane ran them at full speed.
func TestLaneJobsSlowBesideTheirPartners(t *testing.T) {
	jobs := []trace.Job{{ID: "a", Arrival: 0, GPUs: 1, Duration: 60}, {ID: "b", Arrival: 0, GPUs: 1, Duration: 60}}
	for _, name := range []string{"fifo", "las", "hare", "las+pack"} {
		t.Run(name, func(t *testing.T) {
			res, err := Run(Config{Cluster: cluster(t, "n1g1"), Policy: mustPolicy(t, name, policy.Config{}), Lanes: 2, LaneMemoryMB: 40000}, jobs)
			must.NoError(t, err)
			must.Eq(t, 0, res.Summary.Unfinished)
			for _, j := range res.Jobs {
				must.EqOp(t, 0.0, j.Start, must.Sprint(j.ID, " starts at once"))
				must.Between(t, 99.9, j.Finish, 100.1, must.Sprint(j.ID))
			}
		})
	}
}

// A lane job in its start latency has no task running yet: it slows no
// partner, and its wait is the wall clock's, not stretched by theirs. On
// one GPU of two lanes with a 20 s start latency, a (60 s of work, from 0)
// runs alone from 20 to 50, b (from 30) starts its task at 50, and from
// then on each keeps 0.6 of its pace: a's last 30 s of work take 50 s (to
// 100), b's first 30 too, and its last 30 run alone (to 130). Slowed
// from b's start, and b's wait stretched, as the simulator had it, a
// finished at 113.
func TestALaneJobSlowsItsPartnersOnceItsTaskRuns(t *testing.T) {
	jobs := []trace.Job{{ID: "a", Arrival: 0, GPUs: 1, Duration: 60}, {ID: "b", Arrival: 30, GPUs: 1, Duration: 60}}
	for _, name := range []string{"fifo", "las+pack"} {
		t.Run(name, func(t *testing.T) {
			res, err := Run(Config{Cluster: cluster(t, "n1g1"), Policy: mustPolicy(t, name, policy.Config{}),
				Lanes: 2, LaneMemoryMB: 40000, StartLatency: 20}, jobs)
			must.NoError(t, err)
			must.Between(t, 99.99, res.Jobs[0].Finish, 100.01, must.Sprint("a"))
			must.Between(t, 129.99, res.Jobs[1].Finish, 130.01, must.Sprint("b"))
		})
	}
}

// A job's result says how many nodes its run spanned, as the placer chose
// its GPUs; a placer that names no GPUs names no nodes.
func TestJobResultCountsTheNodesARunSpans(t *testing.T) {
	jobs := []trace.Job{
		{ID: "eight", Arrival: 0, GPUs: 8, Duration: 100},
		{ID: "four", Arrival: 200, GPUs: 4, Duration: 100},
	}
	res, err := Run(Config{Cluster: cluster(t, "n2g4"), Policy: mustPolicy(t, "las+consolidated", policy.Config{})}, jobs)
	must.NoError(t, err)
	must.Eq(t, 2, res.Jobs[0].Nodes)
	must.Eq(t, 1, res.Jobs[1].Nodes)

	res, err = Run(Config{Cluster: cluster(t, "n2g4"), Policy: mustPolicy(t, "fifo", policy.Config{})}, jobs)
	must.NoError(t, err)
	for _, j := range res.Jobs {
		must.LessEq(t, 2, j.Nodes)
	}
}

// A start in the round that preempted waits for the preempted job's stop
// (StopLatency); starts into GPUs that were free do not.
func TestStopLatency(t *testing.T) {
	jobs := []trace.Job{{ID: "A", Arrival: 0, GPUs: 4, Duration: 2000}, {ID: "B", Arrival: 100, GPUs: 1, Duration: 500}}
	las := func(stop float64) *Result {
		res, err := Run(Config{Cluster: cluster(t, "n1g4"), Policy: mustPolicy(t, "las", policy.Config{}), StopLatency: stop}, jobs)
		must.NoError(t, err)
		return res
	}
	plain, stopping := las(0), las(7)
	aborting, err := Run(Config{Cluster: cluster(t, "n1g4"), Policy: mustPolicy(t, "las", policy.Config{}), StopLatency: 7, AbortLatency: 240}, jobs)
	must.NoError(t, err)
	must.Eq(t, stopping.Jobs, aborting.Jobs, must.Sprint("no start was taken back: AbortLatency changes nothing"))
	must.Eq(t, 1, stopping.Jobs[0].Preemptions)
	must.Eq(t, 0.0, stopping.Jobs[0].Start, must.Sprint("A started into free GPUs at once"))
	must.Eq(t, plain.Jobs[1].Finish+7, stopping.Jobs[1].Finish, must.Sprint("B waited for A's stop"))
	must.Eq(t, plain.Jobs[0].Finish+7, stopping.Jobs[0].Finish, must.Sprint("A resumed after B, into free GPUs: no stop to wait for"))
}

// A run preempted before it got through its start overhead loses that
// start whole: the next run pays its own, and none of the old one is
// carried over as work. A (4 GPUs, 2,000 s) pays 1,000 s of overhead,
// crosses the 3,250 GPU-s cut at 812.5 s, still in it, and is preempted
// for B (1 GPU, 500 s), which ends at 2,312.5; A then runs 1,000 + 2,000 s.
func TestPreemptedStartIsLostWhole(t *testing.T) {
	jobs := []trace.Job{{ID: "A", Arrival: 0, GPUs: 4, Duration: 2000}, {ID: "B", Arrival: 100, GPUs: 1, Duration: 500}}
	res, err := Run(Config{Cluster: cluster(t, "n1g4"), Policy: mustPolicy(t, "las", policy.Config{}), RunOverhead: 1000}, jobs)
	must.NoError(t, err)
	must.Eq(t, 1, res.Jobs[0].Preemptions)
	must.Eq(t, 2312.5, res.Jobs[1].Finish)
	must.Eq(t, 5312.5, res.Jobs[0].Finish, must.Sprint("not 5,500: the 187.5 s of overhead left at the preemption is not carried over"))
}

// A start taken back before its task ran is no preemption: a real cluster
// has no task to stop, so the start that takes its GPUs waits for no stop.
// srtf starts A (2,000 s), then B (500 s) arrives while A is still in its
// 300 s start latency and takes A's GPUs.
func TestAStartTakenBackBeforeItsTaskRanIsNoPreemption(t *testing.T) {
	jobs := []trace.Job{{ID: "A", Arrival: 0, GPUs: 4, Duration: 2000}, {ID: "B", Arrival: 100, GPUs: 4, Duration: 500}}
	res, err := Run(Config{Cluster: cluster(t, "n1g4"), Policy: mustPolicy(t, "srtf", policy.Config{}), StartLatency: 300, StopLatency: 7}, jobs)
	must.NoError(t, err)
	must.Eq(t, 0, res.Jobs[0].Preemptions)
	must.Eq(t, 900.0, res.Jobs[1].Finish, must.Sprint("B: 300 s of latency and 500 s of run from 100, no stop to wait for"))
	must.Eq(t, 3200.0, res.Jobs[0].Finish, must.Sprint("A starts again, whole, when B ends"))
}

// A start taken back before its task ran keeps its GPUs for AbortLatency
// (a Nomad client takes seconds to give up a task's set-up), and the
// start that takes them waits for it; a start that the stops' GPUs cover
// waits StopLatency only. Under srtf with 300 s of start latency on four
// GPUs: A (2 GPUs, 2,000 s) runs from 300; C (2 GPUs, 3,000 s) arrives at
// 350 and is still starting when B (4 GPUs, 100 s) arrives at 400, which
// preempts A and takes C back.
func TestAStartTakenBackKeepsItsGPUsForTheAbortLatency(t *testing.T) {
	jobs := []trace.Job{
		{ID: "A", Arrival: 0, GPUs: 2, Duration: 2000},
		{ID: "C", Arrival: 350, GPUs: 2, Duration: 3000},
		{ID: "B", Arrival: 400, GPUs: 4, Duration: 100},
	}
	for _, tc := range []struct {
		name  string
		abort float64
		wantB float64
	}{
		{"freed at once", 0, 400 + 7 + 300 + 100},
		{"freed after the abort latency", 240, 400 + 240 + 300 + 100},
		{"an abort latency below the stop latency", 3, 400 + 7 + 300 + 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			byID := srtfRun(t, jobs, tc.abort, 7)
			must.Eq(t, 1, byID["A"].Preemptions, must.Sprint("A was running: a preemption"))
			must.Eq(t, 0, byID["C"].Preemptions, must.Sprint("C was still starting: taken back, no preemption"))
			must.Eq(t, tc.wantB, byID["B"].Finish)
		})
	}
}

// srtfRun runs jobs under srtf on four GPUs with 300 s of start latency,
// the abort and stop latencies given, and gives the results by job.
func srtfRun(t *testing.T, jobs []trace.Job, abort, stop float64) map[string]JobResult {
	t.Helper()
	res, err := Run(Config{Cluster: cluster(t, "n1g4"), Policy: mustPolicy(t, "srtf", policy.Config{}),
		StartLatency: 300, StopLatency: stop, AbortLatency: abort}, jobs)
	must.NoError(t, err)
	byID := map[string]JobResult{}
	for _, j := range res.Jobs {
		byID[j.ID] = j
	}
	return byID
}

// The GPUs of a start taken back stay held for later rounds' starts too,
// not only the round that took it back. C (4 GPUs) is taken back at 100
// for B (1 GPU, 50 s), which waits for C's GPUs until 340; D (1 GPU, 50 s)
// arriving at 110 waits for them as well, to 340.
func TestHeldGPUsHoldLaterStartsToo(t *testing.T) {
	byID := srtfRun(t, []trace.Job{
		{ID: "C", Arrival: 0, GPUs: 4, Duration: 1000},
		{ID: "B", Arrival: 100, GPUs: 1, Duration: 50},
		{ID: "D", Arrival: 110, GPUs: 1, Duration: 50},
	}, 240, 0)
	must.Eq(t, 100+240+300+50, byID["B"].Finish)
	must.Eq(t, 340+300+50, byID["D"].Finish, must.Sprint("D waited for C's GPUs from 110 to 340"))
	must.Eq(t, 0, byID["C"].Preemptions)
}

// In one round, a start the preemption's stops cover waits the stop
// latency only, and one that needs the GPUs of a start taken back waits
// for them: A (2 GPUs) runs and C (2 GPUs) is still starting when B1 and
// B2 (2 GPUs, 10 s each) arrive together at 400.
func TestStopsCoverAStartBeforeHeldGPUs(t *testing.T) {
	byID := srtfRun(t, []trace.Job{
		{ID: "A", Arrival: 0, GPUs: 2, Duration: 2000},
		{ID: "C", Arrival: 350, GPUs: 2, Duration: 3000},
		{ID: "B1", Arrival: 400, GPUs: 2, Duration: 10},
		{ID: "B2", Arrival: 400, GPUs: 2, Duration: 10},
	}, 240, 7)
	must.Eq(t, 400+7+300+10, byID["B1"].Finish, must.Sprint("B1 took A's GPUs, after its stop"))
	must.Eq(t, 400+240+300+10, byID["B2"].Finish, must.Sprint("B2 took C's, after the client gave them up"))
}

// A start taken back while it still waited for the GPUs it was to take
// had no allocation to stop: its GPUs free when those it waited for do,
// not the abort latency later. B (4 GPUs) preempts A at 1000 and waits
// for A's stop until 1007; C (4 GPUs, 100 s) takes B back at 1003 and
// waits only for that stop.
func TestAStartTakenBackBeforeItWasPlacedHoldsNothingMore(t *testing.T) {
	byID := srtfRun(t, []trace.Job{
		{ID: "A", Arrival: 0, GPUs: 4, Duration: 5000},
		{ID: "B", Arrival: 1000, GPUs: 4, Duration: 1000},
		{ID: "C", Arrival: 1003, GPUs: 4, Duration: 100},
	}, 240, 7)
	must.Eq(t, 1007+300+100, byID["C"].Finish, must.Sprint("from A's stop at 1,007: not 1,643, as B was never placed, nor 1,410, as the round that took B back stopped nothing"))
	must.Eq(t, 1, byID["A"].Preemptions)
	must.Eq(t, 0, byID["B"].Preemptions)
}

// A job still starting shows a policy its remaining time without the
// start's costs, as a live planner counts it from the job's duration and
// the time it has run: under srtf, B (120 s) arriving while A (100 s)
// starts does not take A back, which with A's 50 s latency counted as
// work it would (150 − 10 > 120).
func TestStartingJobsRemainingLeavesOutItsStartCosts(t *testing.T) {
	jobs := []trace.Job{
		{ID: "A", Arrival: 0, GPUs: 1, Duration: 100},
		{ID: "B", Arrival: 10, GPUs: 1, Duration: 120},
	}
	res, err := Run(Config{Cluster: cluster(t, "n1g1"), StartLatency: 50,
		Policy: mustPolicy(t, "srtf", policy.Config{})}, jobs)
	must.NoError(t, err)
	must.Eq(t, 150.0, res.Jobs[0].Finish, must.Sprint("A runs once it has started"))
	must.Eq(t, 150.0+50+120, res.Jobs[1].Finish)
	must.Eq(t, 0, res.Summary.Preemptions)
}

// Under a Rotation a job alone on two GPU models is drawn again every
// period, though nothing waits, and moves about every other period; each
// move costs it the migration cost, and nothing else does.
func TestRotationMovesALoneJobEveryFewPeriods(t *testing.T) {
	cl := trace.Cluster{Name: "V100+K80", Groups: []trace.NodeGroup{
		{Count: 1, GPUModel: "V100", GPUs: 1, CPUs: 8, MemoryGB: 64},
		{Count: 1, GPUModel: "K80", GPUs: 1, CPUs: 8, MemoryGB: 64}}}
	jobs := []trace.Job{{ID: "long", Arrival: 0, GPUs: 1, Duration: 100 * policy.DefaultRotationPeriod}}
	res, err := Run(Config{Cluster: cl, Policy: mustPolicy(t, "las+rotate", policy.Config{}), MigrationCost: 30, checkSnapshot: true}, jobs)
	must.NoError(t, err)
	must.NoError(t, res.snapErr)
	moves := res.Jobs[0].Migrations
	must.Between(t, 30, moves, 70)
	must.Eq(t, jobs[0].Duration+30*float64(moves), res.Jobs[0].Finish)
}

// A policy that does not preempt still gets its rotation rounds on a full
// cluster: two long jobs on the two GPUs of a V100 and a K80 under
// fjf+rotate trade places now and then.
func TestRotationRoundsOnAFullCluster(t *testing.T) {
	cl := trace.Cluster{Name: "V100+K80", Groups: []trace.NodeGroup{
		{Count: 1, GPUModel: "V100", GPUs: 1, CPUs: 8, MemoryGB: 64},
		{Count: 1, GPUModel: "K80", GPUs: 1, CPUs: 8, MemoryGB: 64}}}
	jobs := []trace.Job{{ID: "a", GPUs: 1, Duration: 50 * policy.DefaultRotationPeriod}, {ID: "b", GPUs: 1, Duration: 50 * policy.DefaultRotationPeriod}}
	res, err := Run(Config{Cluster: cl, Policy: mustPolicy(t, "fjf+rotate", policy.Config{}), MigrationCost: 30, checkSnapshot: true}, jobs)
	must.NoError(t, err)
	must.NoError(t, res.snapErr)
	must.Greater(t, 5, res.Jobs[0].Migrations)
	must.Eq(t, res.Jobs[0].Migrations, res.Jobs[1].Migrations)
}

// A round decides RoundDelay after the event that calls for it, on the
// service the running jobs have then, as the live planner decides after
// Nomad's events reach it. Under srtf on two GPUs, X (10 s) ends at 10 and
// frees one; B (2 GPUs, 89.5 s) waits. Decided at 10, A (100 s) has 90 s
// left and yields to B; a second later it has 89 s left and keeps its GPU.
func TestARoundDecidesOnWhatItSeesAfterItsDelay(t *testing.T) {
	jobs := []trace.Job{
		{ID: "A", Arrival: 0, GPUs: 1, Duration: 100},
		{ID: "X", Arrival: 0, GPUs: 1, Duration: 10},
		{ID: "B", Arrival: 1, GPUs: 2, Duration: 89.5},
	}
	srtf := func(delay, latency float64) *Result {
		res, err := Run(Config{Cluster: cluster(t, "n1g2"), Policy: mustPolicy(t, "srtf", policy.Config{}), RoundDelay: delay, StartLatency: latency}, jobs)
		must.NoError(t, err)
		return res
	}
	now, later := srtf(0, 0), srtf(1, 0)
	must.Eq(t, 1, now.Jobs[0].Preemptions)
	must.Eq(t, 10.0, now.Jobs[2].Start)
	must.Eq(t, 0, later.Jobs[0].Preemptions, must.Sprint("A had less left than B when the round decided"))
	must.Eq(t, 1.0, later.Jobs[0].Start, must.Sprint("the arrivals at 0 started in a round a second later"))
	must.Eq(t, 101.0, later.Jobs[0].Finish)
	must.Eq(t, 102.0, later.Jobs[2].Start, must.Sprint("B starts in the round A's end calls for, a second after it"))

	// The delay comes out of a start's cost, not on top of it: with 3 s
	// of start latency of which the round's delay is 1, X still ends at 13.
	split := srtf(1, 2)
	must.Eq(t, 13.0, split.Jobs[1].Finish)
	must.Eq(t, 13.0, srtf(0, 3).Jobs[1].Finish)
}

// The events of a round's delay join its round, and a policy's own wake
// (a queue cut) is planned by the planner's timer, at once.
func TestRoundDelayJoinsEventsAndLeavesWakesOnTime(t *testing.T) {
	jobs := []trace.Job{{ID: "A", Arrival: 0, GPUs: 1, Duration: 50}, {ID: "B", Arrival: 2, GPUs: 1, Duration: 50}}
	res, err := Run(Config{Cluster: cluster(t, "n1g4"), Policy: mustPolicy(t, "fifo", policy.Config{}), RoundDelay: 3}, jobs)
	must.NoError(t, err)
	must.Eq(t, 3.0, res.Jobs[0].Start)
	must.Eq(t, 3.0, res.Jobs[1].Start, must.Sprint("B arrived within A's round's delay: not 5"))

	// 2D-LAS preempts A for B when A crosses its queue's cut (812.5 s),
	// whatever the delay: that round is the policy's wake.
	jobs = []trace.Job{{ID: "A", Arrival: 0, GPUs: 4, Duration: 2000}, {ID: "B", Arrival: 100, GPUs: 1, Duration: 500}}
	res, err = Run(Config{Cluster: cluster(t, "n1g4"), Policy: mustPolicy(t, "las", policy.Config{}), RoundDelay: 5}, jobs)
	must.NoError(t, err)
	must.Eq(t, 1, res.Jobs[0].Preemptions)
	must.Eq(t, 5.0+812.5, res.Jobs[1].Start, must.Sprint("A started 5 s late, and crossed its cut 812.5 s later"))

	for _, bad := range []float64{-1, math.Inf(1), math.NaN()} {
		_, err := Run(Config{Cluster: cluster(t, "n1g4"), Policy: mustPolicy(t, "fifo", policy.Config{}), RoundDelay: bad}, jobs)
		must.ErrorContains(t, err, "RoundDelay")
	}
}

// A start that waits for a preemption's stop waits UnblockLatency more
// once the GPUs free: Nomad places an allocation blocked on GPUs only
// after the client reports the stop. A start into GPUs that were free
// waits nothing more.
func TestAStartThatWaitsForAStopWaitsItsUnblock(t *testing.T) {
	jobs := []trace.Job{{ID: "A", Arrival: 0, GPUs: 4, Duration: 2000}, {ID: "B", Arrival: 100, GPUs: 1, Duration: 500}}
	las := func(unblock float64) *Result {
		res, err := Run(Config{Cluster: cluster(t, "n1g4"), Policy: mustPolicy(t, "las", policy.Config{}), StopLatency: 7, UnblockLatency: unblock}, jobs)
		must.NoError(t, err)
		return res
	}
	plain, unblocked := las(0), las(3)
	must.Eq(t, plain.Jobs[1].Finish+3, unblocked.Jobs[1].Finish, must.Sprint("B waited for A's stop, then its unblock"))
	must.Eq(t, 0.0, unblocked.Jobs[0].Start, must.Sprint("A started into free GPUs: no unblock"))
	must.Eq(t, plain.Jobs[0].Finish+3, unblocked.Jobs[0].Finish, must.Sprint("A resumed after B, into free GPUs; only B's 3 s moved it"))
	_, err := Run(Config{Cluster: cluster(t, "n1g4"), Policy: mustPolicy(t, "las", policy.Config{}), UnblockLatency: -2}, jobs)
	must.ErrorContains(t, err, "UnblockLatency")
}

// A run's end is seen CompletionLag later: the job holds its GPUs until
// then, and the round its end calls for decides after it, but its JCT
// ends with its work. A round that preempts a job in its lag finds it
// finished: no preemption, and its JCT as it was.
func TestACompletionIsSeenItsLagLater(t *testing.T) {
	jobs := []trace.Job{{ID: "A", Arrival: 0, GPUs: 4, Duration: 10}, {ID: "B", Arrival: 1, GPUs: 4, Duration: 10}}
	fifo := func(lag, delay float64) *Result {
		res, err := Run(Config{Cluster: cluster(t, "n1g4"), Policy: mustPolicy(t, "fifo", policy.Config{}), CompletionLag: lag, RoundDelay: delay,
			checkSnapshot: true}, jobs)
		must.NoError(t, err)
		must.NoError(t, res.snapErr)
		return res
	}
	res := fifo(5, 1)
	must.Eq(t, 1.0, res.Jobs[0].Start)
	must.Eq(t, 11.0, res.Jobs[0].Finish, must.Sprint("A's JCT ends with its work"))
	must.Eq(t, 17.0, res.Jobs[1].Start, must.Sprint("seen at 16, decided a second later"))
	must.Eq(t, 27.0, res.Jobs[1].Finish)
	must.Eq(t, 12.0, fifo(0, 1).Jobs[1].Start)

	// 2D-LAS with a cut at 100 GPU-s preempts A (400 GPU-s) for B, which
	// arrives in A's lag.
	jobs = []trace.Job{{ID: "A", Arrival: 0, GPUs: 4, Duration: 100}, {ID: "B", Arrival: 102, GPUs: 1, Duration: 10}}
	res, err := Run(Config{Cluster: cluster(t, "n1g4"), Policy: mustPolicy(t, "las", policy.Config{QueueCuts: []float64{100}}),
		CompletionLag: 5, checkSnapshot: true}, jobs)
	must.NoError(t, err)
	must.NoError(t, res.snapErr)
	must.Eq(t, 100.0, res.Jobs[0].Finish, must.Sprint("finished at the end of its work"))
	must.Eq(t, 0, res.Jobs[0].Preemptions)
	must.Eq(t, 102.0, res.Jobs[1].Start)
	res, err = Run(Config{Cluster: cluster(t, "n1g4"), Policy: mustPolicy(t, "las", policy.Config{QueueCuts: []float64{100}}), CompletionLag: 1}, jobs)
	must.NoError(t, err)
	must.Eq(t, 100.0, res.Jobs[0].Finish, must.Sprint("seen before B arrives"))

	for _, bad := range []float64{-1, math.Inf(1), math.NaN()} {
		_, err := Run(Config{Cluster: cluster(t, "n1g4"), Policy: mustPolicy(t, "fifo", policy.Config{}), CompletionLag: bad}, jobs)
		must.ErrorContains(t, err, "CompletionLag")
	}
}
