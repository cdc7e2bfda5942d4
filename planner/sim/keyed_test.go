package sim

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/caravan-gpu/caravan/internal/shareddata"
	"github.com/caravan-gpu/caravan/planner/policy"
	"github.com/caravan-gpu/caravan/planner/trace"
	"github.com/shoenig/test/must"
)

// randomTrace has arrivals at one moment, in bursts and spread out; jobs
// of no GPUs, of the whole cluster and larger; and zero, tiny, round and
// long durations.
func randomTrace(rng *rand.Rand, n, gpus int) []trace.Job {
	var jobs []trace.Job
	t := 0.0
	for k := 0; k < n; k++ {
		switch rng.IntN(4) {
		case 0:
		case 1:
			t += float64(rng.IntN(5))
		default:
			t += rng.ExpFloat64() * 50
		}
		g := []int{1, 1, 1, 2, 3, 4, 8, gpus, gpus + 1}[rng.IntN(9)]
		if rng.IntN(40) == 0 {
			g = 0
		}
		d := math.Exp(rng.NormFloat64()*1.5 + 5)
		switch rng.IntN(6) {
		case 0:
			d = float64(rng.IntN(3))
		case 1:
			d = float64(10 * (1 + rng.IntN(10)))
		}
		jobs = append(jobs, trace.Job{ID: strconv.Itoa(k), Arrival: t, GPUs: g, Duration: d})
	}
	return jobs
}

// bits writes a result with every float as its bits (an unfinished job's
// NaNs included), its rounds and its utilisation series.
func bits(r *Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "rounds %d summary %+v\n", r.Rounds, r.Summary)
	for _, j := range r.Jobs {
		fmt.Fprintf(&b, "%s %x %x %x %x %d %s %v\n", j.ID, math.Float64bits(j.Start), math.Float64bits(j.Finish),
			math.Float64bits(j.JCT), math.Float64bits(j.Queueing), j.Preemptions, j.GPUModel, j.Stops)
	}
	for _, u := range r.Util {
		fmt.Fprintf(&b, "u %x %x\n", math.Float64bits(u.T), math.Float64bits(u.Busy))
	}
	return b.String()
}

