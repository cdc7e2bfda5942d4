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
	s := &Sensitivity{grids: map[string]map[int]*sensGrid{}}
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

func (g *sensGrid) at(c, m float64) float64 {
	ci, cf := locate(g.cpus, c)
	mi, mf := locate(g.mems, m)
	v := func(a, b int) float64 { return g.val[a][b] }
	c1, m1 := min(ci+1, len(g.cpus)-1), min(mi+1, len(g.mems)-1)
	lo := v(ci, mi)*(1-mf) + v(ci, m1)*mf
	hi := v(c1, mi)*(1-mf) + v(c1, m1)*mf
	return lo*(1-cf) + hi*cf
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

// synergySizer is Synergy's CPU and host-memory sizing. GREEDY gives each
// running job, in rank order, the least resources reaching its best
// throughput while the pool lasts, so later jobs may get less than their
// GPU-proportional share. TUNE first gives every job its proportional
// share, takes back what insensitive jobs do not need, and hands the spare
// to sensitive jobs in rank order, so no job drops below its share.
// The pool is the job's node when the placer chose GPUs, otherwise every
// node of its GPU model.
type synergySizer struct {
	sens *Sensitivity
	tune bool
}

func (z synergySizer) Name() string {
	if z.tune {
		return "synergy-tune"
	}
	return "synergy-greedy"
}

type resPool struct{ cpu, mem, gpus float64 }

func (z synergySizer) Size(s *Snapshot, r *Result) {
	c := s.capacity()
	pools := map[int]*resPool{} // >= 0: node; < 0: -(model+1)
	poolOf := func(d *Decision) int {
		if len(d.Slots) > 0 {
			return d.Slots[0].Node
		}
		return -(c.find(d.GPUModel) + 1)
	}
	for n := range s.Nodes {
		node := &s.Nodes[n]
		if !node.Healthy || len(c.byNode[n]) == 0 {
			continue
		}
		m := c.find(node.GPUs[c.byNode[n][0]].Model)
		for _, k := range []int{n, -(m + 1)} {
			p := pools[k]
			if p == nil {
				p = &resPool{}
				pools[k] = p
			}
			p.cpu += node.CPUs
			p.mem += node.MemoryGB
			p.gpus += float64(len(c.byNode[n]))
		}
	}
	type alloc struct {
		i        int
		g        float64
		grid     *sensGrid
		pool     *resPool
		prop     [2]float64 // per GPU
		cpu, mem float64    // per GPU
	}
	var jobs []alloc
	for _, i := range r.Order {
		d := &r.Decisions[i]
		if !d.Run {
			continue
		}
		p := pools[poolOf(d)]
		if p == nil || p.gpus == 0 {
			continue
		}
		j := &s.Jobs[i]
		a := alloc{i: i, g: float64(max(j.GPUs, 1)), grid: z.sens.grid(j.Model, j.GPUs), pool: p,
			prop: [2]float64{p.cpu / p.gpus, p.mem / p.gpus}}
		jobs = append(jobs, a)
	}
	// Free resources per pool start full; allocations draw from them.
	freeCPU, freeMem := map[*resPool]float64{}, map[*resPool]float64{}
	for _, p := range pools {
		freeCPU[p], freeMem[p] = p.cpu, p.mem
	}
	take := func(a *alloc, cpu, mem float64) {
		cpu = min(cpu, freeCPU[a.pool]/a.g)
		mem = min(mem, freeMem[a.pool]/a.g)
		a.cpu, a.mem = max(cpu, 0), max(mem, 0)
		freeCPU[a.pool] -= a.cpu * a.g
		freeMem[a.pool] -= a.mem * a.g
	}
	if !z.tune {
		for k := range jobs {
			a := &jobs[k]
			want := a.prop
			if a.grid != nil {
				want = a.grid.best
			}
			take(a, want[0], want[1])
		}
	} else {
		for k := range jobs {
			a := &jobs[k]
			want := a.prop
			if a.grid != nil {
				want = a.grid.leastKeeping(a.prop)
			}
			take(a, want[0], want[1])
		}
		for k := range jobs {
			a := &jobs[k]
			if a.grid == nil {
				continue
			}
			// Return this job's share and take the best point affordable.
			fc, fm := freeCPU[a.pool]+a.cpu*a.g, freeMem[a.pool]+a.mem*a.g
			bc, bm := a.cpu, a.mem
			bestT := a.grid.at(bc, bm)
			for _, c := range a.grid.cpus {
				for _, m := range a.grid.mems {
					if c*a.g <= fc && m*a.g <= fm {
						if t := a.grid.at(c, m); t > bestT*1.001 || (t >= bestT && c+m/20 < bc+bm/20) {
							bc, bm, bestT = c, m, t
						}
					}
				}
			}
			freeCPU[a.pool], freeMem[a.pool] = fc-bc*a.g, fm-bm*a.g
			a.cpu, a.mem = bc, bm
		}
	}
	for _, a := range jobs {
		d := &r.Decisions[a.i]
		d.CPUs, d.MemoryGB = a.cpu*a.g, a.mem*a.g
		d.Speedup = 1
		if a.grid != nil {
			if base := a.grid.at(a.prop[0], a.prop[1]); base > 0 {
				d.Speedup = a.grid.at(a.cpu, a.mem) / base
			}
		}
	}
}

// leastKeeping is the smallest grid point (CPU first) with at least the
// throughput of the proportional share prop.
func (g *sensGrid) leastKeeping(prop [2]float64) [2]float64 {
	need := g.at(prop[0], prop[1])
	for _, c := range g.cpus {
		if c > prop[0] {
			break
		}
		for _, m := range g.mems {
			if m > prop[1] {
				break
			}
			if g.at(c, m) >= need {
				return [2]float64{c, m}
			}
		}
	}
	return prop
}

func sortFloats(v []float64) { sort.Float64s(v) }
