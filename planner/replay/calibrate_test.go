package replay

import (
	"fmt"
	"math"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/caravan-gpu/caravan/planner/sim"
)

// What a start costs live is measured from the event that let each job
// start: its arrival when the simulator started it on arrival, else the
// latest completion before its live start.
func TestMeasuredStartLatency(t *testing.T) {
	ideal := &sim.Result{Jobs: []sim.JobResult{
		{ID: "a", Arrival: 0, Start: 0}, {ID: "b", Arrival: 10, Start: 10}, {ID: "c", Arrival: 20, Start: 20},
		{ID: "queued", Arrival: 30, Start: 90},
	}}
	live := &sim.Result{Jobs: []sim.JobResult{
		{ID: "a", Arrival: 0.1, Start: 8.1, Finish: 150}, {ID: "b", Arrival: 10, Start: 22, Finish: 300},
		{ID: "c", Arrival: 20, Start: 29, Finish: 100},
		// Queued behind a: starts 11 s after a completed, whatever its arrival.
		{ID: "queued", Arrival: 30, Start: 161, Finish: 400},
	}}
	d, n := Live{Jobs: live}.StartLatency(ideal, 0)
	must.Eq(t, 4, n)
	must.Eq(t, 11.0, d, must.Sprint("median of 8, 12, 9 and 11"))
	d, n = Live{Jobs: &sim.Result{}}.StartLatency(ideal, 0)
	must.Eq(t, 0, n)
	must.Eq(t, 0.0, d)

	// Five queued jobs that each started by preempting another, 10 s
	// after the stop freed their GPUs: timed from the stops, not from the
	// last completion (400) long before.
	var stops []float64
	for k := 1; k <= 5; k++ {
		id, stop := fmt.Sprintf("p%d", k), 400+100*float64(k)
		ideal.Jobs = append(ideal.Jobs, sim.JobResult{ID: id, Arrival: 40, Start: stop})
		live.Jobs = append(live.Jobs, sim.JobResult{ID: id, Arrival: 40, Start: stop + 10})
		stops = append(stops, stop)
	}
	d, _ = Live{Jobs: live}.StartLatency(ideal, 0)
	must.Eq(t, 110.0, d, must.Sprint("median of 8, 12, 9, 11, 110, 210, 310, 410 and 510"))
	d, n = Live{Jobs: live, Stops: stops}.StartLatency(ideal, 0)
	must.Eq(t, 9, n)
	must.Eq(t, 10.0, d, must.Sprint("median of 8, 12, 9, 11 and five 10s"))
}

// Jobs that one event let start, a burst of arrivals at one trace time or
// a completion, start one after another live: the spread is the mean gap
// between their consecutive starts, leaving out gaps longer than a start's
// latency (a later round's start), and the latency is measured less the
// spread of the jobs before.
func TestMeasuredStartSpread(t *testing.T) {
	ideal := &sim.Result{Jobs: []sim.JobResult{
		{ID: "a", Arrival: 0, Start: 0}, {ID: "b", Arrival: 0, Start: 0}, {ID: "c", Arrival: 0, Start: 0},
		{ID: "late", Arrival: 0, Start: 0},
		{ID: "d", Arrival: 50, Start: 50},
		{ID: "q1", Arrival: 1, Start: 40}, {ID: "q2", Arrival: 1, Start: 40},
	}}
	live := &sim.Result{Jobs: []sim.JobResult{
		// Submitted 0.1 s apart, started 1 s apart.
		{ID: "a", Arrival: 0, Start: 2, Finish: 42}, {ID: "b", Arrival: 0.1, Start: 3, Finish: 80},
		{ID: "c", Arrival: 0.2, Start: 4, Finish: 90},
		// Started on arrival in the simulator, but by a later round live.
		{ID: "late", Arrival: 0.3, Start: 30, Finish: 95},
		{ID: "d", Arrival: 50, Start: 52, Finish: 60},
		// a's completion lets both start, 2 s apart.
		{ID: "q1", Arrival: 1, Start: 44, Finish: 100}, {ID: "q2", Arrival: 1, Start: 46, Finish: 100},
	}}
	spread, events := Live{Jobs: live}.StartSpread(ideal, 5)
	must.Eq(t, 2, events, must.Sprint("the burst at 0 and a's completion; d alone does not count"))
	must.Eq(t, 4.0/3, spread, must.Sprint("gaps 1, 1 and 2; late's 26 s is a later round"))
	latency, n := Live{Jobs: live}.StartLatency(ideal, 1)
	must.Eq(t, 7, n)
	// a 2, b 2.9-1, c 3.8-2, late 29.7-3, d 2, q1 2, q2 4-1: sorted 1.8,
	// 1.9, 2, 2, 2, 3, 26.7.
	must.Eq(t, 2.0, latency)
	spread, events = Live{Jobs: &sim.Result{}}.StartSpread(ideal, 5)
	must.Eq(t, 0, events)
	must.Eq(t, 0.0, spread)
}