// Keyed rounds give the very results of full rounds (Policy.Plan) with
// the other shortcuts kept: every job's figures bit for bit, the summary,
// the number of rounds and the utilisation series. Random traces and
// clusters, srsf, srtf and 2D-LAS and 2D-Gittins with several queue cuts
// (one crossed twice at once, an entry queue above 0), preset sizes and
// their own quantum, start costs, and jobs given in steps when Gavel's
// throughputs are at hand; and predict, whose keys read the history of
// jobs of three to six groups as they finish.
func TestKeyedRoundsAreFullRoundsBitForBit(t *testing.T) {
	var tp *trace.Throughputs
	if path, err := shareddata.Path("gavel/simulation_throughputs.json"); err == nil {
		var err error
		tp, err = trace.LoadThroughputs(path)
		must.NoError(t, err)
	}
	cutSets := [][]float64{nil, {500, 5000}, {0, 300}, {300, 300}, {1e-12}, {100, 200, 400, 800}, {10, 11, 12}}
	names := []string{"srtf", "srsf", "srsf+fastest", "las", "las+fastest", "gittins", "gittins/sizes", "gittins/delta", "predict", "predict"}
	specs := []string{"n1g1", "n1g4", "n2g4", "n3g8", "5xV100", "13xV100"}
	costs := []Config{{}, {StartLatency: 3, StartSpread: 0.5, RunOverhead: 2}, {PreemptionCost: 7},
		{StartLatency: 3, StartSpread: 0.5, RunOverhead: 2, StartJitter: 0.9, JitterSeed: 5},
		{StartLatency: 2, StartSpread: 0.5, RunOverhead: 2, RoundDelay: 1.5, StopLatency: 3, UnblockLatency: 2},
		{RoundDelay: 40}, {RoundDelay: 0.5, CompletionLag: 6, StartLatency: 1}}
	types := []string{"ResNet-18 (batch size 16)", "ResNet-50 (batch size 64)", "Transformer (batch size 16)"}
	for trial := 0; trial < 160; trial++ {
		rng := rand.New(rand.NewPCG(uint64(trial), 77))
		spec, name := specs[rng.IntN(len(specs))], names[rng.IntN(len(names))]
		cl := cluster(t, spec)
		pcfg := policy.Config{QueueCuts: cutSets[rng.IntN(len(cutSets))]}
		switch name {
		case "gittins/sizes":
			var sizes []float64
			for k := 0; k < 1+rng.IntN(50); k++ {
				sizes = append(sizes, math.Exp(rng.NormFloat64()*1.5+5))
			}
			pcfg.JobSizes = policy.NewSizeDistribution(sizes)
		case "gittins/delta":
			pcfg.GittinsDelta = float64(1 + rng.IntN(500))
		}
		cost := costs[rng.IntN(len(costs))]
		jobs := randomTrace(rng, 20+rng.IntN(300), cl.GPUs())
		if name == "predict" {
			// Three to six groups, the last only in the second half, so
			// that new windows appear while jobs wait.
			groups := 3 + rng.IntN(4)
			for k := range jobs {
				g := rng.IntN(groups - 1)
				if k >= len(jobs)/2 && rng.IntN(4) == 0 {
					g = groups - 1
				}
				jobs[k].Group = string(rune('a' + g))
			}
		}
		steps := tp != nil && spec != "n1g1" && rng.IntN(3) == 0
		if steps {
			for k := range jobs {
				if g := jobs[k].GPUs; g >= 1 && g <= 4 && rng.IntN(2) == 0 {
					jobs[k].JobType, jobs[k].Steps, jobs[k].Duration = types[rng.IntN(len(types))], float64(1+rng.IntN(20000)), 0
				}
			}
		}
		label := fmt.Sprintf("trial %d: %s on %s, cuts %v, costs %+v, steps %v", trial, name, spec, pcfg.QueueCuts, cost, steps)
		run := func(noKeyed bool) string {
			cfg := cost
			cfg.Cluster, cfg.Policy, cfg.Throughputs, cfg.KeepUtil, cfg.noKeyed = cl, mustPolicy(t, strings.Split(name, "/")[0], pcfg), tp, true, noKeyed
			res, err := Run(cfg, jobs)
			must.NoError(t, err, must.Sprint(label))
			return bits(res)
		}
		must.EqOp(t, run(true), run(false), must.Sprint(label))
	}
}

// keyedAndFull runs jobs under cfg with keyed rounds, and with full rounds
// where keyed rounds would be (the other shortcuts kept).
func keyedAndFull(t *testing.T, cfg Config, jobs []trace.Job) (with, without *Result) {
	t.Helper()
	with, err := Run(cfg, jobs)
	must.NoError(t, err)
	cfg.noKeyed = true
	without, err = Run(cfg, jobs)
	must.NoError(t, err)
	return with, without
}

// Two jobs cross into queue 1 in one round, the later arrival (Y) having
// started first; an arrival then takes a GPU, and only one of them still
// fits. 2D-LAS ranks jobs new to a queue by arrival: X keeps its GPUs and
// Y is preempted, with the keyed queue as without it.
func TestKeyedRoundsRankCrossersByArrival(t *testing.T) {
	jobs := []trace.Job{
		{ID: "A", Arrival: 0, GPUs: 1, Duration: 502},
		{ID: "B", Arrival: 0, GPUs: 1, Duration: 2},
		{ID: "C", Arrival: 0, GPUs: 1, Duration: 502},
		{ID: "X", Arrival: 1, GPUs: 2, Duration: 10000},
		{ID: "Y", Arrival: 2, GPUs: 1, Duration: 10000},
		{ID: "D", Arrival: 1002, GPUs: 1, Duration: 100},
	}
	with, without := keyedAndFull(t, Config{Cluster: cluster(t, "3xV100"), KeepUtil: true,
		Policy: mustPolicy(t, "las", policy.Config{QueueCuts: []float64{1000}})}, jobs)
	must.Eq(t, 0, with.Jobs[3].Preemptions)
	must.Eq(t, 1, with.Jobs[4].Preemptions)
	must.EqOp(t, bits(without), bits(with))
}

