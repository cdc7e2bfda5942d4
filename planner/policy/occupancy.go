package policy

import "math/bits"

// occupancy tracks lanes in use per GPU for one round, and indexes nodes
// by how many wholly free GPUs of each model they have, so that placing a
// job costs a few word scans instead of a walk over every node.
type occupancy struct {
	c    *capacity
	used [][]int   // used[node][gpu]: lanes taken; whole-GPU jobs take all
	who  [][][]int // who[node][gpu]: jobs on its lanes

	// Built on first use by placeWhole.
	free    [][]int      // free[m][node]: wholly free GPUs of model m
	buckets [][][]uint64 // buckets[m][k]: bitset of nodes with exactly k free
	total   []int        // wholly free GPUs of model m, all nodes
}

// newOccupancy marks the GPUs of every job that keeps running this round.
func newOccupancy(s *Snapshot, r *Result) *occupancy {
	c := s.capacity()
	o := &occupancy{c: c, used: make([][]int, len(s.Nodes)), who: make([][][]int, len(s.Nodes))}
	flat := make([]int, 0, c.gpus)
	for n := range s.Nodes {
		k := len(s.Nodes[n].GPUs)
		o.used[n] = flat[len(flat) : len(flat)+k : len(flat)+k]
		flat = flat[:len(flat)+k]
		o.who[n] = make([][]int, k)
	}
	for i := range s.Jobs {
		j, d := &s.Jobs[i], &r.Decisions[i]
		if j.State != Running || !d.Run {
			continue
		}
		for _, sl := range j.Placement {
			if sl.Node >= len(s.Nodes) || sl.GPU >= len(s.Nodes[sl.Node].GPUs) {
				continue
			}
			if sl.Lane >= 0 {
				o.used[sl.Node][sl.GPU]++
				o.who[sl.Node][sl.GPU] = append(o.who[sl.Node][sl.GPU], i)
			} else {
				o.used[sl.Node][sl.GPU] = s.Nodes[sl.Node].GPUs[sl.GPU].LaneCount()
			}
		}
	}
	return o
}

// index counts the wholly free GPUs per model and node.
func (o *occupancy) index() {
	c := o.c
	nodes := len(o.used)
	words := (nodes + 63) / 64
	o.free = make([][]int, len(c.models))
	o.buckets = make([][][]uint64, len(c.models))
	o.total = make([]int, len(c.models))
	for m := range c.models {
		o.free[m] = make([]int, nodes)
		o.buckets[m] = make([][]uint64, c.perNode[m]+1)
		for k := range o.buckets[m] {
			o.buckets[m][k] = make([]uint64, words)
		}
	}
	for n := range o.used {
		for x, g := range c.byNode[n] {
			if o.used[n][g] == 0 {
				o.free[c.modelOf[n][x]][n]++
			}
		}
	}
	for m := range c.models {
		for n, k := range o.free[m] {
			if k > 0 {
				o.buckets[m][k][n/64] |= 1 << (n % 64)
				o.total[m] += k
			}
		}
	}
}

// lowest is the lowest node in bitset b, or -1.
func lowest(b []uint64) int {
	for w, word := range b {
		if word != 0 {
			return w*64 + bits.TrailingZeros64(word)
		}
	}
	return -1
}

// take gives k wholly free GPUs of model m on node n to a job.
func (o *occupancy) take(s *Snapshot, n, m, k int, slots []Slot) []Slot {
	left := k
	for x, g := range o.c.byNode[n] {
		if left == 0 {
			break
		}
		if o.used[n][g] == 0 && o.c.modelOf[n][x] == m {
			o.used[n][g] = s.Nodes[n].GPUs[g].LaneCount()
			slots = append(slots, Slot{Node: n, GPU: g, Lane: -1})
			left--
		}
	}
	had := o.free[m][n]
	o.buckets[m][had][n/64] &^= 1 << (n % 64)
	o.free[m][n] = had - k
	if had > k {
		o.buckets[m][had-k][n/64] |= 1 << (n % 64)
	}
	o.total[m] -= k
	return slots
}

// placeWhole finds whole GPUs for j on the decided model, or un-runs d:
// the fullest single node that still has room (best fit, lowest node on a
// tie), else the nodes with the most free GPUs, most first.
func (o *occupancy) placeWhole(s *Snapshot, j *Job, d *Decision) {
	g := max(j.GPUs, 1)
	m := o.c.find(d.GPUModel)
	if m < 0 {
		d.Run = false
		return
	}
	if o.free == nil {
		o.index()
	}
	if o.total[m] < g {
		d.Run = false
		d.Reason = "waits: free GPUs are fragmented"
		return
	}
	buckets := o.buckets[m]
	for k := g; k < len(buckets); k++ {
		if n := lowest(buckets[k]); n >= 0 {
			d.Slots = o.take(s, n, m, g, make([]Slot, 0, g))
			return
		}
	}
	// Spread over the nodes with the most free GPUs.
	slots := make([]Slot, 0, g)
	for left := g; left > 0; {
		k := len(buckets) - 1
		for k > 0 && lowest(buckets[k]) < 0 {
			k--
		}
		n := lowest(buckets[k])
		take := min(left, k)
		slots = o.take(s, n, m, take, slots)
		left -= take
	}
	d.Slots = slots
}
