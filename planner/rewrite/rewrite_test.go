package rewrite

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caravan-gpu/caravan/planner/cluster"
	"github.com/caravan-gpu/caravan/planner/nomadx/nomadxtest"
	"github.com/hashicorp/nomad/api"
	"github.com/hashicorp/nomad/helper/pointer"
	"github.com/shoenig/test/must"
)

func gpuJob(id string) *api.Job {
	job := api.NewBatchJob(id, id, "global", 50)
	task := api.NewTask("train", "caravan")
	task.Require(&api.Resources{CPU: pointer.Of(100), MemoryMB: pointer.Of(64),
		Devices: []*api.RequestedDevice{{Name: "nvidia/gpu", Count: pointer.Of[uint64](1)}}})
	job.AddTaskGroup(api.NewTaskGroup("train", 1).AddTask(task))
	return job
}

func TestRewrite(t *testing.T) {
	lane := true
	cases := []struct {
		name   string
		target Target
		live   bool
		want   []string
	}{
		{"priority only", Target{Priority: 80}, false, []string{"priority 50→80"}},
		{"same priority is no change", Target{Priority: 50}, false, nil},
		{"placement on pending job", Target{Priority: 50, Placement: &Placement{Model: "Tesla T4", Lane: &lane, CPU: 400, MemoryMB: 2048}}, false,
			[]string{"task train cpu 400 MHz", "task train memory 2048 MB", "constraint ${device.attr.model} = Tesla T4", "constraint ${device.attr.lanes_per_gpu} > 1"}},
		{"placement ignored on live job", Target{Priority: 30, Placement: &Placement{Model: "Tesla T4"}}, true, []string{"priority 50→30"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			job := gpuJob("j")
			got := Rewrite(job, tc.target, tc.live)
			must.Eq(t, tc.want, []string(got))
		})
	}
}

func TestRewriteHoldsAndReleases(t *testing.T) {
	job := gpuJob("j")
	job.Constraints = []*api.Constraint{{LTarget: "${attr.kernel.name}", Operand: "=", RTarget: "linux"}}
	must.Eq(t, []string{"hold: waits for the planner"}, []string(Rewrite(job, Target{Priority: 50, Hold: true}, false)))
	must.True(t, cluster.Held(job))
	must.Eq(t, "true", job.Meta[cluster.MetaHeld])
	must.Len(t, 0, Rewrite(job, Target{Priority: 50, Hold: true}, false), must.Sprint("held twice is one hold"))

	must.Eq(t, []string{"release: Nomad may place it"}, []string(Rewrite(job, Target{Priority: 50}, false)))
	must.False(t, cluster.Held(job))
	must.Len(t, 1, job.Constraints, must.Sprint("the user's own constraint stays"))
	_, marked := job.Meta[cluster.MetaHeld]
	must.False(t, marked)

	must.Eq(t, []string{"priority 50→70", "hold: preempted, every allocation stops"},
		[]string(Rewrite(job, Target{Priority: 70, Hold: true}, true)))
}

// The CPU and memory the planner sizes come back to what the user wrote as
// soon as a placement no longer sizes them, and when the planner gives the
// job back.
func TestRewriteRestoresUsersResources(t *testing.T) {
	job := gpuJob("j")
	res := job.TaskGroups[0].Tasks[0].Resources
	Rewrite(job, Target{Placement: &Placement{CPU: 4000, MemoryMB: 8192}}, false)
	must.Eq(t, 4000, *res.CPU)
	must.Eq(t, 8192, *res.MemoryMB)
	must.Eq(t, "train/train=100,64", job.Meta[cluster.MetaResources])

	// Sized again: the user's values stay recorded, not the last size.
	Rewrite(job, Target{Placement: &Placement{CPU: 2000}}, false)
	must.Eq(t, 2000, *res.CPU)
	must.Eq(t, 64, *res.MemoryMB, must.Sprint("memory is no longer sized: the user's"))
	must.Eq(t, "train/train=100,64", job.Meta[cluster.MetaResources])

	Rewrite(job, Target{Hold: true}, false)
	change := Rewrite(job, Target{Restore: true}, false)
	must.Eq(t, []string{"release: Nomad may place it", "task train cpu 100 MHz"}, []string(change))
	must.Eq(t, 100, *res.CPU)
	must.False(t, cluster.PlannerMeta(job.Meta), must.Sprint("no trace of the planner is left"))
	must.False(t, cluster.Held(job))
}

