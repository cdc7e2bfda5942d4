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
//
// With a checkpoint file the run resumes: it reads the last finished
// iteration from the file at start, continues after it, and rewrites the
// file atomically after each iteration, so a job that is stopped and placed
// again keeps its progress (less the iteration it was in). The checkpoint
// has the progress line's format.
//
// A run can be faster or slower on some GPU models: Speed maps a model (as
// the driver names it in CARAVAN_GPU_MODEL) to a factor by which iterations
// go faster there.
package workload

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/caravan-gpu/caravan/driver/budget"
	"github.com/caravan-gpu/caravan/gpu/reservation"
	"github.com/caravan-gpu/caravan/gpu/sim"
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
	// ActWhen, when set, is a file that must exist before exceed and crash
	// modes act, so that a test decides the moment (after a restart, say)
	// rather than an iteration count that load can move.
	ActWhen string
	// LeakMiB is leaked per iteration in leak mode.
	LeakMiB uint64
	// SpikeTime, when set, is how long exceed mode holds its excess before
	// freeing it again, as a spike of activations that lasts milliseconds;
	// unset, the excess lasts through the backward pass's first step.
	SpikeTime time.Duration

	// GPU is where memory is recorded; empty runs without a GPU.
	GPU string
	// BudgetMiB is this process's share of the budget the driver announced
	// on GPU (0 when unknown).
	BudgetMiB uint64
	// MPSLimitMiB is the limit the process's own environment asks of MPS on
	// GPU (0: none). The limit it gets is its MPS server's, which this can
	// only lower, and none where no MPS daemon listens at MPSPipeDir.
	MPSLimitMiB uint64
	// MPSPipeDir is where the process looks for the MPS control daemon
	// (CUDA_MPS_PIPE_DIRECTORY); the default when empty.
	MPSPipeDir string
	// SimStateDir is the sim backend's state directory, when simulated.
	SimStateDir  string
	ProgressFile string
	// IterationFile is where iteration boundaries are marked.
	IterationFile string
	// Checkpoint, when set, is read at start to resume after the last
	// finished iteration and rewritten after each iteration.
	Checkpoint string
	// GangCheckpoints, when set, makes the run one worker of a synchronous
	// gang: the checkpoint files of every worker, Checkpoint among them.
	// The run resumes from the least advanced of them and makes no
	// progress until every worker has started (gang.go).
	GangCheckpoints []string

	// Speed is the factor by which an iteration is shorter on a GPU model:
	// IterationTime / Speed[GPUModel]. A model it does not name runs at the
	// smallest factor given; no factors at all means 1 everywhere.
	Speed map[string]float64
	// GPUModel is the model of the GPU the run holds (CARAVAN_GPU_MODEL).
	GPUModel string
	// SharedSpeed is the share of its speed the run keeps for each other
	// process that runs on its GPU, as two jobs on one GPU's lanes slow
	// each other: an iteration beside k of them takes 1 / SharedSpeed^k as
	// long. It is read at each iteration, from the simulated backend's
	// records (SimStateDir); 0 or 1, or a real GPU, leaves the speed alone.
	SharedSpeed float64
	// HostSpeed, when set, scales the speed by what the task's CPU and
	// memory allow (hostspeed.go); HostFactor is that scale, read from
	// the env by FromEnv.
	HostSpeed  *HostSpeed
	HostFactor float64
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
	// The budget of this GPU, where the task has several.
	if mib, err := budget.LimitFor(env, budget.PerGPUEnv, c.GPU); err != nil {
		return err
	} else if mib > 0 {
		c.BudgetMiB = mib
	}
	// Each of a task's gpu_processes may hold its share of the budget.
	if v := env[budget.ProcessesEnv]; v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return fmt.Errorf("%s: want a whole number of at least 1, got %q", budget.ProcessesEnv, v)
		}
		c.BudgetMiB /= uint64(n)
	}
	if c.MPSLimitMiB, err = budget.LimitFor(env, budget.MPSLimitEnv, c.GPU); err != nil {
		return err
	}
	if c.MPSPipeDir == "" {
		c.MPSPipeDir = env["CUDA_MPS_PIPE_DIRECTORY"]
	}
	if c.SimStateDir == "" {
		c.SimStateDir = env["CARAVAN_SIM_STATE_DIR"]
	}
	if c.IterationFile == "" {
		c.IterationFile = env["CARAVAN_ITERATION_FILE"]
	}
	if c.GPUModel == "" {
		c.GPUModel = env[budget.ModelEnv]
	}
	if c.HostSpeed != nil {
		cpu, mem, err := hostLimits(env)
		if err != nil {
			return err
		}
		if c.HostFactor, err = c.HostSpeed.Factor(cpu, mem); err != nil {
			return err
		}
		if !(c.HostFactor > 0) {
			return fmt.Errorf("host-speed: no training on %g MHz and %g MB (its profile's throughput there is 0)", cpu, mem)
		}
	}
	return nil
}

