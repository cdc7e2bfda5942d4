package policy

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/shoenig/test/must"
)

// The count placers count lanes per model; every lane start they make must
// still name its GPU, or the planner cannot pin it to the partners the
// count assumed: first the shared GPU's free lane, then a wholly free GPU
// on the fullest node, then its second lane.
func TestCountPlacersNameTheLanesTheyCount(t *testing.T) {
	laned := nodes("H100", 2, 2) // two nodes of two GPUs, two lanes each
	on := job("on", 0, 1)
	on.State, on.GPUModel, on.Placement = Running, "H100", []Slot{{Node: 1, GPU: 0, Lane: 0}}
	jobs := []Job{on}
	for i := 1; i <= 4; i++ {
		j := job(fmt.Sprintf("p%d", i), float64(i), 1)
		j.Remaining = float64(100 * i)
		jobs = append(jobs, j)
	}
	want := [][]Slot{nil, {{1, 0, 1}}, {{1, 1, 0}}, {{1, 1, 1}}, {{0, 0, 0}}}
	for _, name := range []string{"fifo", "las", "srtf", "hare", "allox"} {
		t.Run(name, func(t *testing.T) {
			s := &Snapshot{Nodes: laned, Jobs: slices.Clone(jobs)}
			r := plan(t, name, Config{}, s)
			// AlloX's matching may keep the last job back; the rest start.
			must.SliceContainsSubset(t, running(s, r), []string{"on", "p1", "p2", "p3"})
			for i := 1; i <= 4; i++ {
				d := r.Decisions[i]
				if !d.Run {
					continue
				}
				must.True(t, d.Lane, must.Sprint(s.Jobs[i].ID, " runs on a lane"))
				must.Eq(t, want[i], d.Slots, must.Sprint(s.Jobs[i].ID))
			}
		})
	}
}

// On random laned clusters with lane and whole-GPU jobs running, every
// lane start of every placer names one lane of a GPU of its model, no GPU
// holds more jobs than it has lanes, and no lane start lands on a GPU a
// whole-GPU job keeps.
func TestEveryLaneStartNamesAFreeLane(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 25))
	placers := []string{"fifo", "fjf", "las", "srtf", "gittins", "hare", "allox", "las+pack", "las+consolidated", "fjf+fastest"}
	for round := 0; round < 200; round++ {
		s := randomLanedSnapshot(rng)
		for _, name := range placers {
			s.cap = nil
			r := plan(t, name, Config{}, s)
			lanes := map[[2]int]int{}
			whole := map[[2]int]bool{}
			for i, j := range s.Jobs {
				d := r.Decisions[i]
				if !d.Run {
					continue
				}
				slots := d.Slots
				if j.State == Running {
					slots = j.Placement
				}
				for _, sl := range slots {
					k := [2]int{sl.Node, sl.GPU}
					if sl.Lane >= 0 {
						lanes[k]++
					} else {
						whole[k] = true
					}
				}
				if d.Lane && j.State == Pending {
					must.SliceLen(t, 1, d.Slots, must.Sprintf("%s round %d: %s names its lane", name, round, j.ID))
					gpu := s.Nodes[d.Slots[0].Node].GPUs[d.Slots[0].GPU]
					must.Eq(t, d.GPUModel, gpu.Model)
					must.Greater(t, 1, gpu.LaneCount())
				}
			}
			for k, n := range lanes {
				must.LessEq(t, s.Nodes[k[0]].GPUs[k[1]].LaneCount(), n, must.Sprintf("%s round %d: GPU %v", name, round, k))
				must.False(t, whole[k], must.Sprintf("%s round %d: GPU %v held whole and by lanes", name, round, k))
			}
		}
	}
}

// randomLanedSnapshot is one to three nodes of two models, most GPUs cut
// into two or three lanes, with lane jobs and whole-GPU jobs running on
// some of them and one- to four-GPU jobs waiting.
func randomLanedSnapshot(rng *rand.Rand) *Snapshot {
	s := &Snapshot{Now: 1000}
	for n := 0; n < 1+rng.IntN(3); n++ {
		node := Node{ID: fmt.Sprint("n", n), CPUs: 32, MemoryGB: 256, Healthy: true}
		model := []string{"H100", "A100"}[rng.IntN(2)]
		for g := 0; g < 2+rng.IntN(3); g++ {
			node.GPUs = append(node.GPUs, GPU{Model: model, Healthy: true, Lanes: 2 + rng.IntN(2)})
		}
		s.Nodes = append(s.Nodes, node)
	}
	id := 0
	for n, node := range s.Nodes {
		for g, gpu := range node.GPUs {
			switch rng.IntN(3) {
			case 0: // lane jobs on some of its lanes
				for l := 0; l < 1+rng.IntN(gpu.LaneCount()); l++ {
					j := job(fmt.Sprint("r", id), float64(id), 1)
					j.State, j.GPUModel, j.Placement = Running, gpu.Model, []Slot{{Node: n, GPU: g, Lane: l}}
					j.Attained, j.Executed, j.Remaining = float64(rng.IntN(5000)), 100, float64(rng.IntN(5000))
					s.Jobs = append(s.Jobs, j)
					id++
				}
			case 1: // a whole-GPU job
				j := job(fmt.Sprint("w", id), float64(id), 1)
				j.State, j.GPUModel, j.Placement = Running, gpu.Model, []Slot{{Node: n, GPU: g, Lane: -1}}
				j.Attained, j.Executed, j.Remaining = float64(rng.IntN(5000)), 100, float64(rng.IntN(5000))
				s.Jobs = append(s.Jobs, j)
				id++
			}
		}
	}
	for k := 0; k < 2+rng.IntN(10); k++ {
		j := job(fmt.Sprint("p", id), float64(500+id), []int{1, 1, 1, 2, 4}[rng.IntN(5)])
		j.Remaining = float64(rng.IntN(5000))
		s.Jobs = append(s.Jobs, j)
		id++
	}
	return s
}
