package service

import (
	"encoding/json"

	"github.com/caravan-gpu/caravan/planner/policy"
)

// finishedJob is one completed job in the history kept in Consul KV: its
// service in GPU-seconds, for 2D-Gittins, and its group and GPU count, for
// the predict order.
type finishedJob struct {
	GPUSeconds float64 `json:"gpu_seconds"`
	Group      string  `json:"group,omitempty"`
	GPUs       int     `json:"gpus,omitempty"`
}

// UnmarshalJSON also reads a bare number, the GPU-seconds alone: the
// history's earlier form, and the sample caravan replay writes.
func (f *finishedJob) UnmarshalJSON(data []byte) error {
	var size float64
	if err := json.Unmarshal(data, &size); err == nil {
		*f = finishedJob{GPUSeconds: size}
		return nil
	}
	type plain finishedJob
	return json.Unmarshal(data, (*plain)(f))
}

// sizesOf is the GPU-seconds of each finished job.
func sizesOf(jobs []finishedJob) []float64 {
	out := make([]float64, len(jobs))
	for i, j := range jobs {
		out[i] = j.GPUSeconds
	}
	return out
}

// historyOf indexes finished jobs, oldest first, for the predict order.
func historyOf(jobs []finishedJob) *policy.History {
	h := policy.NewHistory(0)
	for _, j := range jobs {
		h.Add(j.Group, j.GPUs, j.GPUSeconds)
	}
	return h
}
