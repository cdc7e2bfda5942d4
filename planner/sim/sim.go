package sim

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/caravan-gpu/caravan/internal/minheap"
	"github.com/caravan-gpu/caravan/planner/policy"
	"github.com/caravan-gpu/caravan/planner/trace"
)

// Config describes one simulation run.
type Config struct {
	Cluster trace.Cluster
	Policy  *policy.Policy
	// Lanes splits every GPU into that many lanes of LaneMemoryMB each
	// (0 or 1: whole GPUs only). Only the pack placer uses lanes.
	Lanes        int
	LaneMemoryMB int
	// PreemptionCost is the run time in seconds a preempted job loses
	// when it resumes (checkpoint reload); 0 by default.
	PreemptionCost float64
	// MigrationCost is the run time in seconds a job loses when a policy's
	// migrate or rotate step moves it to another GPU model (checkpoint, restart),
	// charged in place of PreemptionCost; 0 by default. Set it to the cost
	// the policy plans with (policy.Config.MigrationCost).
	MigrationCost float64
	// StartLatency is the time in seconds every start, first or after a
	// preemption, holds its GPUs before the task runs: what a real
	// cluster spends between the event that lets a job start and its task
	// running (a planner round, Nomad's evaluation and placement, the
	// driver starting the task). The job makes no progress and attains no
	// service meanwhile, as the live planner counts executed time from
	// the task's start. 0 by default; caravan replay measures it.
	StartLatency float64
	// RoundDelay is how long, in seconds, a round decides after the event
	// that calls for it: the live planner's part of a start (its wait for
	// Nomad's events, its settle, the round's work and its writes). Jobs
	// run on meanwhile, so the round sees their service as the live one
	// does, and the events of the delay join its round. StartLatency is
	// then what a start takes after the round. 0 by default: rounds decide
	// at their event, and StartLatency holds the planner's part too.
	RoundDelay float64
	// StartJitter spreads each start's StartLatency uniformly over
	// StartLatency·(1 ± StartJitter), drawn in the order of the starts
	// from JitterSeed. Live starts do not each take the median, and a
	// policy whose order turns on near ties follows the draw: runs over
	// several seeds show how far. 0 by default (every start pays
	// StartLatency); at least 0 and below 1.
	StartJitter float64
	JitterSeed  uint64
	// StartSpread is how long the cluster takes to start each task, one
	// per GPU, one after another: a real cluster places and starts the
	// allocations its rounds release in turn, so jobs that a round starts
	// together (and that would finish together) are spread out, a burst
	// of starts queues behind the starts of earlier rounds, and a gang
	// runs only once its last task has started. A job of g GPUs whose
	// first task waits k spreads for the tasks before it holds its GPUs
	// StartLatency + (k+g-1)·StartSpread. 0 by default; caravan replay
	// measures it.
	StartSpread float64
	// GangSpread, when above StartSpread, is how far apart a gang's own
	// tasks start, in seconds, in its place within a gang: a job of g GPUs
	// runs (g-1)·GangSpread after its first task's turn. A real cluster
	// starts a gang's allocations on several clients, each behind its own
	// queue, and they may start further apart than the cluster's pace;
	// never closer, as the clients serve every task of the gang (on one
	// client they set up a gang's tasks side by side, so the first starts
	// late and the rest soon after it). The queue of starts still
	// advances by StartSpread per task. 0 by default (StartSpread within a
	// gang too); caravan replay measures it.
	GangSpread float64
	// StartsShared models the clients' set-up of starts as shared rather
	// than queued: each task joins the set-up StartLatency after its
	// start and needs StartSpread of it, and the tasks in set-up share it
	// equally, as a client sets up the allocations it was given side by
	// side. A lone task so waits StartLatency + StartSpread, a gang of g
	// alone StartLatency + g·StartSpread, and a start beside others
	// longer, as much longer as they share. GangSpread is not used.
	// caravan replay fits either model to the live starts.
	StartsShared bool
	// StopLatency is how long, in seconds, a preempted job keeps its GPUs
	// after the round that preempts it: a real cluster's planner writes
	// the hold and Nomad stops the job's tasks before the GPUs are free.
	// A start of that round waits that much more when the GPUs that were
	// free before the preemption, less those the round's earlier starts
	// took, are too few for it (counted over the cluster, not per model
	// or node). 0 by default; caravan replay measures it.
	StopLatency float64
	// UnblockLatency is how much longer, in seconds, a start that waits
	// for a preemption's stop takes after the GPUs free than StartLatency
	// gives a start whose GPUs are free: Nomad places an allocation that
	// waited for GPUs only once the client has reported the stop and the
	// evaluation is unblocked, where it places one with free GPUs at once.
	// Added to StopLatency for those starts. 0 by default; caravan replay
	// measures it.
	UnblockLatency float64
	// AbortLatency is how long, in seconds, a start taken back before its
	// first task ran keeps its GPUs after the round that takes it back.
	// Nomad frees an allocation's devices once its client reports it
	// stopped, and a task stopped in its set-up takes a Nomad client
	// about 4 s of real time to report, where a running task takes a
	// tenth of a second. A start, in that round or a later one, that
	// needs them waits until they free. A start taken back while it still
	// waited for the GPUs it was to take had no allocation yet: its GPUs
	// free when those it waited for do. 0 by default, the GPUs free at
	// once; caravan replay measures it.
	AbortLatency float64
	// RunOverhead is the time in seconds every run, first or after a
	// preemption, spends running without progress: the process starting
	// and exiting, the framework's setup. It counts as executed time.
	// 0 by default; caravan replay measures it.
	RunOverhead float64
	// CompletionLag is how long after a run's work ends the cluster
	// learns of it: a Nomad client reports a task's end some time after
	// the process exits, and until then the planner sees the job running
	// and Nomad its GPUs taken. The job holds its GPUs, and counts as
	// running, that much longer; its JCT ends with its work. A round that
	// preempts it meanwhile finds it finished. 0 by default; caravan
	// replay measures it.
	CompletionLag float64
	// Throughputs, when set, gives jobs with a JobType their steps/s per
	// GPU model; jobs given as Steps need it.
	Throughputs *trace.Throughputs
	// Colocation is the slowdown of jobs sharing a GPU (nil: default).
	Colocation *policy.Colocation
	// Compat follows Tiresias' reference simulator: it plans at every
	// event, and the promote knob counts all pending time since the last
	// promotion rather than the current wait.
	Compat bool
	// Progress, when set, is called with the number of finished jobs
	// every so often.
	Progress func(done, total int)
	// KeepUtil records GPU utilisation over time in Result.Util.
	KeepUtil bool
	// KeepRestarts records the rounds that started each job again in
	// Result.Restarts.
	KeepRestarts bool

	noShortcut    bool // tests: plan every round in full, as without startArrivals, queuedBehind, arrivalRound and the keyed queue's round
	checkSnapshot bool // tests: compare the kept Snapshot with a fresh copy every round (Result.snapErr)
	noKeyed       bool // tests: plan in full what the keyed queue's round would, keeping the other shortcuts
}

