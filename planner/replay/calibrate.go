package replay

import (
	"math"
	"slices"
	"sort"

	"github.com/caravan-gpu/caravan/planner/sim"
)

// Live is what a live run's costs are measured on: the run in the
// simulator's terms, each job's tasks (Result.Tasks, in the same order as
// Jobs.Jobs; a job without any counts as one task from its start to its
// finish), the preemptions' stops, in order, and the planner's releases
// (Result.Releases).
type Live struct {
	Jobs     *sim.Result
	Tasks    [][]TaskRun
	Stops    []float64
	Releases [][]float64
	// Holds and Decided are the planner's holds and the rounds that wrote
	// each job (Result.Holds, Result.Decided); Decided is nil where the
	// planner's decisions were not read.
	Holds, Decided [][]float64
	// SharedSpeed is the workload's speed beside each partner on its GPU
	// (Result.SharedSpeed); 0 when it ignored them.
	SharedSpeed float64
	// IndependentWorkers says a gang's tasks each ran their own course
	// from their own start (JobOptions.IndependentWorkers).
	IndependentWorkers bool
	// RoundEvery is Result.RoundEvery.
	RoundEvery float64
}

// Live is the run as its costs are measured on.
func (r *Result) Live() Live {
	return Live{Jobs: r.Sim, Tasks: r.Tasks, Stops: r.Stops, Releases: r.Releases, Holds: r.Holds, Decided: r.Decided,
		SharedSpeed: r.SharedSpeed, IndependentWorkers: r.IndependentWorkers, RoundEvery: r.RoundEvery}
}

// decided is the round that decided the i-th job's release at release:
// the latest round that wrote the job at or before it. A round read
// after the job's arrival and the hold before the release, since rounds
// run one after another; a release whose round was not read (the
// planner's log of writes moved on between two reads) is not known.
func (l Live) decided(i int, arrival, release float64) (float64, bool) {
	if i >= len(l.Decided) {
		return 0, false
	}
	d, ok := latestBy(l.Decided[i], release)
	if !ok || d < arrival {
		return 0, false
	}
	if i < len(l.Holds) {
		if h, held := latestBy(l.Holds[i], release); held && d < h {
			return 0, false
		}
	}
	return d, true
}

// release is the planner's last release of the i-th job at or before
// start, if Nomad kept it.
func (l Live) release(i int, start float64) (float64, bool) {
	if i >= len(l.Releases) {
		return 0, false
	}
	return latestBy(l.Releases[i], start)
}

// latestBy is the latest of the sorted times at or before t.
func latestBy(sorted []float64, t float64) (float64, bool) {
	k := sort.Search(len(sorted), func(k int) bool { return sorted[k] > t })
	if k == 0 {
		return 0, false
	}
	return sorted[k-1], true
}

// lastEvent is the latest of arrival and the completions (finishes,
// sorted) and stops at or before t.
func (l Live) lastEvent(finishes []float64, arrival, t float64) float64 {
	from, _ := l.lastEventBy(finishes, arrival, t)
	return from
}

// What a start answered (liveStart.answeredBy).
const (
	eventArrival = iota
	eventCompletion
	eventStop
)

// lastEventBy is lastEvent and what it was: the job's own arrival, a
// completion, or a preemption's stop.
func (l Live) lastEventBy(finishes []float64, arrival, t float64) (float64, int) {
	from, by := arrival, eventArrival
	if f, ok := latestBy(finishes, t); ok && f > from {
		from, by = f, eventCompletion
	}
	if st, ok := latestBy(l.Stops, t); ok && st > from {
		from, by = st, eventStop
	}
	return from, by
}

// firstTasks is the i-th job's tasks of its first start: its first runs,
// one per GPU it asked for.
func (l Live) firstTasks(i int) []TaskRun {
	j := l.Jobs.Jobs[i]
	if i >= len(l.Tasks) || len(l.Tasks[i]) == 0 {
		return []TaskRun{{Start: j.Start, End: j.Finish}}
	}
	return l.Tasks[i][:min(max(j.GPUs, 1), len(l.Tasks[i]))]
}

