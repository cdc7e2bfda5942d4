package cluster

import (
	"sort"
	"strings"

	"github.com/caravan-gpu/caravan/gpu/reservation"
	"github.com/hashicorp/nomad/api"
)

// Lane is one device instance caravan-device fingerprinted (a whole GPU or
// a slot of a lane) with the allocation holding it: what `caravan lanes`
// prints and the planner's GPU map shows.
type Lane struct {
	Node   string `json:"node"`
	NodeID string `json:"node_id"`
	Group  string `json:"device"`
	Model  string `json:"model"`
	// GPU is the physical GPU's UUID, Lane the lane on it ("" for a whole
	// GPU).
	GPU       string  `json:"gpu"`
	Lane      string  `json:"lane,omitempty"`
	Instance  string  `json:"instance"`
	MemoryMiB uint64  `json:"memory_mib"`
	Share     float64 `json:"gpu_share"`
	Healthy   bool    `json:"healthy"`
	Health    string  `json:"health,omitempty"`
	AllocID   string  `json:"alloc_id,omitempty"`
	Job       string  `json:"job,omitempty"`
	Task      string  `json:"task,omitempty"`
	// TaskState is what the caravan driver last said of the task in the
	// lane: "running", "suspended" (frozen while another task has its
	// turn) or "checkpointed" (suspended with its GPU state saved to host
	// memory); empty when the driver has said neither.
	TaskState string `json:"task_state,omitempty"`
	// MemoryUsedMiB is the GPU memory the instance's processes use, from
	// the device plugin's statistics; nil when not read.
	MemoryUsedMiB *uint64 `json:"memory_used_mib,omitempty"`
}

// Lanes lists every device instance of nodes with the live allocation
// holding it, sorted by node and instance.
func Lanes(nodes []*api.NodeListStub, allocs []*api.AllocationListStub) []Lane {
	type holder struct{ alloc, job, task, state string }
	held := map[string]holder{} // node/instance → holder
	for _, a := range allocs {
		if a.ClientStatus != "running" && a.ClientStatus != "pending" || a.AllocatedResources == nil {
			continue
		}
		for name, t := range a.AllocatedResources.Tasks {
			if t == nil {
				continue
			}
			state := taskLaneState(a.TaskStates[name])
			for _, d := range t.Devices {
				for _, id := range d.DeviceIDs {
					held[a.NodeID+"/"+id] = holder{a.ID, Key(orDefault(a.Namespace), a.JobID), name, state}
				}
			}
		}
	}
	var rows []Lane
	for _, stub := range nodes {
		n := NodeFrom(stub)
		for _, g := range n.GPUs {
			for _, in := range g.Instances {
				h := held[n.ID+"/"+in.ID]
				gpu, lane := in.ID, ""
				if _, ok := reservation.LaneOf(in.ID); ok {
					var rest string
					gpu, rest, _ = strings.Cut(in.ID, ":lane")
					lane = "lane" + strings.SplitN(rest, ":", 2)[0]
				}
				rows = append(rows, Lane{Node: n.Name, NodeID: n.ID, Group: g.Name, Model: g.Model, GPU: gpu, Lane: lane,
					Instance: in.ID, MemoryMiB: g.MemoryMiB, Share: g.Share, Healthy: in.Healthy, Health: in.Health,
					AllocID: h.alloc, Job: h.job, Task: h.task, TaskState: h.state})
			}
		}
	}
	sort.SliceStable(rows, func(i, j int) bool {
		if rows[i].Node != rows[j].Node {
			return rows[i].Node < rows[j].Node
		}
		return rows[i].Instance < rows[j].Instance
	})
	return rows
}

// taskLaneState reads the caravan driver's latest lane event of a task:
// it says "suspended in …" (with "checkpointed PIDs" when it saved the GPU
// state), "resumed in …", or "released in …" for a task that stays
// stopped until its other lanes give it a turn.
func taskLaneState(ts *api.TaskState) string {
	if ts == nil || ts.State != "running" {
		return ""
	}
	for i := len(ts.Events) - 1; i >= 0; i-- {
		e := ts.Events[i]
		if e == nil {
			continue
		}
		msg := e.DriverMessage
		if msg == "" {
			msg = e.DisplayMessage
		}
		switch {
		case strings.HasPrefix(msg, "suspended in ") && strings.Contains(msg, "checkpointed PIDs"):
			return "checkpointed"
		case strings.HasPrefix(msg, "suspended in "), strings.HasPrefix(msg, "released in "):
			return "suspended"
		case strings.HasPrefix(msg, "resumed in "):
			return "running"
		}
	}
	return "running"
}

func orDefault(ns string) string {
	if ns == "" {
		return "default"
	}
	return ns
}