// A gang's spread is the mean over the jobs of several GPUs of their
// first start's first-to-last task start over the tasks after the first;
// a one-GPU job, a gang whose later start is in its tasks, and a start
// taken back before its last task started are measured as they should be.
func TestMeasuredGangSpread(t *testing.T) {
	live := &sim.Result{Jobs: []sim.JobResult{
		{ID: "one", GPUs: 1, Start: 0, Finish: 50},
		{ID: "four", GPUs: 4, Start: 10, Finish: 100},
		{ID: "two", GPUs: 2, Start: 0, Finish: 300},
		{ID: "cut", GPUs: 2, Start: 0, Finish: 400},
	}}
	tasks := [][]TaskRun{
		{{Start: 0, End: 50}},
		{{Start: 10, End: 100}, {Start: 14, End: 100}, {Start: 13, End: 100}, {Start: 22, End: 100}},
		// Preempted at 100 and started again at 200: only the first
		// start's two tasks count.
		{{Start: 0, End: 100}, {Start: 8, End: 100}, {Start: 200, End: 300}, {Start: 290, End: 300}},
		// Its first task was stopped before the second started.
		{{Start: 0, End: 5}, {Start: 30, End: 35}, {Start: 100, End: 400}, {Start: 101, End: 400}},
	}
	spread, gangs := Live{Jobs: live, Tasks: tasks}.GangSpread()
	must.Eq(t, 2, gangs)
	must.Eq(t, 6.0, spread, must.Sprint("mean of (22-10)/3 = 4 and (8-0)/1 = 8"))

	spread, gangs = Live{Jobs: &sim.Result{}}.GangSpread()
	must.Eq(t, 0, gangs)
	must.Eq(t, 0.0, spread)

	// A gang Nomad placed piecemeal, as a preemption's stops freed its
	// GPUs, waited for those stops (the stop latency's part): left out.
	// Placed in one evaluation, its spread counts.
	piecemeal := [][]TaskRun{nil, {{Placed: 9, Start: 10, End: 100}, {Placed: 9, Start: 14, End: 100},
		{Placed: 40, Start: 43, End: 100}, {Placed: 80, Start: 82, End: 100}}}
	live.Jobs = live.Jobs[:2]
	spread, gangs = Live{Jobs: live, Tasks: piecemeal}.GangSpread()
	must.Eq(t, 0, gangs)
	must.Eq(t, 0.0, spread)
	together := [][]TaskRun{nil, {{Placed: 9, Start: 10, End: 100}, {Placed: 9, Start: 14, End: 100},
		{Placed: 9, Start: 13, End: 100}, {Placed: 9, Start: 22, End: 100}}}
	spread, gangs = Live{Jobs: live, Tasks: together}.GangSpread()
	must.Eq(t, 1, gangs)
	must.Eq(t, 4.0, spread)
}

// A run's overhead is measured on jobs that ran unpreempted on the same
// model in both runs: the mean of live run time less the simulated one.
func TestMeasuredRunOverhead(t *testing.T) {
	ideal := &sim.Result{Jobs: []sim.JobResult{
		{ID: "a", Start: 0, Finish: 100, GPUModel: "V100"}, {ID: "b", Start: 10, Finish: 60, GPUModel: "V100"},
		{ID: "c", Start: 0, Finish: 30, GPUModel: "V100"}, {ID: "pre", Start: 0, Finish: 500, Preemptions: 1, GPUModel: "V100"},
		{ID: "k80", Start: 0, Finish: 100, GPUModel: "V100"},
	}}
	live := &sim.Result{Jobs: []sim.JobResult{
		{ID: "a", Start: 5, Finish: 109, GPUModel: "V100"}, {ID: "b", Start: 20, Finish: 73, GPUModel: "V100"},
		{ID: "c", Start: 2, Finish: 40, GPUModel: "V100"}, {ID: "pre", Start: 0, Finish: 900, GPUModel: "V100"},
		{ID: "k80", Start: 0, Finish: 400, GPUModel: "K80"},
	}}
	d, n := Live{Jobs: live}.RunOverhead(ideal)
	must.Eq(t, 3, n, must.Sprint("preempted and moved jobs are left out"))
	must.Eq(t, 5.0, d, must.Sprint("mean of 4, 3 and 8"))
}

// On lanes, a task is measured against its own live partners, not the
// simulator's pairing. Live, a and b (60 s of work each) share GPU-0 of
// n1, each at half its pace beside the other; c runs alone on GPU-0 of
// n2, a GPU of the same name on another node. a runs alone for 10 s, then
// 50 s of work beside b take 100 s: 110 s. b runs beside a for 102 s (51 s
// of work), then 9 s alone: 111 s. c: 60 s. Each ran 2 s longer live. The
// simulator gave each a GPU of its own, which is no cost of a run.
func TestRunOverheadOnALaneCountsItsLivePartners(t *testing.T) {
	ideal := &sim.Result{Jobs: []sim.JobResult{
		{ID: "a", GPUs: 1, Start: 0, Finish: 60, Isolated: 60, GPUModel: "H100"},
		{ID: "b", GPUs: 1, Start: 10, Finish: 70, Isolated: 60, GPUModel: "H100"},
		{ID: "c", GPUs: 1, Start: 10, Finish: 70, Isolated: 60, GPUModel: "H100"},
	}}
	live := &sim.Result{Jobs: []sim.JobResult{
		{ID: "a", GPUs: 1, Start: 100, Finish: 212, GPUModel: "H100"},
		{ID: "b", GPUs: 1, Start: 110, Finish: 223, GPUModel: "H100"},
		{ID: "c", GPUs: 1, Start: 110, Finish: 172, GPUModel: "H100"},
	}}
	tasks := [][]TaskRun{
		{{Start: 100, End: 212, Node: "n1", GPU: "GPU-0"}},
		{{Start: 110, End: 223, Node: "n1", GPU: "GPU-0"}},
		{{Start: 110, End: 172, Node: "n2", GPU: "GPU-0"}},
	}
	d, n := Live{Jobs: live, Tasks: tasks, SharedSpeed: 0.5}.RunOverhead(ideal)
	must.Eq(t, 3, n)
	must.Between(t, 1.999, d, 2.001)

	// Read as whole GPUs, the difference in pairing is charged as overhead.
	whole, _ := Live{Jobs: live, Tasks: tasks}.RunOverhead(ideal)
	must.Greater(t, 30, whole)
}