// RunOverhead is how much longer a job runs live than it simulated, in
// trace seconds, beyond the start: its processes starting and exiting,
// the workload's setup, a completion seen late. It is the mean, over the
// jobs that ran unpreempted on the same GPU model in both runs, of the
// job's longest task's run time less the job's simulated one, and never
// negative. Each task runs from its gang's last start, since a gang's
// tasks start one after another (the start spread) and make progress only
// once all have, as the simulator runs a gang (from its own start where
// the workers ran on their own). The longest task, since a job finishes
// with its last task and the simulator charges the overhead once per run:
// over the tasks of a gang, whose exits are seen seconds apart on a busy
// client, the mean charged a gang less than it waited. The mean over jobs,
// not the median, since a few runs that take seconds longer add to the
// average JCT as much as many that take a little longer. It also returns
// how many jobs it saw.
//
// A task sized by Synergy's table (TaskRun.Speed) is measured against its
// work at the speed its own CPU and memory allowed, since the live and
// simulated runs may size a job differently (another moment, another
// server's room); a job either side re-sized (a restart) is left out.
//
// A task on a lane is measured against its own live partners instead:
// who shares a GPU depends on the moment each job starts, so the live
// pairing differs from the simulated one, and the difference is not a
// cost of running. Its run is set against the time its job's work takes
// beside the tasks that ran on the same GPU meanwhile (sharedRunTime).
func (l Live) RunOverhead(ideal *sim.Result) (float64, int) {
	simulated := make(map[string]sim.JobResult, len(ideal.Jobs))
	for _, j := range ideal.Jobs {
		simulated[j.ID] = j
	}
	partners := l.tasksByGPU()
	var d []float64
	for i, j := range l.Jobs.Jobs {
		s, ok := simulated[j.ID]
		if !ok || j.Preemptions > 0 || s.Preemptions > 0 || !(j.Start > 0) || !(j.Finish > j.Start) || j.GPUModel != s.GPUModel {
			continue
		}
		tasks := l.firstTasks(i)
		if tasks[0].Speed > 0 && (s.Migrations > 0 || len(l.Tasks[i]) > len(tasks)) {
			continue
		}
		_, joined, _ := startSpan(tasks)
		longest := math.Inf(-1)
		for _, t := range tasks {
			want := s.Finish - s.Start
			if t.GPU != "" && l.SharedSpeed > 0 {
				want = sharedRunTime(t, partners[laneGPU{t.Node, t.GPU}], s.Isolated, l.SharedSpeed)
			}
			if t.Speed > 0 {
				want = s.Isolated / t.Speed
			}
			from := joined
			if l.IndependentWorkers {
				from = t.Start
			}
			longest = max(longest, (t.End-from)-want)
		}
		d = append(d, longest)
	}
	return max(Mean(d), 0), len(d)
}

// startSpan is when the first and the last of a start's tasks (at least
// one) started, and when the first of them ended.
func startSpan(tasks []TaskRun) (first, last, ended float64) {
	first, last, ended = tasks[0].Start, tasks[0].Start, tasks[0].End
	for _, t := range tasks[1:] {
		first, last, ended = min(first, t.Start), max(last, t.Start), min(ended, t.End)
	}
	return first, last, ended
}

// laneGPU is a physical GPU of the live cluster: UUIDs are unique to a
// node only, as each client's simulated fleet names its own.
type laneGPU struct{ node, gpu string }

// tasksByGPU indexes every task that ran on a lane by its GPU.
func (l Live) tasksByGPU() map[laneGPU][]TaskRun {
	out := map[laneGPU][]TaskRun{}
	for _, ts := range l.Tasks {
		for _, t := range ts {
			if t.GPU != "" {
				k := laneGPU{t.Node, t.GPU}
				out[k] = append(out[k], t)
			}
		}
	}
	return out
}

// sharedRunTime is how long work of solo seconds takes from t's start on
// a GPU where each other task of onGPU that runs meanwhile leaves it
// speed of its pace (the simulator's co-location factor, per partner).
func sharedRunTime(t TaskRun, onGPU []TaskRun, solo, speed float64) float64 {
	var edges []float64
	for _, o := range onGPU {
		if o != t {
			edges = append(edges, o.Start, o.End)
		}
	}
	sort.Float64s(edges)
	at, left := t.Start, solo
	for _, next := range append(edges, math.Inf(1)) {
		if next <= at {
			continue
		}
		rate := 1.0
		for _, o := range onGPU {
			if o != t && o.Start <= at && at < o.End {
				rate *= speed
			}
		}
		if left <= rate*(next-at) {
			return at + left/rate - t.Start
		}
		left -= rate * (next - at)
		at = next
	}
	return at - t.Start
}