// JobResult is one job's outcome.
type JobResult struct {
	ID          string
	GPUs        int
	Weight      float64
	Arrival     float64
	Start       float64 // first start
	Finish      float64
	JCT         float64
	Queueing    float64 // time pending, in total
	Isolated    float64 // run time alone on its fastest GPUs
	Preemptions int     // times its running task was stopped; a start taken back before its task ran is none
	// Stops are the times of those preemptions, oldest first: the
	// rounds that preempted it (a live replay's are when Nomad stopped
	// its tasks).
	Stops      []float64
	Migrations int    // moves while running: to another GPU model, or (Synergy's lease) other GPUs
	GPUModel   string // model it finished on
	// RanOn are the GPU models of its runs, first start first, a model
	// given once for runs on it in a row; nil on a cluster of one model.
	RanOn []string
	// Model is the job's own (a Synergy sensitivity's), "" when none.
	Model string
	// Nodes is how many nodes the run it finished on (or last ran)
	// spanned; 0 when the placer named no GPUs.
	Nodes int
}

// UtilPoint is the number of busy GPUs from time T on.
type UtilPoint struct {
	T    float64
	Busy float64
}

// Result is a run's outcome.
type Result struct {
	Policy  string
	GPUs    int
	Jobs    []JobResult
	Util    []UtilPoint
	Summary Summary
	// Rounds is how many planning rounds the run asked the policy for.
	Rounds int
	// Restarts are, for each job of Jobs, the rounds that started it
	// again, oldest first: after a preemption, or a start taken back
	// before its task ran. nil without Config.KeepRestarts.
	Restarts [][]float64

	snapErr error // see Config.checkSnapshot
}