func TestRewriteReplacesOnlyItsOwnConstraints(t *testing.T) {
	job := gpuJob("j")
	dev := job.TaskGroups[0].Tasks[0].Resources.Devices[0]
	dev.Constraints = []*api.Constraint{{LTarget: cluster.AttrMemory, Operand: ">=", RTarget: "10 GiB"}}

	Rewrite(job, Target{Placement: &Placement{Model: "Tesla T4"}}, false)
	must.Len(t, 2, dev.Constraints)
	must.Eq(t, "${device.attr.model}|=|Tesla T4", job.Meta[cluster.MetaPlacement])

	change := Rewrite(job, Target{Placement: &Placement{Model: "NVIDIA H100 80GB HBM3"}}, false)
	must.Len(t, 2, dev.Constraints, must.Sprint("the old model constraint is replaced, not added to"))
	must.Eq(t, cluster.AttrMemory, dev.Constraints[0].LTarget)
	must.Eq(t, "NVIDIA H100 80GB HBM3", dev.Constraints[1].RTarget)
	must.Eq(t, []string{"constraint ${device.attr.model} = NVIDIA H100 80GB HBM3"}, []string(change))

	// A second identical rewrite changes nothing.
	must.Len(t, 0, Rewrite(job, Target{Placement: &Placement{Model: "NVIDIA H100 80GB HBM3"}}, false))
}

func TestRewriteKeepsUsersModelChoice(t *testing.T) {
	job := gpuJob("j")
	dev := job.TaskGroups[0].Tasks[0].Resources.Devices[0]
	dev.Constraints = []*api.Constraint{{LTarget: cluster.AttrModel, Operand: "=", RTarget: "Tesla T4"}}
	change := Rewrite(job, Target{Placement: &Placement{Model: "NVIDIA H100 80GB HBM3"}}, false)
	must.Len(t, 0, change)
	must.Len(t, 1, dev.Constraints)
	must.Eq(t, "Tesla T4", dev.Constraints[0].RTarget)
}

// Where lanes are a device type of their own, a job placed on a lane asks
// for that type, and gets its own request back when placed whole or given
// back. A user's own lane request is theirs.
func TestRewriteRenamesRequestForLanes(t *testing.T) {
	lane, whole := true, false
	job := gpuJob("j")
	dev := job.TaskGroups[0].Tasks[0].Resources.Devices[0]
	change := Rewrite(job, Target{Placement: &Placement{Lane: &lane, LaneRequest: true}}, false)
	must.Eq(t, cluster.LaneRequest, dev.Name)
	must.Eq(t, []string{"constraint ${device.attr.lanes_per_gpu} > 1", "device nvidia/gpu → nvidia/lane"}, []string(change))
	must.Len(t, 0, Rewrite(job, Target{Placement: &Placement{Lane: &lane, LaneRequest: true}}, false), must.Sprint("placed the same: no change"))
	must.Eq(t, []string{"train"}, taskNames(job), must.Sprint("still a GPU job"))

	Rewrite(job, Target{Placement: &Placement{Lane: &whole}}, false)
	must.Eq(t, "nvidia/gpu", dev.Name)
	must.Eq(t, "${device.attr.lanes_per_gpu}|<=|1", job.Meta[cluster.MetaPlacement])

	Rewrite(job, Target{Placement: &Placement{Lane: &lane, LaneRequest: true}}, false)
	Rewrite(job, Target{Restore: true}, false)
	must.Eq(t, "nvidia/gpu", dev.Name)
	must.False(t, cluster.PlannerMeta(job.Meta), must.Sprint("no trace of the planner is left"))

	own := gpuJob("own")
	ownDev := own.TaskGroups[0].Tasks[0].Resources.Devices[0]
	ownDev.Name = "gpu"
	Rewrite(own, Target{Placement: &Placement{Lane: &lane, LaneRequest: true}}, false)
	must.Eq(t, cluster.LaneRequest, ownDev.Name)
	Rewrite(own, Target{Restore: true}, false)
	must.Eq(t, "gpu", ownDev.Name, must.Sprint("the user's exact name comes back"))

	user := gpuJob("user")
	userDev := user.TaskGroups[0].Tasks[0].Resources.Devices[0]
	userDev.Name = cluster.LaneRequest
	must.Len(t, 0, Rewrite(user, Target{Placement: &Placement{Lane: &whole}}, false), must.Sprint("the user asked for lanes"))
	must.Eq(t, cluster.LaneRequest, userDev.Name)

	// A rename record someone else wrote never turns a request into
	// something other than a GPU request.
	user.Meta = map[string]string{cluster.MetaPlacement: "device|renamed from|fpga"}
	Rewrite(user, Target{Restore: true}, false)
	must.Eq(t, cluster.LaneRequest, userDev.Name)
}

