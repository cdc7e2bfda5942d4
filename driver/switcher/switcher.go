// Package switcher suspends and resumes a task's processes so that tasks
// sharing a lane can take turns: with cuda-checkpoint where the NVIDIA driver
// supports it (the GPU memory moves to host memory and the GPU is freed),
// else with SIGSTOP and SIGCONT.
package switcher

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Mechanism suspends and resumes processes.
type Mechanism interface {
	// Name is "sigstop" or "cuda-checkpoint".
	Name() string
	// Suspend stops pids; gpuPIDs are those holding GPU memory.
	Suspend(ctx context.Context, pids, gpuPIDs []int) error
	// Resume undoes Suspend.
	Resume(ctx context.Context, pids, gpuPIDs []int) error
}

// Signals suspends with SIGSTOP and resumes with SIGCONT. The GPU memory
// stays allocated while a task is stopped.
type Signals struct{}

func (Signals) Name() string { return "sigstop" }

func (Signals) Suspend(_ context.Context, pids, _ []int) error {
	return signalAll(pids, syscall.SIGSTOP)
}

func (Signals) Resume(_ context.Context, pids, _ []int) error {
	return signalAll(pids, syscall.SIGCONT)
}

// signalAll signals every pid; a process that has exited is not an error.
func signalAll(pids []int, sig syscall.Signal) error {
	var errs []error
	for _, pid := range pids {
		if err := syscall.Kill(pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("pid %d: %w", pid, err))
		}
	}
	return errors.Join(errs...)
}

// CUDACheckpoint toggles the CUDA state of every GPU process with NVIDIA's
// cuda-checkpoint utility (driver 550 or later) and stops the processes, so
// that a suspended task holds no GPU memory.
type CUDACheckpoint struct {
	Path    string
	Timeout time.Duration
}

func (CUDACheckpoint) Name() string { return "cuda-checkpoint" }

func (c CUDACheckpoint) Suspend(ctx context.Context, pids, gpuPIDs []int) error {
	for _, pid := range gpuPIDs {
		if err := c.toggle(ctx, pid); err != nil {
			return err
		}
	}
	return signalAll(pids, syscall.SIGSTOP)
}

func (c CUDACheckpoint) Resume(ctx context.Context, pids, gpuPIDs []int) error {
	if err := signalAll(pids, syscall.SIGCONT); err != nil {
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

// Select picks the mechanism. want is "auto", "sigstop" or
// "cuda-checkpoint"; path is the configured cuda-checkpoint binary (found on
// PATH when empty); realGPU is false on the simulated backend, where there
// is no CUDA state to move; driverVersion is the NVIDIA driver's version.
func Select(want, path string, realGPU bool, driverVersion string) (Choice, error) {
	if want == "sigstop" {
		return Choice{Signals{}, "switch_mechanism = \"sigstop\""}, nil
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
	return Choice{Signals{}, "cuda-checkpoint unusable (" + whyNot(lookErr, realGPU, driverVersion) + "); using SIGSTOP/SIGCONT"}, nil
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
