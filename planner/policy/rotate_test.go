package policy

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/shoenig/test/must"
)

// rotationCluster is 8 V100s, 4 P100s and 4 K80s, whole GPUs.
func rotationCluster() []Node {
	ns := append(append(nodes("V100", 1, 8), nodes("P100", 1, 4)...), nodes("K80", 1, 4)...)
	return wholeGPUs(ns)
}

// One running job, drawn once a period for 4,000 periods, runs on each
// model about as often as the model has GPUs (8:4:4), and moves only when
// its draw changes.
func TestRotationSpreadsAJobOverTheModelsByTheirGPUs(t *testing.T) {
	p, err := Parse("las+rotate", Config{})
	must.NoError(t, err)
	must.True(t, p.ReplacesRunning())
	j := job("long", 0, 1)
	j.State, j.GPUModel, j.Placed = Running, "K80", -1 // since before the first period
	on := map[string]int{}
	moves := 0
	const periods = 4000
	for k := range periods {
		now := float64(k)*DefaultRotationPeriod + 1
		s := &Snapshot{Nodes: rotationCluster(), Now: now, Jobs: []Job{j}}
		r := p.Plan(s, nil)
		d := r.Decisions[0]
		must.True(t, d.Run)
		must.True(t, d.Renewed, must.Sprintf("period %d", k))
		must.Eq(t, d.GPUModel != j.GPUModel, d.Migrate)
		if d.Migrate {
			moves++
		}
		must.Eq(t, DefaultRotationPeriod-1, r.Wake)
		on[d.GPUModel]++
		j.GPUModel, j.Placed = d.GPUModel, now
	}
	for model, want := range map[string]float64{"V100": 0.5, "P100": 0.25, "K80": 0.25} {
		got := float64(on[model]) / periods
		must.Less(t, 0.03, math.Abs(got-want), must.Sprintf("%s: %.3f of the periods, want %.2f", model, got, want))
	}
	// A draw independent of the last moves with chance 1 − (½² + ¼² + ¼²).
	must.Less(t, 0.04, math.Abs(float64(moves)/periods-0.625))
}

// Within a period a job placed since it began keeps its model; a job
// running since before it is drawn again, once: the round after, renewed,
// it keeps its model too.
func TestRotationDrawsEachJobOnceAPeriod(t *testing.T) {
	p, err := Parse("las+rotate", Config{})
	must.NoError(t, err)
	moved := 0
	for k := range 200 {
		from := float64(k) * DefaultRotationPeriod
		fresh := job("fresh", 0, 1)
		fresh.State, fresh.GPUModel, fresh.Placed = Running, "K80", from+5
		old := job(fmt.Sprint("old", k), 0, 1)
		old.State, old.GPUModel, old.Placed = Running, "K80", from-5
		s := &Snapshot{Nodes: rotationCluster(), Now: from + 10, Jobs: []Job{fresh, old}}
		r := p.Plan(s, nil)
		must.Eq(t, "K80", r.Decisions[0].GPUModel)
		must.False(t, r.Decisions[0].Migrate)
		must.False(t, r.Decisions[0].Renewed)
		must.True(t, r.Decisions[1].Renewed)
		if r.Decisions[1].Migrate {
			moved++
		}
		// Renewed, the old job is placed at the round; the next round in
		// the period leaves it.
		s.Jobs[1].GPUModel, s.Jobs[1].Placed = r.Decisions[1].GPUModel, s.Now
		s.Now += 100
		again := p.Plan(s, nil)
		must.Eq(t, s.Jobs[1].GPUModel, again.Decisions[1].GPUModel)
		must.False(t, again.Decisions[1].Migrate)
		must.False(t, again.Decisions[1].Renewed)
	}
	must.Greater(t, 50, moved)
}

