package plugin

// This file holds what a task is given: its budget, lanes and iteration file.

import (
	"fmt"
	"path/filepath"

	"github.com/hashicorp/nomad/helper/users/dynamic"
	"github.com/hashicorp/nomad/plugins/drivers"

	"github.com/caravan-gpu/caravan/driver/budget"
	"github.com/caravan-gpu/caravan/driver/lane"
	"github.com/caravan-gpu/caravan/driver/task"
	"github.com/caravan-gpu/caravan/gpu"
	"github.com/caravan-gpu/caravan/gpu/reservation"
	"github.com/caravan-gpu/caravan/internal/safefile"
)

// planSpec decides a task's budget and lane from its grants (read from the
// device env only, which a job cannot set) and its config.
func planSpec(s *settings, cfg *drivers.TaskConfig, tc TaskConfig) (task.Spec, []reservation.Grant, error) {
	grants, err := reservation.FromEnv(cfg.DeviceEnv)
	if err != nil {
		return task.Spec{}, nil, fmt.Errorf("device reservation: %w", err)
	}
	var limit uint64
	if tc.GPUMemory != "" {
		if limit, err = gpu.ParseMemoryMiB(tc.GPUMemory); err != nil {
			return task.Spec{}, nil, fmt.Errorf("gpu_memory: %w", err)
		}
		if limit == 0 {
			return task.Spec{}, nil, fmt.Errorf("gpu_memory: must be more than 0")
		}
	}
	policy := s.BudgetPolicy
	if tc.GPUMemoryPolicy != "" {
		policy = tc.GPUMemoryPolicy
	}
	if _, err := parsePolicy("gpu_memory_policy", policy); err != nil {
		return task.Spec{}, nil, err
	}
	b, err := budget.Plan(grants, limit, budget.Policy(policy))
	if err != nil {
		return task.Spec{}, nil, err
	}
	if tc.GPUProcesses < 1 || tc.GPUProcesses > budget.MaxProcesses {
		return task.Spec{}, nil, fmt.Errorf("gpu_processes: must be from 1 to %d, got %d", budget.MaxProcesses, tc.GPUProcesses)
	}
	b.Processes = tc.GPUProcesses
	profile, err := tc.MemoryProfile.parse()
	if err != nil {
		return task.Spec{}, nil, err
	}
	spec := task.Spec{Budget: b}
	for _, g := range grants {
		if g.Lane < 0 {
			continue
		}
		laneMiB := g.MemoryMiB
		if profile.Known && profile.PersistentMiB+profile.EphemeralMiB > laneMiB {
			return task.Spec{}, nil, fmt.Errorf("memory_profile: persistent + ephemeral (%d MiB) does not fit in lane %s:%d of %d MiB",
				profile.PersistentMiB+profile.EphemeralMiB, g.GPUUUID, g.Lane, laneMiB)
		}
		// A task on several GPUs shares a lane on each (budget.Plan has
		// refused two instances on one GPU).
		spec.Lanes = append(spec.Lanes, task.LaneSpec{Key: lane.Key{GPU: g.GPUUUID, Lane: g.Lane}, MemoryMiB: laneMiB, Profile: profile})
	}
	return spec, grants, nil
}

func (p MemoryProfile) parse() (lane.Profile, error) {
	var out lane.Profile
	if p.Persistent == "" && p.Ephemeral == "" {
		return out, nil
	}
	var err error
	if p.Persistent != "" {
		if out.PersistentMiB, err = gpu.ParseMemoryMiB(p.Persistent); err != nil {
			return out, fmt.Errorf("memory_profile.persistent: %w", err)
		}
	}
	if p.Ephemeral != "" {
		if out.EphemeralMiB, err = gpu.ParseMemoryMiB(p.Ephemeral); err != nil {
			return out, fmt.Errorf("memory_profile.ephemeral: %w", err)
		}
	}
	if out.PersistentMiB+out.EphemeralMiB == 0 {
		// A task that declares it needs nothing would get no share of a
		// lane to be held to.
		return out, fmt.Errorf("memory_profile: persistent + ephemeral must be at least 1 MiB")
	}
	out.Known = true
	return out, nil
}

// iterationFileName is the task's iteration file, in its task directory.
const iterationFileName = "caravan-iterations"

// prepareIterationFile puts a fresh iteration file in the task directory,
// owned by the task's user so that the job can append to it. The task can
// write to that directory and may have left anything at the name, a
// symlink to a root-owned file among them: the old entry is unlinked,
// never opened (driver/safefile).
func prepareIterationFile(cfg *drivers.TaskConfig, username string) (string, error) {
	uid, gid := 0, 0
	if u, g, _, err := dynamic.LookupUser(username); err == nil {
		uid, gid = u, g
	}
	dir, err := safefile.OpenDir(cfg.TaskDir().Dir)
	if err != nil {
		return "", err
	}
	defer dir.Close()
	if err := safefile.CreateFresh(dir, iterationFileName, 0o644, uid, gid); err != nil {
		return "", err
	}
	return filepath.Join(cfg.TaskDir().Dir, iterationFileName), nil
}
