package policy

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/shoenig/test/must"
)

// The blind earliest placer expects a job to run as long again as it has
// (at least a Gavel round), on its profile's speeds: a job that has run
// long waits for a fast GPU that frees soon, a fresh one takes the slow
// GPU free now.
func TestEarliestBlindWaitsForAFastGPUOnlyForAJobThatHasRunLong(t *testing.T) {
	cases := []struct {
		name     string
		busyRan  float64 // run time so far of the job on the V100
		nextRan  float64 // run time so far of the waiting job
		runs     bool
		model    string
		byReason string
	}{
		// 360 s on the K80 now against 36 s on the V100 once it frees, at
		// 3,600: the K80.
		{"fresh, the V100 busy for an hour more", 3600, 0, true, "K80", "starts on K80"},
		// 7,200 s on the K80 against 720 s on the V100 from 600 s: waits.
		{"ran two hours, the V100 free in ten minutes", 600, 7200, false, "V100", "waits for a V100"},
		// 7,200 s on the K80 against 720 s from 7,200 s: the K80.
		{"ran two hours, the V100 busy two hours more", 7200, 7200, true, "K80", "starts on K80"},
		// A fresh running job is expected to run a round (360 s) more.
		{"ran two hours, the V100's job just started", 0, 7200, false, "V100", "waits for a V100"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			busy := onModel("busy", "V100", 1e9, steep) // remaining work a blind plan must not read
			busy.Executed = tc.busyRan
			next := job("next", 1, 1)
			next.Executed, next.Throughput, next.RemainingWork = tc.nextRan, steep, 1
			s := &Snapshot{Now: 10, Nodes: alloxCluster("V100", "K80"), Jobs: []Job{busy, next}}
			r := plan(t, "fjf+earliest-blind", Config{}, s)
			d := r.Decisions[1]
			must.Eq(t, tc.runs, d.Run)
			must.Eq(t, tc.model, d.GPUModel)
			must.StrContains(t, d.Reason, tc.byReason)
		})
	}
}

// blindTimeOn scales the time a job has run by its speed where it runs
// (or last ran) against the model asked about; a job that never ran is
// taken to have run at its slowest.
func TestBlindTimeOn(t *testing.T) {
	j := job("a", 0, 1)
	j.Throughput = map[string]float64{"V100": 10, "P100": 5, "K80": 1}
	must.Eq(t, 360.0, j.blindTimeOn360("", "K80")) // never ran: a round at its slowest
	must.Eq(t, 36.0, j.blindTimeOn360("", "V100"))
	must.Eq(t, 720.0, j.blindTimeOn360("V100", "P100")) // a round at least, at its V100 speed
	j.Executed = 1000
	must.Eq(t, 500.0, j.blindTimeOn360("P100", "V100"))
	must.Eq(t, 5000.0, j.blindTimeOn360("P100", "K80"))
	must.Eq(t, 5000.0, j.blindTimeOn360("P100", "T4")) // unprofiled: at its slowest rate
	j.Throughput = nil
	must.Eq(t, 1000.0, j.blindTimeOn360("P100", "V100")) // no profile: every model alike
}

// blindTimeOn360 is blindTimeOn with Gavel's round as the horizon.
func (j *Job) blindTimeOn360(from, to string) float64 { return j.blindTimeOn(from, to, 360) }

// The least run time a blind step expects a job to have left is the
// rotation period (Config.RotationPeriod, a Gavel round by default), which
// a replay scales with its time scale: a job that has run 200 s, at its
// K80 speed, expects 360 s more under the default, and takes the K80 now
// rather than wait 370 s for the V100; with a 60 s period it expects 200
// s, and the V100, whose job is expected to end at 70 s, is worth the
// wait.
func TestEarliestBlindHorizonIsTheRotationPeriod(t *testing.T) {
	for _, tc := range []struct {
		period float64
		runs   bool
		model  string
	}{{0, true, "K80"}, {360, true, "K80"}, {60, false, "V100"}} {
		t.Run(fmt.Sprint(tc.period), func(t *testing.T) {
			busy := onModel("busy", "V100", 1e9, steep)
			next := job("next", 1, 1)
			next.Executed, next.Throughput = 200, steep
			s := &Snapshot{Now: 10, Nodes: alloxCluster("V100", "K80"), Jobs: []Job{busy, next}}
			r := plan(t, "fjf+earliest-blind", Config{RotationPeriod: tc.period}, s)
			must.Eq(t, tc.runs, r.Decisions[1].Run)
			must.Eq(t, tc.model, r.Decisions[1].GPUModel)
		})
	}
}

