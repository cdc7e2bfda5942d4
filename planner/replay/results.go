package replay

import (
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/caravan-gpu/caravan/gpu/reservation"
	"github.com/caravan-gpu/caravan/planner/sim"
)

// Run is one allocation's run: when its task started and stopped, and on
// which GPU model.
type Run struct {
	Start, End time.Time
	Model      string
	// Placed is when Nomad placed the allocation; Node is where.
	Placed time.Time
	Node   string
	// GPU is the physical GPU of the lane the allocation ran on; "" for
	// a whole GPU.
	GPU string
	// CPUMHz and MemoryMB are what Nomad gave its task; 0 where unknown.
	CPUMHz, MemoryMB float64
}

// Outcome is one job's course as Nomad recorded it, in real time.
type Outcome struct {
	// Start is when the first task of the job's first allocation started;
	// zero when none has.
	Start time.Time
	// Finish is when the last allocation index first completed, once
	// every index has; zero until then.
	Finish time.Time
	// Finished says every allocation index completed successfully.
	Finished bool
	// Preemptions counts the times the job's running allocations were
	// stopped by Nomad (the planner's hold or Nomad's own preemption);
	// allocations stopped within a second of each other count once.
	Preemptions int
	// Stops are when each preemption stopped the job: the first stop of
	// the allocations it stopped together.
	Stops []time.Time
	// Evictions counts the allocations that Nomad's own preemption
	// evicted (desired status "evict") rather than the planner's hold:
	// a start Nomad placed before a hold's stop had freed its GPUs.
	Evictions int
	// Aborts are the allocations stopped before their tasks started, in
	// order of giving up their GPUs.
	Aborts []Abort
	// Model is the GPU model the job finished on ("" when unknown).
	Model string
	// Nodes is how many nodes the allocations that finished the job ran
	// on; 0 until it finished.
	Nodes int
	Runs  []Run
}

// stopGap is how close the stops of one preemption's allocations are.
const stopGap = time.Second

// ReadOutcome reads a job's course from its allocations (every one,
// stopped and replaced ones included), for a task group of count
// allocations. models gives the GPU model of each device instance ID.
// Allocations still running count as running until now.
//
// The job finishes when each allocation index has first completed: a later
// run of a completed index (Nomad places one again when the job changes
// after it completed) finds its checkpoint done and does no work.
func ReadOutcome(allocs []*api.AllocationListStub, count int, models map[string]string, now time.Time) Outcome {
	var o Outcome
	type completion struct {
		at    time.Time
		model string
		node  string
	}
	done := map[int]completion{}
	var stops []time.Time
	var aborts []Abort
	for _, a := range allocs {
		start, end, failed := taskTimes(a)
		stopped := a.DesiredStatus == api.AllocDesiredStatusStop || a.DesiredStatus == api.AllocDesiredStatusEvict
		if a.DesiredStatus == api.AllocDesiredStatusEvict {
			o.Evictions++
		}
		model := allocModel(a, models)
		if !start.IsZero() {
			if o.Start.IsZero() || start.Before(o.Start) {
				o.Start = start
			}
			r := Run{Start: start, End: end, Model: model, Placed: time.Unix(0, a.CreateTime), Node: a.NodeID, GPU: allocLaneGPU(a)}
			if ar := a.AllocatedResources; ar != nil && ar.Tasks[TaskName] != nil {
				r.CPUMHz, r.MemoryMB = float64(ar.Tasks[TaskName].Cpu.CpuShares), float64(ar.Tasks[TaskName].Memory.MemoryMB)
			}
			if r.End.IsZero() {
				r.End = now
			}
			o.Runs = append(o.Runs, r)
			if stopped && !end.IsZero() {
				stops = append(stops, end)
			}
		}
		if start.IsZero() && a.DesiredStatus == api.AllocDesiredStatusStop {
			if freed := abortEnd(a, end); !freed.IsZero() {
				aborts = append(aborts, Abort{Placed: time.Unix(0, a.CreateTime), Freed: freed})
			}
		}
		if a.DesiredStatus != api.AllocDesiredStatusRun || a.ClientStatus != api.AllocClientStatusComplete || failed || end.IsZero() {
			continue
		}
		if i, ok := allocIndex(a.Name); ok {
			if c, seen := done[i]; !seen || end.Before(c.at) {
				done[i] = completion{at: end, model: model, node: a.NodeID}
			}
		}
	}
	o.Finished = count > 0
	nodes := map[string]bool{}
	for i := 0; i < count; i++ {
		c, ok := done[i]
		if !ok {
			o.Finished = false
			continue
		}
		nodes[c.node] = true
		if c.at.After(o.Finish) {
			o.Finish, o.Model = c.at, c.model
		}
	}
	if o.Finished {
		o.Nodes = len(nodes)
	} else {
		o.Finish, o.Model = time.Time{}, ""
	}
	o.Stops = firstOfEach(stops)
	slices.SortFunc(aborts, func(a, b Abort) int { return a.Freed.Compare(b.Freed) })
	o.Aborts = aborts
	o.Preemptions = len(o.Stops)
	sort.Slice(o.Runs, func(i, j int) bool { return o.Runs[i].Start.Before(o.Runs[j].Start) })
	return o
}

// firstOfEach sorts times and keeps the first of those within stopGap of
// the one before: one per preemption of a job of several allocations.
func firstOfEach(times []time.Time) []time.Time {
	slices.SortFunc(times, time.Time.Compare)
	var out []time.Time
	for i, t := range times {
		if i == 0 || t.Sub(times[i-1]) > stopGap {
			out = append(out, t)
		}
	}
	return out
}

