package sim

import (
	"cmp"
	"math"
	"slices"

	"github.com/caravan-gpu/caravan/internal/minheap"
	"github.com/caravan-gpu/caravan/planner/policy"
)

// planRound builds the Snapshot, asks the policy, and carries out its
// decisions.
func (s *simulator) planRound() {
	if s.arrivals != nil {
		s.arrivalRound()
		return
	}
	if s.keyed != nil {
		s.keyed.round()
		return
	}
	s.rounds++
	s.dropFinished()
	s.refreshSnapshot()
	s.snap.Now = s.now
	s.learnSizes()

	r := s.cfg.Policy.Plan(&s.snap, &s.plan)
	// Preemptions first, so the GPUs they free are free for the starts.
	changes := s.changes[:0]
	for k, i := range s.active {
		d := &r.Decisions[k]
		js := &s.jobs[i]
		js.PrevQueue, js.PrevRank = d.Queue, d.Rank
		if d.Promoted {
			js.Attained, js.Executed, js.Wait, js.promoWait = 0, 0, 0, 0
		}
		if d.Renewed {
			js.Placed = s.now // its lease renewed, where it is or where it moves
		}
		switch {
		case js.State == policy.Running && !d.Run:
			s.preempt(i)
		case js.State == policy.Pending && d.Run, js.State == policy.Running && d.Migrate:
			// A running job's size and speedup change only by a restart.
			changes = append(changes, k)
		}
	}
	for _, k := range changes {
		d := &r.Decisions[k]
		i := s.active[k]
		js := &s.jobs[i]
		if js.State == policy.Pending {
			s.start(i, d)
		} else {
			s.migrate(i, d)
		}
	}
	s.changes = changes
	if s.anyLanes {
		s.refreshLaneRates()
	}
	s.nextRank = len(s.active)
	s.blocked = s.pending > 0
	s.head = -1
	if s.blocked && s.cfg.Policy.Blocking {
		for _, k := range r.Order {
			if i := s.active[k]; s.jobs[i].State == policy.Pending {
				s.head = i
				break
			}
		}
	}
	s.wakeAt = math.Inf(1)
	if !math.IsInf(r.Wake, 1) {
		s.wakeAt = s.now + max(r.Wake, 1e-3)
	}
}

// refreshSnapshot brings s.snap.Jobs up to date with the active jobs, in
// the same order. Jobs that were in the last round's Snapshot keep their
// entry and only the fields the simulator changes are written: copying
// every job into a new Snapshot each round was a fifth of a congested run.
func (s *simulator) refreshSnapshot() {
	jobs, of := s.snap.Jobs, s.snapOf
	w, r := 0, 0
	for _, i := range s.active {
		js := &s.jobs[i]
		s.settle(js)
		// Both lists are in arrival order, and jobs new to the Snapshot
		// arrived after every job in it.
		for r < len(of) && of[r] < i {
			r++
		}
		if r < len(of) && of[r] == i {
			if w != r {
				jobs[w] = jobs[r]
			}
			r++
			refreshJob(&jobs[w], &js.Job)
		} else if w < len(jobs) {
			jobs[w] = js.Job
		} else {
			jobs = append(jobs, js.Job)
		}
		if w < len(of) {
			of[w] = i
		} else {
			of = append(of, i)
		}
		j := &jobs[w]
		w++
		setRemaining(j, js)
		if s.cfg.Compat {
			j.Wait = js.promoWait
		}
	}
	s.snap.Jobs, s.snapOf = jobs[:w], of[:w]
	if s.cfg.checkSnapshot && s.snapErr == nil && compareKeptSnapshot != nil {
		s.snapErr = compareKeptSnapshot(s)
	}
}

