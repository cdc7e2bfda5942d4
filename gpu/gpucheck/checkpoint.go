package gpucheck

// This file checks, on a real GPU, checkpoints of a process's GPU memory and what they leave.

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/caravan-gpu/caravan/gpu"
	"github.com/caravan-gpu/caravan/gpu/nvml"
)

// checkpointRefusals measures what the simulated backend assumes a
// checkpoint refuses: a stopped process (which is why the driver
// checkpoints before it freezes), a second checkpoint, and a process with
// a CUDA context but no allocation.
func (r *run) checkpointRefusals() {
	ck := r.preferredCheckpointer()
	if ck == nil {
		r.add("checkpoint refusals", "unavailable", "no way to checkpoint here")
		return
	}
	idle, err := r.start(nil, "-mib", "0", "-hold", "2m")
	if err != nil {
		r.add("checkpoint of a process with no allocation", "error", err.Error())
	} else {
		err = r.checkpoint(ck, idle.pid())
		result := "refused"
		if err == nil {
			result = "done"
			err = r.restore(ck, idle.pid())
		}
		r.add("checkpoint of a process with no allocation", result, fmt.Sprintf("a CUDA context and no cuMemAlloc: %v", err))
		idle.stop()
	}

	if c, err := r.start(nil, "-mib", "1024", "-hold", "2m"); err != nil {
		r.add("second checkpoint", "error", err.Error())
	} else if err := r.checkpoint(ck, c.pid()); err != nil {
		r.add("second checkpoint", "error", "first checkpoint: "+err.Error())
		c.stop()
	} else {
		err := r.checkpoint(ck, c.pid())
		result := "refused"
		if err == nil {
			result = "accepted"
		}
		r.add("second checkpoint", result, fmt.Sprintf("%v; restore after: %v", err, r.restore(ck, c.pid())))
		c.stop()
	}

	// Last: a lock that never returns may leave libcuda's checkpoint API
	// busy in this process.
	c, err := r.start(nil, "-mib", "1024", "-hold", "2m")
	if err != nil {
		r.add("checkpoint of a stopped process", "error", err.Error())
		return
	}
	defer c.stop()
	_ = syscall.Kill(c.pid(), syscall.SIGSTOP)
	waitState(c.pid(), true)
	const lockTimeout = 10 * time.Second
	start := time.Now()
	_, err = boundedFor(r, lockTimeout, 10*time.Second, "checkpoint", func(ctx context.Context) (struct{}, error) {
		return struct{}{}, ck.Checkpoint(ctx, c.pid())
	})
	took := time.Since(start)
	_ = syscall.Kill(c.pid(), syscall.SIGCONT)
	waitState(c.pid(), false)
	if err != nil {
		r.add("checkpoint of a stopped process", "refused", fmt.Sprintf("lock timeout %s, answered after %s: %v", lockTimeout, took.Round(time.Millisecond), err))
	} else {
		r.add("checkpoint of a stopped process", "done", fmt.Sprintf("in %s; restore once running: %v", took.Round(time.Millisecond), r.restore(ck, c.pid())))
	}
}

// preferredCheckpointer is the driver API where libcuda has it, else the
// utility.
func (r *run) preferredCheckpointer() gpu.Checkpointer {
	ckpts := r.checkpointers()
	for _, name := range []string{"driver API", "cuda-checkpoint"} {
		if c, ok := ckpts[name]; ok {
			return c
		}
	}
	return nil
}

func (r *run) checkpoint(ck gpu.Checkpointer, pid int) error {
	_, err := bounded(r, "checkpoint", func(ctx context.Context) (struct{}, error) { return struct{}{}, ck.Checkpoint(ctx, pid) })
	return err
}

func (r *run) restore(ck gpu.Checkpointer, pid int) error {
	_, err := bounded(r, "restore", func(ctx context.Context) (struct{}, error) { return struct{}{}, ck.Restore(ctx, pid) })
	return err
}

