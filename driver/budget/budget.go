// Package budget turns a task's grants and config into GPU-memory budgets,
// the environment that announces them (MPS client limits and framework
// hints), and the check the watchdog runs against the backend's per-process
// accounting.
package budget

import (
	"fmt"
	"sort"
	"strings"

	"github.com/caravan-gpu/caravan/gpu/reservation"
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
	// Processes is how many processes of the task may hold memory on one
	// GPU at once (gpu_processes; 0 reads as 1). Each may hold an equal
	// share of the GPU's budget: the GPU records a peak per process and
	// MPS limits each client, so only per-process shares whose sum is the
	// budget keep the task within it at every moment.
	Processes int
}

// Enforced reports whether there is anything to watch.
func (b Budget) Enforced() bool { return len(b.GPUs) > 0 }

// ProcessCount is the number of processes the budget is shared among.
func (b Budget) ProcessCount() int { return max(b.Processes, 1) }

// ShareMiB is what one process may hold of limitMiB, a GPU's budget.
func (b Budget) ShareMiB(limitMiB uint64) uint64 {
	return limitMiB / uint64(b.ProcessCount())
}

// MaxProcesses bounds gpu_processes: MPS serves at most 48 clients per GPU
// before Volta, and a larger figure is more likely a typo than a plan.
const MaxProcesses = 48

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
	if err := OneInstancePerGPU(grants); err != nil {
		return Budget{}, err
	}
	sorted := append([]reservation.Grant(nil), grants...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].GPUUUID < sorted[j].GPUUUID })
	for _, grant := range sorted {
		g := GPU{UUID: grant.GPUUUID, Lane: grant.Lane, Slots: grant.Slots, LimitMiB: grant.MemoryMiB, SharePercent: min(grant.SharePercent, 100)}
		if taskLimitMiB > 0 {
			if taskLimitMiB > g.LimitMiB {
				return Budget{}, fmt.Errorf("gpu_memory: %d MiB is more than the %d MiB granted on %s; it may only lower the budget", taskLimitMiB, g.LimitMiB, g.UUID)
			}
			g.LimitMiB = taskLimitMiB
		}
		b.GPUs = append(b.GPUs, g)
	}
	return b, nil
}

// OneInstancePerGPU refuses grants that put two instances on one GPU, as
// two device blocks of one task can: one process cannot keep two budgets
// or two lanes' turns apart on one GPU.
func OneInstancePerGPU(grants []reservation.Grant) error {
	byGPU := map[string][]string{}
	for _, g := range grants {
		byGPU[g.GPUUUID] = append(byGPU[g.GPUUUID], g.InstanceID)
	}
	gpus := make([]string, 0, len(byGPU))
	for uuid, ids := range byGPU {
		if len(ids) > 1 {
			gpus = append(gpus, uuid)
		}
	}
	if len(gpus) == 0 {
		return nil
	}
	sort.Strings(gpus)
	ids := byGPU[gpus[0]]
	sort.Strings(ids)
	return fmt.Errorf("device request: instances %s are all on GPU %s; a task may hold one instance per GPU (ask for count = N in one device block, which gets N distinct GPUs, or lower the count of one of the blocks)",
		strings.Join(ids, ", "), gpus[0])
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