// liveStart is one live job's start and the event that let it start: its
// time on the live cluster, when each of its tasks started, and a key
// shared by the jobs one event let start (a burst of arrivals at one trace
// time is submitted over a moment, so each has its own live arrival).
type liveStart struct {
	from, start float64
	tasks       []float64
	event       startEvent
	// released: the planner's release is known, at release, after the
	// event at answered; placed is when Nomad placed the first task's
	// allocation (0: not known); stopWait: a preemption's stop after the
	// release freed the job's GPUs. roundKnown: the round that decided
	// the release read Nomad at round, when the latest event was at
	// roundAnswered.
	released, stopWait, roundKnown bool
	answered, release, placed      float64
	// answeredBy and roundAnsweredBy say what those events were: an
	// arrival, a completion or a stop (eventArrival...).
	answeredBy, roundAnsweredBy int
	round, roundAnswered        float64
}

// startEvent is an arrival at a trace time, or a completion at a live time.
type startEvent struct {
	arrival bool
	at      float64
}

// liveStarts pairs each started live job with the event that let it
// start. Where Nomad kept the planner's release of the job, that is the
// latest arrival (its own), completion or preemption's stop at or before
// the release: the event the planner answered. A preemption the same
// round decided may still have had to free the job's GPUs after the
// release; that wait is the stop latency, charged apart, and is left out.
// Otherwise it is, for a job the simulator starts the moment it arrives,
// its arrival; for one it queues, the latest completion or stop before its
// live start (or its arrival, if later). Without the stops, a job that
// started by preempting another would be timed from a completion long
// before; without the release, a job that the cluster, running behind the
// simulator, made wait would be timed from its arrival, its wait taken
// for the cost of a start.
func (l Live) liveStarts(ideal *sim.Result) []liveStart {
	arrivals := map[string]float64{}
	onArrival := map[string]bool{}
	for _, j := range ideal.Jobs {
		arrivals[j.ID] = j.Arrival
		onArrival[j.ID] = j.Start-j.Arrival < 1e-9
	}
	finishes := make([]float64, 0, len(l.Jobs.Jobs))
	for _, j := range l.Jobs.Jobs {
		if j.Finish > 0 {
			finishes = append(finishes, j.Finish)
		}
	}
	sort.Float64s(finishes)
	var out []liveStart
	for i, j := range l.Jobs.Jobs {
		if !(j.Start > 0) || j.Start < j.Arrival { // NaN: unfinished
			continue
		}
		var tasks []float64
		placed := 0.0
		for k, t := range l.firstTasks(i) {
			tasks = append(tasks, t.Start)
			if k == 0 {
				placed = t.Placed
			}
		}
		if r, ok := l.release(i, j.Start); ok && r >= j.Arrival {
			answered, answeredBy := l.lastEventBy(finishes, j.Arrival, r)
			from, event := answered, startEvent{true, arrivals[j.ID]}
			if from > j.Arrival {
				event = startEvent{false, from}
			}
			st, ok := latestBy(l.Stops, j.Start)
			stopWait := ok && st > r
			if stopWait {
				from += st - r
			}
			s := liveStart{from: from, start: j.Start, tasks: tasks, event: event,
				released: true, stopWait: stopWait, answered: answered, release: r, placed: placed,
				answeredBy: answeredBy}
			if d, ok := l.decided(i, j.Arrival, r); ok {
				s.roundKnown, s.round = true, d
				s.roundAnswered, s.roundAnsweredBy = l.lastEventBy(finishes, j.Arrival, d)
			}
			out = append(out, s)
			continue
		}
		if onArrival[j.ID] {
			out = append(out, liveStart{from: j.Arrival, start: j.Start, tasks: tasks, event: startEvent{true, arrivals[j.ID]}})
			continue
		}
		from := l.lastEvent(finishes, j.Arrival, j.Start)
		out = append(out, liveStart{from: from, start: j.Start, tasks: tasks, event: startEvent{false, from}})
	}
	return out
}