func (r *run) checkpointState(ck gpu.Checkpointer, pid int) (gpu.CheckpointState, error) {
	return bounded(r, "checkpoint state", func(ctx context.Context) (gpu.CheckpointState, error) { return ck.CheckpointState(ctx, pid) })
}

// checkpointers are the ways this host checkpoints: the driver API where
// libcuda has it, and the cuda-checkpoint utility where it is installed.
func (r *run) checkpointers() map[string]gpu.Checkpointer {
	out := map[string]gpu.Checkpointer{}
	r.backend.EnableCheckpoint(r.opts.CheckpointCLI)
	if r.backend.CheckpointMechanism() == "cuda-driver-api" {
		out["driver API"] = r.backend
	}
	path := r.opts.CheckpointCLI
	if path == "" {
		path, _ = exec.LookPath("cuda-checkpoint")
	}
	if path != "" {
		out["cuda-checkpoint"] = nvml.DetectCLI(path)
	}
	return out
}

func (r *run) checkpoints() {
	ckpts := r.checkpointers()
	if len(ckpts) == 0 {
		r.add("checkpoint and restore", "unavailable", "neither libcuda's checkpoint API nor cuda-checkpoint: "+r.backend.CheckpointUnavailable())
		return
	}
	for _, name := range []string{"driver API", "cuda-checkpoint"} {
		ck, ok := ckpts[name]
		if !ok {
			continue
		}
		for _, gib := range r.opts.SizesGiB {
			check := fmt.Sprintf("checkpoint / restore %d GiB (%s)", gib, name)
			if gib*1024 > r.freeMiB()*8/10 {
				r.add(check, "skipped", fmt.Sprintf("%d MiB free", r.freeMiB()))
				continue
			}
			c, err := r.start(nil, "-mib", strconv.FormatUint(gib*1024, 10), "-hold", "5m")
			if err != nil {
				r.add(check, "error", err.Error())
				continue
			}
			start := time.Now()
			err = r.checkpoint(ck, c.pid())
			ckpt := time.Since(start)
			if err != nil {
				r.add(check, "error", "checkpoint: "+err.Error())
				c.stop()
				continue
			}
			_, stillListed := r.listedNow(c.pid())
			start = time.Now()
			err = r.restore(ck, c.pid())
			restore := time.Since(start)
			detail := fmt.Sprintf("listed by NVML while checkpointed: %v", stillListed)
			if err != nil {
				detail += "; restore: " + err.Error()
			}
			r.add(check, fmt.Sprintf("%s / %s", ckpt.Round(time.Millisecond), restore.Round(time.Millisecond)), detail)
			c.stop()
		}
	}
}

func (r *run) restoreWithoutRoom() {
	const check = "restore when its memory does not fit"
	ck := r.preferredCheckpointer()
	if ck == nil {
		r.add(check, "unavailable", "no way to checkpoint here")
		return
	}
	quarter := r.gpu.MemoryMiB / 4
	a, err := r.start(nil, "-mib", strconv.FormatUint(quarter, 10), "-hold", "5m")
	if err != nil {
		r.add(check, "error", err.Error())
		return
	}
	defer a.stop()
	if err := r.checkpoint(ck, a.pid()); err != nil {
		r.add(check, "error", "checkpoint: "+err.Error())
		return
	}
	// Leave less free than the checkpointed process needs.
	fill := r.freeMiB() - quarter/2
	b, err := r.start(nil, "-mib", strconv.FormatUint(fill, 10), "-hold", "5m")
	if err != nil {
		r.add(check, "error", "fill: "+err.Error())
		return
	}
	restoreErr := r.restore(ck, a.pid())
	state, stateErr := r.checkpointState(ck, a.pid())
	b.stop()
	again := r.restore(ck, a.pid())
	detail := fmt.Sprintf("%d MiB checkpointed, %d MiB free: restore error %v; state after %v (%v); restore once the memory is free: %v",
		quarter, quarter/2, restoreErr, state, stateErr, again)
	result := "fails, recoverable"
	switch {
	case restoreErr == nil:
		result = "succeeded"
	case again != nil:
		result = "fails, stuck"
	}
	r.add(check, result, detail)
}
