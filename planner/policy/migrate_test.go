package policy

import (
	"math"
	"testing"

	"github.com/shoenig/test/must"
)

// migrationCluster is one node of fast GPUs and one of slow ones, cut into
// lanes lanes each (0 or 1: whole GPUs).
func migrationCluster(fast, slow, lanes int) []Node {
	ns := append(nodes("V100", 1, fast), nodes("K80", 1, slow)...)
	for n := range ns {
		for g := range ns[n].GPUs {
			ns[n].GPUs[g].Lanes = lanes
		}
	}
	return ns
}

// onModel is a running one-GPU job on model with work left, in steps,
// and its steps/s on each model.
func onModel(id, model string, work float64, rates map[string]float64) Job {
	j := job(id, 0, 1)
	j.State, j.GPUModel = Running, model
	j.RemainingWork, j.Throughput = work, rates
	j.Remaining = work / max(rates["V100"], rates["K80"])
	return j
}

// steep runs ten times faster on a V100; flat barely cares.
var (
	steep = map[string]float64{"V100": 10, "K80": 1}
	flat  = map[string]float64{"V100": 10, "K80": 9}
)

func TestMigration(t *testing.T) {
	cases := []struct {
		name    string
		fast    int // V100s in the cluster
		lanes   int // per GPU
		jobs    []Job
		order   string
		want    map[string]string // job → model it runs on after the round
		migrate []string          // the running jobs that move
	}{{
		name: "a job on a slow GPU moves to a fast one that is free",
		fast: 1,
		jobs: []Job{onModel("a", "K80", 1e5, steep)},
		want: map[string]string{"a": "V100"}, migrate: []string{"a"},
	}, {
		name: "not when less work is left than the move costs",
		fast: 1,
		// 20 s left on the K80; the move costs 30 s.
		jobs: []Job{onModel("a", "K80", 20, steep)},
		want: map[string]string{"a": "K80"},
	}, {
		name: "not when the move only pays back its cost",
		fast: 1,
		// 50 s on the V100 and the 30 s move against 100 s on the K80
		// saves 20 s, for 30 s of a V100's work lost: not worth it.
		jobs: []Job{onModel("a", "K80", 100, map[string]float64{"V100": 2, "K80": 1})},
		want: map[string]string{"a": "K80"},
	}, {
		name: "a job pinned to its model stays",
		fast: 1,
		jobs: []Job{func() Job { j := onModel("a", "K80", 1e5, steep); j.Models = []string{"K80"}; return j }()},
		want: map[string]string{"a": "K80"},
	}, {
		name: "a job with no throughput per model stays",
		fast: 1,
		jobs: []Job{func() Job { j := onModel("a", "K80", 1e5, steep); j.Throughput = nil; return j }()},
		want: map[string]string{"a": "K80"},
	}, {
		name: "the job that gains most from the fast GPU gets it: the two swap",
		fast: 1,
		jobs: []Job{onModel("steep", "K80", 1e5, steep), onModel("flat", "V100", 1e5, flat)},
		want: map[string]string{"steep": "V100", "flat": "K80"}, migrate: []string{"steep", "flat"},
	}, {
		name: "a job that starts takes the slow GPU instead, and costs nothing to move",
		fast: 1,
		jobs: []Job{onModel("steep", "K80", 1e5, steep), func() Job {
			j := job("new", 1, 1)
			j.RemainingWork, j.Throughput, j.Remaining = 1e5, flat, 1e4
			return j
		}()},
		order: "fjf+fastest+migrate",
		want:  map[string]string{"steep": "V100", "new": "K80"}, migrate: []string{"steep"},
	}, {
		name: "a job that starts on a lane holds its GPU",
		fast: 1, lanes: 2,
		jobs: []Job{onModel("steep", "K80", 1e5, steep), func() Job {
			j := job("new", 1, 1)
			j.RemainingWork, j.Throughput, j.Remaining = 1e5, flat, 1e4
			return j
		}()},
		order: "fjf+fastest+migrate",
		want:  map[string]string{"steep": "K80", "new": "V100"},
	}, {
		name: "equal speedups: no swap for nothing",
		fast: 1,
		jobs: []Job{onModel("a", "K80", 1e5, steep), onModel("b", "V100", 1e5, map[string]float64{"V100": 10, "K80": 1.05})},
		want: map[string]string{"a": "K80", "b": "V100"},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := &Snapshot{Now: 10, Nodes: migrationCluster(tc.fast, 1, tc.lanes), Jobs: tc.jobs}
			order := tc.order
			if order == "" {
				order = "fjf+migrate"
			}
			r := plan(t, order, Config{}, s)
			got, moved := map[string]string{}, []string(nil)
			for i, d := range r.Decisions {
				must.True(t, d.Run, must.Sprintf("%s runs", s.Jobs[i].ID))
				got[s.Jobs[i].ID] = d.GPUModel
				if d.Migrate {
					moved = append(moved, s.Jobs[i].ID)
					must.Eq(t, Running, s.Jobs[i].State, must.Sprint("only running jobs migrate"))
					must.StrContains(t, d.Reason, "migrates to "+d.GPUModel)
				}
			}
			must.Eq(t, tc.want, got)
			must.SliceContainsAll(t, tc.migrate, moved)
		})
	}
}

