package policy

// countPlacer counts GPUs per model and nothing else: Tiresias' "count"
// placement. A job runs on GPUs of a single model; among the models that
// have room it takes the one with the most free GPUs.
type countPlacer struct{}

func (countPlacer) Name() string { return "count" }
func (countPlacer) countsOnly()  {}
func (countPlacer) firstFit()    {}

func (countPlacer) Place(s *Snapshot, r *Result, preemptive, blocking bool) {
	walkByCountAgnostic(s, r, preemptive, blocking, shareLanes)
}

// shareLanes lets walkByCount start a one-GPU job on a free lane of a GPU
// that lane jobs already share. Placers that give jobs concrete lanes
// themselves (consolidated, pack) leave it off.
const shareLanes = true

// modelChooser picks the model a pending job should start on given the
// free GPUs per model, or -1 to leave it waiting.
type modelChooser func(j *Job, free []int, g int) int

// walkByCount is the walk every placer starts from. It visits jobs in rank
// order and decides Run and GPUModel by counting free GPUs per model:
// running jobs keep their model if it still has room for them (all of
// them, for non-preemptive orders), pending jobs start where choose says.
// With a nil choose it leaves pending jobs to the caller. It returns the
// GPUs left free per model.
//
// With lanes set, a GPU cut into lanes holds one lane job per lane: the
// first one-GPU job on it counts the GPU, and the jobs after it take its
// spare lanes, when their memory fits one. Without it every job counts
// whole GPUs. A job that names its models (Job.Models) runs on no other.
func walkByCount(s *Snapshot, r *Result, preemptive, blocking bool, choose modelChooser, lanes ...bool) []int {
	return walkByCountKeeper(s, r, preemptive, blocking, choose, len(lanes) > 0 && lanes[0]).free
}

// walkByCountAgnostic is walkByCount for a placer that tells models apart
// by their free GPUs alone (mostFree). To it GPUs that lower-ranked
// running jobs hold are no better than GPUs nobody holds, so a pending job
// starts where it displaces none of them when a model has room for that:
// taking a running job's model by a tie of counts would preempt it for
// nothing.
func walkByCountAgnostic(s *Snapshot, r *Result, preemptive, blocking, share bool) []int {
	return walkCount(s, r, preemptive, blocking, func(_ *Job, free []int, g int) int { return mostFree(free, g) }, share, true).free
}

// walkByCountKeeper is walkByCount returning its keeper, for a placer that
// goes on starting jobs with take.
func walkByCountKeeper(s *Snapshot, r *Result, preemptive, blocking bool, choose modelChooser, share bool) *keeper {
	return walkCount(s, r, preemptive, blocking, choose, share, false)
}