// A task Synergy's table sized is measured against its work at the speed
// its own CPU and memory gave it: live, a (120 s of work) got 2× its
// share and ran 63 s; the simulator gave it 1.5× (80 s). b got its share
// both sides and ran 3 s longer live. c was re-sized in the simulation (a
// restart), d restarted live: both are left out. Each ran 3 s longer.
func TestRunOverheadOfASizedJobCountsItsOwnSpeed(t *testing.T) {
	ideal := &sim.Result{Jobs: []sim.JobResult{
		{ID: "a", GPUs: 1, Start: 0, Finish: 80, Isolated: 120, GPUModel: "V100"},
		{ID: "b", GPUs: 1, Start: 0, Finish: 50, Isolated: 50, GPUModel: "V100"},
		{ID: "c", GPUs: 1, Start: 0, Finish: 90, Isolated: 50, Migrations: 1, GPUModel: "V100"},
		{ID: "d", GPUs: 1, Start: 0, Finish: 50, Isolated: 50, GPUModel: "V100"},
	}}
	live := &sim.Result{Jobs: []sim.JobResult{
		{ID: "a", GPUs: 1, Start: 10, Finish: 73, GPUModel: "V100"},
		{ID: "b", GPUs: 1, Start: 10, Finish: 63, GPUModel: "V100"},
		{ID: "c", GPUs: 1, Start: 10, Finish: 30, GPUModel: "V100"},
		{ID: "d", GPUs: 1, Start: 10, Finish: 200, GPUModel: "V100"},
	}}
	tasks := [][]TaskRun{
		{{Start: 10, End: 73, Speed: 2}},
		{{Start: 10, End: 63, Speed: 1}},
		{{Start: 10, End: 30, Speed: 3}},
		{{Start: 10, End: 40, Speed: 1}, {Start: 100, End: 200, Speed: 0.5}},
	}
	d, n := Live{Jobs: live, Tasks: tasks}.RunOverhead(ideal)
	must.Eq(t, 2, n)
	must.Eq(t, 3.0, d)
}

// Work on a lane runs at the pace its partners leave it, partner by
// partner, and alone once they have gone.
func TestSharedRunTime(t *testing.T) {
	self := TaskRun{Start: 0, End: 1000, Node: "n", GPU: "g"}
	for _, tc := range []struct {
		name     string
		partners []TaskRun
		want     float64
	}{
		{"alone", nil, 60},
		{"beside one throughout", []TaskRun{{Start: 0, End: 1000}}, 120},
		{"beside two", []TaskRun{{Start: 0, End: 1000}, {Start: 0, End: 1000}}, 240},
		{"a partner that leaves", []TaskRun{{Start: 0, End: 20}}, 70},
		{"a partner that comes", []TaskRun{{Start: 50, End: 1000}}, 70},
		{"a partner before", []TaskRun{{Start: -50, End: 0}}, 60},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := sharedRunTime(self, append([]TaskRun{self}, tc.partners...), 60, 0.5)
			must.Between(t, tc.want-1e-9, got, tc.want+1e-9)
		})
	}
}

// A gang's tasks start one after another: the spread counts each task, and
// the job after the gang is measured less the spread of all its tasks.
// The gang makes progress once its last task has started, so each task's
// run overhead is measured from there, and the job is charged its last.
func TestAGangsTasksAreSpreadAndRunFromTheLastStart(t *testing.T) {
	ideal := &sim.Result{Jobs: []sim.JobResult{
		{ID: "gang", GPUs: 3, Arrival: 0, Start: 0, Finish: 100, GPUModel: "V100"},
		{ID: "after", GPUs: 1, Arrival: 0, Start: 0, Finish: 100, GPUModel: "V100"},
	}}
	live := &sim.Result{Jobs: []sim.JobResult{
		{ID: "gang", GPUs: 3, Arrival: 0, Start: 2, Finish: 106, GPUModel: "V100"},
		{ID: "after", GPUs: 1, Arrival: 0, Start: 5, Finish: 107, GPUModel: "V100"},
	}}
	measured := Live{Jobs: live, Tasks: [][]TaskRun{
		{{Start: 2, End: 106}, {Start: 3, End: 106}, {Start: 4, End: 106}},
		{{Start: 5, End: 107}},
	}}
	spread, events := measured.StartSpread(ideal, 5)
	must.Eq(t, 1, events)
	must.Eq(t, 1.0, spread, must.Sprint("four tasks a second apart"))
	must.Eq(t, []float64{2, 2}, measured.StartDelays(ideal, spread), must.Sprint("after is measured less three tasks' spread"))
	overhead, n := measured.RunOverhead(ideal)
	must.Eq(t, 2, n, must.Sprint("two jobs"))
	must.Eq(t, 2.0, overhead, must.Sprint("every task ran 2 s longer than its work from the gang's last start"))

	// Workers that each ran their own course are measured from their own
	// starts.
	measured.IndependentWorkers = true
	measured.Tasks[0] = []TaskRun{{Start: 2, End: 104}, {Start: 3, End: 105}, {Start: 4, End: 106}}
	overhead, n = measured.RunOverhead(ideal)
	must.Eq(t, 2, n)
	must.Eq(t, 2.0, overhead)

	// A job finishes with its last task, and the simulator charges a
	// run's overhead once: a gang whose tasks' exits were seen apart is
	// charged its last, not the mean of its tasks (4.75 here).
	measured.IndependentWorkers = false
	measured.Tasks[0] = []TaskRun{{Start: 2, End: 105}, {Start: 3, End: 106}, {Start: 4, End: 118}}
	overhead, n = measured.RunOverhead(ideal)
	must.Eq(t, 2, n)
	must.Eq(t, 8.0, overhead, must.Sprint("the gang's last task 14 s over its work from its last start at 4, after 2"))
}