// TestMigrationSettles plays rounds in which the decisions are carried out
// and the jobs progress, and a job arrives every round that would gain a
// little more on a V100 than a job already there: once the first round has
// put the jobs where they gain most, no running job moves again for a gain
// that small, and none goes back where it came from.
func TestMigrationSettles(t *testing.T) {
	var jobs []Job
	rates := []map[string]float64{steep, flat, {"V100": 10, "K80": 4}, {"V100": 10, "K80": 6}, {"V100": 10, "K80": 5.5}}
	for i, r := range rates {
		jobs = append(jobs, onModel(string(rune('a'+i)), "K80", 1e6, r))
	}
	for i := range jobs[:2] {
		jobs[i].GPUModel = "V100"
	}
	s := &Snapshot{Nodes: migrationCluster(2, 8, 0), Jobs: jobs}
	p, err := Parse("fjf+migrate", Config{})
	must.NoError(t, err)
	moves := map[string][]string{}
	perRound := make([]int, 6)
	for round := range perRound {
		s.Now = float64(round) * 360
		if round > 0 {
			// 3.9, 3.8, ... steps/s on a K80: each gains 0.01 to 0.05 of a
			// V100 more than c there.
			newcomer := job(string(rune('A'+round)), s.Now, 1)
			newcomer.RemainingWork, newcomer.Remaining = 1e6, 1e5
			newcomer.Throughput = map[string]float64{"V100": 10, "K80": 4 - 0.1*float64(round)}
			s.Jobs = append(s.Jobs, newcomer)
		}
		r := p.Plan(s, nil)
		for i, d := range r.Decisions {
			j := &s.Jobs[i]
			must.True(t, d.Run)
			if d.Migrate {
				perRound[round]++
				moves[j.ID] = append(moves[j.ID], d.GPUModel)
			}
			j.State, j.GPUModel = Running, d.GPUModel
			j.PrevQueue, j.PrevRank = d.Queue, d.Rank
			j.RemainingWork -= 360 * j.Throughput[j.GPUModel]
		}
	}
	// The flat job gives its V100 to the steepest job on a K80, in the
	// first round; the rest are near equals and stay.
	must.Eq(t, []int{2, 0, 0, 0, 0, 0}, perRound)
	must.Eq(t, map[string][]string{"b": {"K80"}, "c": {"V100"}}, moves)
}

