package replay

import (
	"math"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/hashicorp/nomad/helper/pointer"
	"github.com/shoenig/test/must"

	"github.com/caravan-gpu/caravan/gpu/reservation"
	"github.com/caravan-gpu/caravan/planner/cluster"
	"github.com/caravan-gpu/caravan/planner/sim"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

func TestClock(t *testing.T) {
	c := Clock{T0: t0, Scale: 20}
	cases := []struct {
		trace float64
		real  time.Time
	}{
		{0, t0},
		{20, at(1)},
		{100, at(5)},
		{-10, at(-0.5)},
		{1, at(0.05)},
	}
	for _, tc := range cases {
		must.Eq(t, tc.real, c.At(tc.trace))
		must.InDelta(t, tc.trace, c.Trace(tc.real), 1e-9)
	}
	must.True(t, math.IsNaN(c.Trace(time.Time{})), must.Sprint("never is NaN"))
	must.Eq(t, 30.0, c.Span(1500*time.Millisecond))
}

// alloc builds an allocation stub of job "j" at index i: desired status,
// client status, and its task's start and finish in seconds after t0 (<0:
// not yet).
func alloc(id string, i int, desired, client string, start, finish float64, failed bool, device string) *api.AllocationListStub {
	ts := &api.TaskState{State: "dead", Failed: failed}
	if start >= 0 {
		ts.StartedAt = at(start)
	}
	if finish >= 0 {
		ts.FinishedAt = at(finish)
	}
	a := &api.AllocationListStub{ID: id, Name: "j.train[" + itoa(i) + "]", DesiredStatus: desired, ClientStatus: client,
		TaskStates: map[string]*api.TaskState{"train": ts}}
	if device != "" {
		a.AllocatedResources = &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{
			"train": {Devices: []*api.AllocatedDeviceResource{{Vendor: "nvidia", Type: "gpu", Name: "group", DeviceIDs: []string{device}}}}}}
	}
	return a
}

func itoa(i int) string { return string(rune('0' + i)) }