// Where Nomad kept the planner's release, a start is timed from the event
// the release answered: a job that the simulator started on arrival but
// the live cluster made wait is timed from the completion that let it
// start, not from its arrival; and the wait for a preemption's stop after
// the release is the stop latency, left out.
func TestStartTimedFromTheEventItsReleaseAnswered(t *testing.T) {
	ideal := &sim.Result{Jobs: []sim.JobResult{
		{ID: "a", Arrival: 0, Start: 0}, {ID: "late", Arrival: 1, Start: 1}, {ID: "pre", Arrival: 100, Start: 100},
		{ID: "old", Arrival: 1, Start: 1},
	}}
	live := &sim.Result{Jobs: []sim.JobResult{
		{ID: "a", Arrival: 0, Start: 2, Finish: 48},
		{ID: "late", Arrival: 1, Start: 53, Finish: 90},
		{ID: "pre", Arrival: 100, Start: 106, Finish: 200},
		// No release kept: timed from its arrival, as the simulator
		// started it then.
		{ID: "old", Arrival: 1, Start: 60, Finish: 100},
	}}
	measured := Live{Jobs: live, Stops: []float64{104}, Releases: [][]float64{{0.5}, {50}, {101}, nil}}
	must.Eq(t, []float64{2, 5, 59, 3}, measured.StartDelays(ideal, 0),
		must.Sprint("in order of start: a 2 from its arrival; late 5 from a's completion at 48; old 59; pre 1 to its release and 2 after the stop at 104"))
}

// A first start's delay splits where the live run shows it went: the
// planner's answer to the event, Nomad's placement, the client's start.
func TestStartPartsSplitAStartsDelay(t *testing.T) {
	ideal := &sim.Result{Jobs: []sim.JobResult{
		{ID: "a", Arrival: 0, Start: 0}, {ID: "late", Arrival: 1, Start: 1}, {ID: "old", Arrival: 1, Start: 1},
	}}
	live := &sim.Result{Jobs: []sim.JobResult{
		{ID: "a", Arrival: 0, Start: 12, Finish: 48},
		{ID: "late", Arrival: 1, Start: 60, Finish: 90},
		{ID: "old", Arrival: 1, Start: 60, Finish: 100},
	}}
	measured := Live{Jobs: live,
		Tasks: [][]TaskRun{
			{{Placed: 4, Start: 12, End: 48}},
			{{Placed: 51, Start: 60, End: 90}},
			{{Placed: 30, Start: 60, End: 100}},
		},
		Releases: [][]float64{{2}, {50}, nil}}
	p := measured.StartParts(ideal)
	must.NotNil(t, p)
	must.Eq(t, 2, p.MeasuredOn, must.Sprint("old has no release kept"))
	// a: 2 to its release, 2 to its placement, 8 to its start; late: 2
	// after a's completion at 48, 1, 9.
	must.Eq(t, 2, p.Planner)
	must.Eq(t, 2, p.Nomad)
	must.Eq(t, 9, p.Client)
	must.Eq(t, 2, p.MeasuredOn)

	measured.Tasks = nil
	must.Nil(t, measured.StartParts(ideal), must.Sprint("no placement times"))
}

// The planner's part and Nomad's are charged as means: every start waits
// the whole of both, so one slow round in four adds to the average JCT a
// quarter of its length, which a median leaves out.
func TestStartPartsChargeTheMeanOfWhatEachStartWaits(t *testing.T) {
	var ideal, live sim.Result
	var tasks [][]TaskRun
	var releases [][]float64
	for i, planner := range []float64{1, 1, 1, 21} {
		at := float64(1000 * i)
		id := fmt.Sprint(i)
		ideal.Jobs = append(ideal.Jobs, sim.JobResult{ID: id, Arrival: at, Start: at})
		live.Jobs = append(live.Jobs, sim.JobResult{ID: id, GPUs: 1, Arrival: at, Start: at + planner + 10, Finish: at + 500})
		tasks = append(tasks, []TaskRun{{Placed: at + planner + 2 + float64(2*i), Start: at + planner + 10, End: at + 500}})
		releases = append(releases, []float64{at + planner})
	}
	p := Live{Jobs: &live, Tasks: tasks, Releases: releases}.StartParts(&ideal)
	must.NotNil(t, p)
	must.Eq(t, 6, p.Planner, must.Sprint("the mean of 1, 1, 1 and 21"))
	must.Eq(t, 5, p.NomadUnblocked, must.Sprint("the mean of 2, 4, 6 and 8"))
	must.Eq(t, 6, p.Nomad, must.Sprint("the upper median, for reading"))
}