// A blind migration decides the same whatever the remaining work and
// time say (a live planner knows neither), and moves on throughputs and
// the time a job has run.
func TestBlindMigrationReadsNoRemainingWork(t *testing.T) {
	cases := []struct {
		name     string
		executed float64 // the running job's run time so far
		rates    map[string]float64
		moves    bool
	}{
		// Expected to run 360 s more on the K80, 36 s on the V100: the 30 s
		// move and the damping take more than it saves.
		{"just started, ten times faster on the free V100: not yet", 0, steep, false},
		{"run for an hour, ten times faster there", 3600, steep, true},
		{"run for a day, ten times faster there", 86400, steep, true},
		{"barely faster there: damped", 86400, flat, false},
		// 360 s expected on the K80 against 180 s and the 30 s move.
		{"just started, twice as fast there", 0, map[string]float64{"V100": 2, "K80": 1}, true},
		{"run for a day, a tenth faster there", 86400, map[string]float64{"V100": 1.1, "K80": 1}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var models []string
			for _, work := range []float64{1, 20, 1e9} { // 1: a live planner's unit, unknown
				j := onModel("a", "K80", work, tc.rates)
				j.Executed = tc.executed
				j.Remaining = work / 7
				s := &Snapshot{Now: 10, Nodes: migrationCluster(1, 1, 0), Jobs: []Job{j}}
				r := plan(t, "fjf+migrate-blind", Config{}, s)
				d := r.Decisions[0]
				must.Eq(t, d.GPUModel == "V100", d.Migrate)
				models = append(models, d.GPUModel)
			}
			must.Eq(t, []string{models[0], models[0], models[0]}, models)
			must.Eq(t, tc.moves, models[0] == "V100")
		})
	}
}

// The blind migration's horizon is the rotation period: a job that has
// just started on a K80, ten times faster on the free V100, is not worth
// a 30 s move when expected to run a 360 s round more (the default), and
// is when expected to run an hour more.
func TestBlindMigrationHorizonIsTheRotationPeriod(t *testing.T) {
	for _, tc := range []struct {
		period float64
		moves  bool
	}{{0, false}, {360, false}, {3600, true}} {
		j := onModel("a", "K80", 1, steep)
		s := &Snapshot{Now: 10, Nodes: migrationCluster(1, 1, 0), Jobs: []Job{j}}
		r := plan(t, "fjf+migrate-blind", Config{RotationPeriod: tc.period}, s)
		must.Eq(t, tc.moves, r.Decisions[0].Migrate, must.Sprint("period ", tc.period))
	}
	for _, bad := range []float64{-1, math.NaN(), math.Inf(1)} {
		_, err := Parse("las+migrate-blind", Config{RotationPeriod: bad})
		must.ErrorContains(t, err, "rotation period")
	}
}

// A blind migration wakes at the end of its horizon's period while a job
// runs slower than it could: its guess grows as the job runs, so the
// move it is not worth now may be later, with nothing else happening.
func TestBlindMigrationWakesWhileAJobCouldRunFaster(t *testing.T) {
	for _, tc := range []struct {
		name, policy, on string
		rates            map[string]float64
		period           float64
		models           []string // the job's allowed models
		v100Taken        bool     // a job that gains nothing by moving holds the V100
		wake             float64
	}{
		{"on the K80, the V100 ten times faster", "fjf+migrate-blind", "K80", steep, 0, nil, false, 360 - 10},
		{"a little faster, an hour's period", "fjf+migrate-blind", "K80", flat, 3600, nil, false, 3600 - 10},
		{"on the V100 already", "fjf+migrate-blind", "V100", steep, 0, nil, false, math.Inf(1)},
		{"the V100 taken: no room to move to", "fjf+migrate-blind", "K80", steep, 0, nil, true, math.Inf(1)},
		{"limited to the K80", "fjf+migrate-blind", "K80", steep, 0, []string{"K80"}, false, math.Inf(1)},
		{"clairvoyant: its remaining work does not grow", "fjf+migrate", "K80", flat, 0, nil, false, math.Inf(1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := onModel("a", tc.on, 1, tc.rates)
			j.Models = tc.models
			s := &Snapshot{Now: 10, Nodes: migrationCluster(1, 1, 0), Jobs: []Job{j}}
			if tc.v100Taken {
				s.Jobs = append(s.Jobs, onModel("b", "V100", 1, map[string]float64{"V100": 1, "K80": 1}))
			}
			r := plan(t, tc.policy, Config{RotationPeriod: tc.period}, s)
			must.False(t, r.Decisions[0].Migrate)
			must.Eq(t, tc.wake, r.Wake)
		})
	}
}
