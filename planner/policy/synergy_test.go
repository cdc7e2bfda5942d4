package policy

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/shoenig/test/must"
)

// synergyTable profiles two models on one GPU: "cpu" trains in proportion
// to its CPUs up to 6 per GPU (best: 6 CPUs), "flat" does not care (best:
// 1 CPU); memory does not matter to either (best: 62.5 GB).
func synergyTable(t *testing.T) *Sensitivity {
	t.Helper()
	var rows []SensitivityRow
	for _, c := range []float64{1, 3, 6} {
		for _, m := range []float64{62.5, 125} {
			rows = append(rows, SensitivityRow{"cpu", 1, c, m, c / 3}, SensitivityRow{"flat", 1, c, m, 1})
		}
	}
	sens, err := NewSensitivity(rows)
	must.NoError(t, err)
	return sens
}

// synergyNode is a node of gpus V100s with cpus cores and 125 GB per GPU.
func synergyNode(gpus int, cpus float64) Node {
	n := Node{ID: "n", CPUs: cpus, MemoryGB: 125 * float64(gpus), Healthy: true}
	for range gpus {
		n.GPUs = append(n.GPUs, GPU{Model: "V100", Healthy: true})
	}
	return n
}

func synergyJob(id string, arrival float64, gpus int, model string) Job {
	j := job(id, arrival, gpus)
	j.Model = model
	return j
}

type sized struct {
	run     bool
	cpus    float64
	speedup float64
}

func sizes(s *Snapshot, r *Result) map[string]sized {
	out := map[string]sized{}
	for i, d := range r.Decisions {
		out[s.Jobs[i].ID] = sized{d.Run, d.CPUs, math.Round(d.Speedup*1000) / 1000}
	}
	return out
}

// One node, 4 GPUs, 12 cores (3 per GPU): two cpu jobs and two flat ones
// arrive in that order.
//
// GREEDY gives each its demand or skips it: the cpu jobs take 6 cores
// each, and the flat jobs, whose 1 core no longer fits, wait. Before,
// GREEDY ran them on 0 cores and the simulator credited them with the
// throughput of the lowest profiled point.
//
// TUNE: the cpu jobs take 6 each; the first flat job's core does not fit,
// so the job above its share with the most cores per GPU (the first cpu
// job) drops to its share (3), and both flat jobs get their core.
func TestSynergyGreedySkipsAndTuneShrinks(t *testing.T) {
	cases := []struct {
		policy string
		want   map[string]sized
	}{
		{"fjf+count+synergy-greedy", map[string]sized{
			"cpu0": {true, 6, 2}, "cpu1": {true, 6, 2}, "flat2": {false, 0, 1}, "flat3": {false, 0, 1}}},
		{"fjf+count+synergy-tune", map[string]sized{
			"cpu0": {true, 3, 1}, "cpu1": {true, 6, 2}, "flat2": {true, 1, 1}, "flat3": {true, 1, 1}}},
	}
	for _, tc := range cases {
		t.Run(tc.policy, func(t *testing.T) {
			s := &Snapshot{Nodes: []Node{synergyNode(4, 12)}}
			for i, m := range []string{"cpu", "cpu", "flat", "flat"} {
				s.Jobs = append(s.Jobs, synergyJob(fmt.Sprint(m, i), float64(i), 1, m))
			}
			r := plan(t, tc.policy, Config{Sensitivity: synergyTable(t)}, s)
			must.Eq(t, tc.want, sizes(s, r))
			if tc.policy == "fjf+count+synergy-greedy" {
				must.StrContains(t, r.Decisions[2].Reason, "skipped")
			}
		})
	}
}