// A waiting job is guessed from the model it last ran on (Job.GPUModel),
// and a running job from the model it holds, read from its placement
// where its GPUModel is not given: a job that ran an hour on a V100, ten
// times its K80 speed, is expected to need an hour more there, not a
// tenth of one.
func TestEarliestBlindReadsWhereAJobRan(t *testing.T) {
	cases := []struct {
		name    string
		lastRan string // the waiting job's last model
		runs    bool
		model   string
	}{
		// 36,000 s on the K80 against 10,000 + 3,600 s on the V100.
		{"ran an hour on a V100: waits for it", "V100", false, "V100"},
		// Taken to have run at its K80 speed: 3,600 s there now against
		// 10,000 + 360 s on the V100.
		{"never told where it ran: the K80 now", "", true, "K80"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			busy := job("busy", 0, 1)
			busy.State, busy.Executed, busy.Throughput = Running, 10000, steep
			busy.Placement = []Slot{{Node: 0, GPU: 0, Lane: -1}} // the V100, told only by where it is
			next := job("next", 1, 1)
			next.Executed, next.Throughput, next.GPUModel = 3600, steep, tc.lastRan
			s := &Snapshot{Now: 10, Nodes: alloxCluster("V100", "K80"), Jobs: []Job{busy, next}}
			r := plan(t, "fjf+earliest-blind", Config{}, s)
			must.Eq(t, tc.runs, r.Decisions[1].Run)
			must.Eq(t, tc.model, r.Decisions[1].GPUModel)
		})
	}
}

// On random clusters and queues the blind placer decides the same
// whatever the jobs' remaining work and time say, while the clairvoyant
// one, on the same snapshots, does not always: the remaining work is
// there to read, and only the blind one leaves it.
func TestEarliestBlindReadsNoRemainingWork(t *testing.T) {
	rng := rand.New(rand.NewPCG(14, 26))
	models := []string{"V100", "P100", "K80"}
	clairvoyantDiffers := 0
	for trial := range 300 {
		var gpus []string
		for range 2 + rng.IntN(8) {
			gpus = append(gpus, models[rng.IntN(len(models))])
		}
		s := &Snapshot{Now: 1000, Nodes: alloxCluster(gpus...)}
		free := len(gpus)
		for i := range 2 + rng.IntN(10) {
			j := job(fmt.Sprint("j", i), float64(i), 1+rng.IntN(2))
			j.Throughput = map[string]float64{"V100": 4 + rng.Float64()*6, "P100": 2 + rng.Float64()*2, "K80": 0.5 + rng.Float64()}
			j.Executed = float64(rng.IntN(4)) * rng.Float64() * 5000
			if j.Executed > 0 && free >= j.GPUs && rng.IntN(2) == 0 {
				j.State, j.GPUModel = Running, gpus[len(gpus)-free]
				if rng.IntN(4) > 0 {
					// Running GPUs of one model, as placed.
					for k := len(gpus) - free; k < len(gpus)-free+j.GPUs; k++ {
						gpus[k] = j.GPUModel
					}
				}
				free -= j.GPUs
			}
			s.Jobs = append(s.Jobs, j)
		}
		s.Nodes = alloxCluster(gpus...)
		decide := func(name string, work func(i int) float64) []string {
			c := *s
			c.Jobs = append([]Job(nil), s.Jobs...)
			for i := range c.Jobs {
				c.Jobs[i].RemainingWork = work(i)
				c.Jobs[i].Remaining = work(i) / c.Jobs[i].Throughput["V100"]
			}
			r := plan(t, name, Config{}, &c)
			var out []string
			for i, d := range r.Decisions {
				out = append(out, fmt.Sprintf("%s run=%v model=%s migrate=%v slots=%v %s", c.Jobs[i].ID, d.Run, d.GPUModel, d.Migrate, d.Slots, d.Reason))
			}
			return out
		}
		short := func(i int) float64 { return float64(i % 3) } // 0: unknown, as a live planner may give
		long := func(i int) float64 { return 1e6 * float64(1+(i*7)%5) }
		for _, name := range []string{"las+earliest-blind", "las+earliest-blind+migrate-blind"} {
			must.Eq(t, decide(name, short), decide(name, long), must.Sprintf("trial %d, %s", trial, name))
		}
		if fmt.Sprint(decide("las+earliest", short)) != fmt.Sprint(decide("las+earliest", long)) {
			clairvoyantDiffers++
		}
	}
	must.Positive(t, clairvoyantDiffers)
	t.Logf("the clairvoyant placer decided otherwise in %d of 300 trials", clairvoyantDiffers)
}