// SpeedFactor is the factor of c.GPUModel: its entry in Speed, else the
// smallest factor in Speed, else 1; times HostFactor where HostSpeed is set.
func (c Config) SpeedFactor() float64 {
	if c.HostSpeed != nil && c.HostFactor > 0 {
		return c.modelFactor() * c.HostFactor
	}
	return c.modelFactor()
}

func (c Config) modelFactor() float64 {
	if len(c.Speed) == 0 {
		return 1
	}
	if f, ok := c.Speed[c.GPUModel]; ok {
		return f
	}
	slowest := 0.0
	for _, f := range c.Speed {
		if slowest == 0 || f < slowest {
			slowest = f
		}
	}
	return slowest
}

// ParseSpeeds reads "MODEL=FACTOR,MODEL=FACTOR" (a model may hold spaces,
// not commas; the factor follows the last '='). Factors must be positive.
func ParseSpeeds(s string) (map[string]float64, error) {
	out := map[string]float64{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for _, part := range strings.Split(s, ",") {
		i := strings.LastIndex(part, "=")
		if i < 0 {
			return nil, fmt.Errorf("%q is not MODEL=FACTOR", part)
		}
		model := strings.TrimSpace(part[:i])
		f, err := strconv.ParseFloat(strings.TrimSpace(part[i+1:]), 64)
		switch {
		case model == "":
			return nil, fmt.Errorf("%q has no model", part)
		case err != nil || !(f > 0) || f > 1e9:
			return nil, fmt.Errorf("%q: factor must be a positive number", part)
		}
		if _, dup := out[model]; dup {
			return nil, fmt.Errorf("model %q given twice", model)
		}
		out[model] = f
	}
	return out, nil
}

// FormatSpeeds writes factors as ParseSpeeds reads them, sorted by model.
func FormatSpeeds(speeds map[string]float64) string {
	models := make([]string, 0, len(speeds))
	for m := range speeds {
		models = append(models, m)
	}
	sort.Strings(models)
	parts := make([]string, len(models))
	for i, m := range models {
		parts[i] = m + "=" + strconv.FormatFloat(speeds[m], 'g', -1, 64)
	}
	return strings.Join(parts, ",")
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
	case c.SpikeTime < 0:
		return errors.New("spike-time: must not be negative")
	}
	switch c.Mode {
	case ModeNormal, ModeExceed, ModeLeak, ModeCrash, ModeIgnoreSignal:
	default:
		return fmt.Errorf("mode: unknown mode %q", c.Mode)
	}
	if err := c.validateGang(); err != nil {
		return err
	}
	if !(c.SharedSpeed >= 0 && c.SharedSpeed <= 1) {
		return fmt.Errorf("shared-speed: must be in (0, 1], got %g", c.SharedSpeed)
	}
	for m, f := range c.Speed {
		if !(f > 0) {
			return fmt.Errorf("speed: factor of %q must be positive, got %g", m, f)
		}
	}
	return nil
}