type jobState struct {
	// The fields every round reads first (settle's, the keyed queue's),
	// next to each other and to the Job's own counters at the start of
	// policy.Job.
	lastUpdate float64
	work       float64    // remaining, in the unit of rate
	rate       float64    // current progress per second
	laneShare  float64    // GPU share counted per second when on a lane
	latency    float64    // StartLatency (and spread) left before the task runs
	startSlots [2]float64 // when its start began and ended its turn in the queue of starts (StartSpread)
	gangTail   float64    // the part of latency after its first task started: (g-1) spreads
	// idleEnd is the work left once the run's start latency and overhead,
	// added to work when it started, are used up: a preemption while work
	// is still above it drops the rest, since the next start pays its own.
	idleEnd float64
	// lagWork is the work the run's CompletionLag added to work, the
	// last of it: work at or below it is the lag.
	lagWork float64
	// freedAt is when the GPUs its start waited for (a stop, a start
	// taken back) came free: before then the cluster had not placed it.
	freedAt float64
	queued  float64 // total pending time
	// The keyed queue's fields (seq, lazy, inTail, pendAt and logAt) sit
	// here, beside the counters a round reads with them, rather than in
	// the queue: a round reads them for every job it visits.
	seq  int64 // under RanksByQueue: the job's place in its queue
	done bool
	// lazy: the job runs, and rounds do not settle it; it is settled, as
	// they would have, at logAt on (keyedQueue.catchUp).
	lazy   bool
	inTail bool  // the job holds its entry in the keyed queue's tail count
	pendAt int32 // where a pending job's counters are (keyedQueue.pend)
	policy.Job
	logAt       int32
	promoWait   float64 // compat: pending time since the last promotion
	trace       *trace.Job
	rates       map[string]float64
	finishAt    float64
	version     int
	pendingFrom float64
	started     bool
	start       float64
	preempts    int
	stops       []float64 // when each preemption happened
	ranOn       []string  // JobResult.RanOn
	ranOnAdded  bool      // the last start or move added ranOn's last model
	migrations  int
	nodes       int // nodes the run it is on (or last was) spans
	speedup     float64
	finish      float64
	isolated    float64
}

// Run simulates jobs (sorted by arrival) under cfg.
func Run(cfg Config, jobs []trace.Job) (*Result, error) {
	s, err := newSimulator(cfg, jobs)
	if err != nil {
		return nil, err
	}
	s.run()
	return s.result(), nil
}