// StartSpread is how much later, on the live cluster, each further
// task that one event let start started, in trace seconds: the mean gap
// between consecutive task starts of the jobs one event let start, a
// gang's tasks among them. Nomad places and the clients start the tasks
// one round releases one after another. A gap longer than within (the
// start latency) is a later round's start, not spread, and is left out.
// It also returns how many events it saw.
func (l Live) StartSpread(ideal *sim.Result, within float64) (float64, int) {
	byEvent := map[startEvent][]float64{}
	for _, s := range l.liveStarts(ideal) {
		byEvent[s.event] = append(byEvent[s.event], s.tasks...)
	}
	sum, gaps, events := 0.0, 0, 0
	for _, starts := range byEvent {
		sort.Float64s(starts)
		counted := false
		for i := 1; i < len(starts); i++ {
			if gap := starts[i] - starts[i-1]; gap <= within {
				sum += gap
				gaps++
				counted = true
			}
		}
		if counted {
			events++
		}
	}
	if gaps == 0 {
		return 0, 0
	}
	return sum / float64(gaps), events
}

// GangSpread is how far apart, in trace seconds, the tasks of a gang
// started on the live cluster: the mean over the jobs of several GPUs of
// the time from the first to the last task of the first start, divided by
// the tasks after the first. The mean, as the average JCT adds up every
// gang's wait for its last task. A gang's allocations start on several
// clients, among other jobs' tasks, and came out about 1.65 times the
// cluster's pace (StartSpread) in two 300-job replays. A start whose tasks
// did not all run at once (taken back before its last started) is left
// out, and so is one whose allocations Nomad placed at different times:
// those waited for GPUs that a preemption's stop freed one after another,
// which the stop latency charges (a 2D-Gittins replay on one client had
// gangs placed over 90 trace s, and its gang spread came out 8.9 against
// 1.7 to 3.6 in the other policies' runs). It also returns how many gangs
// it saw.
func (l Live) GangSpread() (float64, int) {
	var spreads []float64
	for i, j := range l.Jobs.Jobs {
		if j.GPUs < 2 || i >= len(l.Tasks) || len(l.Tasks[i]) < j.GPUs {
			continue
		}
		tasks := l.firstTasks(i)
		first, last, ended := startSpan(tasks)
		if last > ended || !placedTogether(tasks) {
			continue
		}
		spreads = append(spreads, (last-first)/float64(len(tasks)-1))
	}
	return Mean(spreads), len(spreads)
}

// placedTogether says whether Nomad placed the tasks in one evaluation
// (one placement time), or does not say when it placed them.
func placedTogether(tasks []TaskRun) bool {
	for _, t := range tasks[1:] {
		if t.Placed != tasks[0].Placed {
			return false
		}
	}
	return true
}

// StartLatency is what a start costs on the live cluster, in trace
// seconds: the median, over the live jobs, of the time from the event that
// let the job start to its first task's start, less spread for each task
// that the same event let start before it (see StartSpread). It
// also returns how many jobs it saw.
func (l Live) StartLatency(ideal *sim.Result, spread float64) (float64, int) {
	d := l.StartDelays(ideal, spread)
	return Median(d), len(d)
}

// StartDelays is, per live start, the time from the event that let it
// start to its first task's start, less spread for each task that the
// same event let start before it.
func (l Live) StartDelays(ideal *sim.Result, spread float64) []float64 {
	starts := l.liveStarts(ideal)
	sort.Slice(starts, func(a, b int) bool { return starts[a].start < starts[b].start })
	before := map[startEvent]int{}
	var d []float64
	for _, s := range starts {
		d = append(d, max(s.start-s.from-float64(before[s.event])*spread, 0))
		before[s.event] += len(s.tasks)
	}
	return d
}