// setRemaining sets j's remaining time (and work, for a job given in
// steps) from js's progress, as a round's Snapshot shows them. A running
// job's start costs not yet spent (its latency and run overhead, which
// start added to its work) are not the job's work: a live planner counts
// the remaining time from the job's duration and the time it has run, and
// a job still starting has not run.
func setRemaining(j *policy.Job, js *jobState) {
	work := js.work
	if js.State == policy.Running {
		work = js.workLeft()
	}
	if js.rates != nil {
		j.RemainingWork = max(work, 0)
		j.Remaining = j.RemainingWork / maxRate(js.rates)
	} else {
		j.Remaining = max(work, 0)
	}
}

// compareKeptSnapshot, set by the tests, compares the kept Snapshot with a
// fresh copy of the active jobs (Config.checkSnapshot).
var compareKeptSnapshot func(s *simulator) error

// refreshJob copies into dst the fields of src the simulator changes
// (see settle, start, preempt and planRound); the others are set once.
func refreshJob(dst, src *policy.Job) {
	dst.State = src.State
	dst.Attained, dst.Executed, dst.Wait = src.Attained, src.Executed, src.Wait
	dst.PrevQueue, dst.PrevRank = src.PrevQueue, src.PrevRank
	dst.Placed = src.Placed
	dst.CPUs, dst.MemoryGB = src.CPUs, src.MemoryGB
	if dst.GPUModel != src.GPUModel {
		dst.GPUModel = src.GPUModel
	}
	if len(dst.Placement) != len(src.Placement) || (len(src.Placement) > 0 && &dst.Placement[0] != &src.Placement[0]) {
		dst.Placement = src.Placement
	}
}

// dropFinished removes finished jobs from the active set, keeping its
// arrival order.
func (s *simulator) dropFinished() {
	w := 0
	for _, i := range s.active {
		if !s.jobs[i].done {
			s.active[w] = i
			w++
		}
	}
	s.active = s.active[:w]
}

func maxRate(rates map[string]float64) float64 {
	best := 0.0
	for _, r := range rates {
		best = max(best, r)
	}
	return best
}

// learnSizes refreshes the completed-size distribution 2D-Gittins may learn
// from when policy.Relearn says so.
func (s *simulator) learnSizes() {
	if s.cfg.Policy.Order.Name() != "gittins" {
		return // only 2D-Gittins reads the completed sizes
	}
	if n := len(s.sizes); policy.Relearn(s.sizesBuilt, n) {
		if d := s.snap.CompletedSizes; d != nil {
			s.snap.CompletedSizes = d.With(s.sizes[s.sizesBuilt:])
		} else {
			s.snap.CompletedSizes = policy.NewSizeDistribution(s.sizes)
		}
		s.sizesBuilt = n
	}
}

func (s *simulator) gpuUse(js *jobState) float64 {
	if js.laneShare > 0 {
		return 0 // lanes count their GPU once, in occupyLane
	}
	return float64(js.GPUs)
}