// newSimulator is a run of jobs on cfg, ready to run.
func newSimulator(cfg Config, jobs []trace.Job) (*simulator, error) {
	if cfg.Policy == nil {
		return nil, fmt.Errorf("sim: no policy")
	}
	nodes := buildNodes(cfg)
	if len(nodes) == 0 {
		return nil, fmt.Errorf("sim: cluster %q has no GPUs", cfg.Cluster.Name)
	}
	if !(cfg.StartJitter >= 0 && cfg.StartJitter < 1) {
		return nil, fmt.Errorf("sim: StartJitter %v is outside [0, 1)", cfg.StartJitter)
	}
	if !(cfg.RoundDelay >= 0 && !math.IsInf(cfg.RoundDelay, 1)) {
		return nil, fmt.Errorf("sim: RoundDelay %v is not a non-negative number of seconds", cfg.RoundDelay)
	}
	if !(cfg.CompletionLag >= 0 && !math.IsInf(cfg.CompletionLag, 1)) {
		return nil, fmt.Errorf("sim: CompletionLag %v is not a non-negative number of seconds", cfg.CompletionLag)
	}
	if !(cfg.UnblockLatency >= 0 && !math.IsInf(cfg.UnblockLatency, 1)) {
		return nil, fmt.Errorf("sim: UnblockLatency %v is not a non-negative number of seconds", cfg.UnblockLatency)
	}
	s := &simulator{cfg: cfg, snap: policy.Snapshot{Nodes: nodes, History: policy.NewHistory(0)}, gpus: cfg.Cluster.GPUs(), model: onlyModel(nodes),
		recordHistory: cfg.Policy.ReadsHistory(), replaces: cfg.Policy.ReplacesRunning()}
	if cfg.StartJitter > 0 {
		s.jitter = rand.New(rand.NewPCG(cfg.JitterSeed, 0))
	}
	if cfg.KeepRestarts {
		s.restarts = make([][]float64, len(jobs))
	}
	if err := s.load(jobs); err != nil {
		return nil, err
	}
	if s.useArrivalQueue() {
		s.arrivals = newArrivalQueue(s.jobs)
	} else if s.useKeyedQueue() {
		s.keyed = newKeyedQueue(s)
	}
	return s, nil
}

// onlyModel is the cluster's GPU model if it has one only, else "".
func onlyModel(nodes []policy.Node) string {
	model := ""
	for _, n := range nodes {
		for _, g := range n.GPUs {
			if model != "" && g.Model != model {
				return ""
			}
			model = g.Model
		}
	}
	return model
}

func buildNodes(cfg Config) []policy.Node {
	var nodes []policy.Node
	for _, g := range cfg.Cluster.Groups {
		for k := 0; k < g.Count; k++ {
			n := policy.Node{ID: fmt.Sprintf("%s-%d", g.GPUModel, len(nodes)), CPUs: g.CPUs, MemoryGB: g.MemoryGB, Healthy: true}
			for i := 0; i < g.GPUs; i++ {
				n.GPUs = append(n.GPUs, policy.GPU{Model: g.GPUModel, Lanes: cfg.Lanes, LaneMemoryMB: cfg.LaneMemoryMB, Healthy: true})
			}
			if len(n.GPUs) > 0 {
				nodes = append(nodes, n)
			}
		}
	}
	return nodes
}

type simulator struct {
	restarts [][]float64 // Config.KeepRestarts: each job's starts after its first; nil without
	jitter   *rand.Rand  // Config.StartJitter's draws; nil without it
	cfg      Config
	snap     policy.Snapshot
	// snapOf is the job index of each entry of snap.Jobs.
	snapOf  []int
	snapErr error // see Config.checkSnapshot
	changes []int // planRound scratch: the decisions that start or resize a job
	gpus    int
	model   string // the only GPU model, or "" for a mixed cluster
	// replaces says the policy places running jobs again when it wakes
	// (Policy.ReplacesRunning), so a wake-up counts when nothing waits.
	replaces bool
	// nextRank is beyond every rank given so far (see startArrivals).
	nextRank int
	rounds   int
	jobs     []jobState
	next     int   // next arrival
	active   []int // pending or running, in arrival order
	heap     finishHeap
	now      float64
	wakeAt   float64
	call     roundCall // a round called for, under RoundDelay
	plan     policy.Result
	done     int

	pending   int
	busy      float64
	util      []UtilPoint
	busyArea  float64
	lastBusyT float64

	sizes      []float64
	sizesBuilt int
	// recordHistory: the policy reads Snapshot.History, which costs a
	// sorted insert per finished job to keep.
	recordHistory bool
	anyLanes      bool
	laneOcc       map[gpuKey][]int
	// laneWakes are when lane jobs' tasks come to run, their start
	// latency over (Key: time, Tie: job): from then on they slow their
	// partners, and their partners them.
	laneWakes []minheap.Entry[struct{}]
	blocked   bool // the last round left a job waiting
	head      int  // strict FIFO: the first job the last round left waiting
	// startsFree is when the cluster can start its next task, for
	// StartSpread.
	startsFree float64
	// setup is the starts under way, under StartsShared.
	setup setupPool
	// preempted says a preemption happened at preemptedAt; freeBeforeStops
	// is what the starts of that moment may still take of the GPUs that
	// were free before it. A start that needs more waits for the stop
	// (Config.StopLatency).
	preempted       bool
	preemptedAt     float64
	freeBeforeStops float64
	// held are the GPUs of starts taken back that are not free yet
	// (Config.AbortLatency), each with when it frees; stopsFreed the
	// GPUs the preemptions at preemptedAt free, for the stop latency.
	held       []heldGPUs
	stopsFreed float64
	// arrivals, when set, holds the pending jobs in place of active, and
	// rounds are carried out on it (see arrivalRound).
	arrivals *arrivalQueue
	// keyed, when set, keeps the waiting jobs ordered by key, and rounds
	// are carried out on it (see keyedQueue.round).
	keyed *keyedQueue
}