func TestReadOutcome(t *testing.T) {
	models := map[string]string{"GPU-v-0": "V100", "GPU-v-1": "V100", "GPU-k-0": "K80"}
	now := at(100)
	cases := []struct {
		name        string
		count       int
		allocs      []*api.AllocationListStub
		finished    bool
		start       time.Time
		finish      time.Time
		preemptions int
		model       string
		runs        int
	}{
		{name: "one allocation ran to the end", count: 1,
			allocs:   []*api.AllocationListStub{alloc("a1", 0, "run", "complete", 2, 12, false, "GPU-v-0")},
			finished: true, start: at(2), finish: at(12), model: "V100", runs: 1},
		{name: "not started yet", count: 1,
			allocs: []*api.AllocationListStub{alloc("a1", 0, "run", "pending", -1, -1, false, "")}},
		{name: "still running: runs until now, not finished", count: 1,
			allocs: []*api.AllocationListStub{alloc("a1", 0, "run", "running", 3, -1, false, "GPU-v-0")},
			start:  at(3), runs: 1},
		{name: "two GPUs: finished when both indexes completed, at the later end", count: 2,
			allocs: []*api.AllocationListStub{
				alloc("a1", 0, "run", "complete", 1, 10, false, "GPU-v-0"),
				alloc("a2", 1, "run", "complete", 1.5, 11, false, "GPU-v-1"),
			}, finished: true, start: at(1), finish: at(11), model: "V100", runs: 2},
		{name: "one of two indexes still running", count: 2,
			allocs: []*api.AllocationListStub{
				alloc("a1", 0, "run", "complete", 1, 10, false, "GPU-v-0"),
				alloc("a2", 1, "run", "running", 1, -1, false, "GPU-v-1"),
			}, start: at(1), runs: 2},
		{name: "held while running (both allocations stopped together), released onto a K80", count: 2,
			allocs: []*api.AllocationListStub{
				alloc("a1", 0, "stop", "complete", 1, 5, false, "GPU-v-0"),
				alloc("a2", 1, "stop", "complete", 1, 5.3, false, "GPU-v-1"),
				alloc("a3", 0, "run", "complete", 20, 30, false, "GPU-k-0"),
				alloc("a4", 1, "run", "complete", 20, 31, false, "GPU-k-0"),
			}, finished: true, start: at(1), finish: at(31), preemptions: 1, model: "K80", runs: 4},
		{name: "preempted twice by Nomad, evicted", count: 1,
			allocs: []*api.AllocationListStub{
				alloc("a1", 0, "evict", "complete", 0, 4, false, "GPU-v-0"),
				alloc("a2", 0, "evict", "complete", 10, 14, false, "GPU-v-0"),
				alloc("a3", 0, "run", "complete", 20, 25, false, "GPU-v-1"),
			}, finished: true, start: at(0), finish: at(25), preemptions: 2, model: "V100", runs: 3},
		{name: "stopped before it started is no preemption", count: 1,
			allocs: []*api.AllocationListStub{
				alloc("a1", 0, "stop", "complete", -1, -1, false, ""),
				alloc("a2", 0, "run", "complete", 5, 6, false, "GPU-v-0"),
			}, finished: true, start: at(5), finish: at(6), model: "V100", runs: 1},
		{name: "an index run again after it completed finished the first time", count: 1,
			allocs: []*api.AllocationListStub{
				alloc("a1", 0, "run", "complete", 1, 4, false, "GPU-k-0"),
				alloc("a2", 0, "run", "complete", 12, 12.1, false, "GPU-v-0"),
			}, finished: true, start: at(1), finish: at(4), model: "K80", runs: 2},
		{name: "a failed task does not finish its index", count: 1,
			allocs:   []*api.AllocationListStub{alloc("a1", 0, "run", "complete", 1, 2, true, "GPU-v-0")},
			finished: false, start: at(1), runs: 1},
		{name: "stopped for good", count: 1,
			allocs: []*api.AllocationListStub{alloc("a1", 0, "stop", "complete", 1, 2, false, "GPU-v-0")},
			start:  at(1), preemptions: 1, runs: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := ReadOutcome(tc.allocs, tc.count, models, now)
			must.Eq(t, tc.finished, o.Finished)
			must.Eq(t, tc.start, o.Start)
			must.Eq(t, tc.finish, o.Finish)
			must.Eq(t, tc.preemptions, o.Preemptions)
			must.Eq(t, tc.model, o.Model)
			must.SliceLen(t, tc.runs, o.Runs)
			for _, r := range o.Runs {
				must.False(t, r.End.Before(r.Start))
			}
		})
	}
}

func TestAllocIndex(t *testing.T) {
	for name, want := range map[string]int{"j.train[0]": 0, "replay-x-1.train[12]": 12, "a[b].train[3]": 3} {
		i, ok := allocIndex(name)
		must.True(t, ok, must.Sprint(name))
		must.Eq(t, want, i)
	}
	for _, name := range []string{"j.train", "j.train[x]", "j.train[-1]", "j.train[1"} {
		_, ok := allocIndex(name)
		must.False(t, ok, must.Sprint(name))
	}
}

// The live job in trace seconds: scale 10, submitted 1 s after T0 (trace
// 10), ran 2..4 and 6..9 real, so JCT (9-1)*10 = 80 with 50 executed and
// 30 queued.
func TestJobResult(t *testing.T) {
	c := Clock{T0: t0, Scale: 10}
	w := Work{Isolated: 50}
	o := Outcome{Start: at(2), Finish: at(9), Finished: true, Preemptions: 1, Stops: []time.Time{at(4)}, Model: "V100",
		Runs: []Run{{Start: at(2), End: at(4)}, {Start: at(6), End: at(9)}, {Start: at(6.5), End: at(8)}}}
	jr := JobResult(c, "17", 2, 1, w, at(1), o)
	must.Eq(t, sim.JobResult{ID: "17", GPUs: 2, Weight: 1, Arrival: 10, Start: 20, Finish: 90, JCT: 80,
		Queueing: 30, Isolated: 50, Preemptions: 1, Stops: []float64{40}, GPUModel: "V100"}, jr)

	o.Finished, o.Finish = false, time.Time{}
	un := JobResult(c, "17", 2, 1, w, at(1), o)
	must.True(t, math.IsNaN(un.JCT) && math.IsNaN(un.Finish) && math.IsNaN(un.Start), must.Sprint("unfinished is NaN as in the simulator"))
	must.Eq(t, 10.0, un.Arrival)
	must.Eq(t, []float64{40}, un.Stops, must.Sprint("an unfinished job's stops are kept"))
}

