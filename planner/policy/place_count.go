package policy

// countPlacer counts GPUs per model and nothing else: Tiresias' "count"
// placement. A job runs on GPUs of a single model; among the models that
// have room it takes the one with the most free GPUs.
type countPlacer struct{}

func (countPlacer) Name() string { return "count" }
func (countPlacer) countsOnly()  {}

func (countPlacer) Place(s *Snapshot, r *Result, preemptive, blocking bool) {
	walkByCount(s, r, preemptive, blocking, func(_ *Job, free []int, g int) int {
		return mostFree(free, g)
	})
}

// modelChooser picks the model a pending job should start on given the
// free GPUs per model, or -1 to leave it waiting.
type modelChooser func(j *Job, free []int, g int) int

// walkByCount is the walk every placer starts from. It visits jobs in rank
// order and decides Run and GPUModel by counting free GPUs per model:
// running jobs keep their model if it still has room for them (all of
// them, for non-preemptive orders), pending jobs start where choose says.
// With a nil choose it leaves pending jobs to the caller. It returns the
// GPUs left free per model.
func walkByCount(s *Snapshot, r *Result, preemptive, blocking bool, choose modelChooser) []int {
	c := s.capacity()
	k := keeper{c: c, s: s, free: append([]int(nil), c.total...)}
	free := k.free
	if !preemptive {
		for i := range s.Jobs {
			if j := &s.Jobs[i]; j.State == Running {
				k.keep(j, &r.Decisions[i])
			}
		}
	}
	startsBlocked := false
	for _, i := range r.Order {
		j, d := &s.Jobs[i], &r.Decisions[i]
		g := max(j.GPUs, 1)
		if j.State == Running {
			if !preemptive {
				continue
			}
			if k.fits(j) {
				k.keep(j, d)
			} else {
				d.Reason = r.join(d.Reason, "; preempted for higher-ranked jobs")
			}
			continue
		}
		if choose == nil {
			continue // the caller places pending jobs itself
		}
		if startsBlocked {
			d.Reason = r.join(d.Reason, "; waits behind the head of the queue")
			continue
		}
		m := -1
		if g <= maxInt(c.total) {
			m = choose(j, free, g)
		}
		if m < 0 {
			d.Reason = r.join(d.Reason, "; waits: not enough free GPUs")
			startsBlocked = blocking
			continue
		}
		d.Run, d.GPUModel = true, c.models[m]
		free[m] -= g
		d.Reason = r.join(d.Reason, "; starts")
	}
	return free
}

// keeper lets running jobs keep their GPUs, counting a GPU shared by lane
// jobs once.
type keeper struct {
	c        *capacity
	s        *Snapshot
	free     []int
	laneGPUs map[[2]int]bool
}

func (k *keeper) sharesCounted(j *Job) bool {
	if len(j.Placement) != 1 || j.Placement[0].Lane < 0 {
		return false
	}
	sl := j.Placement[0]
	return k.laneGPUs[[2]int{sl.Node, sl.GPU}]
}

func (k *keeper) fits(j *Job) bool {
	if k.sharesCounted(j) {
		return true
	}
	m := k.c.runningModel(k.s, j)
	return m >= 0 && k.free[m] >= max(j.GPUs, 1)
}

func (k *keeper) keep(j *Job, d *Decision) {
	m := k.c.runningModel(k.s, j)
	d.Run = true
	d.Slots = j.Placement
	d.Lane = len(j.Placement) > 0 && j.Placement[0].Lane >= 0
	if m >= 0 {
		d.GPUModel = k.c.models[m]
	}
	if m < 0 || k.sharesCounted(j) {
		return
	}
	k.free[m] -= max(j.GPUs, 1)
	if d.Lane {
		if k.laneGPUs == nil {
			k.laneGPUs = map[[2]int]bool{}
		}
		k.laneGPUs[[2]int{j.Placement[0].Node, j.Placement[0].GPU}] = true
	}
}

func maxInt(v []int) int {
	m := 0
	for _, x := range v {
		m = max(m, x)
	}
	return m
}
