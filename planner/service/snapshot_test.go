package service

import (
	"testing"
	"time"

	"github.com/caravan-gpu/caravan/planner/cluster"
	"github.com/caravan-gpu/caravan/planner/enact"
	"github.com/caravan-gpu/caravan/planner/plannerapi"
	"github.com/caravan-gpu/caravan/planner/policy"
	"github.com/caravan-gpu/caravan/planner/profile"
	"github.com/caravan-gpu/caravan/planner/rewrite"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
	"github.com/hashicorp/nomad/helper/pointer"
	"github.com/shoenig/test/must"
)

// A job's expected duration becomes the remaining time the oracle policies
// read: less what it has run, and in the profile's unit of work when it
// has one, counting the work each model did at that model's rate.
func TestSnapshotRemainingFromDuration(t *testing.T) {
	now := time.Unix(10_000, 0)
	state := &cluster.State{Time: now, Jobs: []*cluster.Job{
		{Namespace: "default", ID: "plain", GPUs: 1, Duration: 100, Executed: 30, Submitted: now.Add(-time.Minute)},
		{Namespace: "default", ID: "profiled", GPUs: 1, Duration: 100, Profile: "resnet", Submitted: now.Add(-time.Minute),
			Executed: 40, ExecutedOn: map[string]float64{"T4": 40}},
		{Namespace: "default", ID: "unknown", GPUs: 1, Submitted: now.Add(-time.Minute)},
	}}
	profiles := map[string]profile.Profile{"resnet": {Name: "resnet", Throughput: map[string]float64{"H100": 4, "T4": 1}}}
	snap, _ := toSnapshot(snapshotInput{state: state, memory: map[string]*memory{}, profiles: profiles})
	must.Eq(t, 70.0, snap.Jobs[0].Remaining)
	// 100 s on the H100 is 400 units; 40 s on the T4 did 40 of them.
	must.Eq(t, 360.0, snap.Jobs[1].RemainingWork)
	must.Eq(t, 90.0, snap.Jobs[1].Remaining)
	must.Eq(t, -1.0, snap.Jobs[2].Remaining)
}

// A job's weight from its meta reaches the policy, which ranks by it
// (hare); a job without one weighs 1.
func TestSnapshotCarriesWeight(t *testing.T) {
	now := time.Unix(10_000, 0)
	state := &cluster.State{Time: now, Jobs: []*cluster.Job{
		{Namespace: "default", ID: "heavy", GPUs: 1, Weight: 3, Submitted: now.Add(-time.Minute)},
		{Namespace: "default", ID: "plain", GPUs: 1, Submitted: now.Add(-time.Minute)},
	}}
	snap, _ := toSnapshot(snapshotInput{state: state, memory: map[string]*memory{}})
	must.Eq(t, 3.0, snap.Jobs[0].Weight)
	must.Eq(t, 0.0, snap.Jobs[1].Weight)
}

// A waiting job carries the model its latest allocation ran on, as the
// simulator keeps it: the blind steps guess its remaining time from its
// speed there. A running job carries the model it holds.
func TestSnapshotKeepsTheModelAWaitingJobLastRanOn(t *testing.T) {
	now := time.Unix(10_000, 0)
	ran := func(model string, from, to int64) *cluster.Alloc {
		return &cluster.Alloc{ID: model, ClientStatus: "complete", DesiredStatus: "stop", Model: model,
			Started: time.Unix(from, 0), Finished: time.Unix(to, 0)}
	}
	state := &cluster.State{Time: now, Jobs: []*cluster.Job{
		{Namespace: "default", ID: "moved", GPUs: 1, Submitted: now.Add(-time.Hour),
			Allocs: []*cluster.Alloc{ran("V100", 9_000, 9_500), ran("K80", 7_000, 8_000)}},
		{Namespace: "default", ID: "never", GPUs: 1, Submitted: now.Add(-time.Hour),
			Allocs: []*cluster.Alloc{{ID: "p", ClientStatus: "pending", DesiredStatus: "stop", Model: "V100"}}},
		{Namespace: "default", ID: "fresh", GPUs: 1, Submitted: now.Add(-time.Minute)},
	}}
	snap, _ := toSnapshot(snapshotInput{state: state, memory: map[string]*memory{}})
	must.Eq(t, "V100", snap.Jobs[0].GPUModel)
	must.Eq(t, "", snap.Jobs[1].GPUModel) // placed, never started
	must.Eq(t, "", snap.Jobs[2].GPUModel)
}