// ReadCheckpoint returns the last finished iteration recorded in path: 0
// when the file does not exist yet.
func ReadCheckpoint(path string, iterations int) (int, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("checkpoint: %w", err)
	}
	var p Progress
	if err := json.Unmarshal(data, &p); err != nil {
		return 0, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	switch {
	case p.Iterations != iterations:
		return 0, fmt.Errorf("checkpoint %s is of a run of %d iterations, this one has %d", path, p.Iterations, iterations)
	case p.Iteration < 0 || p.Iteration > iterations:
		return 0, fmt.Errorf("checkpoint %s: iteration %d is outside 0..%d", path, p.Iteration, iterations)
	}
	return p.Iteration, nil
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
	mem := &recorder{ctx: ctx, cfg: c, pid: pid}
	defer mem.release()
	enc := json.NewEncoder(out)
	first := 1
	if c.Checkpoint != "" {
		// A gang's list holds the worker's own checkpoint (validateGang).
		var done int
		var err error
		if len(c.GangCheckpoints) > 0 {
			done, err = c.gangResume()
		} else {
			done, err = ReadCheckpoint(c.Checkpoint, c.Iterations)
		}
		if err != nil {
			return err
		}
		if done > 0 {
			_ = enc.Encode(Progress{Iteration: done, Iterations: c.Iterations, Done: done == c.Iterations,
				Event: "resumed from checkpoint"})
		}
		first = done + 1
	}
	var leaked uint64
	if err := mem.set(c.PersistentMiB); err != nil {
		return mem.outOfMemory(enc, first, err)
	}
	if len(c.GangCheckpoints) > 0 && first <= c.Iterations {
		leave, err := c.joinGang(ctx)
		if err != nil {
			return err
		}
		defer leave()
		_ = enc.Encode(Progress{Iteration: first - 1, Iterations: c.Iterations, GPUMemory: mem.current,
			Event: fmt.Sprintf("gang of %d up", len(c.GangCheckpoints))})
	}
	start := time.Now()
	iteration := float64(c.IterationTime) / c.SpeedFactor()
	pace := newPacer()
	for it := first; it <= c.Iterations; it++ {
		step := time.Duration(iteration / c.sharedFactor(pid) / float64(2*c.Steps))
		// Forward: activations pile up; backward: they are freed.
		for s := 1; s <= c.Steps; s++ {
			if err := pace.step(ctx, step); err != nil {
				return err
			}
			if err := mem.set(c.PersistentMiB + leaked + c.EphemeralMiB*uint64(s)/uint64(c.Steps)); err != nil {
				return mem.outOfMemory(enc, it, err)
			}
		}
		if c.Mode == ModeExceed && c.acts(it) {
			over := c.BudgetMiB + c.BudgetMiB/4 + 1
			if c.BudgetMiB == 0 {
				over = 2 * (c.PersistentMiB + c.EphemeralMiB + 1)
			}
			peak := mem.current
			if err := mem.set(over); err != nil {
				return mem.outOfMemory(enc, it, err)
			}
			_ = enc.Encode(Progress{Iteration: it, Iterations: c.Iterations, GPUMemory: over, Event: "exceeding budget"})
			if c.SpikeTime > 0 {
				if err := sleep(ctx, c.SpikeTime); err != nil {
					return err
				}
				_ = mem.set(peak)
			}
		}
		for s := c.Steps - 1; s >= 0; s-- {
			if err := pace.step(ctx, step); err != nil {
				return err
			}
			_ = mem.set(c.PersistentMiB + leaked + c.EphemeralMiB*uint64(s)/uint64(c.Steps))
		}
		if c.Mode == ModeLeak {
			leaked += c.LeakMiB
			if err := mem.set(c.PersistentMiB + leaked); err != nil {
				return mem.outOfMemory(enc, it, err)
			}
		}
		markIteration(c.IterationFile, it)
		elapsed := time.Since(start).Seconds()
		p := Progress{Iteration: it, Iterations: c.Iterations, ItsPerSec: float64(it-first+1) / elapsed,
			GPUMemory: mem.current, Elapsed: elapsed, Done: it == c.Iterations}
		if c.Checkpoint != "" {
			if err := writeAtomic(c.Checkpoint, p); err != nil {
				return fmt.Errorf("checkpoint: %w", err)
			}
		}
		_ = enc.Encode(p)
		writeProgress(c.ProgressFile, p)
		if c.Mode == ModeCrash && c.acts(it) {
			return fmt.Errorf("crash mode: failing at iteration %d", it)
		}
	}
	return nil
}