// Random clusters and queues: the jobs that run never hold more GPUs of a
// model than it has, a job limited to some models stays on them, and the
// same Snapshot gives the same round.
func TestRotationKeepsEveryModelWithinItsGPUs(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 2))
	p, err := Parse("las+rotate", Config{})
	must.NoError(t, err)
	models := []string{"V100", "P100", "K80"}
	for trial := range 500 {
		var ns []Node
		total := map[string]int{}
		for _, m := range models {
			n := rng.IntN(3)
			ns = append(ns, wholeGPUs(nodes(m, n, 4))...)
			total[m] += 4 * n
		}
		if len(ns) == 0 {
			continue
		}
		s := &Snapshot{Nodes: ns, Now: float64(rng.IntN(5000))}
		used := map[string]int{}
		for k := range 3 + rng.IntN(20) {
			j := job(fmt.Sprint(k), float64(k), []int{1, 1, 2, 4}[rng.IntN(4)])
			m := models[rng.IntN(len(models))]
			if rng.IntN(2) == 0 && used[m]+j.GPUs <= total[m] {
				j.State, j.GPUModel, j.Placed = Running, m, float64(rng.IntN(5000))
				used[m] += j.GPUs
			}
			if rng.IntN(6) == 0 {
				j.Models = []string{m}
			}
			s.Jobs = append(s.Jobs, j)
		}
		r := p.Plan(s, nil)
		held := map[string]int{}
		for i, d := range r.Decisions {
			if !d.Run {
				continue
			}
			held[d.GPUModel] += s.Jobs[i].GPUs
			if len(s.Jobs[i].Models) > 0 {
				must.Eq(t, s.Jobs[i].Models[0], d.GPUModel)
			}
			must.Eq(t, d.Migrate, s.Jobs[i].State == Running && d.GPUModel != s.Jobs[i].GPUModel)
		}
		for m, g := range held {
			must.LessEq(t, total[m], g, must.Sprintf("trial %d: %s", trial, m))
		}
		again := p.Plan(s, nil)
		for i := range r.Decisions {
			must.Eq(t, r.Decisions[i].GPUModel, again.Decisions[i].GPUModel)
			must.Eq(t, r.Decisions[i].Run, again.Decisions[i].Run)
		}
	}
}

func TestRotationExcludesMigrationAndSizing(t *testing.T) {
	for _, name := range []string{"las+rotate+migrate", "las+migrate+rotate", "las+rotate+migrate-blind", "las+migrate-blind+migrate"} {
		_, err := Parse(name, Config{})
		must.ErrorContains(t, err, "take one")
	}
	sens, err := NewSensitivity([]SensitivityRow{{Model: "m", GPUs: 1, CPUsPerGPU: 3, MemGBPerGPU: 62.5, Throughput: 1}})
	must.NoError(t, err)
	_, err = Parse("fjf+rotate+synergy", Config{Sensitivity: sens})
	must.ErrorContains(t, err, "take one")
	p, err := Parse("las+migrate", Config{})
	must.NoError(t, err)
	must.False(t, p.ReplacesRunning())
	p, err = Parse("fjf+count+synergy", Config{Sensitivity: sens, SynergyLease: 300})
	must.NoError(t, err)
	must.True(t, p.KeepsLease())
	p, err = Parse("las+rotate", Config{})
	must.NoError(t, err)
	must.False(t, p.KeepsLease())
}

// GPUs that running lane jobs hold are not free to the draw: a 2-GPU job
// on the K80s never lands on V100s whose lanes are all taken.
func TestRotationCountsLaneGPUs(t *testing.T) {
	p, err := Parse("las+rotate", Config{})
	must.NoError(t, err)
	ns := append(nodes("V100", 1, 2), wholeGPUs(nodes("K80", 1, 2))...) // the V100s have 2 lanes each
	var jobs []Job
	for g := range 2 {
		for lane := range 2 {
			j := job(fmt.Sprint("lane", g, lane), 0, 1)
			j.State, j.GPUModel, j.Placement, j.Placed = Running, "V100", []Slot{{Node: 0, GPU: g, Lane: lane}}, -1
			jobs = append(jobs, j)
		}
	}
	wide := job("wide", 0, 2)
	wide.State, wide.GPUModel, wide.Placed = Running, "K80", -1
	jobs = append(jobs, wide)
	for k := range 200 {
		s := &Snapshot{Nodes: ns, Now: float64(k)*DefaultRotationPeriod + 1, Jobs: jobs}
		r := p.Plan(s, nil)
		d := r.Decisions[len(jobs)-1]
		must.True(t, d.Run)
		must.Eq(t, "K80", d.GPUModel, must.Sprintf("period %d", k))
		must.False(t, d.Migrate)
	}
}

// A running job placed on concrete GPUs (live, every running job is) is
// drawn too; when it moves it gives up its Slots for the caller to find
// GPUs of the new model.
func TestRotationMovesAJobThatHoldsGPUs(t *testing.T) {
	p, err := Parse("las+rotate", Config{})
	must.NoError(t, err)
	moves := 0
	for k := range 200 {
		j := job("placed", 0, 1)
		j.State, j.GPUModel, j.Placed = Running, "K80", -1
		j.Placement = []Slot{{Node: 2, GPU: 0, Lane: -1}}
		s := &Snapshot{Nodes: rotationCluster(), Now: float64(k)*DefaultRotationPeriod + 1, Jobs: []Job{j}}
		d := p.Plan(s, nil).Decisions[0]
		if d.Migrate {
			moves++
			must.Nil(t, d.Slots)
		} else {
			must.Eq(t, j.Placement, d.Slots)
		}
	}
	must.Between(t, 100, moves, 200)
}