// The clients' queue of starts: busy while some task is placed and not
// started, draining one start per so many seconds meanwhile.
func TestClientsBusy(t *testing.T) {
	busy, perStart := ClientsBusy([][]TaskRun{
		{{Placed: 0, Start: 10}, {Placed: 0, Start: 20}}, // waiting 0 to 20, two starts
		{{Placed: 40, Start: 40}},                        // never waited
		{{Placed: 50, Start: 60}},                        // waiting 50 to 60
		{{Start: 70}},                                    // no placement known
	})
	must.Eq(t, 30.0/60, busy, must.Sprint("30 s of the 60 from the first placement to the last start"))
	must.Eq(t, 10, perStart, must.Sprint("30 s for three starts"))
	busy, perStart = ClientsBusy(nil)
	must.Eq(t, 0, busy)
	must.Eq(t, 0, perStart)
}

// The clients' queue is fitted to the starts it made: a delay after each
// placement, and one start per service time at most.
func TestClientQueueFitsTheClientsStarts(t *testing.T) {
	place := func(at float64, starts ...float64) []TaskRun {
		var runs []TaskRun
		for _, s := range starts {
			runs = append(runs, TaskRun{Placed: at, Start: s, End: s + 100})
		}
		return runs
	}
	tasks := [][]TaskRun{
		place(10, 40, 50, 60, 70, 80), // a burst of five, one every 10 s
		place(200, 230),               // alone: the delay only
		place(300, 330, 340, 350),
		{{Start: 500}}, // no placement known: left out
	}
	delay, service, n := ClientQueue(tasks, false)
	must.Eq(t, 9, n)
	must.Between(t, 29, delay, 31)
	must.Between(t, 9, service, 11)

	// Without a queue (every task its own delay after placement) the
	// service comes out near nothing.
	delay, service, _ = ClientQueue([][]TaskRun{place(1, 31), place(5, 35), place(11, 41), place(20, 50)}, false)
	must.Between(t, 29, delay, 31)
	must.Less(t, 6, service)

	_, _, n = ClientQueue(nil, false)
	must.Eq(t, 0, n)
}

// A client sets up a placement's allocations side by side: a gang's first
// task starts late and the rest soon after. The fit follows the start a
// job waits for, the gang's last, and the lone tasks' delay, not the
// gangs' first tasks (which, fitted on every task, made the delay about 15
// here); with workers each on its own course every task counts.
func TestClientQueueFitsTheStartEachJobWaitsFor(t *testing.T) {
	place := func(at float64, after ...float64) []TaskRun {
		var runs []TaskRun
		for _, a := range after {
			runs = append(runs, TaskRun{Placed: at, Start: at + a, End: at + 500})
		}
		return runs
	}
	gang := []float64{15, 19, 20, 21, 22, 22.5, 23, 23}
	tasks := [][]TaskRun{place(100, 5), place(200, 5), place(300, 5), place(400, gang...),
		place(600, 5), place(700, gang...), place(900, 5)}
	delay, service, n := ClientQueue(tasks, false)
	must.Eq(t, 21, n)
	must.Between(t, 4.5, delay, 5.5)
	must.Between(t, 2.3, service, 2.8, must.Sprint("a gang's last start 23 s after its placement: 5 + 7 × 2.57"))

	delay, _, _ = ClientQueue(tasks, true)
	must.Greater(t, 10, delay, must.Sprint("every task a start of its own: the gangs' first tasks count"))
}

// ClientShare recovers the shared set-up's delay and service from starts
// made by it, worked out here in small steps of time rather than as the
// fit works them out; and the queue fits the same starts worse.
func TestClientShareFitsASharedSetUp(t *testing.T) {
	const delay, service, step = 3.0, 1.5, 0.001
	type placement struct {
		at    float64
		tasks int
	}
	// (A placement at 0 would read as no placement time.)
	placements := []placement{{1, 1}, {2, 8}, {5, 1}, {6, 2}, {31, 1}, {32, 4}, {33, 1}, {61, 8}, {62, 8}, {63, 1}, {101, 1}}
	left := make([]float64, len(placements))
	ends := make([]float64, len(placements))
	for k := range left {
		left[k] = service
	}
	for now := 0.0; now < 200; now += step {
		shared := 0
		for k, p := range placements {
			if p.at+delay <= now && left[k] > 0 {
				shared += p.tasks
			}
		}
		for k, p := range placements {
			if p.at+delay <= now && left[k] > 0 {
				if left[k] -= step / float64(shared); left[k] <= 0 {
					ends[k] = now + step
				}
			}
		}
	}
	var tasks [][]TaskRun
	for k, p := range placements {
		var runs []TaskRun
		for range p.tasks {
			runs = append(runs, TaskRun{Placed: p.at, Start: ends[k], End: ends[k] + 500})
		}
		tasks = append(tasks, runs)
	}
	must.Between(t, 18.7, ends[1]-2, 18.9, must.Sprint("the gang waits 18.8 s, sharing its set-up with the lone tasks beside it, where alone it would wait 3 + 8 × 1.5"))
	d, s, n := ClientShare(tasks, false)
	must.Eq(t, 36, n)
	must.Between(t, delay-0.2, d, delay+0.2)
	must.Between(t, service-0.05, s, service+0.05)

	ts := startedTasks(tasks, false)
	qd, qs, _ := ClientQueue(tasks, false)
	must.Less(t, 0.2, fitRMS(ts, shareCost(ts)(d, s)), must.Sprint("the grid's nearest point: 0.004 s at the true delay and service"))
	must.Greater(t, 1, fitRMS(ts, queueCost(ts)(qd, qs)), must.Sprint("the queue fits starts made by a shared set-up worse: 3.4 s"))
}

