package service

import (
	"context"
	"testing"
	"time"

	"github.com/caravan-gpu/caravan/planner/cluster"
	"github.com/caravan-gpu/caravan/planner/consulx"
	"github.com/caravan-gpu/caravan/planner/consulx/consulxtest"
	"github.com/caravan-gpu/caravan/planner/nomadx/nomadxtest"
	"github.com/hashicorp/nomad/api"
	"github.com/hashicorp/nomad/helper/pointer"
	"github.com/shoenig/test/must"
)

// A profiled job that waits for busy GPUs is held, unpinned: while it is
// held Nomad places nothing of it, so a pin would only be a write. With
// every GPU busy the matching has no free GPU to queue it on. When its GPU
// frees up, one write releases it pinned to the model that the matching
// gave it, with its band.
func TestRoundHoldsMatchedJobThenReleasesItWithItsPin(t *testing.T) {
	fake, p := busyGPUsAndAProfiledJob(t, func(j *api.Job) { j.SubmitTime = pointer.Of(time.Now().UnixNano()) })
	_, err := p.Round(context.Background())
	must.NoError(t, err)
	job := fake.Get("default", "resnet")
	must.True(t, cluster.Held(job), must.Sprint("a job the policy does not run now is held"))
	must.Len(t, 0, job.TaskGroups[0].Tasks[0].Resources.Devices[0].Constraints, must.Sprint("no pin while held"))
	e, ok := p.Explain("resnet")
	must.True(t, ok)
	must.StrContains(t, e.Reason, "waits: not enough free GPUs")
	must.StrContains(t, e.Placement, "held")

	// A second round with nothing new writes nothing: no pin flips.
	regs := fake.Registers
	_, err = p.Round(context.Background())
	must.NoError(t, err)
	must.Eq(t, regs, fake.Registers)

	// The H100 job completes: resnet is released onto the H100 in one write.
	fake.Allocs[1].ClientStatus = "complete"
	fake.Allocs[1].TaskStates["train"].FinishedAt = time.Now()
	fake.Update("default", "busy-h100", func(j *api.Job) { j.Status = str("dead") })
	_, err = p.Round(context.Background())
	must.NoError(t, err)
	job = fake.Get("default", "resnet")
	must.False(t, cluster.Held(job))
	must.Eq(t, 80, *job.Priority)
	devs := job.TaskGroups[0].Tasks[0].Resources.Devices
	must.Len(t, 1, devs[0].Constraints)
	must.Eq(t, cluster.AttrModel, devs[0].Constraints[0].LTarget)
	must.Eq(t, "H100", devs[0].Constraints[0].RTarget)
	must.Eq(t, regs+1, fake.Registers, must.Sprint("one write for resnet"))
}

// busyGPUsAndAProfiledJob is a leading planner (las+match) over a node whose
// T4 and H100 are both busy, and a pending job "resnet" profiled as 6×
// faster on the H100; edit, when set, changes resnet before the planner
// starts.
func busyGPUsAndAProfiledJob(t *testing.T, edit func(*api.Job)) (*nomadxtest.Fake, *Planner) {
	t.Helper()
	fake := nomadxtest.New()
	fake.NodeSet = []*api.NodeListStub{gpuNode("n1", map[string]int{"T4": 1, "H100": 1})}
	for _, id := range []string{"busy-t4", "busy-h100"} {
		fake.Submit(managedJob(id, 1, nil))
		fake.Update("default", id, func(j *api.Job) { j.Status = str("running") })
	}
	started := time.Now().Add(-time.Minute)
	h100 := runningAlloc("busy-h100", "H100-0", started)
	h100.AllocatedResources.Tasks["train"].Devices[0].Name = "H100"
	fake.Allocs = []*api.AllocationListStub{runningAlloc("busy-t4", "T4-0", started), h100}
	fake.Submit(managedJob("resnet", 1, map[string]string{cluster.MetaProfile: "resnet"}))
	if edit != nil {
		fake.Update("default", "resnet", edit)
	}

	consul := consulxtest.NewServer().Client()
	must.NoError(t, consul.Put(context.Background(), consulx.ProfilesPrefix+"resnet",
		[]byte(`{"name": "resnet", "throughput": {"H100": 6, "T4": 1}}`)))
	p, err := New(settings(t, `planning { policy = "las+match" }`), fake, consul, nil)
	must.NoError(t, err)
	must.NoError(t, p.LoadKV(context.Background()))
	p.beginTerm(context.Background(), "test")
	return fake, p
}