type slot = policy.Slot

func (s *simulator) load(jobs []trace.Job) error {
	s.jobs = make([]jobState, len(jobs))
	models := map[string]bool{}
	for _, n := range s.snap.Nodes {
		for _, g := range n.GPUs {
			models[g.Model] = true
		}
	}
	for i := range jobs {
		tj := &jobs[i]
		if i > 0 && tj.Arrival < jobs[i-1].Arrival {
			return fmt.Errorf("sim: job %s arrives before the job listed above it; sort the trace by arrival", tj.ID)
		}
		js := &s.jobs[i]
		js.trace = tj
		js.Job = policy.Job{ID: tj.ID, Arrival: tj.Arrival, GPUs: max(tj.GPUs, 1), Weight: tj.Weight,
			Model: tj.Model, Group: tj.Group, PrevQueue: -1, PrevRank: -1, Remaining: tj.Duration}
		if tj.JobType != "" {
			js.Model = tj.JobType
		}
		js.speedup = 1
		switch {
		case tj.Steps > 0 && tj.JobType != "" && s.cfg.Throughputs != nil:
			js.rates = map[string]float64{}
			for m := range models {
				if r := s.cfg.Throughputs.Solo(m, tj.JobType, js.GPUs); r > 0 {
					js.rates[m] = r
				}
			}
			if len(js.rates) == 0 {
				return fmt.Errorf("sim: job %s: no throughput for %q on %d GPUs on any model of the cluster", tj.ID, tj.JobType, js.GPUs)
			}
			js.work = tj.Steps
			js.Throughput = js.rates
			best := 0.0
			for _, r := range js.rates {
				best = max(best, r)
			}
			js.isolated = tj.Steps / best
		case tj.Duration > 0:
			js.work = tj.Duration
			js.isolated = tj.Duration
		case tj.Steps > 0:
			return fmt.Errorf("sim: job %s is given in steps of %q but no throughputs were loaded", tj.ID, tj.JobType)
		default:
			js.work, js.isolated = 0, 0
		}
	}
	return nil
}

