package policy

// capacity is the cluster's healthy whole GPUs by model, built once per
// Snapshot (see Snapshot.capacity) since nodes change far less often than
// jobs.
type capacity struct {
	models   []string // sorted by first appearance in Nodes
	total    []int    // healthy GPUs per model
	perNode  []int    // most healthy GPUs of one model on one node
	lanes    []int    // most lanes of one GPU of the model (1: whole only)
	laneMem  []int    // memory of one such lane in MB
	byNode   [][]int  // healthy GPU indices per node
	modelOf  [][]int  // model index of each GPU in byNode
	gpus     int      // GPUs on all nodes, healthy or not
	nodeType []int    // model index per node (-1: mixed or none)
}

func (s *Snapshot) capacity() *capacity {
	if s.cap != nil {
		return s.cap
	}
	c := &capacity{byNode: make([][]int, len(s.Nodes)), modelOf: make([][]int, len(s.Nodes)),
		nodeType: make([]int, len(s.Nodes))}
	for n := range s.Nodes {
		node := &s.Nodes[n]
		c.gpus += len(node.GPUs)
		c.nodeType[n] = -1
		if !node.Healthy {
			continue
		}
		count := map[int]int{}
		for g, gpu := range node.GPUs {
			if !gpu.Healthy {
				continue
			}
			m := c.modelIndex(gpu.Model)
			c.total[m]++
			if gpu.LaneCount() > c.lanes[m] {
				c.lanes[m], c.laneMem[m] = gpu.LaneCount(), gpu.LaneMemoryMB
			}
			count[m]++
			c.byNode[n] = append(c.byNode[n], g)
			c.modelOf[n] = append(c.modelOf[n], m)
			if c.nodeType[n] == -1 {
				c.nodeType[n] = m
			} else if c.nodeType[n] != m {
				c.nodeType[n] = -2
			}
		}
		for m, k := range count {
			c.perNode[m] = max(c.perNode[m], k)
		}
	}
	s.cap = c
	return c
}

func (c *capacity) modelIndex(model string) int {
	for i, m := range c.models {
		if m == model {
			return i
		}
	}
	c.models = append(c.models, model)
	c.total = append(c.total, 0)
	c.perNode = append(c.perNode, 0)
	c.lanes = append(c.lanes, 1)
	c.laneMem = append(c.laneMem, 0)
	return len(c.models) - 1
}

// healthy is the number of healthy whole GPUs of every model.
func (c *capacity) healthy() int {
	n := 0
	for _, t := range c.total {
		n += t
	}
	return n
}

// find returns the index of model, or -1.
func (c *capacity) find(model string) int {
	for i, m := range c.models {
		if m == model {
			return i
		}
	}
	return -1
}

// ResetCache drops what a Snapshot caches about its Nodes; call it after
// changing Nodes on a Snapshot that was planned before.
func (s *Snapshot) ResetCache() { s.cap = nil }

// decidedModel is the model index a job runs on after the round's
// decision d: the model d names, or, for a running job, the one it holds;
// -1 where neither is known.
func (c *capacity) decidedModel(s *Snapshot, j *Job, d *Decision) int {
	at := c.find(d.GPUModel)
	if at < 0 && j.State == Running {
		at = c.runningModel(s, j)
	}
	return at
}

// runningModel is the model index a running job holds, from its GPUModel
// or its placement; with one model in the cluster that model.
func (c *capacity) runningModel(s *Snapshot, j *Job) int {
	if len(c.models) == 1 {
		return 0
	}
	if j.GPUModel != "" {
		if m := c.find(j.GPUModel); m >= 0 {
			return m
		}
	}
	if len(j.Placement) > 0 {
		sl := j.Placement[0]
		if sl.Node < len(s.Nodes) && sl.GPU < len(s.Nodes[sl.Node].GPUs) {
			if m := c.find(s.Nodes[sl.Node].GPUs[sl.GPU].Model); m >= 0 {
				return m
			}
		}
	}
	if len(c.models) > 0 {
		return 0
	}
	return -1
}

// mostFree is the model with the most free GPUs that can hold g, or -1.
func mostFree(free []int, g int) int {
	best := -1
	for m, f := range free {
		if f >= g && (best < 0 || f > free[best]) {
			best = m
		}
	}
	return best
}
