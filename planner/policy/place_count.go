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
// by their free GPUs alone (mostFree). It keeps the running jobs the walk
// displaced for nothing (keeper.keepDisplaced).
func walkByCountAgnostic(s *Snapshot, r *Result, preemptive, blocking, share bool) []int {
	return walkCount(s, r, preemptive, blocking, func(_ *Job, free []int, g int) int { return mostFree(free, g) }, share, true).free
}

// walkByCountKeeper is walkByCount returning its keeper, for a placer that
// goes on starting jobs with take.
func walkByCountKeeper(s *Snapshot, r *Result, preemptive, blocking bool, choose modelChooser, share bool) *keeper {
	return walkCount(s, r, preemptive, blocking, choose, share, false)
}

// walkCount is the walk; with keepNeedless it ends with
// keeper.keepDisplaced.
func walkCount(s *Snapshot, r *Result, preemptive, blocking bool, choose modelChooser, share, keepNeedless bool) *keeper {
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
	// The running jobs on whole GPUs the walk displaces, with their
	// reasons before, and the jobs it starts on whole GPUs, in rank order.
	var displaced, started []int
	var before []string
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
				if keepNeedless && !onLane(j) {
					displaced, before = append(displaced, i), append(before, d.Reason)
				}
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
		if m < 0 {
			d.Reason = r.join(d.Reason, "; waits: not enough free GPUs")
			startsBlocked = blocking
			continue
		}
		k.take(j, d, m, g)
		d.Reason = r.join(d.Reason, "; starts")
		if keepNeedless && !d.Lane {
			started = append(started, i)
		}
	}
	for n, i := range displaced {
		if k.keepDisplaced(r, i, started) {
			r.Decisions[i].Reason = before[n]
		}
	}
	return k
}

// keepDisplaced keeps running job i, which the walk displaced, when the
// jobs it started on i's model can start on other models' free GPUs
// instead, and moves them there. To a placer that tells models apart by
// free GPUs alone a GPU a running job holds is no better than a free one,
// so taking it preempted the job for nothing. It changes no job's start,
// only its model, and uses only GPUs the walk left free: keeping i costs
// no other job.
func (k *keeper) keepDisplaced(r *Result, i int, started []int) bool {
	j := &k.s.Jobs[i]
	m := k.c.runningModel(k.s, j)
	if m < 0 {
		return false
	}
	type move struct{ job, to, gpus int }
	var moves []move
	need := max(j.GPUs, 1) - k.free[m]
	// The lowest-ranked starts move first.
	for x := len(started) - 1; x >= 0 && need > 0; x-- {
		p := started[x]
		if r.Decisions[p].GPUModel != k.c.models[m] {
			continue
		}
		pj := &k.s.Jobs[p]
		g := max(pj.GPUs, 1)
		to := -1
		for y, f := range k.free {
			if y != m && f >= g && pj.allows(k.c.models[y]) && (to < 0 || f > k.free[to]) {
				to = y
			}
		}
		if to < 0 {
			continue
		}
		k.free[to] -= g
		k.free[m] += g
		moves = append(moves, move{p, to, g})
		need -= g
	}
	if need > 0 {
		for _, mv := range moves {
			k.free[mv.to] += mv.gpus
			k.free[m] -= mv.gpus
		}
		return false
	}
	for _, mv := range moves {
		r.Decisions[mv.job].GPUModel = k.c.models[mv.to]
	}
	k.keep(j, &r.Decisions[i])
	return true
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
	d.Lane = onLane(j)
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