func taskNames(job *api.Job) []string {
	var out []string
	for _, tg := range job.TaskGroups {
		for _, task := range tg.Tasks {
			if len(cluster.GPURequests(task)) > 0 {
				out = append(out, task.Name)
			}
		}
	}
	return out
}

// A user edit that lands between the planner's read and its write must
// survive: the planner's write is refused and redone on the user's version.
func TestWriterKeepsConcurrentUserEdit(t *testing.T) {
	fake := nomadxtest.New()
	fake.Submit(gpuJob("j"))
	edits := 0
	fake.BeforeRegister = func(*api.Job) {
		if edits < 3 {
			edits++
			user := fake.Get("default", "j")
			user.Meta = map[string]string{"user.edit": strings.Repeat("x", edits)}
			fake.Submit(user)
		}
	}
	w := &Writer{Nomad: fake, Limiter: NewLimiter(0, 1)}
	res := w.Apply(context.Background(), "default", "j", Target{Priority: 90})
	must.NoError(t, res.Err)
	must.Eq(t, Written, res.Outcome)
	must.Eq(t, 3, res.Conflicts)
	got := fake.Get("default", "j")
	must.Eq(t, 90, *got.Priority)
	must.Eq(t, "xxx", got.Meta["user.edit"])
}

// ApplyRead starts from the caller's copy; a copy that a user's edit made
// stale is refused by the index check and the edit is kept.
func TestWriterApplyReadKeepsEditMadeAfterTheCopy(t *testing.T) {
	fake := nomadxtest.New()
	fake.Submit(gpuJob("j"))
	stale := fake.Get("default", "j")
	user := fake.Get("default", "j")
	user.Meta = map[string]string{"user.edit": "x"}
	fake.Submit(user)
	w := &Writer{Nomad: fake}
	res := w.ApplyRead(context.Background(), stale, Target{Priority: 90})
	must.NoError(t, res.Err)
	must.Eq(t, Written, res.Outcome)
	must.Eq(t, 1, res.Conflicts)
	got := fake.Get("default", "j")
	must.Eq(t, 90, *got.Priority)
	must.Eq(t, "x", got.Meta["user.edit"])

	res = w.ApplyRead(context.Background(), fake.Get("default", "j"), Target{Priority: 70})
	must.Eq(t, Written, res.Outcome)
	must.Eq(t, 0, res.Conflicts)
	must.Eq(t, 70, *fake.Get("default", "j").Priority)
}

func TestWriterGivesUpAfterMaxAttempts(t *testing.T) {
	fake := nomadxtest.New()
	fake.Submit(gpuJob("j"))
	fake.BeforeRegister = func(*api.Job) { fake.Submit(fake.Get("default", "j")) }
	w := &Writer{Nomad: fake, MaxAttempts: 3}
	res := w.Apply(context.Background(), "default", "j", Target{Priority: 90})
	must.Eq(t, Failed, res.Outcome)
	must.ErrorContains(t, res.Err, "changed 3 times")
	must.Eq(t, 50, *fake.Get("default", "j").Priority)
}

func TestWriterLeavesPlacementOfLiveJob(t *testing.T) {
	fake := nomadxtest.New()
	fake.Submit(gpuJob("j"))
	fake.Allocs = []*api.AllocationListStub{{ID: "a1", JobID: "j", Namespace: "default", ClientStatus: "running", DesiredStatus: "run"}}
	w := &Writer{Nomad: fake}
	res := w.Apply(context.Background(), "default", "j", Target{Priority: 20, Placement: &Placement{Model: "Tesla T4", CPU: 999}})
	must.Eq(t, Written, res.Outcome)
	must.True(t, res.Live)
	got := fake.Get("default", "j")
	must.Eq(t, 20, *got.Priority)
	must.Eq(t, 100, *got.TaskGroups[0].Tasks[0].Resources.CPU)
	must.Len(t, 0, got.TaskGroups[0].Tasks[0].Resources.Devices[0].Constraints)
	must.MapNotContainsKey(t, got.Meta, cluster.MetaPlacement)
}

func TestWriterSkipsStoppedAndMissingJobs(t *testing.T) {
	fake := nomadxtest.New()
	job := gpuJob("stopped")
	job.Stop = pointer.Of(true)
	fake.Submit(job)
	w := &Writer{Nomad: fake}
	must.Eq(t, Skipped, w.Apply(context.Background(), "default", "stopped", Target{Priority: 90}).Outcome)
	must.Eq(t, Skipped, w.Apply(context.Background(), "default", "missing", Target{Priority: 90}).Outcome)
	must.Eq(t, 0, fake.Registers)
}

