// Package switcher suspends and resumes a task so that tasks sharing a lane
// can take turns: its processes are frozen (through the task's cgroup, or
// with SIGSTOP where it has none), and with cuda-checkpoint, where the GPU
// backend can checkpoint, the GPU memory first moves to host memory so that
// the GPU is freed.
package switcher

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/caravan-gpu/caravan/driver/proctree"
	"github.com/caravan-gpu/caravan/gpu"
)

// Freezer stops and continues all of a task's processes at once.
type Freezer interface {
	// Method names how: "cgroup-v2", "cgroup-v1-freezer" or "signals".
	Method() string
	Freeze(ctx context.Context) error
	Thaw(ctx context.Context) error
}

// Mechanism suspends and resumes a task.
type Mechanism interface {
	// Name is "freeze" or "cuda-checkpoint".
	Name() string
	// Via says how the GPU state moves: the backend's checkpoint mechanism
	// ("cuda-driver-api", "cuda-checkpoint-cli", "sim"); empty for freeze.
	Via() string
	// Suspend stops the task; gpuPIDs are its processes that hold GPU
	// memory. It returns the processes whose GPU state it checkpointed. On
	// error it has undone exactly what it did: nothing stays checkpointed
	// or frozen.
	Suspend(ctx context.Context, procs Freezer, gpuPIDs []int) (checkpointed []int, err error)
	// Resume undoes Suspend, restoring exactly checkpointed. On error it
	// returns the processes still checkpointed, for a retry.
	Resume(ctx context.Context, procs Freezer, checkpointed []int) (left []int, err error)
}

// Freeze only freezes the task's processes. Their GPU memory stays
// allocated while the task is suspended.
type Freeze struct{}

func (Freeze) Name() string { return "freeze" }

func (Freeze) Via() string { return "" }

func (Freeze) Suspend(ctx context.Context, procs Freezer, _ []int) ([]int, error) {
	return nil, procs.Freeze(ctx)
}

func (Freeze) Resume(ctx context.Context, procs Freezer, checkpointed []int) ([]int, error) {
	return checkpointed, procs.Thaw(ctx)
}

// CUDACheckpoint moves the CUDA state of every GPU process to host memory
// through the GPU backend and then freezes the task, so that a suspended
// task holds no GPU memory. Checkpointing needs the process running, so it
// comes before the freeze and the restore after the thaw.
type CUDACheckpoint struct {
	GPU gpu.Checkpointer
}

func (CUDACheckpoint) Name() string { return "cuda-checkpoint" }

func (c CUDACheckpoint) Via() string { return c.GPU.CheckpointMechanism() }

func (c CUDACheckpoint) Suspend(ctx context.Context, procs Freezer, gpuPIDs []int) ([]int, error) {
	var done []int
	for _, pid := range gpuPIDs {
		// A process stopped by a signal (the task's own, say) holds a
		// checkpoint's lock for its whole timeout on the hardware, and the
		// lane with it; it is refused at once instead.
		if p, err := proctree.Read(pid); err == nil && (p.State == 'T' || p.State == 't') {
			return nil, errors.Join(fmt.Errorf("checkpoint pid %d: the process is stopped by a signal, and a checkpoint of it would wait out its lock timeout", pid), c.rollback(ctx, done))
		}
		if err := c.GPU.Checkpoint(ctx, pid); err != nil {
			return nil, errors.Join(fmt.Errorf("checkpoint pid %d: %w", pid, err), c.rollback(ctx, done))
		}
		done = append(done, pid)
	}
	if err := procs.Freeze(ctx); err != nil {
		// A partial freeze is thawed before the restores, which need the
		// processes running.
		return nil, errors.Join(fmt.Errorf("freeze: %w", err), procs.Thaw(ctx), c.rollback(ctx, done))
	}
	return done, nil
}

// ErrRollback is wrapped by a suspend whose undoing failed: some of the
// processes it checkpointed may still be.
var ErrRollback = errors.New("roll back")

// rollback restores the processes a failed suspend checkpointed, and only
// those.
func (c CUDACheckpoint) rollback(ctx context.Context, done []int) error {
	var errs []error
	for i := len(done) - 1; i >= 0; i-- {
		if err := c.GPU.Restore(ctx, done[i]); err != nil {
			errs = append(errs, fmt.Errorf("%w: restore pid %d: %w", ErrRollback, done[i], err))
		}
	}
	return errors.Join(errs...)
}

func (c CUDACheckpoint) Resume(ctx context.Context, procs Freezer, checkpointed []int) ([]int, error) {
	if err := procs.Thaw(ctx); err != nil {
		return checkpointed, fmt.Errorf("thaw: %w", err)
	}
	for i, pid := range checkpointed {
		if err := c.GPU.Restore(ctx, pid); err != nil {
			return append([]int(nil), checkpointed[i:]...), fmt.Errorf("restore pid %d: %w", pid, err)
		}
	}
	return nil, nil
}

// Choice is the mechanism chosen for a node and why.
type Choice struct {
	Mechanism Mechanism
	Reason    string
}

// Select picks the mechanism. want is "auto", "freeze" ("sigstop" is its
// former name) or "cuda-checkpoint"; backend is the GPU backend (nil when
// there is none), which checkpoints when it implements gpu.Checkpointer and
// can here; driverVersion is the NVIDIA driver's version (550 or later is
// needed).
func Select(want string, backend gpu.Backend, driverVersion string) (Choice, error) {
	if want == "freeze" || want == "sigstop" {
		return Choice{Freeze{}, "switch_mechanism = \"" + want + "\""}, nil
	}
	ckpt, why := checkpointer(backend, driverVersion)
	if want == "cuda-checkpoint" {
		if ckpt == nil {
			return Choice{}, fmt.Errorf("switch_mechanism: cuda-checkpoint requested but unusable here (%s)", why)
		}
		return Choice{CUDACheckpoint{GPU: ckpt}, "switch_mechanism = \"cuda-checkpoint\" via " + ckpt.CheckpointMechanism()}, nil
	}
	if ckpt != nil {
		return Choice{CUDACheckpoint{GPU: ckpt}, "cuda-checkpoint via " + ckpt.CheckpointMechanism() + " with driver " + driverVersion}, nil
	}
	return Choice{Freeze{}, "cuda-checkpoint unusable (" + why + "); freezing tasks only"}, nil
}

func checkpointer(backend gpu.Backend, driverVersion string) (gpu.Checkpointer, string) {
	if backend == nil {
		return nil, "no GPU backend"
	}
	ckpt, ok := backend.(gpu.Checkpointer)
	if !ok {
		return nil, "the " + backend.Name() + " backend cannot checkpoint"
	}
	if ckpt.CheckpointMechanism() == "" {
		return nil, ckpt.CheckpointUnavailable()
	}
	if !driverAtLeast(driverVersion, 550) {
		return nil, "NVIDIA driver " + driverVersion + " is older than 550"
	}
	return ckpt, ""
}

// driverAtLeast compares the major version of an NVIDIA driver string such
// as "550.54.15".
func driverAtLeast(version string, major int) bool {
	head, _, _ := strings.Cut(version, ".")
	v, err := strconv.Atoi(head)
	return err == nil && v >= major
}

// Timed runs op and returns how long it took.
func Timed(op func() error) (time.Duration, error) {
	start := time.Now()
	err := op()
	return time.Since(start), err
}