// A job larger than the cluster waits to the end: its queueing time, kept
// in the keyed queue's dense counters while it waits, is given back.
func TestKeyedRoundsReportJobsLeftWaiting(t *testing.T) {
	jobs := []trace.Job{
		{ID: "A", Arrival: 0, GPUs: 8, Duration: 100},
		{ID: "B", Arrival: 10, GPUs: 1, Duration: 50},
		{ID: "C", Arrival: 20, GPUs: 1, Duration: 30},
	}
	for _, name := range []string{"srsf", "las", "gittins"} {
		with, without := keyedAndFull(t, Config{Cluster: cluster(t, "n1g4"), Policy: mustPolicy(t, name, policy.Config{})}, jobs)
		must.Eq(t, 1, with.Summary.Unfinished, must.Sprint(name))
		must.Eq(t, 60.0, with.Jobs[0].Queueing, must.Sprint(name)) // settled when B finishes, the last event
		must.EqOp(t, bits(without), bits(with), must.Sprint(name))
	}
}

// A job of the last queue is settled lazily, at the very times a round or
// the arrival shortcut would have settled it: here the shortcut starts
// short jobs beside it at odd moments, and a wide arrival then preempts
// it. Its remaining work, and so its finish, match full rounds bit for
// bit only if each of those settles is replayed.
func TestTailSettlesWhenRoundsWould(t *testing.T) {
	jobs := []trace.Job{{ID: "A", Arrival: 0, GPUs: 1, Duration: 1000}}
	for k, at := range []float64{10.1, 20.3, 30.7, 40.9, 50.3, 61.7, 70.9} {
		jobs = append(jobs, trace.Job{ID: "B" + strconv.Itoa(k), Arrival: at, GPUs: 1, Duration: 0.37})
	}
	jobs = append(jobs, trace.Job{ID: "C", Arrival: 100.1, GPUs: 2, Duration: 5.3})
	with, without := keyedAndFull(t, Config{Cluster: cluster(t, "n1g2"), KeepUtil: true,
		Policy: mustPolicy(t, "las", policy.Config{QueueCuts: []float64{1}})}, jobs)
	must.Eq(t, 1, with.Jobs[0].Preemptions)
	must.EqOp(t, bits(without), bits(with))
}

// TestKeyPastFullMatchesASortedScan checks the weighted selection against
// sorting the keys and adding up their GPUs in order, on keys with many
// ties and limits below, within and past their total.
func TestKeyPastFullMatchesASortedScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for trial := 0; trial < 2000; trial++ {
		keys := make([]rankGPUs, rng.IntN(40))
		total := 0
		for k := range keys {
			keys[k] = rankGPUs{k2: -float64(rng.IntN(1 + rng.IntN(12))), gpus: int32(1 + rng.IntN(8))}
			total += int(keys[k].gpus)
		}
		limit := rng.IntN(total+10) - 5
		sorted := slices.Clone(keys)
		slices.SortStableFunc(sorted, func(a, b rankGPUs) int { return cmp.Compare(a.k2, b.k2) })
		wantKey, wantOK, held := 0.0, false, 0
		for k := range sorted {
			if held+int(sorted[k].gpus) > limit {
				// The first key past limit; ok when keys below it hold any.
				below := 0
				for _, s := range sorted {
					if s.k2 < sorted[k].k2 {
						below += int(s.gpus)
					}
				}
				wantKey, wantOK = sorted[k].k2, below > 0
				break
			}
			held += int(sorted[k].gpus)
		}
		gotKey, gotOK := keyPastFull(keys, limit)
		must.Eq(t, wantOK, gotOK, must.Sprintf("trial %d: keys %v limit %d", trial, sorted, limit))
		if wantOK {
			must.Eq(t, wantKey, gotKey, must.Sprintf("trial %d: keys %v limit %d", trial, sorted, limit))
		}
	}
}
