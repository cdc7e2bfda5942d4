package nomadxtest

import (
	"fmt"
	"time"

	"github.com/caravan-gpu/caravan/planner/cluster"
	"github.com/hashicorp/nomad/api"
	"github.com/hashicorp/nomad/helper/pointer"
)

// NewGPUFleet returns a fake Nomad for tests and benchmarks at scale: nodes
// nodes n00, n01, … of gpusPerNode T4s each, and jobs batch jobs job-0000,
// job-0001, … of one GPU each, managed under policy, submitted every apart
// from firstSubmit. The first nodes × gpusPerNode jobs run, one on each
// GPU, started when submitted; the rest wait.
func NewGPUFleet(policy string, nodes, gpusPerNode, jobs int, firstSubmit time.Time, every time.Duration) *Fake {
	f := New()
	for n := range nodes {
		f.NodeSet = append(f.NodeSet, t4Node(fmt.Sprintf("n%02d", n), gpusPerNode))
	}
	for i := range jobs {
		id := fmt.Sprintf("job-%04d", i)
		submitted := firstSubmit.Add(time.Duration(i) * every)
		f.Submit(managedGPUJob(id, policy))
		running := i < nodes*gpusPerNode
		f.Update("default", id, func(j *api.Job) {
			j.SubmitTime = pointer.Of(submitted.UnixNano())
			if running {
				j.Status = pointer.Of("running")
			}
		})
		if running {
			node := f.NodeSet[i/gpusPerNode]
			f.Allocs = append(f.Allocs, runningAlloc(id, node.ID, node.NodeResources.Devices[0].Instances[i%gpusPerNode].ID, submitted))
		}
	}
	return f
}

// Complete ends a batch job as Nomad does when its tasks exit 0: the job
// dead, its allocations complete, their tasks finished at finished.
func (f *Fake) Complete(namespace, id string, finished time.Time) {
	f.Update(namespace, id, func(j *api.Job) { j.Status = pointer.Of("dead") })
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, a := range f.Allocs {
		if a.JobID != id || a.Namespace != namespace {
			continue
		}
		a.ClientStatus, a.DesiredStatus = "complete", "run"
		for _, ts := range a.TaskStates {
			ts.State, ts.FinishedAt = "dead", finished
		}
	}
}

// t4Node is a ready node with n T4s whose instance IDs are unique across
// nodes, as real GPU UUIDs are.
func t4Node(id string, n int) *api.NodeListStub {
	d := &api.NodeDeviceResource{Vendor: "nvidia", Type: "gpu", Name: "T4", Attributes: map[string]*api.Attribute{
		"model":  {StringVal: pointer.Of("T4")},
		"memory": {IntVal: pointer.Of[int64](40960), Unit: "MiB"},
	}}
	for i := range n {
		d.Instances = append(d.Instances, &api.NodeDevice{ID: fmt.Sprintf("%s-T4-%d", id, i), Healthy: true})
	}
	return &api.NodeListStub{ID: id, Name: id, Status: "ready", SchedulingEligibility: "eligible",
		NodeResources: &api.NodeResources{Cpu: api.NodeCpuResources{CpuShares: 16000, TotalCpuCores: 16},
			Memory: api.NodeMemoryResources{MemoryMB: 65536}, Devices: []*api.NodeDeviceResource{d}}}
}

// managedGPUJob is a batch job of one task asking for one GPU, managed by
// the planner under policy.
func managedGPUJob(id, policy string) *api.Job {
	job := api.NewBatchJob(id, id, "global", 50)
	job.Meta = map[string]string{cluster.MetaPolicy: policy}
	task := api.NewTask("train", "caravan")
	task.Require(&api.Resources{CPU: pointer.Of(100), MemoryMB: pointer.Of(64),
		Devices: []*api.RequestedDevice{{Name: "nvidia/gpu", Count: pointer.Of[uint64](1)}}})
	job.AddTaskGroup(api.NewTaskGroup("train", 1).AddTask(task))
	return job
}

func runningAlloc(jobID, nodeID, device string, started time.Time) *api.AllocationListStub {
	return &api.AllocationListStub{ID: "alloc-" + jobID, JobID: jobID, Namespace: "default", NodeID: nodeID,
		ClientStatus: "running", DesiredStatus: "run", CreateTime: started.UnixNano(),
		TaskStates: map[string]*api.TaskState{"train": {State: "running", StartedAt: started}},
		AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{
			"train": {Devices: []*api.AllocatedDeviceResource{{Vendor: "nvidia", Type: "gpu", Name: "T4", DeviceIDs: []string{device}}}}}}}
}