// run is the event loop.
func (s *simulator) run() {
	s.wakeAt = math.Inf(1)
	total := len(s.jobs)
	progressEvery := max(total/200, 1)
	for s.done < total && s.snapErr == nil {
		t := math.Inf(1)
		if s.next < total {
			t = s.jobs[s.next].Arrival
		}
		if f, ok := s.peekFinish(); ok {
			t = min(t, f)
		}
		if len(s.laneWakes) > 0 {
			t = min(t, s.laneWakes[0].Key)
		}
		if s.pending > 0 || s.cfg.Compat || s.replaces {
			t = min(t, s.wakeAt)
		}
		if s.call.due > 0 {
			t = min(t, s.call.due)
		}
		if math.IsInf(t, 1) {
			break // pending jobs that can never fit
		}
		s.advanceTo(t)
		s.wakeLanesAt(t)
		changed := s.completeAt(t) // before waited reads what is pending
		m := moment{changed: changed, waited: s.pending > 0, first: s.next}
		for s.next < total && s.jobs[s.next].Arrival <= t {
			s.admit(s.next)
			s.next++
			m.arrived = true
		}
		m.woke = t >= s.wakeAt
		if s.cfg.Progress != nil && m.changed && s.done%progressEvery == 0 {
			s.cfg.Progress(s.done, total)
		}
		if s.cfg.RoundDelay > 0 && !s.delayRound(t, &m) {
			continue
		}
		if s.callsRound(m) && !s.frozen() && !s.queuedBehind(m.changed, m.woke) {
			if !m.arrived || (m.waited && !s.pastWaiting(m.changed, m.woke)) || !s.startArrivals(m.first, s.next) {
				s.planRound()
			}
		} else if m.woke {
			s.wakeAt = math.Inf(1)
		}
	}
	s.advanceTo(s.now)
	if s.keyed != nil {
		s.keyed.flushWaiting()
		s.keyed.flushLazy()
	}
	if s.cfg.Progress != nil {
		s.cfg.Progress(s.done, total)
	}
}

// moment is what the events at one time brought, or, under RoundDelay,
// those of a round's delay taken together.
type moment struct {
	arrived, changed, woke bool // jobs arrived, finished, or the policy woke
	waited                 bool // other jobs waited before the arrivals
	first                  int  // the first job to arrive
}

// callsRound says the events of m call for a round: arrivals, a
// completion or a wake while jobs wait, or one the policy acts on with
// nothing waiting.
func (s *simulator) callsRound(m moment) bool {
	return m.arrived || s.cfg.Compat || (s.pending > 0 && (m.changed || m.woke)) || (m.changed && s.migrates()) || (m.woke && s.replaces)
}

// roundCall is a round called for that decides RoundDelay later
// (Config.RoundDelay), with what the events until then brought.
type roundCall struct {
	due float64 // when it decides; 0: none called for
	moment
}

// delayRound holds back, under RoundDelay, the round the events at t (m)
// call for until it is due, and says whether one is due now; if so, m
// becomes the events of its delay taken together. A wake is taken once:
// the round due sets the next.
func (s *simulator) delayRound(t float64, m *moment) bool {
	if m.woke {
		s.wakeAt = math.Inf(1)
	}
	c := &s.call
	if c.due == 0 {
		if !s.callsRound(*m) {
			return false
		}
		// The live planner's own timer, not a change Nomad reports, plans
		// a wake: without the wait for Nomad's events and the settle.
		delay := s.cfg.RoundDelay
		if !m.arrived && !m.changed {
			delay = 0
		}
		*c = roundCall{due: t + delay, moment: moment{first: m.first}}
	}
	c.arrived, c.changed, c.woke = c.arrived || m.arrived, c.changed || m.changed, c.woke || m.woke
	if t < c.due {
		return false
	}
	*m = c.moment
	*c = roundCall{}
	// Nothing starts during the delay, so the jobs that wait but the
	// arrivals since the call waited before them.
	m.waited = s.pending > s.next-m.first
	return true
}

// frozen says a round cannot change anything: a policy that neither
// preempts, shares lanes, resizes nor places again running jobs has
// nothing to start when every GPU is busy. Skipping those rounds keeps
// congested runs fast.
func (s *simulator) frozen() bool {
	return s.maySkipRounds() && !s.replaces && !s.cfg.Policy.Order.Preemptive() && s.busy >= float64(s.gpus)
}

// migrates says the policy may move running jobs between GPU models, so
// that a completion calls for a round even when nothing waits: the GPUs it
// frees may suit a running job better.
func (s *simulator) migrates() bool {
	return s.cfg.Policy.Migrate != nil && s.model == ""
}