// Host resources count per server, not pooled over a model's servers: two
// nodes of 2 GPUs and 8 cores (4 per GPU), each with one GPU held by a
// running cpu job that has its 6 cores (1.5× its share's throughput, 4
// cores). A new cpu job wants 6 cores: the
// pool has 4 free, but no server has more than 2. GREEDY skips it; TUNE
// falls back to the share (4), shrinks the running job on the first server
// to its share, and runs it there. Before, both ran it with 6 cores from
// the pool.
func TestSynergyFitsPerServer(t *testing.T) {
	cases := []struct {
		policy string
		want   map[string]sized
	}{
		{"fjf+count+synergy-greedy", map[string]sized{
			"old0": {true, 6, 1.5}, "old1": {true, 6, 1.5}, "new": {false, 0, 1}}},
		{"fjf+count+synergy-tune", map[string]sized{
			"old0": {true, 4, 1}, "old1": {true, 6, 1.5}, "new": {true, 4, 1}}},
	}
	for _, tc := range cases {
		t.Run(tc.policy, func(t *testing.T) {
			s := &Snapshot{Nodes: []Node{synergyNode(2, 8), synergyNode(2, 8)}}
			for n := range 2 {
				j := synergyJob(fmt.Sprint("old", n), float64(n), 1, "cpu")
				j.State, j.GPUModel, j.Placement = Running, "V100", []Slot{{Node: n, GPU: 0, Lane: -1}}
				s.Jobs = append(s.Jobs, j)
			}
			s.Jobs = append(s.Jobs, synergyJob("new", 5, 1, "cpu"))
			r := plan(t, tc.policy, Config{Sensitivity: synergyTable(t)}, s)
			must.Eq(t, tc.want, sizes(s, r))
			if r.Decisions[2].Run {
				must.Eq(t, []Slot{{Node: 0, GPU: 1, Lane: -1}}, r.Decisions[2].Slots)
			}
		})
	}
}

// A job GREEDY skips leaves its GPUs to the jobs after it in the same
// round, as the reference's single pass does: a 3-GPU cpu job that wants
// 18 cores is skipped, and a flat job the placer had left waiting for GPUs
// starts on one of them.
func TestSynergyGreedyGivesSkippedGPUsOn(t *testing.T) {
	s := &Snapshot{Nodes: []Node{synergyNode(4, 12)}}
	run := synergyJob("run", 0, 1, "cpu")
	run.State, run.GPUModel, run.Placement = Running, "V100", []Slot{{Node: 0, GPU: 0, Lane: -1}}
	s.Jobs = []Job{run, synergyJob("big", 1, 3, "cpu"), synergyJob("flat", 2, 1, "flat")}
	r := plan(t, "fjf+count+synergy-greedy", Config{Sensitivity: synergyTable(t)}, s)
	must.Eq(t, map[string]sized{"run": {true, 6, 2}, "big": {false, 0, 1}, "flat": {true, 1, 1}}, sizes(s, r))
	must.StrContains(t, r.Decisions[2].Reason, "GPUs a skipped job left")
	must.Eq(t, []Slot{{Node: 0, GPU: 1, Lane: -1}}, r.Decisions[2].Slots)
}

// Under a preemptive order every job is sized in rank order, and a running
// job whose demand no longer fits its server is preempted (GREEDY), as the
// reference's leases end every round.
func TestSynergyGreedyPreemptsUnderPreemptiveOrder(t *testing.T) {
	s := &Snapshot{Nodes: []Node{synergyNode(2, 6)}}
	old := synergyJob("old", 0, 1, "cpu")
	old.State, old.GPUModel, old.Placement, old.Attained, old.Executed = Running, "V100", []Slot{{Node: 0, GPU: 0, Lane: -1}}, 5000, 5000
	s.Jobs = []Job{old, synergyJob("new", 1, 1, "cpu")}
	r := plan(t, "las+count+synergy-greedy", Config{Sensitivity: synergyTable(t)}, s)
	must.Eq(t, map[string]sized{"old": {false, 0, 1}, "new": {true, 6, 2}}, sizes(s, r))
	must.StrContains(t, r.Decisions[0].Reason, "preempted")
}

// A job cannot train on no CPU: its throughput there is 0, not the lowest
// profiled point's.
// Below the lowest profiled point (1 CPU, 62.5 GB per GPU) throughput
// falls in proportion to 0: half a core gets half the 1-CPU throughput,
// and a flat model, which runs as fast on 1 CPU as on 6, is not credited
// with it on 0.01.
func TestSensitivityWithNoCPUIsZero(t *testing.T) {
	sens := synergyTable(t)
	cases := []struct {
		model          string
		cpu, mem, want float64
	}{
		{"cpu", 0, 62.5, 0}, {"cpu", 1, 0, 0}, {"cpu", 0.5, 62.5, 1.0 / 6}, {"cpu", 3, 62.5, 1}, {"cpu", 6, 125, 2},
		{"flat", 0.01, 62.5, 0.01}, {"flat", 1, 62.5, 1}, {"flat", 3, 31.25, 0.5}, {"flat", 0.5, 31.25, 0.25},
	}
	for _, tc := range cases {
		got, ok := sens.Throughput(tc.model, 1, tc.cpu, tc.mem)
		must.True(t, ok)
		must.InDelta(t, tc.want, got, 1e-9, must.Sprintf("%s: %v CPUs, %v GB", tc.model, tc.cpu, tc.mem))
	}
}

