package service

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/caravan-gpu/caravan/planner/cluster"
	"github.com/caravan-gpu/caravan/planner/nomadx/nomadxtest"
	"github.com/hashicorp/nomad/api"
	"github.com/hashicorp/nomad/helper/pointer"
	"github.com/shoenig/test/must"
)

// laneNode is a node with H100s cut into four lanes of two slots each, as
// caravan-device fingerprints them.
func laneNode(id string, gpus int) *api.NodeListStub {
	n := gpuNode(id, nil)
	const model = "NVIDIA H100 80GB HBM3"
	d := &api.NodeDeviceResource{Vendor: "nvidia", Type: "gpu", Name: model + " [4 lanes x 19365 MiB, 2 slots]",
		Attributes: map[string]*api.Attribute{
			"model":         {StringVal: str(model)},
			"memory":        {IntVal: pointer.Of[int64](19365), Unit: "MiB"},
			"gpu_memory":    {IntVal: pointer.Of[int64](81559), Unit: "MiB"},
			"lanes_per_gpu": {IntVal: pointer.Of[int64](4)},
			"lane_share":    {IntVal: pointer.Of[int64](25)},
			"slots":         {IntVal: pointer.Of[int64](2)},
		}}
	for g := 0; g < gpus; g++ {
		for l := 0; l < 4; l++ {
			for s := 0; s < 2; s++ {
				d.Instances = append(d.Instances, &api.NodeDevice{ID: fmt.Sprintf("GPU-h100-%02d:lane%d:slot%d", g, l, s), Healthy: true})
			}
		}
	}
	n.NodeResources.Devices = append(n.NodeResources.Devices, d)
	return n
}

// Jobs that run in lanes keep running: three lane jobs on two H100s hold
// two GPUs, not three. The planner once gave the policy no placement for
// running jobs, so every lane job counted as a whole GPU and the third was
// reported as preempted while it ran on.
func TestRoundCountsLaneJobsOnSharedGPUsOnce(t *testing.T) {
	fake := nomadxtest.New()
	fake.NodeSet = []*api.NodeListStub{laneNode("n1", 2)}
	started := time.Now().Add(-time.Minute)
	for id, instance := range map[string]string{
		"small-1": "GPU-h100-00:lane1:slot0",
		"small-2": "GPU-h100-00:lane3:slot0",
		"small-3": "GPU-h100-01:lane1:slot1",
	} {
		fake.Submit(managedJob(id, 1, nil))
		fake.Update("default", id, func(j *api.Job) { j.Status = str("running") })
		a := runningAlloc(id, instance, started)
		a.AllocatedResources.Tasks["train"].Devices[0].Name = fake.NodeSet[0].NodeResources.Devices[0].Name
		fake.Allocs = append(fake.Allocs, a)
	}
	for _, policy := range []string{"las", "las+match", "las+pack"} {
		t.Run(policy, func(t *testing.T) {
			p, err := New(settings(t, fmt.Sprintf("planning { policy = %q }", policy)), fake, nil, nil)
			must.NoError(t, err)
			_, err = p.Round(context.Background())
			must.NoError(t, err)
			q := p.Queue()
			must.Len(t, 3, q.Jobs)
			for _, e := range q.Jobs {
				must.True(t, e.Run, must.Sprintf("%s: %s", e.Job, e.Reason))
				must.False(t, strings.Contains(e.Reason, "preempted"), must.Sprintf("%s: %s", e.Job, e.Reason))
			}
			for _, e := range q.Jobs {
				must.True(t, e.Lane, must.Sprintf("%s runs in a lane", e.Job))
			}
		})
	}
}

// A lane job is released pinned to the lanes of the GPU the placer chose:
// left to itself, Nomad hands out any free lane of the node, and the job
// would share a GPU the policy counted as free. las+pack starts the held
// job on the H100 no lane job holds yet; fifo's count takes a spare lane
// of the GPU the running lane job shares. Either way the pin names that
// GPU's eight instances (four lanes of two slots) and nothing else.
func TestRoundPinsALaneJobToTheGPUItsPlacerChose(t *testing.T) {
	for _, tc := range []struct {
		policy string
		gpu    int
	}{{"las+pack", 1}, {"fifo", 0}} {
		t.Run(tc.policy, func(t *testing.T) {
			fake := nomadxtest.New()
			fake.NodeSet = []*api.NodeListStub{laneNode("n1", 2)}
			fake.Submit(managedJob("small-1", 1, nil))
			fake.Update("default", "small-1", func(j *api.Job) { j.Status = str("running") })
			a := runningAlloc("small-1", "GPU-h100-00:lane1:slot0", time.Now().Add(-time.Minute))
			a.AllocatedResources.Tasks["train"].Devices[0].Name = fake.NodeSet[0].NodeResources.Devices[0].Name
			fake.Allocs = append(fake.Allocs, a)
			next := managedJob("next", 1, nil)
			next.Constraints = append(next.Constraints, cluster.HoldConstraint())
			fake.Submit(next)

			p, err := New(settings(t, fmt.Sprintf("planning { policy = %q }", tc.policy)), fake, nil, nil)
			must.NoError(t, err)
			_, err = p.Round(context.Background())
			must.NoError(t, err)
			job := fake.Get("default", "next")
			must.False(t, cluster.Held(job), must.Sprint("released"))
			var pin *api.Constraint
			for _, c := range job.TaskGroups[0].Tasks[0].Resources.Devices[0].Constraints {
				if c.LTarget == cluster.AttrDeviceIDs {
					pin = c
				}
			}
			must.NotNil(t, pin, must.Sprint("the lane job names its GPU's instances"))
			must.Eq(t, "set_contains_any", pin.Operand)
			var want []string
			for l := 0; l < 4; l++ {
				for s := 0; s < 2; s++ {
					want = append(want, fmt.Sprintf("GPU-h100-%02d:lane%d:slot%d", tc.gpu, l, s))
				}
			}
			must.Eq(t, strings.Join(want, ","), pin.RTarget)
		})
	}
}
