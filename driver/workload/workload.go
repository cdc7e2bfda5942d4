// Package workload is a synthetic deep-learning training job for tests, e2e
// runs and demos. Each iteration holds persistent memory (weights, optimizer
// state) for the whole run and grows and frees ephemeral memory (activations)
// in the cyclic pattern Zico (ATC'21) describes: memory climbs through the
// forward pass, peaks, and falls back through the backward pass. On the
// simulated backend it records its memory with sim.SetProcessMemory.
//
// Progress is written as JSON lines on stdout and, when set, to a progress
// file that is rewritten atomically after every iteration:
//
//	{"iteration":12,"iterations":100,"its_per_sec":9.8,"gpu_memory_mib":5120,"elapsed_s":1.22,"done":false}
package workload

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/caravan-gpu/caravan/device/gpu/sim"
	"github.com/caravan-gpu/caravan/device/reservation"
)

// Mode is how the workload behaves.
type Mode string

const (
	ModeNormal       Mode = "normal"
	ModeExceed       Mode = "exceed"         // allocates past its budget after a few iterations
	ModeLeak         Mode = "leak"           // never frees part of each iteration's memory
	ModeCrash        Mode = "crash"          // exits 1 mid-run
	ModeIgnoreSignal Mode = "ignore-signals" // ignores SIGTERM and SIGINT
)

// Config shapes a run.
type Config struct {
	Iterations    int
	IterationTime time.Duration
	PersistentMiB uint64
	EphemeralMiB  uint64
	// Steps is how many steps the ephemeral ramp has in each pass.
	Steps int
	Mode  Mode
	// ExceedAfter is the iteration at which exceed and crash modes act.
	ExceedAfter int
	// LeakMiB is leaked per iteration in leak mode.
	LeakMiB uint64

	// GPU is where memory is recorded; empty runs without a GPU.
	GPU string
	// BudgetMiB is the budget the driver announced (0 when unknown).
	BudgetMiB uint64
	// SimStateDir is the sim backend's state directory, when simulated.
	SimStateDir  string
	ProgressFile string
	// IterationFile is where iteration boundaries are marked.
	IterationFile string
}

// Progress is one JSON line of progress.
type Progress struct {
	Iteration  int     `json:"iteration"`
	Iterations int     `json:"iterations"`
	ItsPerSec  float64 `json:"its_per_sec"`
	GPUMemory  uint64  `json:"gpu_memory_mib"`
	Elapsed    float64 `json:"elapsed_s"`
	Done       bool    `json:"done"`
	Event      string  `json:"event,omitempty"`
}

// FromEnv fills the GPU-side fields from the caravan env contract.
func (c *Config) FromEnv(env map[string]string) error {
	grants, err := reservation.FromEnv(env)
	if err != nil {
		return err
	}
	if len(grants) > 0 && c.GPU == "" {
		c.GPU = grants[0].GPUUUID
	}
	if c.GPU == "" {
		if v := env["CUDA_VISIBLE_DEVICES"]; v != "" {
			c.GPU, _, _ = strings.Cut(v, ",")
		}
	}
	if v := env["CARAVAN_GPU_MEMORY_MIB"]; v != "" {
		_, _ = fmt.Sscan(v, &c.BudgetMiB)
	}
	if c.SimStateDir == "" {
		c.SimStateDir = env["CARAVAN_SIM_STATE_DIR"]
	}
	if c.IterationFile == "" {
		c.IterationFile = env["CARAVAN_ITERATION_FILE"]
	}
	return nil
}

// Validate names the first bad field.
func (c Config) Validate() error {
	switch {
	case c.Iterations < 1:
		return errors.New("iterations: must be at least 1")
	case c.IterationTime <= 0:
		return errors.New("iteration-time: must be positive")
	case c.Steps < 1:
		return errors.New("steps: must be at least 1")
	}
	switch c.Mode {
	case ModeNormal, ModeExceed, ModeLeak, ModeCrash, ModeIgnoreSignal:
	default:
		return fmt.Errorf("mode: unknown mode %q", c.Mode)
	}
	return nil
}

// Run runs the workload, writing progress to out.
func Run(ctx context.Context, c Config, out io.Writer) error {
	if err := c.Validate(); err != nil {
		return err
	}
	if c.Mode == ModeIgnoreSignal {
		signal.Ignore(syscall.SIGTERM, syscall.SIGINT)
	}
	pid := os.Getpid()
	mem := &recorder{cfg: c, pid: pid}
	defer mem.release()
	enc := json.NewEncoder(out)
	start := time.Now()
	var leaked uint64
	mem.set(c.PersistentMiB)
	step := c.IterationTime / time.Duration(2*c.Steps)
	for it := 1; it <= c.Iterations; it++ {
		// Forward: activations pile up; backward: they are freed.
		for s := 1; s <= c.Steps; s++ {
			if err := sleep(ctx, step); err != nil {
				return err
			}
			mem.set(c.PersistentMiB + leaked + c.EphemeralMiB*uint64(s)/uint64(c.Steps))
		}
		if c.Mode == ModeExceed && it >= c.ExceedAfter {
			over := c.BudgetMiB + c.BudgetMiB/4 + 1
			if c.BudgetMiB == 0 {
				over = 2 * (c.PersistentMiB + c.EphemeralMiB + 1)
			}
			mem.set(over)
			_ = enc.Encode(Progress{Iteration: it, Iterations: c.Iterations, GPUMemory: over, Event: "exceeding budget"})
		}
		for s := c.Steps - 1; s >= 0; s-- {
			if err := sleep(ctx, step); err != nil {
				return err
			}
			mem.set(c.PersistentMiB + leaked + c.EphemeralMiB*uint64(s)/uint64(c.Steps))
		}
		if c.Mode == ModeLeak {
			leaked += c.LeakMiB
			mem.set(c.PersistentMiB + leaked)
		}
		markIteration(c.IterationFile, it)
		elapsed := time.Since(start).Seconds()
		p := Progress{Iteration: it, Iterations: c.Iterations, ItsPerSec: float64(it) / elapsed,
			GPUMemory: mem.current, Elapsed: elapsed, Done: it == c.Iterations}
		_ = enc.Encode(p)
		writeProgress(c.ProgressFile, p)
		if c.Mode == ModeCrash && it >= c.ExceedAfter {
			return fmt.Errorf("crash mode: failing at iteration %d", it)
		}
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

type recorder struct {
	cfg     Config
	pid     int
	current uint64
}

func (r *recorder) set(mib uint64) {
	r.current = mib
	if r.cfg.GPU == "" || r.cfg.SimStateDir == "" {
		return
	}
	_ = sim.SetProcessMemory(r.cfg.SimStateDir, r.cfg.GPU, r.pid, mib)
}

func (r *recorder) release() {
	if r.cfg.GPU != "" && r.cfg.SimStateDir != "" {
		_ = sim.ReleaseProcess(r.cfg.SimStateDir, r.cfg.GPU, r.pid)
	}
}

// markIteration appends one line per finished iteration, the caravan
// driver's cooperation protocol.
func markIteration(path string, it int) {
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return
	}
	fmt.Fprintf(f, "%d\n", it)
	f.Close()
}

func writeProgress(path string, p Progress) {
	if path == "" {
		return
	}
	data, _ := json.Marshal(p)
	tmp, err := os.CreateTemp(filepath.Dir(path), ".progress-")
	if err != nil {
		return
	}
	_, _ = tmp.Write(append(data, '\n'))
	tmp.Close()
	_ = os.Rename(tmp.Name(), path)
}