// The start latency the simulator is charged: the planner's part, Nomad's
// where no stop held the GPUs (the stop latency charges that wait), and
// the clients' fitted delay.
func TestStartLatencyFromItsParts(t *testing.T) {
	ideal := &sim.Result{Jobs: []sim.JobResult{{ID: "a", Arrival: 0, Start: 0}, {ID: "b", Arrival: 0, Start: 0}}}
	live := &sim.Result{Jobs: []sim.JobResult{
		{ID: "a", GPUs: 1, Arrival: 0, Start: 40, Finish: 100},
		{ID: "b", GPUs: 1, Arrival: 0, Start: 150, Finish: 300},
	}}
	measured := Live{Jobs: live, Stops: []float64{100},
		Tasks: [][]TaskRun{
			{{Placed: 10, Start: 40, End: 100}},
			{{Placed: 120, Start: 150, End: 300}}, // placed once a's stop freed its GPU
		},
		Releases: [][]float64{{5}, {6}}}
	p := measured.StartParts(ideal)
	must.NotNil(t, p)
	must.Eq(t, 114, p.Nomad, must.Sprint("the upper median of 5 and 114"))
	must.Eq(t, 5, p.NomadUnblocked, must.Sprint("b waited for a's stop at 100: left out"))
	must.Eq(t, 5.5, p.Planner, must.Sprint("the mean of 5 and 6"))
	must.Eq(t, 2, p.ClientTasks)
	must.Between(t, 29, p.ClientDelay, 31)
	must.Between(t, 5.5+5+29, p.StartLatency(false), 5.5+5+31)
	must.Between(t, 5.5+5+p.SharedDelay-1e-9, p.StartLatency(true), 5.5+5+p.SharedDelay+1e-9)
}

// A job the run did not finish (NaN start and finish, as a timeout leaves
// it) is no start and no run to measure: the costs stay numbers, and the
// report stays JSON.
func TestCostsLeaveUnfinishedJobsOut(t *testing.T) {
	ideal := &sim.Result{Jobs: []sim.JobResult{{ID: "a", Arrival: 0, Start: 0, Finish: 100}, {ID: "b", Arrival: 5, Start: 5, Finish: 90}}}
	live := &sim.Result{Jobs: []sim.JobResult{
		{ID: "a", GPUs: 1, Arrival: 0, Start: 4, Finish: 106},
		{ID: "b", GPUs: 1, Arrival: 5, Start: math.NaN(), Finish: math.NaN()},
	}}
	r := &Result{Sim: live, Tasks: [][]TaskRun{{{Placed: 1, Start: 4, End: 106}}, nil}, Releases: [][]float64{{0.5}, {6}}}
	c := r.MeasureCosts(ideal, Costs{StartLatency: -1, StartSpread: -1, GangSpread: -1, RunOverhead: -1, StopLatency: -1})
	for _, v := range []float64{c.StartLatency, c.StartSpread, c.GangSpread, c.RunOverhead, c.StopLatency} {
		must.False(t, math.IsNaN(v), must.Sprintf("%+v", c))
	}
	must.Eq(t, 1, c.Starts)
	must.Eq(t, 1, c.Runs)
}

// tenLoneJobs is ten one-GPU jobs 100 s apart, each released release s
// after its arrival, placed placed s and started 8 s after it, and run
// 50 s: the simulator's run without costs and the live one.
func tenLoneJobs(release, placed float64) (*sim.Result, *Result) {
	ideal, live := &sim.Result{}, &sim.Result{}
	r := &Result{Sim: live}
	for i := range 10 {
		at := float64(100 * i)
		id := fmt.Sprint(i)
		ideal.Jobs = append(ideal.Jobs, sim.JobResult{ID: id, GPUs: 1, Arrival: at, Start: at, Finish: at + 50})
		live.Jobs = append(live.Jobs, sim.JobResult{ID: id, GPUs: 1, Arrival: at, Start: at + 8, Finish: at + 58})
		r.Tasks = append(r.Tasks, []TaskRun{{Placed: at + placed, Start: at + 8, End: at + 58}})
		r.Releases = append(r.Releases, []float64{at + release})
	}
	return ideal, r
}

