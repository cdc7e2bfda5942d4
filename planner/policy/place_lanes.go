package policy

// nameLaneStarts gives a concrete GPU to every lane start that its placer
// only counted: the count placers' first lane job on a GPU and the jobs on
// its spare lanes. Without one, the planner cannot pin the start to the
// GPU whose partners the count assumed (Nomad would pick any free lane),
// and the simulator would run it at full speed beside them. Each start,
// in rank order, joins a GPU of its model that lane jobs share and that
// has a lane free; else it opens a wholly free GPU of its model on the
// fullest node, keeping whole nodes free for gangs. A start that finds
// neither waits. Whole-GPU starts stay unnamed, for Nomad to place.
func nameLaneStarts(s *Snapshot, r *Result) {
	if !s.capacity().anyLanes() || !hasUnnamedLaneStart(s, r) {
		return
	}
	occ := newOccupancy(s, r)
	open := occ.openLanes(s)
	for _, i := range r.Order {
		j, d := &s.Jobs[i], &r.Decisions[i]
		if !isUnnamedLaneStart(j, d) {
			continue
		}
		if k := firstFitting(s, j, d.GPUModel, open); k >= 0 {
			open = occ.joinLane(s, i, d, open, k)
			continue
		}
		sl, ok := occ.freeLaneGPU(s, j, d.GPUModel)
		if !ok {
			d.Run, d.Lane = false, false
			d.Reason = r.join(d.Reason, "; waits: no GPU of its model has a lane free")
			continue
		}
		d.Slots = []Slot{occ.openLane(i, sl)}
		if s.Nodes[sl.Node].GPUs[sl.GPU].LaneCount() > 1 {
			open = append(open, Slot{Node: sl.Node, GPU: sl.GPU})
		}
	}
}

func isUnnamedLaneStart(j *Job, d *Decision) bool {
	return d.Run && d.Lane && len(d.Slots) == 0 && j.State != Running
}

func hasUnnamedLaneStart(s *Snapshot, r *Result) bool {
	for i := range r.Decisions {
		if isUnnamedLaneStart(&s.Jobs[i], &r.Decisions[i]) {
			return true
		}
	}
	return false
}

// firstFitting is the first GPU of open, of the model, whose lane fits j,
// or -1.
func firstFitting(s *Snapshot, j *Job, model string, open []Slot) int {
	for k, sl := range open {
		if s.Nodes[sl.Node].GPUs[sl.GPU].Model == model && laneFits(s, j, sl) {
			return k
		}
	}
	return -1
}

// anyLanes says some GPU model is cut into lanes.
func (c *capacity) anyLanes() bool {
	for _, l := range c.lanes {
		if l > 1 {
			return true
		}
	}
	return false
}

// openLanes lists the GPUs that lane jobs share and that have a lane free:
// the only places a lane job can join.
func (o *occupancy) openLanes(s *Snapshot) []Slot {
	var open []Slot
	for n := range s.Nodes {
		for _, g := range o.c.byNode[n] {
			if len(o.who[n][g]) > 0 && o.used[n][g] < s.Nodes[n].GPUs[g].LaneCount() {
				open = append(open, Slot{Node: n, GPU: g})
			}
		}
	}
	return open
}

// openLane starts job i on lane 0 of the wholly free GPU at sl, which
// other lane jobs may join from then on.
func (o *occupancy) openLane(i int, sl Slot) Slot {
	o.used[sl.Node][sl.GPU] = 1
	o.who[sl.Node][sl.GPU] = append(o.who[sl.Node][sl.GPU], i)
	sl.Lane = 0
	return sl
}

// joinLane starts job i (decided by d) on the next lane of open[k], and
// returns open without that GPU once its lanes are all taken.
func (o *occupancy) joinLane(s *Snapshot, i int, d *Decision, open []Slot, k int) []Slot {
	sl := open[k]
	sl.Lane = o.used[sl.Node][sl.GPU]
	o.used[sl.Node][sl.GPU]++
	o.who[sl.Node][sl.GPU] = append(o.who[sl.Node][sl.GPU], i)
	d.Run, d.Lane, d.Slots = true, true, []Slot{sl}
	d.GPUModel = s.Nodes[sl.Node].GPUs[sl.GPU].Model
	if o.used[sl.Node][sl.GPU] >= s.Nodes[sl.Node].GPUs[sl.GPU].LaneCount() {
		open = append(open[:k], open[k+1:]...)
	}
	return open
}

// freeLaneGPU is lane 0 of a wholly free GPU of model whose lanes fit j,
// on the node with the fewest wholly free GPUs of that model (lowest node
// on a tie).
func (o *occupancy) freeLaneGPU(s *Snapshot, j *Job, model string) (Slot, bool) {
	best, bestFree := Slot{}, -1
	for n := range s.Nodes {
		free, pick := 0, -1
		for _, g := range o.c.byNode[n] {
			gpu := &s.Nodes[n].GPUs[g]
			if gpu.Model != model || o.used[n][g] != 0 {
				continue
			}
			free++
			if pick < 0 && laneFits(s, j, Slot{Node: n, GPU: g}) {
				pick = g
			}
		}
		if pick >= 0 && (bestFree < 0 || free < bestFree) {
			best, bestFree = Slot{Node: n, GPU: pick}, free
		}
	}
	return best, bestFree >= 0
}