// A running job's Placed is when it took its GPUs: its live allocation's
// start, a renewal the planner remembers if later, or now for one placed
// and not yet started. The rotate step and Synergy's lease read it.
func TestSnapshotPlacedIsWhenARunningJobTookItsGPUs(t *testing.T) {
	now := time.Unix(10_000, 0)
	alloc := func(status string, started int64) *cluster.Alloc {
		a := &cluster.Alloc{ID: status, ClientStatus: status, DesiredStatus: "run", Model: "V100", DeviceIDs: []string{"g"}}
		if started > 0 {
			a.Started = time.Unix(started, 0)
		}
		return a
	}
	old := &cluster.Alloc{ID: "old", ClientStatus: "complete", DesiredStatus: "stop", Model: "K80",
		Started: time.Unix(9_900, 0), Finished: time.Unix(9_950, 0)}
	state := &cluster.State{Time: now, Jobs: []*cluster.Job{
		{Namespace: "default", ID: "runs", GPUs: 1, Submitted: now.Add(-time.Hour),
			Allocs: []*cluster.Alloc{alloc("running", 9_000), old}},
		{Namespace: "default", ID: "renewed", GPUs: 1, Submitted: now.Add(-time.Hour),
			Allocs: []*cluster.Alloc{alloc("running", 9_000)}},
		{Namespace: "default", ID: "starting", GPUs: 1, Submitted: now.Add(-time.Hour),
			Allocs: []*cluster.Alloc{alloc("pending", 0)}},
	}}
	mem := map[string]*memory{state.Jobs[1].Key(): {prevQueue: -1, prevRank: -1, renewedAt: 9_500}}
	snap, _ := toSnapshot(snapshotInput{state: state, memory: mem})
	must.Eq(t, 9_000.0, snap.Jobs[0].Placed)
	must.Eq(t, 9_500.0, snap.Jobs[1].Placed)
	must.Eq(t, 10_000.0, snap.Jobs[2].Placed)
}

// A round that renews a running job where it runs (Decision.Renewed)
// is remembered as when it took its GPUs again, and the memory keeps it
// through the rounds after.
func TestRenewalIsRemembered(t *testing.T) {
	now := time.Unix(10_000, 0)
	job := &cluster.Job{Namespace: "default", ID: "a", GPUs: 1, Submitted: now.Add(-time.Hour)}
	p := &Planner{cfg: &Settings{Policy: "las"}, memory: map[string]*memory{}, records: map[string][]plannerapi.Record{}}
	round := func(at int64, renewed bool) {
		state := &cluster.State{Time: time.Unix(at, 0), Jobs: []*cluster.Job{job}}
		snap := &policy.Snapshot{Now: float64(at), Jobs: []policy.Job{{ID: "a", GPUs: 1, State: policy.Running}}}
		d := policy.Decision{Job: 0, Run: true, Renewed: renewed}
		p.remember(state, snap, []*cluster.Job{job}, &policy.Result{Decisions: []policy.Decision{d}},
			[]target{{key: job.Key(), namespace: "default", id: "a", decision: d, job: job}}, nil, &plannerapi.Round{}, true)
	}
	round(9_000, false)
	must.Eq(t, 0.0, p.memory[job.Key()].renewedAt)
	round(9_360, true)
	must.Eq(t, 9_360.0, p.memory[job.Key()].renewedAt)
	round(9_400, false)
	must.Eq(t, 9_360.0, p.memory[job.Key()].renewedAt)
}