// The planner's part of the live starts is charged as each round's delay
// (sim.Config.RoundDelay) and taken out of the start latency, where the
// start latency is measured from its parts; given a latency, or asked for
// none, the rounds decide at their events. Ten lone jobs: each released
// 2 s after its arrival, placed 1 s later and started 5 s after that.
func TestThePlannersPartIsChargedAsTheRoundsDelay(t *testing.T) {
	ideal, r := tenLoneJobs(2, 3)
	measure := func(given Costs) Costs {
		given.StartSpread, given.GangSpread, given.RunOverhead, given.StopLatency, given.AbortLatency = -1, -1, -1, -1, -1
		given.Shared = true
		return r.MeasureCosts(ideal, given)
	}
	whole := measure(Costs{StartLatency: -1})
	must.NotNil(t, whole.Parts)
	must.Eq(t, 2.0, whole.Parts.Planner)
	must.Eq(t, 0.0, whole.RoundDelay, must.Sprint("RoundDelay 0: the planner's part stays in the start latency"))
	split := measure(Costs{StartLatency: -1, RoundDelay: -1})
	must.Eq(t, 2.0, split.RoundDelay)
	must.Between(t, whole.StartLatency-2-1e-9, split.StartLatency, whole.StartLatency-2+1e-9)
	var cfg sim.Config
	split.Charge(&cfg)
	must.Eq(t, 2.0, cfg.RoundDelay)
	none := measure(Costs{StartLatency: -1, UnblockLatency: -1})
	must.Eq(t, 0.0, none.UnblockLatency, must.Sprint("no placement waited for a stop"))
	must.Eq(t, 0, none.Unblocks)
	given := measure(Costs{StartLatency: 7, RoundDelay: -1})
	must.Eq(t, 7.0, given.StartLatency)
	must.Eq(t, 0.0, given.RoundDelay, must.Sprint("a latency given whole holds the planner's part"))
}

// A placement that waited for a preemption's stop (the stop after the
// job's release, the placement after the stop) is timed from the stop,
// once per placement of a job; the simulator is charged what it took
// beyond Nomad's part of a start with free GPUs.
func TestUnblockDelaysTimeAPlacementFromTheStopItWaitedFor(t *testing.T) {
	l := Live{
		Stops:    []float64{50, 200},
		Releases: [][]float64{{10}, {45}, {190, 300}},
		Tasks: [][]TaskRun{
			{{Placed: 11, Start: 15, End: 100}},                                        // placed before any stop
			{{Placed: 58, Start: 60, End: 120}, {Placed: 58, Start: 61, End: 120}},     // a gang, after the stop at 50
			{{Placed: 191, Start: 195, End: 198}, {Placed: 303, Start: 306, End: 400}}, // placed at once; the stop at 200 came before its release
		},
	}
	must.Eq(t, []float64{8}, l.UnblockDelays())
}

// Where the planner's rounds were read, its part of a start splits into
// the wait for the round that decided it, which the simulator's rounds
// wait, and the round's reads and writes up to the release, which its
// starts wait. A stop that came after the round and before the release
// (the round's starts wait for its preemptions' stops) bounds the write,
// as it bounds the planner's part; a round that came before the job's
// hold, or before its arrival, is not the one that released it.
func TestTheRoundThatDecidedSplitsThePlannersPart(t *testing.T) {
	ideal := &sim.Result{Jobs: []sim.JobResult{
		{ID: "a", GPUs: 1, Arrival: 0, Start: 0}, {ID: "b", GPUs: 1, Arrival: 100, Start: 100},
		{ID: "c", GPUs: 1, Arrival: 200, Start: 200}, {ID: "d", GPUs: 1, Arrival: 300, Start: 300},
	}}
	live := &sim.Result{Jobs: []sim.JobResult{
		{ID: "a", GPUs: 1, Arrival: 0, Start: 12, Finish: 60},
		{ID: "b", GPUs: 1, Arrival: 100, Start: 120, Finish: 180},
		{ID: "c", GPUs: 1, Arrival: 200, Start: 215, Finish: 280},
		{ID: "d", GPUs: 1, Arrival: 300, Start: 315, Finish: 380},
	}}
	l := Live{Jobs: live, Stops: []float64{108},
		Tasks: [][]TaskRun{
			{{Placed: 6, Start: 12, End: 60}},
			{{Placed: 111, Start: 120, End: 180}},
			{{Placed: 206, Start: 215, End: 280}},
			{{Placed: 306, Start: 315, End: 380}},
		},
		Releases: [][]float64{{5}, {110}, {205}, {305}},
		Holds:    [][]float64{nil, nil, {203}, nil},
		// a: round at 3 (3 after its arrival), released at 5; b: round
		// at 104, a stop at 108 the round waited for, released at 110;
		// c: the round at 201 wrote its hold, the release's round was
		// not read; d: a round before its arrival.
		Decided: [][]float64{{3}, {104}, {201}, {299}},
	}
	p := l.StartParts(ideal)
	must.NotNil(t, p)
	must.Eq(t, 4, p.MeasuredOn)
	must.Eq(t, (5.0+2+5+5)/4, p.Planner, must.Sprint("b's part runs from the stop at 108"))
	must.Eq(t, 2, p.RoundMeasuredOn, must.Sprint("c's and d's rounds are not their releases'"))
	must.Eq(t, (3.0+4)/2, p.Round)
	must.Eq(t, (2.0+2)/2, p.Write)
}