// StartParts is where the time from the event that let a job start to
// its first task's start went, over the live starts that the planner's
// release answered, in trace seconds: the planner (event to release: its
// round's wait and work, and its write), Nomad (release to the
// allocation's placement: the evaluation, and any wait for GPUs that a
// preemption's stop frees) and the client (placement to the task's start:
// fetching the allocation, its hooks, the driver). Nomad and Client are
// medians, for reading; what the simulator is charged is below.
type StartParts struct {
	Planner float64 `json:"planner_s"`
	// Round and Write split the planner's part where its decisions were
	// read (Result.Decided), over RoundMeasuredOn starts: Round is the
	// mean wait from the event to the round that decided the start (when
	// it read Nomad: its wait for min_interval, settle or the round
	// before), Write the mean from that round, or from a stop it waited
	// for, to the release (its reads, its policy and its writes). The
	// simulator decides Round after the event; Write is charged in the
	// start latency.
	Round           float64 `json:"round_s,omitempty"`
	Write           float64 `json:"write_s,omitempty"`
	RoundMeasuredOn int     `json:"round_measured_on,omitempty"`
	// ArrivalWait and CompletionWait are the wait the simulator's rounds
	// are charged (Round where the rounds were read, else Planner) over
	// the starts that answered their own arrival, and over those that
	// answered a completion, which the planner learns of only once a
	// client reports it; ArrivalWaits and CompletionWaits count them.
	// (Starts that answered a preemption's stop are in neither.)
	ArrivalWait     float64 `json:"arrival_wait_s"`
	CompletionWait  float64 `json:"completion_wait_s"`
	ArrivalWaits    int     `json:"arrival_waits"`
	CompletionWaits int     `json:"completion_waits"`
	// RoundWait is the mean of those waits over every start, whatever it
	// answered, over RoundWaits starts: what each round is charged where
	// the two kinds are not told apart. LateRounds counts the starts left
	// out of all three: their round came more than Live.RoundEvery after
	// their latest event, so the planner had planned since it, and what
	// released them was a later reason the replay does not see (a
	// policy's wake as a job's service crossed a cut), not the event. In
	// a 2D-Gittins run on Philly 6c71a0, a start released by a wake 123
	// trace s after a completion made the completions' mean wait 43 s
	// where the other two waited 2 and 3.
	RoundWait  float64 `json:"round_wait_s"`
	RoundWaits int     `json:"round_waits"`
	LateRounds int     `json:"late_rounds,omitempty"`
	Nomad      float64 `json:"nomad_s"`
	Client     float64 `json:"client_s"`
	MeasuredOn int     `json:"measured_on"`
	// ClientsBusy is the share of the run during which some task was
	// placed and not yet started, and ClientsPerStart the trace seconds
	// per task start meanwhile: whether the clients' starts were a queue,
	// and how fast it drained.
	ClientsBusy     float64 `json:"clients_busy"`
	ClientsPerStart float64 `json:"clients_s_per_start"`
	// NomadUnblocked is Nomad's part over the starts that waited for no
	// preemption's stop (the stop latency charges that wait). It and
	// Planner are means: each start waits the whole of both, with no
	// queue between starts to absorb a slow one, so the average JCT adds
	// up their tail (a slow round, a slow evaluation) as often as it
	// happens: in a run of 300 jobs, means of 13.5 and 9.1 trace s
	// against medians of 8.1 and 1.5.
	NomadUnblocked float64 `json:"nomad_unblocked_s"`
	// ClientDelay and ClientService are the clients' queue of starts
	// fitted to the live run (ClientQueue), over ClientTasks tasks.
	ClientDelay   float64 `json:"client_delay_s"`
	ClientService float64 `json:"client_service_s"`
	ClientTasks   int     `json:"client_tasks"`
	// SharedDelay and SharedService are the clients' shared set-up
	// fitted to the same tasks (ClientShare).
	SharedDelay   float64 `json:"shared_delay_s"`
	SharedService float64 `json:"shared_service_s"`
	// ClientRMS and SharedRMS are each fit's root mean square error over
	// the starts waited on, in trace seconds: which model fits the run.
	ClientRMS float64 `json:"client_fit_rms_s"`
	SharedRMS float64 `json:"shared_fit_rms_s"`
}

