package policy

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/shoenig/test/must"
)

// positionGroups is assignPositions' problem in assignToGroups' form: a
// group per model and position.
func positionGroups(times [][]float64, width []int) (cost [][]float64, capacity []int) {
	rows := len(times)
	var model, pos []int
	for m, w := range width {
		if w == 0 {
			continue
		}
		for p := 1; p <= (rows+w-1)/w; p++ {
			capacity = append(capacity, w)
			model, pos = append(model, m), append(pos, p)
		}
	}
	cost = make([][]float64, rows)
	for r := range cost {
		cost[r] = make([]float64, len(capacity))
		for g := range capacity {
			cost[r][g] = float64(pos[g]) * times[r][model[g]]
		}
	}
	return cost, capacity
}

// randomPositions is a random AlloX matching: times drawn from few values
// (many ties) or spread, some rows barred from some models.
func randomPositions(rng *rand.Rand, rows, models int) ([][]float64, []int) {
	width := make([]int, models)
	for m := range width {
		width[m] = rng.IntN(5)
		if rng.IntN(4) == 0 {
			width[m] = rng.IntN(30) // wide: few positions, many rows in each
		}
	}
	width[rng.IntN(models)] = 1 + rng.IntN(4)
	ties := rng.IntN(2) == 0
	times := make([][]float64, rows)
	for r := range times {
		times[r] = make([]float64, models)
		open := false
		for m := range times[r] {
			if ties {
				times[r][m] = float64(1 + rng.IntN(4))
			} else {
				times[r][m] = math.Exp(rng.NormFloat64() * 2)
			}
			if rng.IntN(6) == 0 {
				times[r][m] = math.Inf(1)
			}
			open = open || width[m] > 0 && !math.IsInf(times[r][m], 1)
		}
		if !open {
			for m := range width {
				if width[m] > 0 {
					times[r][m] = 1
				}
			}
		}
	}
	return times, width
}

// assignPositions finds an assignment as cheap as the reference
// successive shortest paths over every group (assignToGroups), itself
// checked against enumeration, on random problems with and without ties.
func TestAssignPositionsIsLeastCost(t *testing.T) {
	for seed := range uint64(3000) {
		rng := rand.New(rand.NewPCG(seed, 17))
		times, width := randomPositions(rng, 1+rng.IntN(60), 1+rng.IntN(4))
		cost, capacity := positionGroups(times, width)
		want := 0.0
		for r, g := range assignToGroups(cost, capacity) {
			must.NonNegative(t, g)
			want += cost[r][g]
		}
		model, pos := assignPositions(times, width)
		got := 0.0
		used := map[[2]int]int{}
		for r := range model {
			must.NonNegative(t, model[r], must.Sprintf("seed %d: row %d unassigned", seed, r))
			must.Positive(t, pos[r])
			got += float64(pos[r]) * times[r][model[r]]
			used[[2]int{model[r], pos[r]}]++
		}
		for k, n := range used {
			must.LessEq(t, width[k[0]], n, must.Sprintf("seed %d: position %v holds %d", seed, k, n))
		}
		must.True(t, math.Abs(got-want) <= 1e-9*math.Max(1, want), must.Sprintf("seed %d: cost %v, least %v", seed, got, want))
	}
}