// TUNE never skips a job that the placer gave GPUs: on random snapshots
// of servers of 8 GPUs (16 to 48 cores, 250 to 1,000 GB), with running jobs of
// every width holding up to twice their share and new jobs arriving, no
// decision of a TUNE round says the job was skipped, and every job TUNE
// runs gets at least some CPU.
func TestSynergyTuneNeverSkips(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	sens := synergyTable(t)
	widths := []int{1, 1, 1, 2, 4, 8, 16}
	for trial := range 2000 {
		nodes := make([]Node, 1+rng.IntN(3))
		for n := range nodes {
			nodes[n] = synergyNode(8, []float64{16, 24, 48}[rng.IntN(3)])
			nodes[n].ID = fmt.Sprint("n", n)
			nodes[n].MemoryGB = []float64{250, 500, 1000}[rng.IntN(3)]
		}
		var jobs []Job
		free := make([][]int, len(nodes))
		for n := range nodes {
			for g := range 8 {
				free[n] = append(free[n], g)
			}
		}
		for k := range 2 + rng.IntN(12) {
			m := []string{"cpu", "flat"}[rng.IntN(2)]
			j := synergyJob(fmt.Sprint("j", k), float64(k), widths[rng.IntN(len(widths))], m)
			if rng.IntN(2) == 0 {
				// Running, on GPUs of one node where they fit.
				n := rng.IntN(len(nodes))
				if len(free[n]) >= j.GPUs {
					j.State, j.GPUModel, j.Attained, j.Executed = Running, "V100", float64(100*k), float64(100*k)
					for _, g := range free[n][:j.GPUs] {
						j.Placement = append(j.Placement, Slot{Node: n, GPU: g, Lane: -1})
					}
					free[n] = free[n][j.GPUs:]
				}
			}
			jobs = append(jobs, j)
		}
		for _, name := range []string{"fjf+count+synergy-tune", "las+count+synergy-tune"} {
			s := &Snapshot{Nodes: nodes, Jobs: slices.Clone(jobs)}
			r := plan(t, name, Config{Sensitivity: sens}, s)
			for i, d := range r.Decisions {
				must.StrNotContains(t, d.Reason, "skipped", must.Sprintf("trial %d, %s, job %s", trial, name, s.Jobs[i].ID))
				if d.Run && !d.Lane {
					must.Positive(t, d.CPUs, must.Sprintf("trial %d, %s, job %s runs on no CPU", trial, name, s.Jobs[i].ID))
				}
			}
		}
	}
}

// TUNE never skips a job that has its GPUs: on random clusters (servers
// of 2 to 8 GPUs with 1 to 6 cores per GPU, some starved of cores) and
// queues (running and waiting jobs of one to four GPUs, CPU-hungry and
// not), every job the placement alone runs, it runs too, and no other.
func TestSynergyTuneRunsEveryJobThePlacerRuns(t *testing.T) {
	sens := synergyTable(t)
	for seed := range uint64(500) {
		rng := rand.New(rand.NewPCG(seed, 5))
		s := randomSynergyQueue(rng, 100, nil)
		for _, placement := range []string{"fjf+count", "las+count", "fjf+consolidated", "las+pack"} {
			alone := plan(t, placement, Config{}, s)
			tuned := plan(t, placement+"+synergy-tune", Config{Sensitivity: sens}, s)
			for i := range s.Jobs {
				must.Eq(t, alone.Decisions[i].Run, tuned.Decisions[i].Run,
					must.Sprintf("seed %d, %s: job %s (%s): %s", seed, placement, s.Jobs[i].ID, s.Jobs[i].Model, tuned.Decisions[i].Reason))
			}
		}
	}
}

