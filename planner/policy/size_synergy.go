package policy

import (
	"fmt"
	"slices"
	"sort"
)

// SensitivityRow is one profiled point: model on GPUs, given CPUs and host
// memory per GPU, trains at Throughput relative to the GPU-proportional
// share.
type SensitivityRow struct {
	Model       string
	GPUs        int
	CPUsPerGPU  float64
	MemGBPerGPU float64
	Throughput  float64
}

// Sensitivity is Synergy's per-model throughput over CPU and memory.
type Sensitivity struct {
	grids map[string]map[int]*sensGrid
	rows  []SensitivityRow
}

type sensGrid struct {
	cpus, mems []float64
	val        [][]float64 // val[cpu][mem]
	best       [2]float64  // least CPU, then memory, reaching ~max throughput
}

// NewSensitivity builds the table; cells missing from a model's grid take
// the nearest lower memory value of the same CPU row.
func NewSensitivity(rows []SensitivityRow) (*Sensitivity, error) {
	type key struct {
		m string
		g int
	}
	pts := map[key][]SensitivityRow{}
	for _, r := range rows {
		if r.GPUs <= 0 || r.CPUsPerGPU <= 0 || r.MemGBPerGPU <= 0 || r.Throughput < 0 {
			return nil, fmt.Errorf("sensitivity row for %q: non-positive value", r.Model)
		}
		pts[key{r.Model, r.GPUs}] = append(pts[key{r.Model, r.GPUs}], r)
	}
	s := &Sensitivity{grids: map[string]map[int]*sensGrid{}, rows: slices.Clone(rows)}
	for k, rs := range pts {
		g := &sensGrid{}
		for _, r := range rs {
			if !slices.Contains(g.cpus, r.CPUsPerGPU) {
				g.cpus = append(g.cpus, r.CPUsPerGPU)
			}
			if !slices.Contains(g.mems, r.MemGBPerGPU) {
				g.mems = append(g.mems, r.MemGBPerGPU)
			}
		}
		sort.Float64s(g.cpus)
		sort.Float64s(g.mems)
		g.val = make([][]float64, len(g.cpus))
		set := make([][]bool, len(g.cpus))
		for i := range g.val {
			g.val[i] = make([]float64, len(g.mems))
			set[i] = make([]bool, len(g.mems))
		}
		for _, r := range rs {
			ci, _ := slices.BinarySearch(g.cpus, r.CPUsPerGPU)
			mi, _ := slices.BinarySearch(g.mems, r.MemGBPerGPU)
			g.val[ci][mi], set[ci][mi] = r.Throughput, true
		}
		for ci := range g.val {
			for mi := range g.val[ci] {
				if !set[ci][mi] && mi > 0 {
					g.val[ci][mi] = g.val[ci][mi-1]
				}
			}
		}
		top := 0.0
		for ci := range g.val {
			for mi := range g.val[ci] {
				top = max(top, g.val[ci][mi])
			}
		}
		found := false
		for ci := range g.cpus {
			for mi := range g.mems {
				if !found && g.val[ci][mi] >= 0.99*top {
					g.best, found = [2]float64{g.cpus[ci], g.mems[mi]}, true
				}
			}
		}
		if s.grids[k.m] == nil {
			s.grids[k.m] = map[int]*sensGrid{}
		}
		s.grids[k.m][k.g] = g
	}
	return s, nil
}

// Models lists the profiled model names, sorted.
func (s *Sensitivity) Models() []string {
	var out []string
	for m := range s.grids {
		out = append(out, m)
	}
	sort.Strings(out)
	return out
}

// Rows are model's profiled points, as given.
func (s *Sensitivity) Rows(model string) []SensitivityRow {
	var out []SensitivityRow
	for _, r := range s.rows {
		if r.Model == model {
			out = append(out, r)
		}
	}
	return out
}

// Grid is the grid the sizer reads for model on gpus GPUs, every cell
// filled: CPUs and GB per GPU, and the throughput there. None when the
// model is unknown.
func (s *Sensitivity) Grid(model string, gpus int) [][3]float64 {
	g := s.grid(model, gpus)
	if g == nil {
		return nil
	}
	var out [][3]float64
	for ci, c := range g.cpus {
		for mi, m := range g.mems {
			out = append(out, [3]float64{c, m, g.val[ci][mi]})
		}
	}
	return out
}

func (s *Sensitivity) grid(model string, gpus int) *sensGrid {
	if s == nil {
		return nil
	}
	byG := s.grids[model]
	if len(byG) == 0 {
		return nil
	}
	if g, ok := byG[gpus]; ok {
		return g
	}
	bestG := -1
	for g := range byG {
		if (g <= gpus && g > bestG) || bestG < 0 {
			bestG = g
		}
	}
	return byG[bestG]
}

// Throughput interpolates model's relative throughput on gpus GPUs with
// the given CPUs and memory per GPU; false when the model is unknown.
func (s *Sensitivity) Throughput(model string, gpus int, cpuPerGPU, memPerGPU float64) (float64, bool) {
	g := s.grid(model, gpus)
	if g == nil {
		return 0, false
	}
	return g.at(cpuPerGPU, memPerGPU), true
}

// at is the relative throughput with c CPUs and m GB per GPU: 0 with no
// CPU or no memory, which a job cannot train on. Below the lowest
// profiled CPU or memory it falls in proportion towards 0: nothing there
// was measured, and a job squeezed to a sliver of a core is not credited
// with the throughput of a whole one.
func (g *sensGrid) at(c, m float64) float64 {
	if c <= 0 || m <= 0 {
		return 0
	}
	ci, cf := locate(g.cpus, c)
	mi, mf := locate(g.mems, m)
	v := func(a, b int) float64 { return g.val[a][b] }
	c1, m1 := min(ci+1, len(g.cpus)-1), min(mi+1, len(g.mems)-1)
	lo := v(ci, mi)*(1-mf) + v(ci, m1)*mf
	hi := v(c1, mi)*(1-mf) + v(c1, m1)*mf
	t := lo*(1-cf) + hi*cf
	if c < g.cpus[0] {
		t *= c / g.cpus[0]
	}
	if m < g.mems[0] {
		t *= m / g.mems[0]
	}
	return t
}

// locate returns the grid cell below x and the fraction towards the next,
// clamped to the grid.
func locate(xs []float64, x float64) (int, float64) {
	if x <= xs[0] {
		return 0, 0
	}
	if x >= xs[len(xs)-1] {
		return len(xs) - 1, 0
	}
	i := sort.SearchFloat64s(xs, x)
	if xs[i] == x {
		return i, 0
	}
	return i - 1, (x - xs[i-1]) / (xs[i] - xs[i-1])
}

func sortFloats(v []float64) { sort.Float64s(v) }
