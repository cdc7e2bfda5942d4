package policy

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// scanPlace is placeWhole written as a plain scan over every node: the
// reference the indexed version must agree with.
func scanPlace(s *Snapshot, used [][]int, model string, g int) []Slot {
	freeOn := func(n int) []int {
		var out []int
		for gi, gpu := range s.Nodes[n].GPUs {
			if s.Nodes[n].Healthy && gpu.Healthy && gpu.Model == model && used[n][gi] == 0 {
				out = append(out, gi)
			}
		}
		return out
	}
	best, total := -1, 0
	for n := range s.Nodes {
		k := len(freeOn(n))
		total += k
		if k >= g && (best < 0 || k < len(freeOn(best))) {
			best = n
		}
	}
	if total < g {
		return nil
	}
	var slots []Slot
	take := func(n, k int) {
		for _, gi := range freeOn(n)[:k] {
			used[n][gi] = s.Nodes[n].GPUs[gi].LaneCount()
			slots = append(slots, Slot{Node: n, GPU: gi, Lane: -1})
		}
	}
	if best >= 0 {
		take(best, g)
		return slots
	}
	var nodes []int
	for n := range s.Nodes {
		if len(freeOn(n)) > 0 {
			nodes = append(nodes, n)
		}
	}
	slices.SortStableFunc(nodes, func(a, b int) int { return len(freeOn(b)) - len(freeOn(a)) })
	for _, n := range nodes {
		k := min(g, len(freeOn(n)))
		take(n, k)
		if g -= k; g == 0 {
			break
		}
	}
	return slots
}

func TestPlaceWholeAgreesWithANodeScan(t *testing.T) {
	models := []string{"V100", "P100", "K80"}
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 7))
		s := &Snapshot{}
		for range 1 + rng.IntN(150) { // past one 64-bit word of nodes
			node := Node{Healthy: rng.IntN(20) > 0}
			mixed := rng.IntN(4) == 0
			model := models[rng.IntN(len(models))]
			for range 1 + rng.IntN(8) {
				if mixed {
					model = models[rng.IntN(len(models))]
				}
				node.GPUs = append(node.GPUs, GPU{Model: model, Healthy: rng.IntN(10) > 0, Lanes: rng.IntN(3)})
			}
			s.Nodes = append(s.Nodes, node)
		}
		r := &Result{}
		o := newOccupancy(s, r)
		want := make([][]int, len(s.Nodes))
		for n := range s.Nodes {
			for gi := range s.Nodes[n].GPUs {
				if rng.IntN(2) == 0 {
					o.used[n][gi] = 1
				}
			}
			want[n] = slices.Clone(o.used[n])
		}
		for step := range 40 {
			model := models[rng.IntN(len(models))]
			g := []int{1, 1, 2, 4, 8, 16}[rng.IntN(6)]
			d := &Decision{Run: true, GPUModel: model}
			o.placeWhole(s, &Job{GPUs: g}, d)
			ref := scanPlace(s, want, model, g)
			if d.Run != (ref != nil) && s.capacity().find(model) >= 0 {
				t.Fatalf("seed %d step %d: %s x%d: run %v, reference %v", seed, step, model, g, d.Run, ref)
			}
			if d.Run && !slices.Equal(d.Slots, ref) {
				t.Fatalf("seed %d step %d: %s x%d: slots %v, reference %v", seed, step, model, g, d.Slots, ref)
			}
		}
	}
}