// maySkipRounds says the simulator may skip rounds at all: not when it
// follows the reference simulator (which plans at every event), nor when
// lanes or sizing let a round change running jobs.
func (s *simulator) maySkipRounds() bool {
	return !s.cfg.Compat && s.cfg.Lanes <= 1 && s.cfg.Policy.Size == nil
}

// startArrivals starts the jobs that just arrived without a planning
// round when a round could do nothing else (see Policy.CanStartArrivals):
// one GPU model, nothing else waits (or pastWaiting), they all fit, and
// every planned job keeps its place in the order. On a cluster with room most arrivals take
// this path, so a run no longer costs a full round per arrival. It reports
// whether it started them.
func (s *simulator) startArrivals(from, to int) bool {
	if !s.maySkipRounds() || s.cfg.noShortcut || s.model == "" || !s.cfg.Policy.CanStartArrivals() {
		return false
	}
	need := 0
	for i := from; i < to; i++ {
		need += s.jobs[i].GPUs
	}
	if float64(need) > float64(s.gpus)-s.busy {
		return false
	}
	if s.arrivals != nil {
		s.startInArrivalOrder() // nothing else waits: it starts them all
		return true
	}
	// Refresh the learned sizes exactly when a round would have.
	s.learnSizes()
	if s.keyed != nil && !s.keyed.settlePlanned() {
		return false
	}
	s.dropFinished()
	always := s.cfg.Policy.AlwaysSettled(&s.snap)
	for _, i := range s.active {
		if js := &s.jobs[i]; js.PrevQueue >= 0 {
			s.settle(js)
			if !always && !s.cfg.Policy.Settled(&s.snap, &js.Job) {
				return false
			}
		}
	}
	for i := from; i < to; i++ {
		s.cfg.Policy.Enter(&s.jobs[i].Job, s.nextRank)
		s.nextRank++
		s.start(i, &policy.Decision{Job: -1, Run: true, GPUModel: s.model, Speedup: 1})
	}
	s.blocked = s.pending > 0
	s.wakeAt = math.Inf(1)
	return true
}

// pastWaiting says startArrivals may start arrivals while other jobs
// wait (Policy.CanStartArrivalsPastWaiting): nothing finished or woke
// the policy since the last round, and no start adds work to a job.
func (s *simulator) pastWaiting(changed, woke bool) bool {
	return !changed && !woke && s.cfg.Policy.CanStartArrivalsPastWaiting() &&
		s.cfg.RoundDelay == 0 && s.cfg.StartLatency == 0 && s.cfg.StartSpread == 0 && s.cfg.GangSpread == 0 && s.cfg.StopLatency == 0 && s.cfg.UnblockLatency == 0 && s.cfg.AbortLatency == 0 &&
		s.cfg.RunOverhead == 0 && s.cfg.CompletionLag == 0 && s.cfg.PreemptionCost == 0
}

// queuedBehind says a round cannot change anything for a strict FIFO
// queue blocked at its head: arrivals rank behind the head, and a
// completion helps only once the head fits in the free GPUs.
func (s *simulator) queuedBehind(changed, woke bool) bool {
	p := s.cfg.Policy
	if !s.maySkipRounds() || !s.blocked || woke || !p.Blocking || p.Order.Preemptive() {
		return false
	}
	if !changed {
		return true
	}
	if s.cfg.noShortcut {
		return false
	}
	// Counting free GPUs only says whether the head fits on one model.
	head := s.head
	return s.model != "" && head >= 0 && float64(s.jobs[head].GPUs) > float64(s.gpus)-s.busy
}

// advanceTo moves the clock, accounting utilisation. Job progress is
// settled lazily (settle) when a job is looked at.
func (s *simulator) advanceTo(t float64) {
	if t > s.now {
		s.busyArea += s.busy * (t - s.now)
		s.now = t
	}
}

// settle brings a job's progress and counters up to now.
func (s *simulator) settle(js *jobState) {
	if js.lazy {
		s.keyed.catchUp(js)
	}
	settleAt(js, s.now)
}

