package cluster

import (
	"testing"

	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

func laneNode() *api.NodeListStub {
	lanes := "2"
	return &api.NodeListStub{ID: "n1", Name: "node-1", Status: "ready", NodeResources: &api.NodeResources{
		Devices: []*api.NodeDeviceResource{{Vendor: "nvidia", Type: "gpu", Name: "h100",
			Attributes: map[string]*api.Attribute{"lanes_per_gpu": {StringVal: &lanes}},
			Instances: []*api.NodeDevice{
				{ID: "GPU-a:lane0:slot0", Healthy: true}, {ID: "GPU-a:lane1:slot0", Healthy: true}, {ID: "GPU-b", Healthy: false, HealthDescription: "xid 79"},
			}}}}}
}

func laneAlloc(id, task string, events ...string) *api.AllocationListStub {
	ts := &api.TaskState{State: "running"}
	for _, e := range events {
		ts.Events = append(ts.Events, &api.TaskEvent{Type: "Driver", DriverMessage: e})
	}
	return &api.AllocationListStub{ID: id, NodeID: "n1", Namespace: "ml", JobID: "job-" + id, ClientStatus: "running",
		TaskStates: map[string]*api.TaskState{task: ts},
		AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{
			task: {Devices: []*api.AllocatedDeviceResource{{Vendor: "nvidia", Type: "gpu", Name: "h100", DeviceIDs: []string{"GPU-a:lane" + id + ":slot0"}}}}}}}
}

// Each instance carries its holder, the GPU and lane it belongs to, and
// what the driver last said of the task in it.
func TestLanesTaskStates(t *testing.T) {
	cases := []struct {
		name   string
		events []string
		want   string
	}{
		{"no driver event", nil, "running"},
		{"suspended", []string{"suspended in GPU-a/lane0 via signals in 3ms (turn)"}, "suspended"},
		{"checkpointed", []string{"suspended in GPU-a/lane0 via cuda-checkpoint in 40ms (turn); checkpointed PIDs [12]"}, "checkpointed"},
		{"resumed after a suspend", []string{"suspended in GPU-a/lane0 via signals in 3ms (turn)", "resumed in GPU-a/lane0 via signals in 2ms (turn)"}, "running"},
		{"released on one lane", []string{"released in GPU-a/lane0 (turn); it stays stopped until its other lanes give it a turn"}, "suspended"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rows := Lanes([]*api.NodeListStub{laneNode()}, []*api.AllocationListStub{laneAlloc("0", "train", tc.events...)})
			must.Len(t, 3, rows)
			must.Eq(t, "GPU-a", rows[0].GPU)
			must.Eq(t, "lane0", rows[0].Lane)
			must.Eq(t, "ml/job-0", rows[0].Job)
			must.Eq(t, "train", rows[0].Task)
			must.Eq(t, tc.want, rows[0].TaskState)
			must.Eq(t, "", rows[1].Job, must.Sprint("lane1 is free"))
			must.Eq(t, "GPU-b", rows[2].GPU)
			must.Eq(t, "", rows[2].Lane)
			must.False(t, rows[2].Healthy)
			must.Eq(t, "xid 79", rows[2].Health)
		})
	}
}