// UnblockDelays are, over the live allocations whose placement waited
// for a preemption's stop, how long after the stop Nomad placed them, in
// trace seconds: an allocation placed after a stop that came after the
// planner's release of its job, once per placement of a job (a gang's
// allocations are placed together). Nomad places an allocation that
// waited for GPUs once the client has reported the stop that frees them
// and the blocked evaluation runs again.
func (l Live) UnblockDelays() []float64 {
	var out []float64
	for i, runs := range l.Tasks {
		seen := map[float64]bool{}
		for _, t := range runs {
			if t.Placed <= 0 || seen[t.Placed] {
				continue
			}
			seen[t.Placed] = true
			r, ok := l.release(i, t.Placed)
			if !ok {
				continue
			}
			if st, ok := latestBy(l.Stops, t.Placed); ok && st > r {
				out = append(out, t.Placed-st)
			}
		}
	}
	return out
}

// StartLatency is the start latency the simulator is charged when the
// live run shows where its starts' time went: the planner's part, Nomad's
// where no stop held the GPUs, and the clients' fixed delay, in their
// shared set-up's model or their queue's.
func (p *StartParts) StartLatency(shared bool) float64 {
	if shared {
		return p.Planner + p.NomadUnblocked + p.SharedDelay
	}
	return p.Planner + p.NomadUnblocked + p.ClientDelay
}

// StartParts splits the live first starts' delays (see
// startParts); nil when Nomad kept no release or placement time.
func (l Live) StartParts(ideal *sim.Result) *StartParts {
	var planner, round, write, nomad, unblocked, client []float64
	// What each start in planner and in round answered (eventArrival...).
	var plannerKind, roundKind []int
	for _, s := range l.liveStarts(ideal) {
		if !s.released || s.placed <= 0 || s.placed < s.release || s.start < s.placed {
			continue
		}
		planner = append(planner, s.release-s.answered)
		plannerKind = append(plannerKind, s.answeredBy)
		if s.roundKnown {
			round = append(round, s.round-s.roundAnswered)
			roundKind = append(roundKind, s.roundAnsweredBy)
			write = append(write, s.release-max(s.round, s.answered))
		}
		nomad = append(nomad, s.placed-s.release)
		if !s.stopWait {
			unblocked = append(unblocked, s.placed-s.release)
		}
		client = append(client, s.start-s.placed)
	}
	if len(planner) == 0 {
		return nil
	}
	p := &StartParts{Planner: Mean(planner), Nomad: Median(nomad), Client: Median(client), MeasuredOn: len(planner),
		NomadUnblocked: Mean(unblocked)}
	waits, kinds := planner, plannerKind
	if len(round) > 0 {
		p.Round, p.Write, p.RoundMeasuredOn = Mean(round), Mean(write), len(round)
		waits, kinds = round, roundKind
	}
	// Each wait under what its start answered, unless its round came too
	// late to be that event's.
	var byKind [3][]float64
	for k, w := range waits {
		if l.RoundEvery > 0 && w > l.RoundEvery {
			p.LateRounds++
			continue
		}
		byKind[kinds[k]] = append(byKind[kinds[k]], w)
	}
	p.ArrivalWait, p.ArrivalWaits = Mean(byKind[eventArrival]), len(byKind[eventArrival])
	p.CompletionWait, p.CompletionWaits = Mean(byKind[eventCompletion]), len(byKind[eventCompletion])
	counted := slices.Concat(byKind[:]...)
	p.RoundWait, p.RoundWaits = Mean(counted), len(counted)
	p.ClientsBusy, p.ClientsPerStart = ClientsBusy(l.Tasks)
	if ts := startedTasks(l.Tasks, l.IndependentWorkers); len(ts) > 0 {
		var queueErr, sharedErr float64
		p.ClientDelay, p.ClientService, queueErr = fitStarts(ts, queueCost(ts))
		p.SharedDelay, p.SharedService, sharedErr = fitStarts(ts, shareCost(ts))
		p.ClientTasks, p.ClientRMS, p.SharedRMS = len(ts), fitRMS(ts, queueErr), fitRMS(ts, sharedErr)
	}
	return p
}