func (s *simulator) start(i int, d *policy.Decision) {
	if s.keyed != nil {
		s.keyed.unwait(i)
	}
	js := &s.jobs[i]
	s.settle(js)
	js.State = policy.Running
	js.Wait = 0
	js.GPUModel = d.GPUModel
	s.ranOn(js, d.GPUModel)
	js.Placement, js.Placed = d.Slots, s.now
	js.nodes = spannedNodes(d.Slots)
	js.speedup = d.Speedup
	js.CPUs, js.MemoryGB = d.CPUs, d.MemoryGB
	s.pending--
	if !js.started {
		js.started, js.start = true, s.now
	} else {
		if s.restarts != nil {
			s.restarts[i] = append(s.restarts[i], s.now)
		}
		if s.cfg.PreemptionCost > 0 {
			js.work += s.cfg.PreemptionCost * s.wallRate(js)
		}
	}
	latency := s.startLatency()
	js.gangTail = 0
	var wait float64
	if s.preempted && s.preemptedAt == s.now {
		wait = s.waitForStops(s.gpuUse(js))
	}
	if len(s.held) > 0 && !d.Lane {
		// A lane start's GPU is counted by its lane, and no lane job
		// holds GPUs once taken back.
		wait = max(wait, s.waitForHeld(s.gpuUse(js)))
	}
	latency += wait
	js.freedAt = s.now + wait
	switch {
	case s.cfg.StartsShared:
		// The clients set up the tasks of every start under way side by
		// side; this one's end moves as others join and leave. No gang
		// spread: a start's tasks end their set-up together.
		latency = s.sharedSetUp(i, latency)
	case s.cfg.StartSpread > 0 || s.cfg.GangSpread > 0:
		// The cluster starts tasks one after another, a spread apart,
		// those of earlier rounds first; a gang's tasks too (GangSpread
		// apart where it is set), and it runs once its last one has
		// started.
		first := max(s.now, s.startsFree)
		tasks := float64(max(js.GPUs, 1))
		// Within a gang no closer than the queue's pace: the clients
		// serve a gang's tasks too.
		gap := max(s.cfg.StartSpread, s.cfg.GangSpread)
		latency += first - s.now + (tasks-1)*gap
		js.gangTail = (tasks - 1) * gap
		s.startsFree = first + tasks*s.cfg.StartSpread
		js.startSlots = [2]float64{first, s.startsFree}
	}
	s.addLag(js)
	js.idleEnd = js.work
	if idle := latency + s.cfg.RunOverhead; idle > 0 {
		js.work += idle * s.wallRate(js)
	}
	js.latency = latency
	js.laneShare = 0
	if d.Lane && len(d.Slots) == 1 {
		s.occupyLane(i, d.Slots[0])
		if latency > 0 {
			s.pushLaneWake(i, s.now+latency)
		}
	}
	s.setBusy(s.gpuUse(js))
	s.reschedule(i)
	if s.keyed != nil {
		s.keyed.started = append(s.keyed.started, i)
	}
}

// spannedNodes counts the nodes slots are on.
func spannedNodes(slots []policy.Slot) int {
	n := 0
	for i, sl := range slots {
		seen := false
		for _, before := range slots[:i] {
			seen = seen || before.Node == sl.Node
		}
		if !seen {
			n++
		}
	}
	return n
}

func (s *simulator) preempt(i int) {
	if !s.preempted || s.preemptedAt != s.now {
		s.preempted, s.preemptedAt, s.freeBeforeStops = true, s.now, float64(s.gpus)-s.busy-s.heldNow()
		s.stopsFreed = 0
	}
	js := &s.jobs[i]
	s.settle(js)
	if s.inLag(js) {
		s.finishInLag(i)
		return
	}
	js.lazy = false // rounds settle it while it waits
	js.leaveRun()
	use := s.gpuUse(js) // 0 on a lane: its GPU is counted once, by the lane
	s.setBusy(-use)
	if js.laneShare > 0 {
		s.releaseLane(i)
	}
	if s.cfg.StartsShared {
		s.setupLeave(i) // a start under way leaves the set-up: the others end sooner
	}
	if js.latency > 0 {
		// Still starting: it gives up its place in the queue of starts.
		if unused := js.startSlots[1] - max(s.now, js.startSlots[0]); unused > 0 {
			s.startsFree = max(s.now, s.startsFree-unused)
		}
	}
	if js.latency > js.gangTail {
		// Taken back before its first task ran: no run was preempted.
		// Its GPUs are free at once, or once Nomad's client has given up
		// the set-up (AbortLatency), or, not placed yet, once those it
		// waited for free.
		switch {
		case s.cfg.AbortLatency <= 0:
			// Counted after releaseLane, as it always was, so that runs
			// without an abort latency stay as they were to the bit.
			s.freeBeforeStops += s.gpuUse(js)
		case s.now < js.freedAt:
			s.hold(use, js.freedAt)
		default:
			s.hold(use, s.now+s.cfg.AbortLatency)
		}
		js.latency = 0
		js.ranOnTakenBack()
	} else {
		// A gang of which some tasks run (its last still starting) has
		// tasks to stop, as a running job has.
		s.stopsFreed += use
		js.latency = 0
		js.preempts++
		js.stops = append(js.stops, s.now)
	}
	js.State = policy.Pending
	js.pendingFrom = s.now
	js.Wait = 0
	js.version++
	js.Placement = nil
	s.pending++
	if s.keyed != nil {
		s.keyed.wait(i)
	}
}