// At a lease's end every running job is placed again, as Synergy's
// reference does each round. Two nodes of 2 GPUs and 8 cores (4 per GPU):
// cpu jobs A and B share node 0, and flat job C has node 1's first GPU.
// Within the lease nothing moves: TUNE holds A and B at their share (4
// cores each), GREEDY squeezes B into the 2 cores A leaves. At its end A
// keeps its GPU and takes its 6 cores, B moves to node 1, where its 6
// fit, onto the GPU no job held, and C keeps its own.
func TestSynergyLeasePlacesRunningJobsAgain(t *testing.T) {
	running := func(id string, arrival float64, model string, node int) Job {
		j := synergyJob(id, arrival, 1, model)
		j.State, j.GPUModel, j.Placed = Running, "V100", arrival
		j.Placement = []Slot{{Node: node, GPU: int(arrival) % 2, Lane: -1}}
		return j
	}
	within := map[string]map[string]sized{
		"synergy-tune":   {"A": {true, 4, 1}, "B": {true, 4, 1}, "C": {true, 1, 1}},
		"synergy-greedy": {"A": {true, 6, 1.5}, "B": {true, 2, 0.5}, "C": {true, 1, 1}},
	}
	for _, sizer := range []string{"synergy-tune", "synergy-greedy"} {
		for _, tc := range []struct {
			now, wake float64
			want      map[string]sized
			slots     [][]Slot
		}{
			{100, 200, within[sizer], [][]Slot{{{0, 0, -1}}, {{0, 1, -1}}, {{1, 0, -1}}}},
			{300, 300, map[string]sized{"A": {true, 6, 1.5}, "B": {true, 6, 1.5}, "C": {true, 1, 1}},
				[][]Slot{{{0, 0, -1}}, {{1, 1, -1}}, {{1, 0, -1}}}},
		} {
			t.Run(fmt.Sprint(sizer, "/", tc.now), func(t *testing.T) {
				s := &Snapshot{Now: tc.now, Nodes: []Node{synergyNode(2, 8), synergyNode(2, 8)}}
				s.Jobs = []Job{running("A", 0, "cpu", 0), running("B", 1, "cpu", 0), running("C", 2, "flat", 1)}
				r := plan(t, "fjf+count+"+sizer, Config{Sensitivity: synergyTable(t), SynergyLease: 300}, s)
				must.Eq(t, tc.want, sizes(s, r))
				for i, d := range r.Decisions {
					must.Eq(t, tc.slots[i], d.Slots, must.Sprintf("job %s", s.Jobs[i].ID))
					moved := !slices.Equal(d.Slots, s.Jobs[i].Placement)
					must.Eq(t, moved, d.Migrate, must.Sprintf("job %s: %s", s.Jobs[i].ID, d.Reason))
					must.Eq(t, "V100", d.GPUModel)
				}
				must.Eq(t, tc.wake, r.Wake)

				// With no lease, the end of one changes nothing.
				r = plan(t, "fjf+count+"+sizer, Config{Sensitivity: synergyTable(t)}, s)
				must.Eq(t, within[sizer], sizes(s, r))
				must.Eq(t, inf, r.Wake)
			})
		}
	}
}

// Placed again at a lease's end, on random clusters and queues, the
// running jobs and those that start hold whole GPUs of their own, as many
// as they asked for, on their model; only a job whose lease ended moves;
// and TUNE still runs every job the placement alone runs.
func TestSynergyLeaseKeepsEveryGPUToOneJob(t *testing.T) {
	sens := synergyTable(t)
	for seed := range uint64(500) {
		rng := rand.New(rand.NewPCG(seed, 7))
		s := randomSynergyQueue(rng, 450, func(j *Job) {
			j.Placed = float64(rng.IntN(450)) // a lease of 300: those placed before 300 are placed again
		})
		for _, order := range []string{"fjf+count", "las+count"} {
			alone := plan(t, order, Config{}, s)
			for _, sizer := range []string{"synergy-tune", "synergy-greedy"} {
				r := plan(t, order+"+"+sizer, Config{Sensitivity: sens, SynergyLease: 300}, s)
				held := map[Slot]string{}
				for i, d := range r.Decisions {
					j := &s.Jobs[i]
					why := must.Sprintf("seed %d, %s+%s: job %s (placed at %g): %s", seed, order, sizer, j.ID, j.Placed, d.Reason)
					if sizer == "synergy-tune" {
						must.Eq(t, alone.Decisions[i].Run, d.Run, why)
					}
					must.True(t, !d.Migrate || (j.State == Running && j.Placed < 300), why)
					if !d.Run {
						continue
					}
					must.SliceLen(t, j.GPUs, d.Slots, why)
					for _, sl := range d.Slots {
						must.MapNotContainsKey(t, held, sl, why)
						held[sl] = j.ID
					}
				}
			}
		}
	}
}