func TestUtilization(t *testing.T) {
	c := Clock{T0: t0, Scale: 2}
	outs := []Outcome{
		{Runs: []Run{{Start: at(0), End: at(5)}, {Start: at(1), End: at(3)}}},
		{Runs: []Run{{Start: at(3), End: at(4)}, {Start: at(7), End: at(7)}}},
	}
	u := Utilization(c, outs)
	must.Eq(t, []sim.UtilPoint{{T: 0, Busy: 1}, {T: 2, Busy: 2}, {T: 6, Busy: 2}, {T: 8, Busy: 1}, {T: 10, Busy: 0}}, u)
	must.Eq(t, 1*2+2*4+2*2+1*2.0, sim.BusyArea(u, 10))
}

// A job's node count is that of the allocations that finished it, not of
// an earlier run that was preempted.
func TestReadOutcomeCountsTheNodesOfTheFinishingRun(t *testing.T) {
	models := map[string]string{"GPU-v-0": "V100", "GPU-v-1": "V100"}
	on := func(a *api.AllocationListStub, node string) *api.AllocationListStub {
		a.NodeID, a.CreateTime = node, at(0.5).UnixNano()
		return a
	}
	o := ReadOutcome([]*api.AllocationListStub{
		on(alloc("a1", 0, "stop", "complete", 1, 5, false, "GPU-v-0"), "n1"),
		on(alloc("a2", 1, "stop", "complete", 1, 5, false, "GPU-v-1"), "n2"),
		on(alloc("a3", 0, "run", "complete", 10, 20, false, "GPU-v-0"), "n3"),
		on(alloc("a4", 1, "run", "complete", 10, 21, false, "GPU-v-1"), "n3"),
	}, 2, models, at(100))
	must.True(t, o.Finished)
	must.Eq(t, 1, o.Nodes)
	// Each run keeps where it ran and when Nomad placed it.
	must.Eq(t, "n3", o.Runs[2].Node)
	must.Eq(t, at(0.5), o.Runs[2].Placed)

	o = ReadOutcome([]*api.AllocationListStub{
		on(alloc("a1", 0, "run", "complete", 1, 5, false, "GPU-v-0"), "n1"),
		on(alloc("a2", 1, "run", "complete", 1, 5, false, "GPU-v-1"), "n2"),
	}, 2, models, at(100))
	must.Eq(t, 2, o.Nodes)

	o = ReadOutcome([]*api.AllocationListStub{
		on(alloc("a1", 0, "run", "complete", 1, 5, false, "GPU-v-0"), "n1"),
		on(alloc("a2", 1, "run", "running", 1, -1, false, "GPU-v-1"), "n2"),
	}, 2, models, at(100))
	must.Eq(t, 0, o.Nodes, must.Sprint("not finished"))
}

// A run keeps the CPU and memory Nomad gave its task, which a job sized
// by Synergy's table trains at; a stub without them reads 0.
func TestReadOutcomeKeepsWhatTheTaskWasGiven(t *testing.T) {
	models := map[string]string{"GPU-v-0": "V100", "GPU-v-1": "V100"}
	sized := alloc("a1", 0, "run", "complete", 1, 5, false, "GPU-v-0")
	sized.AllocatedResources = &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{
		TaskName: {Cpu: api.AllocatedCpuResources{CpuShares: 6000}, Memory: api.AllocatedMemoryResources{MemoryMB: 64000}}}}
	o := ReadOutcome([]*api.AllocationListStub{sized, alloc("a2", 1, "run", "complete", 1, 5, false, "GPU-v-1")}, 2, models, at(100))
	must.Eq(t, [2]float64{6000, 64000}, [2]float64{o.Runs[0].CPUMHz, o.Runs[0].MemoryMB})
	must.Eq(t, [2]float64{0, 0}, [2]float64{o.Runs[1].CPUMHz, o.Runs[1].MemoryMB})
}