// A running job carries what its GPU tasks hold, from its spec: MHz turn
// into cores at the GPU nodes' rate, reserved cores count as they are.
// Synergy's sizer keeps them until the job restarts.
func TestSnapshotCarriesWhatARunningJobHolds(t *testing.T) {
	now := time.Unix(10_000, 0)
	spec := func(count int, res *api.Resources) *api.Job {
		return &api.Job{TaskGroups: []*api.TaskGroup{{Count: &count, Tasks: []*api.Task{
			{Name: "side", Resources: &api.Resources{CPU: pointer.Of(500), MemoryMB: pointer.Of(256)}},
			{Name: "train", Resources: res},
		}}}}
	}
	gpu := func(r *api.Resources) *api.Resources {
		r.Devices = []*api.RequestedDevice{{Name: "nvidia/gpu", Count: pointer.Of[uint64](1)}}
		return r
	}
	running := []*cluster.Alloc{{ID: "a", ClientStatus: "running", DesiredStatus: "run", Started: now.Add(-time.Minute)}}
	state := &cluster.State{Time: now,
		Nodes: []*cluster.Node{{ID: "cpu-only", CPUMHz: 1000, CPUCores: 1}, {ID: "n", CPUMHz: 32000, CPUCores: 16, GPUs: []*cluster.GPUGroup{{Model: "V100"}}}},
		Jobs: []*cluster.Job{
			{Namespace: "default", ID: "mhz", GPUs: 2, Submitted: now.Add(-time.Hour), Allocs: running,
				Spec: spec(2, gpu(&api.Resources{CPU: pointer.Of(6000), MemoryMB: pointer.Of(8192)}))},
			{Namespace: "default", ID: "cores", GPUs: 1, Submitted: now.Add(-time.Hour), Allocs: running,
				Spec: spec(1, gpu(&api.Resources{Cores: pointer.Of(5), MemoryMB: pointer.Of(1024)}))},
			{Namespace: "default", ID: "waits", GPUs: 1, Submitted: now.Add(-time.Hour),
				Spec: spec(1, gpu(&api.Resources{CPU: pointer.Of(6000), MemoryMB: pointer.Of(8192)}))},
		}}
	snap, _ := toSnapshot(snapshotInput{state: state, memory: map[string]*memory{}})
	must.Eq(t, [2]float64{6, 16}, [2]float64{snap.Jobs[0].CPUs, snap.Jobs[0].MemoryGB})
	must.Eq(t, [2]float64{5, 1}, [2]float64{snap.Jobs[1].CPUs, snap.Jobs[1].MemoryGB})
	must.Eq(t, [2]float64{0, 0}, [2]float64{snap.Jobs[2].CPUs, snap.Jobs[2].MemoryGB})
	must.Eq(t, 16.0, snap.Nodes[1].CPUs)

	// planning.core_mhz: a profiled core is worth 500 MHz here, so the
	// node's 32,000 MHz are 64 cores, and 6,000 MHz a task 12.
	snap, _ = toSnapshot(snapshotInput{state: state, memory: map[string]*memory{}, coreMHz: 500})
	must.Eq(t, 64.0, snap.Nodes[1].CPUs)
	must.Eq(t, 24.0, snap.Jobs[0].CPUs)
	must.Eq(t, 5.0, snap.Jobs[1].CPUs)
}

// A job held to restart (a Migrate change written) stays restarting while
// it is held and still runs, and not once its allocations have stopped.
func TestRestartIsRememberedUntilItsStop(t *testing.T) {
	now := time.Unix(10_000, 0)
	job := &cluster.Job{Namespace: "default", ID: "a", GPUs: 1, Submitted: now.Add(-time.Hour),
		Allocs: []*cluster.Alloc{{ID: "x", ClientStatus: "running", DesiredStatus: "run", Started: now.Add(-time.Minute)}}}
	p := &Planner{cfg: &Settings{Policy: "las"}, memory: map[string]*memory{}, records: map[string][]plannerapi.Record{},
		log: hclog.NewNullLogger()}
	round := func(change *enact.Change, res map[string]rewrite.Result) bool {
		state := &cluster.State{Time: now, Jobs: []*cluster.Job{job}}
		snap := &policy.Snapshot{Now: 1, Jobs: []policy.Job{{ID: "a", GPUs: 1, State: policy.Running}}}
		d := policy.Decision{Job: 0, Run: true}
		p.remember(state, snap, []*cluster.Job{job}, &policy.Result{Decisions: []policy.Decision{d}},
			[]target{{key: job.Key(), namespace: "default", id: "a", decision: d, job: job, change: change}}, res, &plannerapi.Round{}, true)
		return p.memory[job.Key()].restarting
	}
	written := map[string]rewrite.Result{job.Key(): {Outcome: rewrite.Written}}
	must.False(t, round(&enact.Change{Action: enact.Preempt}, written))
	must.True(t, round(&enact.Change{Action: enact.Migrate}, written))
	job.Held = true
	must.True(t, round(nil, nil), must.Sprint("held, still running"))
	job.Allocs[0].ClientStatus, job.Allocs[0].DesiredStatus = "complete", "stop"
	must.False(t, round(nil, nil), must.Sprint("stopped"))
}