// A job placed again at its lease's end stays where it was when nothing
// calls for a move: on the server it held, among servers with as many free
// GPUs, and on its own GPUs there, not the first free ones.
func TestSynergyLeaseKeepsAJobWhereItWas(t *testing.T) {
	s := &Snapshot{Now: 300, Nodes: []Node{synergyNode(2, 8), synergyNode(2, 8)}}
	one := synergyJob("one", 0, 1, "cpu")
	one.State, one.GPUModel, one.Placement = Running, "V100", []Slot{{Node: 1, GPU: 1, Lane: -1}}
	s.Jobs = []Job{one}
	for _, sizer := range []string{"synergy-tune", "synergy-greedy"} {
		r := plan(t, "fjf+count+"+sizer, Config{Sensitivity: synergyTable(t), SynergyLease: 300}, s)
		must.Eq(t, one.Placement, r.Decisions[0].Slots, must.Sprint(sizer))
		must.False(t, r.Decisions[0].Migrate, must.Sprint(sizer))
		must.Eq(t, 6, r.Decisions[0].CPUs, must.Sprint(sizer))
	}
	for _, lease := range []float64{-300, 0.5, math.NaN(), math.Inf(1)} {
		_, err := Parse("synergy", Config{Sensitivity: synergyTable(t), SynergyLease: lease})
		must.ErrorContains(t, err, "the Synergy lease must be")
	}
}

// randomSynergyQueue is a random cluster (servers of 2 to 8 GPUs with 1 to
// 6 cores per GPU, some starved of cores) and queue (running and waiting
// jobs of one to four GPUs, CPU-hungry and not); running is called on
// each running job.
func randomSynergyQueue(rng *rand.Rand, now float64, running func(j *Job)) *Snapshot {
	s := &Snapshot{Now: now}
	for n := range 1 + rng.IntN(4) {
		g := []int{2, 4, 8}[rng.IntN(3)]
		node := synergyNode(g, float64(1+rng.IntN(g*6)))
		node.ID = fmt.Sprint("n", n)
		s.Nodes = append(s.Nodes, node)
	}
	used := map[Slot]bool{}
	for k := range 2 + rng.IntN(12) {
		j := synergyJob(fmt.Sprint("j", k), float64(k), []int{1, 1, 2, 4}[rng.IntN(4)], []string{"cpu", "flat"}[rng.IntN(2)])
		j.Remaining = float64(10 + rng.IntN(100))
		if n := rng.IntN(len(s.Nodes)); rng.IntN(2) == 0 {
			var slots []Slot
			for g := range s.Nodes[n].GPUs {
				if sl := (Slot{Node: n, GPU: g, Lane: -1}); len(slots) < j.GPUs && !used[sl] {
					slots = append(slots, sl)
				}
			}
			if len(slots) == j.GPUs {
				for _, sl := range slots {
					used[sl] = true
				}
				j.State, j.GPUModel, j.Placement, j.Attained = Running, "V100", slots, float64(rng.IntN(50))
				if running != nil {
					running(&j)
				}
			}
		}
		s.Jobs = append(s.Jobs, j)
	}
	return s
}

// A job evicted at its lease's end blocks a strict FIFO queue as a job
// skipped at its start does: one server of 3 GPUs and 13 cores; P (2
// GPUs, cpu) starts with its 12 cores, R (running, cpu) finds 1 core and
// waits, and W, a flat job behind it, does not start on R's GPU under
// fifo, where it does under fjf.
func TestSynergyLeaseEvictionBlocksFIFO(t *testing.T) {
	s := &Snapshot{Now: 300, Nodes: []Node{synergyNode(3, 13)}}
	r0 := synergyJob("R", 1, 1, "cpu")
	r0.State, r0.GPUModel, r0.Placement = Running, "V100", []Slot{{Node: 0, GPU: 0, Lane: -1}}
	s.Jobs = []Job{synergyJob("P", 0, 2, "cpu"), r0, synergyJob("W", 2, 1, "flat")}
	for order, wRuns := range map[string]bool{"fifo": false, "fjf": true} {
		r := plan(t, order+"+count+synergy-greedy", Config{Sensitivity: synergyTable(t), SynergyLease: 300}, s)
		must.True(t, r.Decisions[0].Run, must.Sprint(order))
		must.False(t, r.Decisions[1].Run, must.Sprint(order, ": ", r.Decisions[1].Reason))
		must.Eq(t, "", r.Decisions[1].GPUModel, must.Sprint(order))
		must.Eq(t, wRuns, r.Decisions[2].Run, must.Sprint(order, ": ", r.Decisions[2].Reason))
	}
}