// ClientQueue fits the simulator's model of starts (Config.StartLatency
// and StartSpread) to the clients' own: each task starts a fixed delay
// after Nomad placed its allocation, but no sooner than a service time
// after the task started before it, since the clients start one task at
// a time. It returns the delay and the service, in trace seconds, that put
// the start each job waits for nearest the live one, and how many tasks it
// saw. That start is the last task of each placement, since a gang runs
// once its last task has started (every task where the workers run each on
// its own course: eachTask). A client sets up a placement's allocations
// side by side, so a gang's first task starts late and the rest soon after
// it; fitted to every task, the delay followed those first tasks and came
// out two to three times what a lone task waits. Least squares, as the
// average JCT adds up every start's wait, on a grid refined once. Read
// from the gaps between starts instead, the service came out twice what
// the clients' pace under a backlog shows, and where the queue runs near
// saturation that decides the simulated JCT. A grid, not gonum's
// optimisers: the queue's max makes the error kinked, where a local method
// can stop at one, and two parameters over a thousand tasks take
// milliseconds.
func ClientQueue(tasks [][]TaskRun, eachTask bool) (delay, service float64, n int) {
	ts := startedTasks(tasks, eachTask)
	if len(ts) == 0 {
		return 0, 0, 0
	}
	delay, service, _ = fitStarts(ts, queueCost(ts))
	return delay, service, len(ts)
}