// Abort is an allocation stopped before its task started: when Nomad
// placed it, and when it gave up its GPUs, which is when its client
// reported the task dead; for a task stopped in its set-up that takes a
// Nomad client seconds.
type Abort struct {
	Placed, Freed time.Time
}

// abortEnd is when an allocation stopped before its task started gave up
// its GPUs: when its tasks were reported dead (end), or else when its
// client last reported it, once it reported it stopped; zero while it
// has not, and for one whose node was lost.
func abortEnd(a *api.AllocationListStub, end time.Time) time.Time {
	if !end.IsZero() {
		return end
	}
	switch a.ClientStatus {
	case api.AllocClientStatusComplete, api.AllocClientStatusFailed:
		if a.ModifyTime > 0 {
			return time.Unix(0, a.ModifyTime)
		}
	}
	return time.Time{}
}

// taskTimes is when the allocation's tasks first started and last
// finished, and whether any failed.
func taskTimes(a *api.AllocationListStub) (start, end time.Time, failed bool) {
	for _, ts := range a.TaskStates {
		if ts == nil {
			continue
		}
		failed = failed || ts.Failed
		if !ts.StartedAt.IsZero() && (start.IsZero() || ts.StartedAt.Before(start)) {
			start = ts.StartedAt
		}
		if !ts.FinishedAt.IsZero() && ts.FinishedAt.After(end) {
			end = ts.FinishedAt
		}
	}
	return start, end, failed
}

// allocIndex reads the index from an allocation name, "job.group[3]".
func allocIndex(name string) (int, bool) {
	open := strings.LastIndexByte(name, '[')
	if open < 0 || !strings.HasSuffix(name, "]") {
		return 0, false
	}
	i, err := strconv.Atoi(name[open+1 : len(name)-1])
	return i, err == nil && i >= 0
}

// allocDevices calls each for every device the allocation's tasks were
// given, until it returns false.
func allocDevices(a *api.AllocationListStub, each func(*api.AllocatedDeviceResource) bool) {
	if a.AllocatedResources == nil {
		return
	}
	for _, task := range a.AllocatedResources.Tasks {
		if task == nil {
			continue
		}
		for _, d := range task.Devices {
			if d != nil && !each(d) {
				return
			}
		}
	}
}

func allocModel(a *api.AllocationListStub, models map[string]string) string {
	model := ""
	allocDevices(a, func(d *api.AllocatedDeviceResource) bool {
		for _, id := range d.DeviceIDs {
			if m := models[id]; m != "" {
				model = m
				return false
			}
		}
		if d.Name != "" {
			model = d.Name
			return false
		}
		return true
	})
	return model
}

// allocLaneGPU is the physical GPU of the one lane the allocation was
// given, or "" when it was given anything else.
func allocLaneGPU(a *api.AllocationListStub) string {
	var ids []string
	allocDevices(a, func(d *api.AllocatedDeviceResource) bool {
		ids = append(ids, d.DeviceIDs...)
		return true
	})
	if len(ids) != 1 {
		return ""
	}
	uuid, _ := reservation.LaneGPU(ids[0])
	return uuid
}

// executed is the real time any of runs covered, overlaps counted once.
func executed(runs []Run) time.Duration {
	var total time.Duration
	var cur Run
	for i, r := range runs { // sorted by start
		switch {
		case i == 0:
			cur = r
		case r.Start.After(cur.End):
			total += cur.End.Sub(cur.Start)
			cur = r
		case r.End.After(cur.End):
			cur.End = r.End
		}
	}
	if len(runs) > 0 {
		total += cur.End.Sub(cur.Start)
	}
	return total
}

// JobResult is o in the simulator's terms, in trace seconds: the job
// arrived when it was submitted; an unfinished job has NaN start, finish
// and JCT, as in the simulator.
func JobResult(c Clock, id string, gpus int, weight float64, w Work, submitted time.Time, o Outcome) sim.JobResult {
	jr := sim.JobResult{ID: id, GPUs: max(gpus, 1), Weight: weight, Arrival: c.Trace(submitted),
		Start: c.Trace(o.Start), Isolated: w.Isolated, Preemptions: o.Preemptions, GPUModel: o.Model, Nodes: o.Nodes,
		Finish: math.NaN(), JCT: math.NaN()}
	for _, t := range o.Stops {
		jr.Stops = append(jr.Stops, c.Trace(t))
	}
	if !o.Finished {
		jr.Start = math.NaN()
		return jr
	}
	jr.Finish = c.Trace(o.Finish)
	jr.JCT = jr.Finish - jr.Arrival
	jr.Queueing = max(0, jr.JCT-c.Span(executed(o.Runs)))
	return jr
}

// Utilization is busy GPUs over time in trace seconds, each run holding
// one GPU, as the simulator's Result.Util.
func Utilization(c Clock, outcomes []Outcome) []sim.UtilPoint {
	type step struct {
		t time.Time
		d float64
	}
	var steps []step
	for _, o := range outcomes {
		for _, r := range o.Runs {
			if r.End.After(r.Start) {
				steps = append(steps, step{r.Start, 1}, step{r.End, -1})
			}
		}
	}
	sort.SliceStable(steps, func(i, j int) bool { return steps[i].t.Before(steps[j].t) })
	var out []sim.UtilPoint
	busy := 0.0
	for _, s := range steps {
		busy += s.d
		t := c.Trace(s.t)
		if n := len(out); n > 0 && out[n-1].T == t {
			out[n-1].Busy = busy
		} else {
			out = append(out, sim.UtilPoint{T: t, Busy: busy})
		}
	}
	return out
}