// A run on a lane keeps the lane's physical GPU, read from its instance
// ID, and keeps the model its instance maps to; a run on a whole GPU keeps
// no lane GPU.
func TestReadOutcomeKeepsTheGPUOfALane(t *testing.T) {
	lane := reservation.LaneInstanceID("GPU-h-1", 1, 0)
	models := map[string]string{lane: "H100", "GPU-v-0": "V100"}
	o := ReadOutcome([]*api.AllocationListStub{
		alloc("a1", 0, "run", "complete", 1, 5, false, lane),
		alloc("a2", 1, "run", "complete", 2, 6, false, "GPU-v-0"),
	}, 2, models, at(100))
	must.SliceLen(t, 2, o.Runs)
	must.Eq(t, "GPU-h-1", o.Runs[0].GPU)
	must.Eq(t, "H100", o.Runs[0].Model)
	must.Eq(t, "", o.Runs[1].GPU)
	must.Eq(t, "V100", o.Runs[1].Model)
}

// Each preemption's stop is recorded once, at the first stop of the
// allocations it stopped together.
func TestReadOutcomeRecordsWhenPreemptionsStopped(t *testing.T) {
	models := map[string]string{"GPU-v-0": "V100", "GPU-v-1": "V100"}
	o := ReadOutcome([]*api.AllocationListStub{
		alloc("a1", 0, "stop", "complete", 1, 5, false, "GPU-v-0"),
		alloc("a2", 1, "stop", "complete", 1, 5.4, false, "GPU-v-1"),
		alloc("a3", 0, "stop", "complete", 10, 20, false, "GPU-v-0"),
		alloc("a4", 1, "stop", "complete", 10, 20.2, false, "GPU-v-1"),
		alloc("a5", 0, "run", "complete", 30, 40, false, "GPU-v-0"),
		alloc("a6", 1, "run", "complete", 30, 40, false, "GPU-v-1"),
	}, 2, models, at(100))
	must.Eq(t, 2, o.Preemptions)
	must.Eq(t, []time.Time{at(5), at(20)}, o.Stops)
}

// A start taken back before its tasks ran is recorded when each of its
// allocations gave up its GPUs; it is no preemption. A stopped allocation
// whose task state has no finish counts from when its client reported it
// stopped, and one not yet reported stopped does not count.
func TestReadOutcomeRecordsWhenAbortedStartsFreedTheirGPUs(t *testing.T) {
	models := map[string]string{"GPU-v-0": "V100", "GPU-v-1": "V100"}
	unreported := alloc("a5", 0, "stop", "running", -1, -1, false, "GPU-v-0")
	noFinish := alloc("a6", 1, "stop", "complete", -1, -1, false, "GPU-v-1")
	noFinish.ModifyTime = at(30).UnixNano()
	noFinish.CreateTime = at(25).UnixNano()
	lost := alloc("a9", 1, "stop", "lost", -1, -1, false, "GPU-v-1")
	lost.ModifyTime = at(35).UnixNano()
	evicted := alloc("a10", 1, "evict", "complete", -1, 36, false, "GPU-v-1")
	o := ReadOutcome([]*api.AllocationListStub{
		alloc("a1", 0, "stop", "complete", -1, 4.1, false, "GPU-v-0"),
		alloc("a2", 1, "stop", "complete", -1, 4.3, false, "GPU-v-1"),
		alloc("a3", 0, "stop", "complete", 10, 20, false, "GPU-v-0"),
		alloc("a4", 1, "stop", "complete", 10, 20.2, false, "GPU-v-1"),
		unreported, noFinish, lost, evicted,
		alloc("a7", 0, "run", "complete", 40, 50, false, "GPU-v-0"),
		alloc("a8", 1, "run", "complete", 40, 50, false, "GPU-v-1"),
	}, 2, models, at(100))
	var freed []time.Time
	for _, a := range o.Aborts {
		freed = append(freed, a.Freed)
	}
	must.Eq(t, []time.Time{at(4.1), at(4.3), at(30)}, freed, must.Sprint("not the lost allocation, nor the one Nomad evicted"))
	must.Eq(t, at(25), o.Aborts[2].Placed)
	must.Eq(t, []time.Time{at(20)}, o.Stops)
	must.Eq(t, 1, o.Preemptions, must.Sprint("a start taken back is no preemption"))
	must.True(t, o.Finished)
}