// The simulator's rounds wait the round's part, and its starts the rest.
func TestTheRoundsWaitIsChargedAsTheRoundsDelay(t *testing.T) {
	ideal, r := tenLoneJobs(3, 4)
	for i := range r.Releases {
		r.Decided = append(r.Decided, []float64{r.Sim.Jobs[i].Arrival + 1})
	}
	measure := func(round float64) Costs {
		return r.MeasureCosts(ideal, Costs{StartLatency: -1, RoundDelay: round, StartSpread: -1, GangSpread: -1,
			RunOverhead: -1, StopLatency: -1, AbortLatency: -1, Shared: true})
	}
	split, whole := measure(-1), measure(0)
	must.Eq(t, 1.0, split.RoundDelay)
	must.Eq(t, 3.0, split.Parts.Planner)
	must.Between(t, whole.StartLatency-1-1e-9, split.StartLatency, whole.StartLatency-1+1e-9,
		must.Sprint("the start latency keeps the round's 2 s of work, not its 1 s of wait"))

	r.Decided = nil
	must.Eq(t, 3.0, measure(-1).RoundDelay, must.Sprint("without the rounds, the whole planner's part"))
}

// The planner waits longer to answer a completion than an arrival: the
// client reports a task's end late. The simulator's rounds wait the
// arrivals' wait, and a job's end is seen the difference later; a start
// that answered a preemption's stop counts in neither.
func TestACompletionsLongerWaitIsChargedAsItsLag(t *testing.T) {
	ideal, live := &sim.Result{}, &sim.Result{}
	r := &Result{Sim: live}
	add := func(id string, arrival, answered, wait, finish float64) {
		ideal.Jobs = append(ideal.Jobs, sim.JobResult{ID: id, GPUs: 1, Arrival: arrival, Start: arrival, Finish: arrival + 30})
		round := answered + wait
		live.Jobs = append(live.Jobs, sim.JobResult{ID: id, GPUs: 1, Arrival: arrival, Start: round + 7, Finish: finish})
		r.Tasks = append(r.Tasks, []TaskRun{{Placed: round + 2, Start: round + 7, End: finish}})
		r.Releases = append(r.Releases, []float64{round + 1})
		r.Decided = append(r.Decided, []float64{round})
	}
	for i := range 10 {
		at := float64(1000 * i)
		add(fmt.Sprint("a", i), at, at, 1, at+40)       // starts on its arrival, ends at +40
		add(fmt.Sprint("b", i), at+10, at+40, 5, at+90) // waits for a's end
	}
	measure := func(lag float64) Costs {
		return r.MeasureCosts(ideal, Costs{StartLatency: -1, RoundDelay: -1, CompletionLag: lag, StartSpread: -1, GangSpread: -1,
			RunOverhead: -1, StopLatency: -1, AbortLatency: -1, Shared: true})
	}
	c := measure(-1)
	must.Eq(t, 10, c.Parts.ArrivalWaits)
	must.Eq(t, 10, c.Parts.CompletionWaits)
	must.Eq(t, 1.0, c.Parts.ArrivalWait)
	must.Eq(t, 5.0, c.Parts.CompletionWait)
	must.Eq(t, 1.0, c.RoundDelay)
	must.Eq(t, 4.0, c.CompletionLag)
	mean := measure(0)
	must.Eq(t, 3.0, mean.RoundDelay, must.Sprint("-completion-lag 0: every round waits the mean"))
	must.Eq(t, 0.0, mean.CompletionLag)
	must.Eq(t, mean.StartLatency, c.StartLatency, must.Sprint("the start latency loses the mean wait either way"))

	// A stop is neither an arrival nor a completion.
	l := r.Live()
	l.Stops = []float64{42}
	p := l.StartParts(ideal)
	must.Eq(t, 10, p.ArrivalWaits)
	must.Eq(t, 9, p.CompletionWaits, must.Sprint("b0's latest event before its round at 45 is the stop at 42"))
}

// The planner plans at least every interval, so a start whose round came
// more than an interval after its latest event was released by a later
// reason (a policy's wake) and tells nothing of the event's wait: it
// counts in no kind's wait, and the rounds are charged the rest. Unknown
// interval, every start counts.
func TestARoundLongAfterItsEventIsNotItsWait(t *testing.T) {
	ideal, r := tenLoneJobs(3, 4)
	for i := range r.Releases {
		r.Decided = append(r.Decided, []float64{r.Sim.Jobs[i].Arrival + 1})
	}
	// The last job waits for a wake 80 s after its arrival.
	last := len(r.Decided) - 1
	at := r.Sim.Jobs[last].Arrival
	r.Decided[last], r.Releases[last] = []float64{at + 80}, []float64{at + 82}
	r.Tasks[last] = []TaskRun{{Placed: at + 83, Start: at + 87, End: at + 137}}
	r.Sim.Jobs[last].Start, r.Sim.Jobs[last].Finish = at+87, at+137
	measure := func() Costs {
		return r.MeasureCosts(ideal, Costs{StartLatency: -1, RoundDelay: -1, CompletionLag: -1, StartSpread: -1, GangSpread: -1,
			RunOverhead: -1, StopLatency: -1, AbortLatency: -1, Shared: true})
	}
	r.RoundEvery = 60
	c := measure()
	must.Eq(t, 1, c.Parts.LateRounds)
	must.Eq(t, 9, c.Parts.RoundWaits)
	must.Eq(t, 1.0, c.Parts.RoundWait)
	must.Eq(t, 1.0, c.RoundDelay)
	must.Eq(t, (9*1.0+80)/10, c.Parts.Round, must.Sprint("Round still reads every start's wait"))

	r.RoundEvery = 0
	c = measure()
	must.Eq(t, 0, c.Parts.LateRounds)
	must.Eq(t, (9*1.0+80)/10, c.RoundDelay)
}