// workLeft is a running job's own work left: not the start costs its run
// has still to spend (its latency and overhead, which start added to its
// work), nor the lag before the cluster learns of its end.
func (js *jobState) workLeft() float64 {
	return min(js.work, js.idleEnd) - js.lagWork
}

// leaveRun keeps of a job's work, as its run ends, its own work left: a
// start that had not got through its latency and overhead is lost whole,
// and the next run pays its own, and its own lag.
func (js *jobState) leaveRun() {
	js.work, js.lagWork = js.workLeft(), 0
}

// addLag adds to a run's work, as its last, the CompletionLag before the
// cluster learns of its end.
func (s *simulator) addLag(js *jobState) {
	js.lagWork = s.cfg.CompletionLag * s.wallRate(js)
	js.work += js.lagWork
}

// inLag says a running job, settled, has done its work and waits only
// for the cluster to learn of it (CompletionLag).
func (s *simulator) inLag(js *jobState) bool {
	return js.lagWork > 0 && js.State == policy.Running && js.work <= js.lagWork
}

// finishInLag finishes job i, which a round preempts or moves in its lag:
// live, the planner's write finds the task ended. Its GPUs free as a
// completion's do.
func (s *simulator) finishInLag(i int) {
	js := &s.jobs[i]
	lagLeft := 0.0
	if r := s.wallRate(js); r > 0 {
		lagLeft = js.work / r
	}
	s.finishJob(i, s.now-(s.cfg.CompletionLag-lagLeft))
}

// waitForStops is how much longer a start of use GPUs, in the round of a
// preemption, waits for the GPUs its stops free: none while the GPUs
// free before it last, else StopLatency and UnblockLatency (where starts
// taken back are held, only while the stops' GPUs last). The GPUs it
// takes are counted off.
func (s *simulator) waitForStops(use float64) float64 {
	need := use - s.freeBeforeStops
	s.freeBeforeStops = max(0, s.freeBeforeStops-use)
	if need <= 0 {
		return 0
	}
	if s.cfg.AbortLatency > 0 {
		// Starts taken back hold GPUs of their own (waitForHeld): the
		// stop latency is for the GPUs the round's stops free.
		if s.stopsFreed <= 0 {
			return 0
		}
		s.stopsFreed = max(0, s.stopsFreed-need)
	}
	return s.cfg.StopLatency + s.cfg.UnblockLatency
}

// heldGPUs are GPUs of a start taken back that free at until.
type heldGPUs struct {
	gpus, until float64
}

// hold keeps gpus GPUs from the starts until until.
func (s *simulator) hold(gpus, until float64) {
	if gpus > 0 && until > s.now {
		s.held = append(s.held, heldGPUs{gpus, until})
	}
}

// heldNow drops the held GPUs that have come free and says how many are
// held still.
func (s *simulator) heldNow() float64 {
	s.held = slices.DeleteFunc(s.held, func(h heldGPUs) bool { return h.until <= s.now })
	total := 0.0
	for _, h := range s.held {
		total += h.gpus
	}
	return total
}

// waitForHeld is how much longer a start of use GPUs waits for held ones:
// none where the GPUs neither busy nor held suffice, else until enough of
// the held ones have come free, soonest first, which it then takes.
func (s *simulator) waitForHeld(use float64) float64 {
	need := use - (float64(s.gpus) - s.busy - s.heldNow())
	if need <= 0 {
		return 0
	}
	slices.SortFunc(s.held, func(a, b heldGPUs) int { return cmp.Compare(a.until, b.until) })
	until := s.now
	for k := range s.held {
		if need <= 0 {
			break
		}
		take := min(need, s.held[k].gpus)
		s.held[k].gpus -= take
		need -= take
		until = s.held[k].until
	}
	s.held = slices.DeleteFunc(s.held, func(h heldGPUs) bool { return h.gpus <= 0 })
	return until - s.now
}

