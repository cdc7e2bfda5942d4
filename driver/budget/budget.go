// Package budget turns a task's grants and config into GPU-memory budgets,
// the environment that announces them (MPS client limits and framework
// hints), and the check the watchdog runs against the backend's per-process
// accounting.
package budget

import (
	"fmt"
	"sort"

	"github.com/caravan-gpu/caravan/device/reservation"
)

// Policy is what the watchdog does on a breach.
type Policy string

const (
	PolicyKill Policy = "kill"
	PolicyWarn Policy = "warn"
)

// AnyGPU is the UUID of a budget that applies on every GPU the task touches,
// used when the task has no grant but sets gpu_memory.
const AnyGPU = "*"

// GPU is the budget on one GPU.
type GPU struct {
	UUID     string
	LimitMiB uint64
	// SharePercent is the compute share granted on this GPU (0 = unknown).
	SharePercent int
	// Lane and Slots describe the lane the budget comes from; Lane is -1 for
	// a whole GPU or MIG instance.
	Lane, Slots int
}

// Budget is every GPU budget of a task and the policy that enforces them.
type Budget struct {
	GPUs   []GPU
	Policy Policy
}

// Enforced reports whether there is anything to watch.
func (b Budget) Enforced() bool { return len(b.GPUs) > 0 }

// Plan builds a budget from the grants caravan-device made and the task's
// own gpu_memory (0 when unset). gpu_memory may lower a granted budget but
// never raise it.
func Plan(grants []reservation.Grant, taskLimitMiB uint64, policy Policy) (Budget, error) {
	b := Budget{Policy: policy}
	if len(grants) == 0 {
		if taskLimitMiB > 0 {
			b.GPUs = []GPU{{UUID: AnyGPU, LimitMiB: taskLimitMiB, Lane: -1, Slots: 1}}
		}
		return b, nil
	}
	byUUID := map[string]*GPU{}
	var order []string
	for _, g := range grants {
		cur, ok := byUUID[g.GPUUUID]
		if !ok {
			cur = &GPU{UUID: g.GPUUUID, Lane: g.Lane, Slots: g.Slots}
			byUUID[g.GPUUUID] = cur
			order = append(order, g.GPUUUID)
		}
		cur.LimitMiB += g.MemoryMiB
		cur.SharePercent += g.SharePercent
		if cur.SharePercent > 100 {
			cur.SharePercent = 100
		}
	}
	sort.Strings(order)
	for _, uuid := range order {
		g := *byUUID[uuid]
		if taskLimitMiB > 0 {
			if taskLimitMiB > g.LimitMiB {
				return Budget{}, fmt.Errorf("gpu_memory: %d MiB is more than the %d MiB granted on %s; it may only lower the budget", taskLimitMiB, g.LimitMiB, uuid)
			}
			g.LimitMiB = taskLimitMiB
		}
		b.GPUs = append(b.GPUs, g)
	}
	return b, nil
}

// For returns the budget that applies on uuid.
func (b Budget) For(uuid string) (GPU, bool) {
	for _, g := range b.GPUs {
		if g.UUID == uuid || g.UUID == AnyGPU {
			return g, true
		}
	}
	return GPU{}, false
}
