package policy

import "strings"

// DefaultColocationFactor is the speed a job keeps on a shared GPU when no
// measurement covers the pair: roughly the median of Gavel's measured
// co-location throughputs (0.51 on K80, 0.58 on P100, 0.65 on V100).
const DefaultColocationFactor = 0.6

// Colocation is the slowdown model for jobs sharing a GPU: the fraction of
// its solo throughput a job keeps next to a given partner, per GPU model.
// Build it with NewColocation; the zero value uses the default factor.
type Colocation struct {
	pairs  map[[3]string]float64 // {gpu, self, partner} -> factor
	median map[string]float64    // gpu -> median factor over its pairs
	// Alias maps a cluster GPU model (lower case) to the measured model,
	// e.g. "v100m32" -> "v100".
	Alias map[string]string
}

// ColocationSample is one measured pair: Self keeps Factor of its solo
// throughput next to Partner on GPU.
type ColocationSample struct {
	GPU, Self, Partner string
	Factor             float64
}

// NewColocation builds the model from samples.
func NewColocation(samples []ColocationSample, alias map[string]string) *Colocation {
	c := &Colocation{pairs: map[[3]string]float64{}, median: map[string]float64{}, Alias: alias}
	byGPU := map[string][]float64{}
	for _, sm := range samples {
		gpu := strings.ToLower(sm.GPU)
		c.pairs[[3]string{gpu, sm.Self, sm.Partner}] = sm.Factor
		byGPU[gpu] = append(byGPU[gpu], sm.Factor)
	}
	for gpu, v := range byGPU {
		c.median[gpu] = median(v)
	}
	return c
}

func (c *Colocation) gpu(model string) string {
	m := strings.ToLower(model)
	if c != nil && c.Alias != nil {
		if a, ok := c.Alias[m]; ok {
			return a
		}
	}
	return m
}

// Factor is the share of its solo speed self keeps next to partner on a
// GPU of model gpuModel.
func (c *Colocation) Factor(gpuModel, self, partner string) float64 {
	if c == nil {
		return DefaultColocationFactor
	}
	g := c.gpu(gpuModel)
	if f, ok := c.pairs[[3]string{g, self, partner}]; ok {
		return f
	}
	if f, ok := c.median[g]; ok {
		return f
	}
	return DefaultColocationFactor
}

// packPlacer is lane packing in the spirit of Salus, Zico and Gandiva:
// it places jobs like consolidatedPlacer, puts one-GPU jobs that fit in a
// lane's memory on a lane, and when whole GPUs run out lets waiting
// one-GPU jobs join a GPU with a free lane, if the pair's measured
// co-location throughput says sharing gains over running one of them.
type packPlacer struct{ coloc *Colocation }

func (packPlacer) Name() string { return "pack" }

func (p packPlacer) Place(s *Snapshot, r *Result, preemptive, blocking bool) {
	occ := consolidate(s, r, preemptive, blocking, func(i int, j *Job, d *Decision, occ *occupancy) {
		if d.Run && len(d.Slots) == 1 && laneFits(s, j, d.Slots[0]) {
			d.Slots[0] = occ.openLane(i, d.Slots[0]) // take already counted it as not free
			d.Lane = true
		}
	})
	open := occ.openLanes(s)
	for _, i := range r.Order {
		if len(open) == 0 {
			break
		}
		j, d := &s.Jobs[i], &r.Decisions[i]
		if d.Run || j.State == Running || j.GPUs > 1 {
			continue
		}
		k, ok := p.bestLane(s, occ, i, open)
		if !ok {
			continue
		}
		open = occ.joinLane(s, i, d, open, k)
		d.Reason = r.join(d.Reason, "; shares a GPU lane")
	}
}

// laneFits says whether job j may run on a lane of the GPU at sl.
func laneFits(s *Snapshot, j *Job, sl Slot) bool {
	gpu := &s.Nodes[sl.Node].GPUs[sl.GPU]
	return j.GPUs <= 1 && gpu.LaneCount() > 1 &&
		(j.GPUMemoryMB == 0 || gpu.LaneMemoryMB == 0 || j.GPUMemoryMB <= gpu.LaneMemoryMB)
}

// bestLane is the open GPU where job i and its partners gain the most
// combined throughput (in solo units, above 1), as an index into open.
func (p packPlacer) bestLane(s *Snapshot, occ *occupancy, i int, open []Slot) (int, bool) {
	j := &s.Jobs[i]
	best, bestGain := -1, 1.0
	for k, sl := range open {
		gpu := &s.Nodes[sl.Node].GPUs[sl.GPU]
		if !laneFits(s, j, sl) {
			continue
		}
		who := occ.who[sl.Node][sl.GPU]
		gain := 1.0
		for _, o := range who {
			gain *= p.coloc.Factor(gpu.Model, j.Model, s.Jobs[o].Model)
		}
		for _, o := range who {
			gain += p.coloc.Factor(gpu.Model, s.Jobs[o].Model, j.Model)
		}
		gain -= float64(len(who) - 1) // the partners' solo share before
		if gain > bestGain {
			best, bestGain = k, gain
			if p.coloc == nil {
				break // one factor for every pair: the first open lane is as good
			}
		}
	}
	return best, best >= 0
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	c := append([]float64(nil), v...)
	sortFloats(c)
	if len(c)%2 == 1 {
		return c[len(c)/2]
	}
	return (c[len(c)/2-1] + c[len(c)/2]) / 2
}