// fitRMS is the root mean square error, in trace seconds, of a model's
// fit (fitStarts' squared error) over the starts waited on.
func fitRMS(ts []startedTask, squared float64) float64 {
	n := 0
	for _, t := range ts {
		if t.waitedOn {
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return math.Sqrt(squared / float64(n))
}

// queueCost is the squared error, over the starts waited on, of the
// clients' queue of delay d and service s (ClientQueue).
func queueCost(ts []startedTask) func(d, s float64) float64 {
	return func(d, s float64) float64 {
		prev, sum := math.Inf(-1), 0.0
		for _, t := range ts {
			at := max(t.Placed+d, prev+s)
			prev = at
			if t.waitedOn {
				sum += (at - t.Start) * (at - t.Start)
			}
		}
		return sum
	}
}

// ClientShare fits the simulator's other model of starts
// (Config.StartsShared) to the clients' own: each task joins the clients'
// set-up a fixed delay after Nomad placed its allocation and needs a
// service time of it, and the tasks in set-up share it equally. It returns
// the delay and the service, in trace seconds, that put the start each job
// waits for nearest the live one, and how many tasks it saw, as
// ClientQueue does. A client starts the allocations it was given side by
// side: fitted as a queue, a lone task placed beside a gang waited for
// the whole gang, and the delay grew to cover the gangs' last tasks, which
// charged one-GPU starts twice what they waited on 2D-Gittins' replays.
func ClientShare(tasks [][]TaskRun, eachTask bool) (delay, service float64, n int) {
	ts := startedTasks(tasks, eachTask)
	if len(ts) == 0 {
		return 0, 0, 0
	}
	delay, service, _ = fitStarts(ts, shareCost(ts))
	return delay, service, len(ts)
}

// shareCost is the squared error, over the starts waited on, of the
// clients' shared set-up of delay d and service s (ClientShare).
func shareCost(ts []startedTask) func(d, s float64) float64 {
	// Every task needs the same, so they end in the order they join: each
	// ends once the set-up's virtual time (the service each task in it
	// has had) is the service past what it was at its joining.
	tags := make([]float64, len(ts))
	return func(d, s float64) float64 {
		sum, now, virtual, head := 0.0, math.Inf(-1), 0.0, 0
		for k := 0; k <= len(ts); k++ {
			join := math.Inf(1)
			if k < len(ts) {
				join = ts[k].Placed + d
			}
			// The tasks that end before this one joins.
			for head < k {
				end := now + (tags[head]-virtual)*float64(k-head)
				if end > join {
					break
				}
				now, virtual = end, tags[head]
				for head < k && tags[head] <= virtual {
					if t := ts[head]; t.waitedOn {
						sum += (end - t.Start) * (end - t.Start)
					}
					head++
				}
			}
			if k == len(ts) {
				break
			}
			if head < k {
				virtual += (join - now) / float64(k-head)
			}
			now = join
			tags[k] = virtual + s
		}
		return sum
	}
}

// startedTask is a task that Nomad placed and that started, and whether
// its start is the one its job waits for.
type startedTask struct {
	TaskRun
	job      int
	waitedOn bool
}

// startedTasks is the tasks that started after their placement, in the
// order of their placements (and starts within one), each placement's
// last marked as the start its job waits for: a gang runs once its last
// task has started (every task where the workers run each on its own
// course: eachTask).
func startedTasks(tasks [][]TaskRun, eachTask bool) []startedTask {
	var ts []startedTask
	for job, runs := range tasks {
		for _, t := range runs {
			if t.Placed > 0 && t.Start >= t.Placed {
				ts = append(ts, startedTask{TaskRun: t, job: job, waitedOn: eachTask})
			}
		}
	}
	sort.Slice(ts, func(a, b int) bool {
		if ts[a].Placed != ts[b].Placed {
			return ts[a].Placed < ts[b].Placed
		}
		return ts[a].Start < ts[b].Start
	})
	type placement struct {
		job    int
		placed float64
	}
	last := map[placement]int{}
	for k, t := range ts {
		last[placement{t.job, t.Placed}] = k
	}
	for _, k := range last {
		ts[k].waitedOn = true
	}
	return ts
}

// fitStarts is the delay and service of a model of starts that put the
// starts waited on nearest the live ones (least squares, cost), on a grid
// refined once: a task's delay at most its wait, the service at most the
// median wait (a slower set-up would have made most waits longer).
func fitStarts(ts []startedTask, cost func(d, s float64) float64) (delay, service, best float64) {
	waits := make([]float64, len(ts))
	for k, t := range ts {
		waits[k] = t.Start - t.Placed
	}
	sort.Float64s(waits)
	dHi, sHi := waits[len(waits)*19/20], waits[len(waits)/2]
	const steps = 48
	best = math.Inf(1)
	search := func(dLo, dHi, sLo, sHi float64) {
		for i := 0; i <= steps; i++ {
			d := dLo + (dHi-dLo)*float64(i)/steps
			for k := 0; k <= steps; k++ {
				s := sLo + (sHi-sLo)*float64(k)/steps
				if c := cost(d, s); c < best {
					best, delay, service = c, d, s
				}
			}
		}
	}
	search(0, dHi, 0, sHi)
	dStep, sStep := dHi/steps, sHi/steps
	search(max(delay-dStep, 0), delay+dStep, max(service-sStep, 0), service+sStep)
	return delay, service, best
}

// ClientsBusy is the share of the span from the first placement to the
// last start during which some task was placed and not yet started, and
// the trace seconds per task start during that time (0 when none).
func ClientsBusy(tasks [][]TaskRun) (busy, perStart float64) {
	type edge struct {
		at    float64
		delta int
	}
	var edges []edge
	for _, t := range placedTasks(tasks) {
		edges = append(edges, edge{t.Placed, 1}, edge{t.Start, -1})
	}
	if len(edges) == 0 {
		return 0, 0
	}
	// At one instant a start comes before a placement: a task placed
	// and started at once never waited.
	sort.Slice(edges, func(a, b int) bool {
		if edges[a].at != edges[b].at {
			return edges[a].at < edges[b].at
		}
		return edges[a].delta < edges[b].delta
	})
	waiting, busyTime, starts := 0, 0.0, 0
	for k, e := range edges {
		if k > 0 && waiting > 0 {
			busyTime += e.at - edges[k-1].at
		}
		if e.delta < 0 && waiting > 0 {
			starts++
		}
		waiting += e.delta
	}
	if span := edges[len(edges)-1].at - edges[0].at; span > 0 {
		busy = busyTime / span
	}
	if starts > 0 {
		perStart = busyTime / float64(starts)
	}
	return busy, perStart
}

// placedTasks is every task run whose placement Nomad kept and which
// started at or after it, in a slice of its own.
func placedTasks(tasks [][]TaskRun) []TaskRun {
	var out []TaskRun
	for _, runs := range tasks {
		for _, t := range runs {
			if t.Placed > 0 && t.Start >= t.Placed {
				out = append(out, t)
			}
		}
	}
	return out
}

// Mean is the mean of xs, 0 for none.
func Mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	sum := 0.0
	for _, x := range xs {
		sum += x
	}
	return sum / float64(len(xs))
}

// Median is the middle of xs (the upper one of an even count), 0 for none;
// it sorts a copy.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	d := append([]float64(nil), xs...)
	sort.Float64s(d)
	return d[len(d)/2]
}
