// Package switcher suspends and resumes a task so that tasks sharing a lane
// can take turns: its processes are frozen (through the task's cgroup, or
// with SIGSTOP where it has none), and with cuda-checkpoint, where the NVIDIA
// driver supports it, the GPU memory first moves to host memory so that the
// GPU is freed.
package switcher

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
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
	// Suspend stops the task; gpuPIDs are its processes that hold GPU
	// memory.
	Suspend(ctx context.Context, procs Freezer, gpuPIDs []int) error
	// Resume undoes Suspend.
	Resume(ctx context.Context, procs Freezer, gpuPIDs []int) error
}

// Freeze only freezes the task's processes. Their GPU memory stays
// allocated while the task is suspended.
type Freeze struct{}

func (Freeze) Name() string { return "freeze" }

func (Freeze) Suspend(ctx context.Context, procs Freezer, _ []int) error { return procs.Freeze(ctx) }

func (Freeze) Resume(ctx context.Context, procs Freezer, _ []int) error { return procs.Thaw(ctx) }

// CUDACheckpoint toggles the CUDA state of every GPU process with NVIDIA's
// cuda-checkpoint utility (driver 550 or later) and then freezes the task,
// so that a suspended task holds no GPU memory. The toggle needs the process
// running, so it comes before the freeze and after the thaw.
type CUDACheckpoint struct {
	Path    string
	Timeout time.Duration
}

func (CUDACheckpoint) Name() string { return "cuda-checkpoint" }

func (c CUDACheckpoint) Suspend(ctx context.Context, procs Freezer, gpuPIDs []int) error {
	for _, pid := range gpuPIDs {
		if err := c.toggle(ctx, pid); err != nil {
			return err
		}
	}
	return procs.Freeze(ctx)
}

func (c CUDACheckpoint) Resume(ctx context.Context, procs Freezer, gpuPIDs []int) error {
	if err := procs.Thaw(ctx); err != nil {
		return err
	}
	for _, pid := range gpuPIDs {
		if err := c.toggle(ctx, pid); err != nil {
			return err
		}
	}
	return nil
}

func (c CUDACheckpoint) toggle(ctx context.Context, pid int) error {
	timeout := c.Timeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, c.Path, "--toggle", "--pid", strconv.Itoa(pid)).CombinedOutput()
	if err != nil {
		return fmt.Errorf("cuda-checkpoint --toggle --pid %d: %v: %s", pid, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Choice is the mechanism chosen for a node and why.
type Choice struct {
	Mechanism Mechanism
	Reason    string
}

// Select picks the mechanism. want is "auto", "freeze" ("sigstop" is its
// former name) or "cuda-checkpoint"; path is the configured cuda-checkpoint binary (found on
// PATH when empty); realGPU is false on the simulated backend, where there
// is no CUDA state to move; driverVersion is the NVIDIA driver's version.
func Select(want, path string, realGPU bool, driverVersion string) (Choice, error) {
	if want == "freeze" || want == "sigstop" {
		return Choice{Freeze{}, "switch_mechanism = \"" + want + "\""}, nil
	}
	bin, lookErr := findCheckpoint(path)
	usable := lookErr == nil && realGPU && driverAtLeast(driverVersion, 550)
	if want == "cuda-checkpoint" {
		if !usable {
			return Choice{}, fmt.Errorf("switch_mechanism: cuda-checkpoint requested but unusable here (%s)", whyNot(lookErr, realGPU, driverVersion))
		}
		return Choice{CUDACheckpoint{Path: bin}, "switch_mechanism = \"cuda-checkpoint\""}, nil
	}
	if usable {
		return Choice{CUDACheckpoint{Path: bin}, "cuda-checkpoint found at " + bin + " with driver " + driverVersion}, nil
	}
	return Choice{Freeze{}, "cuda-checkpoint unusable (" + whyNot(lookErr, realGPU, driverVersion) + "); freezing tasks only"}, nil
}

func findCheckpoint(path string) (string, error) {
	if path != "" {
		if st, err := os.Stat(path); err != nil {
			return "", err
		} else if st.Mode()&0o111 == 0 {
			return "", fmt.Errorf("%s is not executable", path)
		}
		return path, nil
	}
	return exec.LookPath("cuda-checkpoint")
}

func whyNot(lookErr error, realGPU bool, driverVersion string) string {
	switch {
	case lookErr != nil:
		return "binary not found: " + lookErr.Error()
	case !realGPU:
		return "the GPU backend is simulated"
	default:
		return "NVIDIA driver " + driverVersion + " is older than 550"
	}
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