// Many concurrent writers and users racing on one job: every user edit
// survives and the final priority is the planner's.
func TestWriterRaceStress(t *testing.T) {
	fake := nomadxtest.New()
	fake.Submit(gpuJob("j"))
	w := &Writer{Nomad: fake, MaxAttempts: 1000}
	var wg sync.WaitGroup
	const users = 100
	for i := 0; i < users; i++ {
		wg.Add(2)
		go func() {
			defer wg.Done()
			res := w.Apply(context.Background(), "default", "j", Target{Priority: 70})
			must.NoError(t, res.Err)
		}()
		go func(i int) {
			defer wg.Done()
			// A user's read-modify-write with CAS, as `nomad job run -check-index` does.
			for {
				j := fake.Get("default", "j")
				if j.Meta == nil {
					j.Meta = map[string]string{}
				}
				j.Meta[string(rune('a'+i%26))+string(rune('a'+i/26))] = "1"
				if _, err := fake.RegisterJob(context.Background(), j, *j.JobModifyIndex); err == nil {
					return
				}
			}
		}(i)
	}
	wg.Wait()
	got := fake.Get("default", "j")
	must.Eq(t, users, len(got.Meta), must.Sprint("every user edit survives"))
	must.Eq(t, 70, *got.Priority)
}

func TestLimiter(t *testing.T) {
	l := NewLimiter(100, 1)
	now := time.Unix(0, 0)
	var mu sync.Mutex
	l.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	must.NoError(t, l.Wait(context.Background()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	// The clock stands still, so no token refills and the wait runs out.
	must.Error(t, l.Wait(ctx))
	mu.Lock()
	now = now.Add(10 * time.Millisecond)
	mu.Unlock()
	must.NoError(t, l.Wait(context.Background()))
}

// Nomad checks EnforceIndex before the write goes through Raft, so a user's
// unchecked `nomad job run` can land between the check and the planner's
// write. The planner finds the version it replaced and writes it back with
// its own change on top.
func TestWriterRestoresEditLandingBetweenIndexCheckAndWrite(t *testing.T) {
	fake := nomadxtest.New()
	fake.Submit(gpuJob("j"))
	slipped := false
	fake.AfterIndexCheck = func(*api.Job) {
		if slipped {
			return
		}
		slipped = true
		user := fake.Get("default", "j")
		user.Meta = map[string]string{"owner": "user"}
		fake.Submit(user)
	}
	w := &Writer{Nomad: fake}
	res := w.Apply(context.Background(), "default", "j", Target{Priority: 70})
	must.NoError(t, res.Err)
	must.Eq(t, Written, res.Outcome)
	must.Eq(t, 1, res.Restored)
	got := fake.Get("default", "j")
	must.Eq(t, "user", got.Meta["owner"], must.Sprint("the user's edit survives"))
	must.Eq(t, 70, *got.Priority)
}

// Holding a running job preempts it: the hold alone would leave it running,
// since Nomad backs out a destructive update it cannot place, so every live
// allocation is stopped too, and none that already stopped.
func TestWriterPreemptsByHoldingAndStopping(t *testing.T) {
	fake := nomadxtest.New()
	fake.Submit(gpuJob("j"))
	fake.Allocs = []*api.AllocationListStub{
		{ID: "a1", JobID: "j", Namespace: "default", ClientStatus: "running", DesiredStatus: "run"},
		{ID: "a2", JobID: "j", Namespace: "default", ClientStatus: "pending", DesiredStatus: "run"},
		{ID: "old", JobID: "j", Namespace: "default", ClientStatus: "complete", DesiredStatus: "stop"},
	}
	w := &Writer{Nomad: fake}
	res := w.Apply(context.Background(), "default", "j", Target{Priority: 70, Hold: true})
	must.NoError(t, res.Err)
	must.Eq(t, Written, res.Outcome)
	must.Eq(t, []string{"priority 50→70", "hold: preempted, every allocation stops", "stopped 2 allocation(s)"}, []string(res.Change))
	must.Eq(t, []string{"a1", "a2"}, fake.Stopped)
	must.True(t, cluster.Held(fake.Get("default", "j")))

	// Held, but one allocation still runs (a stop that did not finish):
	// the next write stops it.
	fake.Allocs[0].ClientStatus, fake.Allocs[0].DesiredStatus = "running", "run"
	res = w.Apply(context.Background(), "default", "j", Target{Priority: 70, Hold: true})
	must.Eq(t, Written, res.Outcome)
	must.Eq(t, []string{"stopped 1 allocation(s)"}, []string(res.Change))
	must.Eq(t, []string{"a1", "a2", "a1"}, fake.Stopped)

	// Held and stopped: a second write changes nothing and stops nothing.
	res = w.Apply(context.Background(), "default", "j", Target{Priority: 70, Hold: true})
	must.Eq(t, Unchanged, res.Outcome)
	must.Len(t, 3, fake.Stopped)
}

func TestUserModels(t *testing.T) {
	job := gpuJob("j")
	models, picked := UserModels(job)
	must.False(t, picked)
	must.SliceEmpty(t, models)

	dev := job.TaskGroups[0].Tasks[0].Resources.Devices[0]
	dev.Constraints = []*api.Constraint{{LTarget: cluster.AttrModel, Operand: "=", RTarget: "Tesla T4"}}
	models, picked = UserModels(job)
	must.True(t, picked)
	must.Eq(t, []string{"Tesla T4"}, models)

	// The planner's own pin is not the user's choice.
	job = gpuJob("k")
	Rewrite(job, Target{Placement: &Placement{Model: "NVIDIA H100 80GB HBM3"}}, false)
	_, picked = UserModels(job)
	must.False(t, picked)

	// A choice that names no list: picked, but any model as far as the
	// list goes.
	job = gpuJob("r")
	job.TaskGroups[0].Tasks[0].Resources.Devices[0].Constraints = []*api.Constraint{{LTarget: cluster.AttrModel, Operand: "regexp", RTarget: "A100|H100"}}
	models, picked = UserModels(job)
	must.True(t, picked)
	must.SliceEmpty(t, models)

	job = gpuJob("n")
	job.TaskGroups[0].Tasks[0].Resources.Devices[0].Name = "nvidia/gpu/Tesla T4"
	models, _ = UserModels(job)
	must.Eq(t, []string{"Tesla T4"}, models)
}

// mirroredFake is the fake with a mirror of allocations, as
// nomadx.Mirror keeps them, and a count of the allocation lists asked of
// Nomad.
type mirroredFake struct {
	*nomadxtest.Fake
	mirrored []*api.AllocationListStub
	synced   bool
	asked    int
}

func (m *mirroredFake) MirroredJobAllocations(namespace, id string) ([]*api.AllocationListStub, bool) {
	return m.mirrored, m.synced
}

func (m *mirroredFake) JobAllocations(ctx context.Context, namespace, id string) ([]*api.AllocationListStub, error) {
	m.asked++
	return m.Fake.JobAllocations(ctx, namespace, id)
}

// A hold takes the job's allocations from a synced mirror, saving a
// request per job; a placement, a restore, or a mirror not synced asks
// Nomad.
func TestWriterHoldsFromTheMirror(t *testing.T) {
	fake := &mirroredFake{Fake: nomadxtest.New(), synced: true,
		mirrored: []*api.AllocationListStub{{ID: "a1", JobID: "j", Namespace: "default", ClientStatus: "running", DesiredStatus: "run"}}}
	fake.Submit(gpuJob("j"))
	fake.Allocs = fake.mirrored // what Nomad has, which the mirror mirrors
	w := &Writer{Nomad: fake}
	res := w.Apply(context.Background(), "default", "j", Target{Priority: 70, Hold: true})
	must.NoError(t, res.Err)
	must.True(t, res.Live, must.Sprint("the mirror's allocation runs"))
	must.Eq(t, []string{"a1"}, fake.Stopped)
	must.Zero(t, fake.asked)

	fake.Submit(gpuJob("k"))
	w.Apply(context.Background(), "default", "k", Target{Priority: 20, Placement: &Placement{Model: "Tesla T4"}})
	must.Eq(t, 1, fake.asked)

	fake.synced = false
	fake.Submit(gpuJob("m"))
	w.Apply(context.Background(), "default", "m", Target{Priority: 70, Hold: true})
	must.Eq(t, 2, fake.asked)
}

// The job a write hands back carries the version Nomad gave it, not the one
// it was read at: the planner tells a job's current allocations by it.
func TestWriterKeepsTheVersionItWrote(t *testing.T) {
	fake := nomadxtest.New()
	fake.Submit(gpuJob("j"))
	w := &Writer{Nomad: fake}
	for want := uint64(1); want <= 3; want++ {
		res := w.ApplyRead(context.Background(), fake.Get("default", "j"), Target{Priority: 60 + int(want)})
		must.NoError(t, res.Err)
		must.NotNil(t, res.Job)
		got := fake.Get("default", "j")
		must.Eq(t, *got.Version, *res.Job.Version)
		must.Eq(t, want, *res.Job.Version)
		must.Eq(t, *got.JobModifyIndex, *res.Job.JobModifyIndex)
	}

	// A restored user edit: the kept job is the last write's version.
	slipped := false
	fake.AfterIndexCheck = func(*api.Job) {
		if !slipped {
			slipped = true
			user := fake.Get("default", "j")
			user.Meta = map[string]string{"owner": "user"}
			fake.Submit(user)
		}
	}
	res := w.Apply(context.Background(), "default", "j", Target{Priority: 70})
	must.Eq(t, 1, res.Restored)
	must.Eq(t, *fake.Get("default", "j").Version, *res.Job.Version)
}

// A placer's node choice pins each GPU group to its nodes; the next
// placement replaces the pin, a restore removes it, and a user's own node
// pin is left as it is.
func TestRewritePinsNodes(t *testing.T) {
	job := gpuJob("j")
	job.AddTaskGroup(api.NewTaskGroup("logs", 1).AddTask(api.NewTask("ship", "exec")))
	tg := job.TaskGroups[0]
	tg.Constraints = []*api.Constraint{{LTarget: "${attr.kernel.name}", Operand: "=", RTarget: "linux"}}

	change := Rewrite(job, Target{Placement: &Placement{Nodes: []string{"n-1"}}}, false)
	must.Eq(t, []string{"constraint ${node.unique.id} = n-1"}, []string(change))
	must.Len(t, 2, tg.Constraints)
	must.Eq(t, api.Constraint{LTarget: cluster.AttrNodeID, Operand: "=", RTarget: "n-1"}, *tg.Constraints[1])
	must.SliceEmpty(t, job.TaskGroups[1].Constraints, must.Sprint("a group without GPUs is not pinned"))

	change = Rewrite(job, Target{Placement: &Placement{Nodes: []string{"n-2", "n-3"}}}, false)
	must.Eq(t, []string{"constraint ${node.unique.id} set_contains_any n-2,n-3"}, []string(change))
	must.Len(t, 2, tg.Constraints, must.Sprint("the old pin is replaced"))
	must.Eq(t, "set_contains_any", tg.Constraints[1].Operand)
	must.Len(t, 0, Rewrite(job, Target{Placement: &Placement{Nodes: []string{"n-2", "n-3"}}}, false))

	// Placed without a node choice: the pin goes.
	Rewrite(job, Target{Placement: &Placement{}}, false)
	must.Len(t, 1, tg.Constraints)
	must.Eq(t, "${attr.kernel.name}", tg.Constraints[0].LTarget)

	Rewrite(job, Target{Placement: &Placement{Nodes: []string{"n-1"}}}, false)
	Rewrite(job, Target{Restore: true}, false)
	must.Len(t, 1, tg.Constraints, must.Sprint("given back: the pin is removed"))
	must.Eq(t, "", job.Meta[cluster.MetaPlacement])

	// The user's own pin, at the job or the group, is theirs.
	user := gpuJob("u")
	user.Constraints = []*api.Constraint{{LTarget: cluster.AttrNodeName, Operand: "regexp", RTarget: "gpu-.*"}}
	must.Len(t, 0, Rewrite(user, Target{Placement: &Placement{Nodes: []string{"n-1"}}}, false))
	must.SliceEmpty(t, user.TaskGroups[0].Constraints)
}

// A lane job is pinned to the lanes of the GPU the placer chose, on every
// GPU request, with set_contains_any even for one ID (Nomad checks it
// against the group's whole ID list as well as each instance); the pin is
// replaced and removed as the node pin is, and a user's own is theirs.
func TestRewritePinsDevices(t *testing.T) {
	job := gpuJob("j")
	d := job.TaskGroups[0].Tasks[0].Resources.Devices[0]
	d.Constraints = []*api.Constraint{{LTarget: cluster.AttrMemory, Operand: ">=", RTarget: "8 GiB"}}

	change := Rewrite(job, Target{Placement: &Placement{Devices: []string{"GPU-b-lane1", "GPU-b-lane0"}}}, false)
	must.Eq(t, []string{"constraint ${device.ids} set_contains_any GPU-b-lane0,GPU-b-lane1"}, []string(change))
	must.Len(t, 2, d.Constraints)
	must.Eq(t, api.Constraint{LTarget: cluster.AttrDeviceIDs, Operand: "set_contains_any", RTarget: "GPU-b-lane0,GPU-b-lane1"}, *d.Constraints[1])
	must.SliceEmpty(t, job.TaskGroups[0].Constraints, must.Sprint("devices are pinned on the request, not the group"))
	must.Len(t, 0, Rewrite(job, Target{Placement: &Placement{Devices: []string{"GPU-b-lane0", "GPU-b-lane1"}}}, false),
		must.Sprint("the same instances in another order change nothing"))

	change = Rewrite(job, Target{Placement: &Placement{Devices: []string{"GPU-c-lane0"}}}, false)
	must.Eq(t, []string{"constraint ${device.ids} set_contains_any GPU-c-lane0"}, []string(change))
	must.Len(t, 2, d.Constraints, must.Sprint("the old pin is replaced"))

	Rewrite(job, Target{Restore: true}, false)
	must.Len(t, 1, d.Constraints, must.Sprint("given back: the pin is removed"))
	must.Eq(t, cluster.AttrMemory, d.Constraints[0].LTarget)
	must.Eq(t, "", job.Meta[cluster.MetaPlacement])

	user := gpuJob("u")
	ud := user.TaskGroups[0].Tasks[0].Resources.Devices[0]
	ud.Constraints = []*api.Constraint{{LTarget: cluster.AttrDeviceIDs, Operand: "set_contains_any", RTarget: "GPU-a"}}
	must.Len(t, 0, Rewrite(user, Target{Placement: &Placement{Devices: []string{"GPU-b-lane0"}}}, false))
	must.Len(t, 1, ud.Constraints)
}

// A round's writes land phase by phase: every write of the stops before
// any of the starts, however many writers run at once; each result is
// handed back, and the caller's spec is left as it was.
func TestApplyPhasesWritesEachPhaseBeforeTheNext(t *testing.T) {
	fake := nomadxtest.New()
	for _, id := range []string{"s1", "s2", "s3", "r1", "r2", "r3", "r4"} {
		fake.Submit(gpuJob(id))
	}
	var mu sync.Mutex
	var order []string
	fake.BeforeRegister = func(j *api.Job) {
		mu.Lock()
		order = append(order, *j.ID)
		mu.Unlock()
	}
	shared := fake.Get("default", "r1")
	phases := [][]Write{
		{{Key: "default/s1", Target: Target{Priority: 10, Hold: true}}, {Key: "default/s2", Target: Target{Priority: 10, Hold: true}},
			{Key: "default/s3", Target: Target{Priority: 10, Hold: true}}},
		{{Key: "default/r1", Spec: shared, Target: Target{Priority: 90}}, {Key: "default/r2", Target: Target{Priority: 90}},
			{Key: "default/r3", Target: Target{Priority: 90}}, {Key: "default/r4", Target: Target{Priority: 90}}},
	}
	results := map[string]Result{}
	w := &Writer{Nomad: fake}
	w.ApplyPhases(context.Background(), phases, 4, func(c Write, r Result) {
		mu.Lock()
		results[c.Key] = r
		mu.Unlock()
	})
	must.Len(t, 7, order)
	for _, id := range order[:3] {
		must.StrHasPrefix(t, "s", id, must.Sprintf("order %v", order))
	}
	must.MapLen(t, 7, results)
	for k, r := range results {
		must.Eq(t, Written, r.Outcome, must.Sprint(k))
	}
	must.Eq(t, 90, *fake.Get("default", "r1").Priority)
	must.NotEq(t, 90, *shared.Priority, must.Sprint("the writer works on a copy of the spec it is handed"))
}

// runningJob submits a job with n running allocations, named id-0, id-1, ...
func runningJob(fake *nomadxtest.Fake, id string, n int) {
	fake.Submit(gpuJob(id))
	for i := range n {
		fake.Allocs = append(fake.Allocs, &api.AllocationListStub{ID: fmt.Sprintf("%s-%d", id, i), JobID: id, Namespace: "default",
			ClientStatus: "running", DesiredStatus: "run"})
	}
}

// allStopped says whether Nomad has marked every one of the job's
// allocations stopped.
func allStopped(fake *nomadxtest.Fake, id string) bool {
	allocs, _ := fake.JobAllocations(context.Background(), "default", id)
	for _, a := range allocs {
		if a.DesiredStatus == "run" {
			return false
		}
	}
	return true
}

// A start is written only once Nomad has marked stopped what the round's
// holds stopped: written earlier, Nomad schedules it before the stop and
// preempts allocations of its own choosing.
func TestApplyPhasesWaitsForTheStopsToLand(t *testing.T) {
	fake := nomadxtest.New()
	fake.DeferStops = true
	runningJob(fake, "victim", 2)
	fake.Submit(gpuJob("start"))
	var mu sync.Mutex
	landedAtStart := false
	fake.BeforeRegister = func(j *api.Job) {
		if *j.ID == "start" {
			mu.Lock()
			landedAtStart = allStopped(fake, "victim")
			mu.Unlock()
		}
	}
	go func() {
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if fake.LandStops() > 0 {
				return
			}
		}
	}()
	phases := [][]Write{{{Key: "default/victim", Target: Target{Priority: 70, Hold: true}}}, {{Key: "default/start", Target: Target{Priority: 80}}}}
	results := map[string]Result{}
	w := &Writer{Nomad: fake, StopWait: 10 * time.Second}
	stats := w.ApplyPhases(context.Background(), phases, 2, func(c Write, r Result) {
		mu.Lock()
		results[c.Key] = r
		mu.Unlock()
	})
	must.Eq(t, []string{"victim-0", "victim-1"}, results["default/victim"].Stopped)
	must.Eq(t, Written, results["default/start"].Outcome)
	must.True(t, landedAtStart, must.Sprint("the start was written before the hold's stops landed"))
	must.Positive(t, stats.StopWait)
	must.Zero(t, stats.StopsPending)
}

// Stops that never land hold the next phase back for StopWait only, and
// say so; a round without a later phase, or whose stops stopped nothing,
// does not wait.
func TestApplyPhasesWaitsForStopsAtMostStopWait(t *testing.T) {
	fake := nomadxtest.New()
	fake.DeferStops = true
	runningJob(fake, "victim", 1)
	fake.Submit(gpuJob("start"))
	fake.Submit(gpuJob("pending"))
	w := &Writer{Nomad: fake, StopWait: 50 * time.Millisecond}
	ignore := func(Write, Result) {}
	hold := func(id string) []Write {
		return []Write{{Key: "default/" + id, Target: Target{Priority: 70, Hold: true}}}
	}
	start := []Write{{Key: "default/start", Target: Target{Priority: 80}}}

	stats := w.ApplyPhases(context.Background(), [][]Write{hold("victim"), start}, 2, ignore)
	must.Eq(t, 1, stats.StopsPending)
	must.GreaterEq(t, 50*time.Millisecond, stats.StopWait)
	must.Eq(t, 80, *fake.Get("default", "start").Priority, must.Sprint("the start is written after the wait all the same"))

	// Nothing after the stops: no wait.
	fake.LandStops()
	runningJob(fake, "last", 1)
	stats = w.ApplyPhases(context.Background(), [][]Write{hold("last"), nil}, 2, ignore)
	must.Zero(t, stats.StopWait)
	// A hold of a job that runs nothing stops nothing: no wait.
	stats = w.ApplyPhases(context.Background(), [][]Write{hold("pending"), start}, 2, ignore)
	must.Zero(t, stats.StopWait)
}

// With the event stream's mirror the wait reads the mirror: no request
// to Nomad per poll.
func TestApplyPhasesWaitsOnTheMirror(t *testing.T) {
	fake := &mirroredFake{Fake: nomadxtest.New(), synced: true}
	fake.DeferStops = true
	runningJob(fake.Fake, "victim", 1)
	fake.Submit(gpuJob("start"))
	mirror := &lockedMirror{mirroredFake: fake}
	mirror.set(slices.Clone(fake.Allocs))
	go func() {
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if fake.LandStops() > 0 {
				time.Sleep(30 * time.Millisecond) // the stream's lag
				allocs, _ := fake.Fake.JobAllocations(context.Background(), "default", "victim")
				mirror.set(allocs)
				return
			}
		}
	}()
	w := &Writer{Nomad: mirror, StopWait: 10 * time.Second}
	stats := w.ApplyPhases(context.Background(), [][]Write{
		{{Key: "default/victim", Target: Target{Priority: 70, Hold: true}}}, {{Key: "default/start", Target: Target{Priority: 80}}}},
		1, func(Write, Result) {})
	must.Zero(t, stats.StopsPending)
	must.GreaterEq(t, 30*time.Millisecond, stats.StopWait)
	must.Zero(t, fake.asked, must.Sprint("allocations listed from Nomad while a mirror was synced"))
}

// lockedMirror is a mirror its test replaces as the stream would, safe for
// the writer to read meanwhile.
type lockedMirror struct {
	*mirroredFake
	mu     sync.Mutex
	allocs []*api.AllocationListStub
}

func (m *lockedMirror) set(allocs []*api.AllocationListStub) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.allocs = allocs
}

func (m *lockedMirror) MirroredJobAllocations(namespace, id string) ([]*api.AllocationListStub, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*api.AllocationListStub
	for _, a := range m.allocs {
		if a.JobID == id {
			out = append(out, a)
		}
	}
	return out, true
}