// A job's holds are the versions that put the planner's hold on it while
// the version before had none.
func TestHistoryOf(t *testing.T) {
	version := func(v uint64, held bool, sec float64) *api.Job {
		j := &api.Job{Version: &v, SubmitTime: pointer.Of(at(sec).UnixNano())}
		if held {
			j.Constraints = []*api.Constraint{cluster.HoldConstraint()}
		}
		return j
	}
	// Newest first, as Nomad lists them: submitted held (0), released (1),
	// preempted (2), its priority changed while held (3), released (4),
	// preempted (5).
	h := historyOf([]*api.Job{version(5, true, 50), version(4, false, 40), version(3, true, 30),
		version(2, true, 20), version(1, false, 10), version(0, true, 0)})
	must.Eq(t, uint64(5), h.Version)
	must.Eq(t, []time.Time{at(20), at(50)}, h.Holds, must.Sprint("version 0 has no version before it; 3 was held already"))
	must.Eq(t, []time.Time{at(10), at(40)}, h.Releases)
	must.Eq(t, JobHistory{}, historyOf(nil))
}

// Each stop is timed from the hold that made it; a stop with no hold of
// its own is left out.
func TestStopDelays(t *testing.T) {
	c := Clock{T0: t0, Scale: 10}
	got := stopDelays(c, []time.Time{at(20), at(50)}, []time.Time{at(20.5), at(40), at(50.25)})
	must.Eq(t, []float64{5, 2.5}, got, must.Sprint("0.5 s and 0.25 s real at scale 10; the stop at 40 had no hold after the one before it"))
}

// Each allocation a hold stopped before its task ran is timed from that
// hold, the first after its placement, to its giving up its GPUs; an
// abort with no hold between its placement and its end (a change of
// model, which Nomad carries out by stopping it) is left out.
func TestAbortDelays(t *testing.T) {
	c := Clock{T0: t0, Scale: 10}
	ab := func(placed, freed float64) Abort { return Abort{Placed: at(placed), Freed: at(freed)} }
	holds := []time.Time{at(20), at(50), at(70)}
	got := abortDelays(c, holds, []Abort{ab(19.8, 20.1), ab(19.9, 24), ab(49, 50.2), ab(60, 62)})
	must.Eq(t, []float64{1, 40, 2}, got, must.Sprint("0.1 s and 4 s real after the first hold, 0.2 s after the second; the abort placed at 60 and freed at 62 had no hold in between"))
	must.Eq(t, []float64{20}, abortDelays(c, []time.Time{at(20), at(21)}, []Abort{ab(19, 22)}),
		must.Sprint("released and held again before the first hold's abort was given up: the second hold stopped a newer start"))
	must.Nil(t, abortDelays(c, []time.Time{at(20)}, nil))
	must.Nil(t, abortDelays(c, nil, []Abort{ab(4, 5)}), must.Sprint("an abort with no hold is left out"))
}

// A job's models, live, are its runs' in order of start, a model once for
// runs on it in a row: a gang's tasks and a restart on the same model
// give it once, a run of no known model none.
func TestRanOn(t *testing.T) {
	runs := []TaskRun{
		{Start: 50, Model: "K80"}, {Start: 10, Model: "V100"}, {Start: 11, Model: "V100"},
		{Start: 30, Model: "V100"}, {Start: 40}, {Start: 60, Model: "K80"}, {Start: 70, Model: "V100"},
	}
	must.Eq(t, []string{"V100", "K80", "V100"}, RanOn(runs))
	must.Eq(t, 50, runs[0].Start, must.Sprint("the runs are left in their order"))
	must.Nil(t, RanOn(nil))
}