// sharedFactor is the share of its speed the run keeps beside the other
// processes on its GPU now (SharedSpeed); 1 where nothing tells.
func (c Config) sharedFactor(pid int) float64 {
	if c.SharedSpeed <= 0 || c.SharedSpeed >= 1 || c.SimStateDir == "" || c.GPU == "" {
		return 1
	}
	n, err := sim.Sharers(c.SimStateDir, c.GPU, pid)
	if err != nil {
		return 1
	}
	return math.Pow(c.SharedSpeed, float64(n))
}

// acts says exceed and crash modes act at iteration it.
func (c *Config) acts(it int) bool {
	if it < c.ExceedAfter {
		return false
	}
	if c.ActWhen == "" {
		return true
	}
	_, err := os.Stat(c.ActWhen)
	return err == nil
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
	ctx     context.Context
	cfg     Config
	pid     int
	current uint64
	// opened is set once the GPU's device node opened (sim.OpenDevice).
	opened bool
	// mps is what the process connected to at its first call.
	mps sim.MPSConnection
}

// set allocates or frees down to mib. Past an MPS client limit the
// allocation fails and the process keeps what it held. While the process
// is checkpointed the call waits for its restore, as a CUDA call does.
func (r *recorder) set(mib uint64) error {
	if r.cfg.GPU == "" || r.cfg.SimStateDir == "" {
		r.current = mib
		return nil
	}
	if err := sim.WaitRestored(r.ctx, r.cfg.SimStateDir, r.cfg.GPU, r.pid); err != nil {
		return err
	}
	// The first allocation opens the GPU, as CUDA's first call does: the
	// task's device cgroup may refuse it.
	if !r.opened {
		if err := sim.OpenDevice(r.cfg.SimStateDir, r.cfg.GPU); err != nil {
			return err
		}
		// CUDA connects to MPS at its first call, and keeps the limit it
		// got then.
		conn, err := sim.ConnectMPS(r.ctx, r.cfg.SimStateDir, r.cfg.GPU, r.cfg.MPSPipeDir, r.cfg.MPSLimitMiB)
		if err != nil {
			return err
		}
		if err := sim.CheckContext(r.cfg.SimStateDir, r.cfg.GPU, conn); err != nil {
			return err
		}
		r.mps, r.opened = conn, true
	}
	if err := sim.AllocateProcessMemory(r.cfg.SimStateDir, r.cfg.GPU, r.pid, mib, r.mps.LimitMiB); err != nil {
		return err
	}
	r.current = mib
	return nil
}

// outOfMemory reports a failed allocation as a progress event and ends the
// run with it, as a training job ends on CUDA's out-of-memory error.
func (r *recorder) outOfMemory(enc *json.Encoder, it int, err error) error {
	_ = enc.Encode(Progress{Iteration: it, Iterations: r.cfg.Iterations, GPUMemory: r.current, Event: err.Error()})
	return err
}

func (r *recorder) release() {
	if r.cfg.GPU != "" && r.cfg.SimStateDir != "" {
		_ = sim.ReleaseOwnProcess(r.ctx, r.cfg.SimStateDir, r.cfg.GPU, r.pid)
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
	_ = writeAtomic(path, p)
}

// writeAtomic replaces path with p's JSON line through a rename, so that a
// reader (or a resumed run) never sees half a file.
func writeAtomic(path string, p Progress) error {
	data, _ := json.Marshal(p)
	return writeFileAtomic(path, append(data, '\n'))
}

// writeFileAtomic replaces path with data through a rename.
func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".progress-")
	if err != nil {
		return err
	}
	_, err = tmp.Write(data)
	if err == nil {
		// A later run of the job may run as another user (a driver leases
		// each allocation a UID of its own) and must read it.
		err = tmp.Chmod(0o644)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
	}
	return err
}