// A job the migrate step moves is sized on the model it moves to: one
// V100 server and one K80 server, a job on the K80 ten times faster on the
// V100 moves there, and its GPU and cores are the V100 server's.
func TestSynergySizesAMigrationOnItsNewModel(t *testing.T) {
	nodes := migrationCluster(1, 1, 0)
	for n := range nodes {
		nodes[n].CPUs, nodes[n].MemoryGB, nodes[n].Healthy = 6, 125, true
	}
	j := onModel("a", "K80", 1e5, steep)
	j.Model, j.Placement = "cpu", []Slot{{Node: 1, GPU: 0, Lane: -1}}
	s := &Snapshot{Now: 10, Nodes: nodes, Jobs: []Job{j}}
	for _, lease := range []float64{0, 300} {
		r := plan(t, "fjf+migrate+synergy-tune", Config{Sensitivity: synergyTable(t), SynergyLease: lease}, s)
		d := r.Decisions[0]
		must.True(t, d.Migrate)
		must.Eq(t, "V100", d.GPUModel)
		must.Eq(t, []Slot{{Node: 0, GPU: 0, Lane: -1}}, d.Slots, must.Sprint(d.Reason))
	}
}

// A running task keeps the CPU and memory it started with: its size
// changes only by a restart (Decision.Migrate). One node of 2 GPUs and 8
// cores (4 per GPU); cpu job A runs on GPU 0.
//   - A holds 6 cores and B arrives: GREEDY keeps A and skips B; TUNE
//     shrinks A to its share for B, a restart.
//   - A holds 3 cores (it started squeezed) and nothing waits: it keeps
//     them, where before this it grew to 6 in place. At its lease's end
//     it is placed again, on its own GPU, at 6 cores: a restart.
func TestSynergyRunningJobRestartsToChangeSize(t *testing.T) {
	running := func(cpus float64) Job {
		a := synergyJob("A", 0, 1, "cpu")
		a.State, a.GPUModel, a.Placement = Running, "V100", []Slot{{Node: 0, GPU: 0, Lane: -1}}
		a.CPUs, a.MemoryGB = cpus, 125
		return a
	}
	for _, tc := range []struct {
		policy  string
		lease   float64
		now     float64
		cpus    float64
		pending bool
		want    map[string]sized
		restart bool
	}{
		{"fjf+count+synergy-greedy", 0, 10, 6, true, map[string]sized{"A": {true, 6, 1.5}, "B": {false, 0, 1}}, false},
		{"fjf+count+synergy-tune", 0, 10, 6, true, map[string]sized{"A": {true, 4, 1}, "B": {true, 4, 1}}, true},
		{"fjf+count+synergy-tune", 0, 10, 3, false, map[string]sized{"A": {true, 3, 0.75}}, false},
		{"fjf+count+synergy-greedy", 0, 10, 3, false, map[string]sized{"A": {true, 3, 0.75}}, false},
		{"fjf+count+synergy-tune", 300, 100, 3, false, map[string]sized{"A": {true, 3, 0.75}}, false},
		{"fjf+count+synergy-tune", 300, 300, 3, false, map[string]sized{"A": {true, 6, 1.5}}, true},
	} {
		t.Run(fmt.Sprint(tc.policy, "/", tc.cpus, "/", tc.now), func(t *testing.T) {
			s := &Snapshot{Now: tc.now, Nodes: []Node{synergyNode(2, 8)}}
			s.Jobs = []Job{running(tc.cpus)}
			if tc.pending {
				s.Jobs = append(s.Jobs, synergyJob("B", 5, 1, "cpu"))
			}
			r := plan(t, tc.policy, Config{Sensitivity: synergyTable(t), SynergyLease: tc.lease}, s)
			must.Eq(t, tc.want, sizes(s, r))
			d := r.Decisions[0]
			must.Eq(t, tc.restart, d.Migrate, must.Sprint(d.Reason))
			must.Eq(t, []Slot{{Node: 0, GPU: 0, Lane: -1}}, d.Slots)
			if tc.restart && tc.lease == 0 {
				must.StrContains(t, d.Reason, "re-sized from 6.00 CPUs")
			}
			if !tc.restart {
				must.Eq(t, tc.cpus, d.CPUs, must.Sprint("kept exactly"))
				must.Eq(t, 125, d.MemoryGB)
			}
		})
	}
}