// walkCount is the walk; with spareHeld it keeps pending jobs off the
// GPUs of lower-ranked running jobs where another model has room.
func walkCount(s *Snapshot, r *Result, preemptive, blocking bool, choose modelChooser, share, spareHeld bool) *keeper {
	c := s.capacity()
	k := &keeper{c: c, s: s, free: append([]int(nil), c.total...), spare: make([]int, len(c.total)), share: share}
	free := k.free
	avail := make([]int, len(free))
	if !preemptive {
		for i := range s.Jobs {
			if j := &s.Jobs[i]; j.State == Running {
				k.keep(j, &r.Decisions[i])
			}
		}
	}
	// held counts, per model, the whole GPUs of running jobs the walk has
	// not reached yet.
	var held, unheld []int
	if preemptive && spareHeld {
		held, unheld = make([]int, len(free)), make([]int, len(free))
		for i := range s.Jobs {
			if j := &s.Jobs[i]; j.State == Running && !onLane(j) {
				if m := c.runningModel(s, j); m >= 0 {
					held[m] += max(j.GPUs, 1)
				}
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
			if held != nil && !onLane(j) {
				if m := c.runningModel(s, j); m >= 0 {
					held[m] -= max(j.GPUs, 1)
				}
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
		// What the job may take of each model: whole free GPUs, and spare
		// lanes for a one-GPU job that fits one.
		for m := range avail {
			avail[m] = 0
			if !j.allows(c.models[m]) {
				continue
			}
			avail[m] = k.room(j, m, g)
		}
		m := -1
		if g <= maxInt(c.total) {
			m = choose(j, avail, g)
		}
		if m >= 0 && held != nil && avail[m]-g < held[m] {
			for x := range avail {
				unheld[x] = max(avail[x]-held[x], 0)
			}
			if spare := choose(j, unheld, g); spare >= 0 {
				m = spare
			}
		}
		if m < 0 {
			d.Reason = r.join(d.Reason, "; waits: not enough free GPUs")
			startsBlocked = blocking
			continue
		}
		k.take(j, d, m, g)
		d.Reason = r.join(d.Reason, "; starts")
	}
	return k
}

// onLane says a job runs on a lane rather than whole GPUs.
func onLane(j *Job) bool {
	return len(j.Placement) > 0 && j.Placement[0].Lane >= 0
}

// keeper lets running jobs keep their GPUs, counting a GPU shared by lane
// jobs once; spare counts the lanes left on such GPUs, per model.
type keeper struct {
	c        *capacity
	s        *Snapshot
	free     []int
	spare    []int
	share    bool // one-GPU jobs may take spare lanes
	laneGPUs map[[2]int]bool
}

// room is how many GPUs of model m job j may take now: whole free GPUs,
// and spare lanes for a one-GPU job that fits one.
func (k *keeper) room(j *Job, m, g int) int {
	if !j.allows(k.c.models[m]) {
		return 0
	}
	if k.share && g == 1 && k.fitsLane(j, m) {
		return k.free[m] + k.spare[m]
	}
	return k.free[m]
}

// take starts j on g GPUs of model m, on a spare lane when it can.
func (k *keeper) take(j *Job, d *Decision, m, g int) {
	d.Run, d.GPUModel = true, k.c.models[m]
	switch {
	case k.share && g == 1 && k.fitsLane(j, m) && k.spare[m] > 0:
		k.spare[m]--
		d.Lane = true
	case k.share && g == 1 && k.fitsLane(j, m):
		// The first lane job on a GPU: the rest of its lanes are spare.
		k.free[m]--
		k.spare[m] += k.c.lanes[m] - 1
		d.Lane = true
	default:
		k.free[m] -= g
	}
}

// fitsLane says j may run on one lane of model m.
func (k *keeper) fitsLane(j *Job, m int) bool {
	return k.c.lanes[m] > 1 && (j.GPUMemoryMB == 0 || k.c.laneMem[m] == 0 || j.GPUMemoryMB <= k.c.laneMem[m])
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
	return m >= 0 && (k.free[m] >= max(j.GPUs, 1) || k.onSpareLane(j, m))
}

// onSpareLane says a running lane job whose GPU is not counted yet may be
// counted on a spare lane: counting is by model, so the spare lanes that
// jobs started this round took are as good as the lanes of its own GPU.
func (k *keeper) onSpareLane(j *Job, m int) bool {
	return k.share && k.free[m] < 1 && k.spare[m] > 0 && len(j.Placement) == 1 && j.Placement[0].Lane >= 0
}

func (k *keeper) keep(j *Job, d *Decision) {
	m := k.c.runningModel(k.s, j)
	d.Run = true
	d.Slots = j.Placement
	d.Lane = len(j.Placement) > 0 && j.Placement[0].Lane >= 0
	if m >= 0 {
		d.GPUModel = k.c.models[m]
	}
	if m < 0 {
		return
	}
	if k.sharesCounted(j) || k.onSpareLane(j, m) {
		k.spare[m] = max(k.spare[m]-1, 0)
		return
	}
	k.free[m] -= max(j.GPUs, 1)
	if d.Lane {
		if k.laneGPUs == nil {
			k.laneGPUs = map[[2]int]bool{}
		}
		sl := j.Placement[0]
		k.laneGPUs[[2]int{sl.Node, sl.GPU}] = true
		if sl.Node < len(k.s.Nodes) && sl.GPU < len(k.s.Nodes[sl.Node].GPUs) {
			k.spare[m] += k.s.Nodes[sl.Node].GPUs[sl.GPU].LaneCount() - 1
		}
	}
}

func maxInt(v []int) int {
	m := 0
	for _, x := range v {
		m = max(m, x)
	}
	return m
}
