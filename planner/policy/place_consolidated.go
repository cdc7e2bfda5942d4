package policy

import "slices"

// consolidatedPlacer counts first (walkByCount) and then gives each job
// concrete GPUs, as few nodes as possible: the fullest single node that
// still has room (best fit), else whole nodes, most free first. A job the
// count admitted but fragmentation cannot place waits.
type consolidatedPlacer struct{}

func (consolidatedPlacer) Name() string { return "consolidated" }

func (consolidatedPlacer) Place(s *Snapshot, r *Result, preemptive, blocking bool) {
	walkByCount(s, r, preemptive, blocking, func(_ *Job, free []int, g int) int {
		return mostFree(free, g)
	})
	occ := newOccupancy(s, r)
	for _, i := range r.Order {
		j, d := &s.Jobs[i], &r.Decisions[i]
		if !d.Run || j.State == Running {
			continue
		}
		occ.placeWhole(s, j, d)
	}
}

// occupancy tracks lanes in use per GPU for one round.
type occupancy struct {
	c    *capacity
	used [][]int   // used[node][gpu]: lanes taken; whole-GPU jobs take all
	who  [][][]int // who[node][gpu]: jobs on its lanes
	free []int     // free[node]: wholly free GPUs, -1 until counted
}

// newOccupancy marks the GPUs of every job that keeps running this round.
func newOccupancy(s *Snapshot, r *Result) *occupancy {
	c := s.capacity()
	o := &occupancy{c: c, used: make([][]int, len(s.Nodes)), who: make([][][]int, len(s.Nodes))}
	for n := range s.Nodes {
		o.used[n] = make([]int, len(s.Nodes[n].GPUs))
		o.who[n] = make([][]int, len(s.Nodes[n].GPUs))
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

// freeOn lists the wholly free GPUs of model on node n.
func (o *occupancy) freeOn(s *Snapshot, n int, model string, buf []int) []int {
	buf = buf[:0]
	for _, g := range o.c.byNode[n] {
		if o.used[n][g] == 0 && s.Nodes[n].GPUs[g].Model == model {
			buf = append(buf, g)
		}
	}
	return buf
}

// freeCount is the number of wholly free GPUs of model index m on node n,
// counted once per round and kept up to date by take.
func (o *occupancy) freeCount(s *Snapshot, n, m int) int {
	if o.c.nodeType[n] == -2 { // mixed node: count it out
		return len(o.freeOn(s, n, o.c.models[m], nil))
	}
	if o.c.nodeType[n] != m {
		return 0
	}
	if o.free == nil {
		o.free = make([]int, len(s.Nodes))
		for k := range o.free {
			o.free[k] = -1
		}
	}
	if o.free[n] < 0 {
		o.free[n] = len(o.freeOn(s, n, o.c.models[m], nil))
	}
	return o.free[n]
}

// placeWhole finds whole GPUs for j on the decided model, or un-runs d.
func (o *occupancy) placeWhole(s *Snapshot, j *Job, d *Decision) {
	g := max(j.GPUs, 1)
	m := o.c.find(d.GPUModel)
	if m < 0 {
		d.Run = false
		return
	}
	best, total := -1, 0
	for n := range s.Nodes {
		k := o.freeCount(s, n, m)
		total += k
		if k >= g && (best < 0 || k < o.freeCount(s, best, m)) {
			best = n
		}
	}
	if total < g {
		d.Run = false
		d.Reason = "waits: free GPUs are fragmented"
		return
	}
	var slots []Slot
	take := func(n, k int) {
		for _, gi := range o.freeOn(s, n, d.GPUModel, nil)[:k] {
			o.used[n][gi] = s.Nodes[n].GPUs[gi].LaneCount()
			slots = append(slots, Slot{Node: n, GPU: gi, Lane: -1})
		}
		if o.free != nil && o.free[n] >= 0 {
			o.free[n] -= k
		}
	}
	if best >= 0 {
		take(best, g)
	} else {
		// Spread over the nodes with the most free GPUs.
		var nodes []int
		for n := range s.Nodes {
			if o.freeCount(s, n, m) > 0 {
				nodes = append(nodes, n)
			}
		}
		slices.SortStableFunc(nodes, func(a, b int) int { return o.freeCount(s, b, m) - o.freeCount(s, a, m) })
		left := g
		for _, n := range nodes {
			k := min(left, o.freeCount(s, n, m))
			take(n, k)
			if left -= k; left == 0 {
				break
			}
		}
	}
	d.Slots = slots
}