// settleRunning settles job i, of started (or of ran, ranked by key), if
// it still runs, and says whether it does. Jobs that run under
// RanksByQueue are settled lazily (catchUp).
func (s *simulator) settleRunning(i int) bool {
	js := &s.jobs[i]
	if js.done || js.State != policy.Running {
		return false
	}
	settleAt(js, s.now)
	return true
}

// settleAt brings a job's progress and counters up to time now.
func settleAt(js *jobState, now float64) {
	dt := now - js.lastUpdate
	if dt <= 0 {
		return
	}
	js.lastUpdate = now
	if js.State == policy.Running {
		js.work -= dt * js.rate
		share := float64(js.GPUs)
		if js.laneShare > 0 {
			share = js.laneShare
		}
		if js.latency > 0 { // the task is not running yet
			wait := min(dt, js.latency)
			js.latency -= wait
			dt -= wait
		}
		js.Executed += dt
		js.Attained += dt * share
		return
	}
	js.Wait += dt
	js.queued += dt
	if js.Executed > 0 {
		js.promoWait += dt
	}
}

func (s *simulator) admit(i int) {
	js := &s.jobs[i]
	js.State = policy.Pending
	js.lastUpdate = js.Arrival
	js.pendingFrom = js.Arrival
	switch {
	case s.arrivals != nil:
		s.arrivals.add(i, js.GPUs)
	case s.keyed != nil:
		s.keyed.wait(i)
	default:
		s.active = append(s.active, i)
	}
	s.pending++
}

// completeAt finishes every running job whose finish time is t.
func (s *simulator) completeAt(t float64) bool {
	any := false
	for {
		f, ok := s.peekFinish()
		if !ok || f > t {
			return any
		}
		e := s.heap.pop()
		js := &s.jobs[e.job]
		s.settle(js)
		s.finishJob(e.job, t-s.cfg.CompletionLag)
		any = true
	}
}

// finishJob records job i, settled, as finished at finish, and frees its
// GPUs.
func (s *simulator) finishJob(i int, finish float64) {
	js := &s.jobs[i]
	if js.lazy {
		s.keyed.done(js)
	}
	js.done, js.finish = true, max(finish, js.start)
	js.State = policy.Pending // leaves the active set on the next compaction
	s.setBusy(-s.gpuUse(js))
	s.done++
	// The size learned is the service the job attained, as the live
	// planner records it: its run time and each run's overhead.
	size := (js.isolated + float64(js.preempts+1)*s.cfg.RunOverhead) * float64(js.GPUs)
	s.sizes = append(s.sizes, size)
	if s.recordHistory {
		s.snap.History.Add(js.Group, js.GPUs, size)
	}
	if js.laneShare > 0 {
		s.releaseLane(i)
	}
}

func (s *simulator) peekFinish() (float64, bool) {
	for len(s.heap) > 0 {
		top := &s.heap[0]
		if js := &s.jobs[top.Tie]; js.version == top.Value && !js.done && js.State == policy.Running {
			return top.Key, true
		}
		s.heap.pop()
	}
	return 0, false
}

func (s *simulator) setBusy(delta float64) {
	s.busy += delta
	if s.cfg.KeepUtil {
		if n := len(s.util); n > 0 && s.util[n-1].T == s.now {
			s.util[n-1].Busy = s.busy
		} else {
			s.util = append(s.util, UtilPoint{T: s.now, Busy: s.busy})
		}
	}
}

// ranOn notes that js runs on model from now, on a cluster of several.
func (s *simulator) ranOn(js *jobState, model string) {
	js.ranOnAdded = s.model == "" && model != "" && (len(js.ranOn) == 0 || js.ranOn[len(js.ranOn)-1] != model)
	if js.ranOnAdded {
		js.ranOn = append(js.ranOn, model)
	}
}

// ranOnTakenBack forgets the model of a start taken back before its task
// ran: the job never ran there, as a live replay, which counts only tasks
// that started, would tell.
func (js *jobState) ranOnTakenBack() {
	if js.ranOnAdded {
		js.ranOn = js.ranOn[:len(js.ranOn)-1]
		js.ranOnAdded = false
	}
}