// migrate moves a running job to d's GPU model (or, Synergy's lease, to
// other GPUs of its own): it stops and starts again there, losing
// MigrationCost seconds of run time on the new model and paying every
// start's latency and overhead (with StartsShared, its share of the
// set-up too).
func (s *simulator) migrate(i int, d *policy.Decision) {
	js := &s.jobs[i]
	s.settle(js)
	if s.inLag(js) {
		s.finishInLag(i)
		return
	}
	s.setBusy(-s.gpuUse(js))
	js.leaveRun() // in the work of the model it leaves
	js.GPUModel = d.GPUModel
	s.ranOn(js, d.GPUModel)
	js.Placement, js.Placed = d.Slots, s.now
	js.nodes = spannedNodes(d.Slots)
	js.speedup = d.Speedup
	js.CPUs, js.MemoryGB = d.CPUs, d.MemoryGB
	js.migrations++
	if s.cfg.StartsShared {
		s.setupLeave(i)
	}
	js.work += s.cfg.MigrationCost * s.wallRate(js)
	s.addLag(js)
	js.idleEnd = js.work
	latency := s.startLatency()
	if s.cfg.StartsShared {
		// Its tasks are set up again, beside the starts under way.
		latency = s.sharedSetUp(i, latency)
	}
	js.work += (latency + s.cfg.RunOverhead) * s.wallRate(js)
	js.latency, js.gangTail = latency, 0
	js.freedAt = s.now
	s.setBusy(s.gpuUse(js))
	s.reschedule(i)
}

// startLatency is the latency a start holds its GPUs for before its
// task runs: Config.StartLatency, spread by Config.StartJitter.
func (s *simulator) startLatency() float64 {
	l := s.cfg.StartLatency
	if s.jitter == nil || l <= 0 {
		return l
	}
	return l * (1 + s.cfg.StartJitter*(2*s.jitter.Float64()-1))
}

// baseRate is the job's solo speed on its current model.
func (s *simulator) baseRate(js *jobState) float64 {
	if js.rates == nil {
		return 1
	}
	if r := js.rates[js.GPUModel]; r > 0 {
		return r
	}
	slow := math.Inf(1)
	for _, r := range js.rates {
		slow = min(slow, r)
	}
	return slow
}

// wallRate is the work a running job does in a second, so that time it
// spends idle (a start, a restart) is charged as that much work: its rate
// on its model times its Synergy speedup, which scales how fast it
// trains, not how long it takes to start.
func (s *simulator) wallRate(js *jobState) float64 {
	if js.speedup > 0 {
		return s.baseRate(js) * js.speedup
	}
	return s.baseRate(js)
}

// reschedule recomputes a running job's rate and finish event.
func (s *simulator) reschedule(i int) {
	js := &s.jobs[i]
	s.settle(js)
	rate := s.baseRate(js) * js.speedup
	if js.laneShare > 0 {
		rate *= s.laneFactor(i)
	}
	js.rate = rate
	js.version++
	if rate <= 0 {
		js.finishAt = math.Inf(1)
		return
	}
	js.finishAt = s.now + max(js.work, 0)/rate
	s.heap.push(finishEvent{t: js.finishAt, job: i, version: js.version})
}

type finishEvent struct {
	t       float64
	job     int
	version int
}

// finishHeap orders the finish events, earliest first, ties by job. A
// preempted job leaves a stale event behind, and a congested run pushes
// and pops millions of them.
type finishHeap []minheap.Entry[int] // Key: time, Tie: job, Value: version

func (h *finishHeap) push(e finishEvent) {
	*h = minheap.Push(*h, minheap.Entry[int]{Key: e.t, Tie: e.job, Value: e.version})
}

// pop removes and returns the earliest event.
func (h *finishHeap) pop() finishEvent {
	e, q := minheap.Pop(*h)
	*h = q
	return finishEvent{t: e.Key, job: e.Tie, version: e.Value}
}
