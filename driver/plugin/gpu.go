package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/drivers/shared/eventer"
	"github.com/hashicorp/nomad/helper/users/dynamic"
	"github.com/hashicorp/nomad/plugins/drivers"

	"github.com/caravan-gpu/caravan/device/gpu"
	"github.com/caravan-gpu/caravan/device/gpu/nvml"
	"github.com/caravan-gpu/caravan/device/gpu/sim"
	"github.com/caravan-gpu/caravan/device/reservation"
	"github.com/caravan-gpu/caravan/driver/budget"
	"github.com/caravan-gpu/caravan/driver/lane"
	"github.com/caravan-gpu/caravan/driver/proctree"
	"github.com/caravan-gpu/caravan/driver/task"
	"github.com/caravan-gpu/caravan/internal/safefile"
)

// openNVML opens the NVML backend; tests replace it with go-nvml's mocks.
var openNVML = func(logger hclog.Logger) (gpu.Backend, error) { return nvml.New(logger) }

// openBackend opens the configured GPU backend. Without one (gpu_backend =
// "none", or "auto" where NVML does not load) it returns nil and why, in
// words for the fingerprint, the log and task events.
func openBackend(s *settings, logger hclog.Logger) (b gpu.Backend, none string, err error) {
	switch s.GPUBackend {
	case "sim":
		b, err := sim.New(s.Sim.FleetFile, s.Sim.StateDir)
		if err != nil {
			return nil, "", fmt.Errorf("gpu_backend sim: %w", err)
		}
		if err := openSimState(b, s.Sim.StateDir, logger); err != nil {
			return nil, "", fmt.Errorf("gpu_backend sim: %w", err)
		}
		return b, "", nil
	case "nvml":
		b, err := openNVML(logger.Named("nvml"))
		if err != nil {
			return nil, "", fmt.Errorf("gpu_backend nvml: %w", err)
		}
		return b, "", nil
	case "auto":
		b, err := openNVML(logger.Named("nvml"))
		if err != nil {
			return nil, fmt.Sprintf(`gpu_backend = "auto" found no NVML (%v)`, err), nil
		}
		return b, "", nil
	}
	return nil, `gpu_backend = "none"`, nil
}

// warnUnenforced tells a task, and the log, that nothing enforces its GPU
// memory budget on this node.
func (d *Driver) warnUnenforced(h *task.Handle, s *settings) {
	msg := "warning: " + unwatched(d.unenforced())
	if h.Spec.Budget.Enforced() && mpsActive(s) {
		msg += "; only the MPS client limits apply"
	}
	h.Logger.Warn("task started without GPU memory enforcement", "reason", d.unenforced())
	d.emit(h, msg, map[string]string{"gpu_backend": "none"}, nil)
}

// unwatched says that nothing enforces GPU memory budgets on this node.
func unwatched(none string) string {
	return "GPU memory budgets are NOT enforced: " + none + "; nothing watches or limits a task's GPU memory"
}

// openSimState lets tasks that run as unprivileged users record their
// simulated GPU memory, as any user may allocate on a real GPU: the
// per-GPU process directories are world-writable and sticky.
func openSimState(b *sim.Backend, stateDir string, logger hclog.Logger) error {
	devs, err := b.Devices()
	if err != nil {
		return err
	}
	// checkpointed/ holds a checkpointed process's entry, which the task
	// keeps writing as it allocates.
	var dirs []string
	for _, top := range []string{"procs", "checkpointed"} {
		dirs = append(dirs, filepath.Join(stateDir, top))
		for _, d := range devs {
			dirs = append(dirs, filepath.Join(stateDir, top, d.UUID))
		}
	}
	for _, dir := range dirs {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if err := os.Chmod(dir, os.ModeSticky|0o777); err != nil {
			return err
		}
	}
	// The simulated MPS daemon's server limits: root's alone, made before
	// any task could make the directory first.
	if err := (sim.MPSDaemon{StateDir: stateDir}).Prepare(); err != nil {
		return err
	}
	// The simulated GPUs are opened through device nodes, so that the
	// kernel holds each task to the GPUs the driver let it open.
	skipped, err := b.CreateDeviceNodes()
	if err != nil {
		return err
	}
	if skipped != "" {
		logger.Warn("simulated GPUs have no device nodes: every task can open every simulated GPU", "reason", skipped)
	}
	return nil
}

// mpsActive reports whether MPS client limits apply to tasks on this node.
func mpsActive(s *settings) bool {
	switch s.MPS {
	case "on":
		return true
	case "off":
		return false
	}
	_, err := os.Stat(filepath.Join(mpsPipeDir(s), "control"))
	return err == nil
}

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

// taskProcs returns the task's processes, pid → command name.
func taskProcs(h *task.Handle) map[int]string {
	pids, err := h.Procs.PIDs()
	if err != nil {
		h.Logger.Debug("listing the task's processes failed", "error", err)
		return nil
	}
	names := make(map[int]string, len(pids))
	for _, pid := range pids {
		if p, err := proctree.Read(pid); err == nil && p.State != 'Z' {
			names[pid] = p.Comm
		}
	}
	return names
}

// gpuPIDs returns the task's processes that hold GPU memory according to
// the last watchdog sample and are still the task's.
func gpuPIDs(h *task.Handle) []int {
	var out []int
	var names map[int]string
	for _, u := range h.GPUUsage() {
		for _, p := range u.Procs {
			if names == nil {
				names = taskProcs(h)
			}
			if _, ok := names[p.PID]; ok {
				out = append(out, p.PID)
			}
		}
	}
	return out
}

// watch samples the task's GPU memory until it exits and enforces its
// budget.
func (d *Driver) watch(h *task.Handle, backend gpu.Backend, interval time.Duration) {
	if backend == nil {
		return
	}
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		d.sampleAndEnforce(h, backend)
		select {
		case <-h.Done:
			return
		case <-d.ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// sharedBudget is the task's budget now: on a lane whose tasks run
// concurrently, its share of the lane (lane.Coordinator.Share) rather than
// the whole lane, so that no task can take what its neighbour was
// admitted with.
func (d *Driver) sharedBudget(h *task.Handle) budget.Budget {
	b := h.Spec.Budget
	if d.coord == nil {
		return b
	}
	gpus := append([]budget.GPU(nil), b.GPUs...)
	for i, g := range gpus {
		if g.Lane < 0 {
			continue
		}
		if share, ok := d.coord.Share(h.Config.ID, lane.Key{GPU: g.UUID, Lane: g.Lane}); ok && share < g.LimitMiB {
			// Never 0, which the watchdog reads as no limit.
			gpus[i].LimitMiB = max(share, 1)
		}
	}
	b.GPUs = gpus
	return b
}

// sampleAndEnforce takes one watchdog sample and acts on a breach. It
// returns the breach, if any.
func (d *Driver) sampleAndEnforce(h *task.Handle, backend gpu.Backend) *budget.Breach {
	names := taskProcs(h)
	if names != nil {
		// Processes seen at an earlier sample that are gone now are judged
		// by what the GPU's accounting kept of them, so that one that went
		// over and exited between two samples is not missed.
		gone := h.NoteProcs(names, processStart)
		if breach := judgeExited(h, backend, gone); breach != nil {
			return d.report(h, breach, false)
		}
	}
	if len(names) == 0 {
		return nil
	}
	b := d.sharedBudget(h)
	if !b.Enforced() {
		// Nothing to enforce; still sample the granted GPUs for stats.
		b = budget.Budget{GPUs: []budget.GPU{{UUID: budget.AnyGPU}}}
	}
	usage, err := budget.Measure(backend, b, names)
	if err != nil {
		h.Logger.Warn("GPU memory sample failed", "error", err)
		return nil
	}
	h.SetGPUUsage(usage)
	for _, u := range usage {
		d.metrics.TaskGPUMemory.WithLabelValues(h.Config.AllocID, h.Config.Name, u.UUID).Set(float64(u.UsedMiB))
		d.metrics.TaskGPUBudget.WithLabelValues(h.Config.AllocID, h.Config.Name, u.UUID).Set(float64(u.LimitMiB))
	}
	// A task reaches only the GPUs it was granted: memory on any other is
	// a breach, whatever its budget.
	ungranted, err := budget.MeasureUngranted(backend, h.Spec.Budget, names)
	if err != nil {
		h.Logger.Warn("GPU memory sample of the GPUs the task was not granted failed", "error", err)
	}
	if breach := budget.CheckUngranted(h.Spec.Budget, ungranted); breach != nil && h.NoteUngranted(breach.UUID) {
		return d.report(h, breach, false)
	}
	if !h.Spec.Budget.Enforced() {
		return nil
	}
	for _, u := range usage {
		d.reportUnknownMemory(h, u)
	}
	breach := budget.Check(b, usage)
	// The peaks are recorded on every sample, so that one judged while the
	// task is over budget now is not judged again later.
	peak := h.Peaks.Check(b, usage)
	if breach == nil && peak != nil {
		// A spike that came and went between two samples: not an episode
		// that lasts, so it is reported on its own.
		return d.report(h, peak, false)
	}
	if !h.NoteBreach(breach != nil) || breach == nil {
		return breach
	}
	return d.report(h, breach, false)
}

// report tells of a breach and acts on its policy. A task whose processes
// have all exited (exited) is not killed: under "kill" it is marked so
// that it ends failed with the reason.
func (d *Driver) report(h *task.Handle, breach *budget.Breach, exited bool) *budget.Breach {
	if h.KillReason() != "" {
		// Killed already: its processes' peaks, judged as they go, are
		// the same breach told again.
		return breach
	}
	reason := breach.Reason()
	d.metrics.Breaches.WithLabelValues(string(breach.Policy)).Inc()
	annotations := map[string]string{
		"gpu": breach.UUID, "used_mib": strconv.FormatUint(breach.UsedMiB, 10),
		"budget_mib": strconv.FormatUint(breach.LimitMiB, 10), "policy": string(breach.Policy),
	}
	for _, g := range h.Spec.Budget.GPUs {
		if g.UUID == breach.UUID && g.Lane >= 0 && breach.LimitMiB < g.LimitMiB {
			reason += fmt.Sprintf(" (its share of lane %d's %d MiB while the lane's tasks run concurrently)", g.Lane, g.LimitMiB)
			annotations["lane_mib"] = strconv.FormatUint(g.LimitMiB, 10)
		}
	}
	if breach.Peak != nil {
		annotations["peak_mib"] = strconv.FormatUint(breach.Peak.PeakMiB, 10)
		annotations["pid"] = strconv.Itoa(breach.Peak.PID)
	}
	if breach.Ungranted {
		annotations["granted"] = strings.Join(breach.Granted, ",")
	}
	if breach.Policy == budget.PolicyWarn {
		d.emit(h, "warning: "+reason, annotations, nil)
		return breach
	}
	if exited {
		h.MarkKilled(reason)
		d.emit(h, reason+"; the task fails (gpu_memory_policy = \"kill\"), though its processes had already exited", annotations, errors.New(reason))
		return breach
	}
	d.emit(h, reason+"; killing the task (gpu_memory_policy = \"kill\")", annotations, errors.New(reason))
	d.kill(h, reason)
	return breach
}

// reportUnknownMemory warns, once per process, that the GPU does not tell
// how much memory some of the task's processes hold, so that the budget
// covers only the others.
func (d *Driver) reportUnknownMemory(h *task.Handle, u budget.Usage) {
	var pids []int
	for _, p := range u.Unknown() {
		pids = append(pids, p.PID)
	}
	if len(pids) == 0 || len(h.NoteUnknownMemory(pids)) == 0 {
		return
	}
	h.Logger.Warn("GPU memory of some task processes is not reported; the budget cannot cover them", "gpu", u.UUID, "pids", pids)
	d.emit(h, "warning: "+u.UnknownReport(), map[string]string{"gpu": u.UUID, "known_mib": strconv.FormatUint(u.UsedMiB, 10)}, nil)
}

// killTimeout bounds how long a kill waits for the task's processes to go.
const killTimeout = 10 * time.Second

// kill ends a task on the driver's own account and records why: every
// process of the task (of its cgroup where it has one) gets SIGKILL.
func (d *Driver) kill(h *task.Handle, reason string) {
	h.MarkKilled(reason)
	ctx, cancel := context.WithTimeout(d.ctx, killTimeout)
	defer cancel()
	if err := h.Procs.Kill(ctx); err != nil {
		h.Logger.Warn("killing the task's processes failed", "process_control", h.Procs.Method(), "error", err)
	}
	// The executor reaps the main process.
	go func() { _ = h.Exec.Shutdown("SIGKILL", 0) }()
}

// emit sends a task event that Nomad shows in `nomad alloc status`.
func (d *Driver) emit(h *task.Handle, msg string, annotations map[string]string, err error) {
	ev := &drivers.TaskEvent{
		TaskID: h.Config.ID, AllocID: h.Config.AllocID, TaskName: h.Config.Name,
		Timestamp: time.Now(), Message: msg, Annotations: annotations, Err: err,
	}
	h.Logger.Info(msg)
	if held, ok := d.recoveryEvents.Load(h.Config.ID); ok {
		held.(*heldEvents).add(ev, d.eventer, h.Logger)
		return
	}
	sendEvent(d.eventer, ev, h.Logger)
}

func sendEvent(e *eventer.Eventer, ev *drivers.TaskEvent, logger hclog.Logger) {
	if err := e.EmitEvent(ev); err != nil {
		logger.Warn("task event dropped", "error", err, "message", ev.Message)
	}
}

// heldEvents are a recovered task's events, held until Nomad waits on the
// task and then sent in order. Every later event of the task goes through
// it too, so that none overtakes the held ones.
type heldEvents struct {
	mu       sync.Mutex
	events   []*drivers.TaskEvent
	released bool
}

func (he *heldEvents) add(ev *drivers.TaskEvent, e *eventer.Eventer, logger hclog.Logger) {
	he.mu.Lock()
	defer he.mu.Unlock()
	if !he.released {
		he.events = append(he.events, ev)
		return
	}
	sendEvent(e, ev, logger)
}

func (he *heldEvents) release(e *eventer.Eventer, logger hclog.Logger) {
	he.mu.Lock()
	defer he.mu.Unlock()
	if he.released {
		return
	}
	he.released = true
	for _, ev := range he.events {
		sendEvent(e, ev, logger)
	}
	he.events = nil
}

// laneStates are a task's states in its lanes, by lane ("GPU-a/lane0").
type laneStates map[string]lane.MemberState

// joinLane places the task in each of its lanes; restored holds its states
// there from before a driver restart, none for a new task.
func (d *Driver) joinLane(h *task.Handle, backend gpu.Backend, restored laneStates) {
	if d.coord == nil {
		return
	}
	var counter *lane.IterationCounter
	if h.Spec.IterationFile != "" {
		counter = lane.NewIterationCounter(h.Spec.IterationFile)
	}
	for _, spec := range h.Spec.AllLanes() {
		d.joinOneLane(h, backend, spec, counter, restored[spec.Key.String()])
	}
}

func (d *Driver) joinOneLane(h *task.Handle, backend gpu.Backend, spec task.LaneSpec, counter *lane.IterationCounter, restored lane.MemberState) {
	gpuUUID := spec.Key.GPU
	d.coord.Join(spec.Key, spec.MemoryMiB, lane.Member{
		TaskID:    h.Config.ID,
		Name:      h.Config.Name,
		Profile:   spec.Profile,
		Processes: h.Procs,
		GPUPIDs:   func() []int { return freshGPUPIDs(h, backend) },
		GPUMemoryMiB: func() uint64 {
			if backend == nil {
				return 0
			}
			usage, err := budget.Measure(backend, budget.Budget{GPUs: []budget.GPU{{UUID: gpuUUID}}}, taskProcs(h))
			if err != nil || len(usage) == 0 {
				return 0
			}
			return usage[0].UsedMiB
		},
		Iterations: counter,
	}, restored)
}

// recoveredLanes reconciles a recovered task's lane states with whether its
// processes are frozen and which are checkpointed now (checkpointedNow). It
// returns the states to rejoin with, whether the task is suspended, and what
// is checkpointed. A task with checkpointed processes is suspended even if
// not frozen (a restart between the checkpoint and the freeze): its resume
// restores them. A frozen task that no lane state has suspended (a state
// from an older driver, or a restart between the freeze and the write) is
// suspended in all its lanes, so that they resume it.
func recoveredLanes(spec task.Spec, states laneStates, frozen bool, checkpointed []int) (laneStates, bool, []int) {
	out := laneStates{}
	anySuspended := false
	for _, l := range spec.AllLanes() {
		st := states[l.Key.String()]
		st.Checkpointed, st.Suspending = checkpointed, nil
		st.Suspended = st.Suspended && (frozen || len(checkpointed) > 0)
		anySuspended = anySuspended || st.Suspended
		out[l.Key.String()] = st
	}
	if !anySuspended && (frozen || len(checkpointed) > 0) {
		for key, st := range out {
			st.Suspended = true
			out[key] = st
		}
		anySuspended = true
	}
	return out, anySuspended, checkpointed
}

// checkpointedNow asks the GPU which of the processes the lane states name
// as checkpointed, or as being checkpointed when the driver stopped, hold
// their state in host memory now (or are locked half-way): a restart in the
// middle of a suspend or a resume leaves the states behind the processes,
// and a resume must restore exactly what is checkpointed. Without a backend
// that can tell, the states' own list stands. Only the task's own processes
// (own) count: the file lies in the task's directory, and a task that wrote
// a neighbour's PIDs there must not have the driver restore them.
func checkpointedNow(ctx context.Context, backend gpu.Backend, states laneStates, own []int, logger hclog.Logger) []int {
	var listed, candidates []int
	seen := map[int]bool{}
	note := func(pid int, isListed bool) {
		if seen[pid] {
			return
		}
		seen[pid] = true
		if !slices.Contains(own, pid) {
			logger.Warn("the lane state names a process that is not the task's; ignored", "pid", pid)
			return
		}
		if isListed {
			listed = append(listed, pid)
		}
		candidates = append(candidates, pid)
	}
	for _, key := range slices.Sorted(maps.Keys(states)) {
		for _, pid := range states[key].Checkpointed {
			note(pid, true)
		}
		for _, pid := range states[key].Suspending {
			note(pid, false)
		}
	}
	ckpt, ok := backend.(gpu.Checkpointer)
	if !ok || ckpt.CheckpointMechanism() == "" {
		return listed
	}
	var out []int
	for _, pid := range candidates {
		state, err := ckpt.CheckpointState(ctx, pid)
		if err != nil {
			// Better to try a restore that fails than to leave a process
			// checkpointed.
			logger.Warn("cannot tell whether a recovered task's process is checkpointed", "pid", pid, "error", err)
			if slices.Contains(listed, pid) {
				out = append(out, pid)
			}
			continue
		}
		if state != gpu.CheckpointRunning {
			out = append(out, pid)
		}
	}
	return out
}

// freshGPUPIDs lists the task's processes holding memory on any of its
// lanes' GPUs, sampled now: a suspend stops the whole task, so it
// checkpoints them all, and the watchdog's last sample may predate the
// task's first allocation.
func freshGPUPIDs(h *task.Handle, backend gpu.Backend) []int {
	if backend == nil {
		return gpuPIDs(h)
	}
	var b budget.Budget
	for _, l := range h.Spec.AllLanes() {
		b.GPUs = append(b.GPUs, budget.GPU{UUID: l.Key.GPU})
	}
	usage, err := budget.Measure(backend, b, taskProcs(h))
	if err != nil {
		return gpuPIDs(h)
	}
	seen := map[int]bool{}
	var out []int
	for _, u := range usage {
		for _, p := range u.Procs {
			if !seen[p.PID] {
				seen[p.PID] = true
				out = append(out, p.PID)
			}
		}
	}
	sort.Ints(out)
	return out
}

// laneStatePath is where a lane task's lane states are kept: in the
// driver's own state directory, where the task cannot write, under a name
// made of its task ID.
func laneStatePath(stateDir string, cfg *drivers.TaskConfig) string {
	return filepath.Join(laneStateDir(stateDir), url.PathEscape(cfg.ID)+".json")
}

func laneStateDir(stateDir string) string { return filepath.Join(stateDir, "lanes") }

// executorLogPath is where a task's executor writes its own log: in the
// driver's state directory, since the executor opens it as root.
func executorLogPath(stateDir string, cfg *drivers.TaskConfig) string {
	return filepath.Join(executorLogDir(stateDir), url.PathEscape(cfg.ID)+".log")
}

func executorLogDir(stateDir string) string { return filepath.Join(stateDir, "executors") }

// trustedLaneState returns the lane state file a recovered task's stored
// state names when it is one this driver keeps; a file elsewhere (a task
// directory, where drivers before state_dir kept it and the task could
// forge it) is not believed.
func trustedLaneState(stateDir string, cfg *drivers.TaskConfig, stored string) (path string, distrusted bool) {
	path = laneStatePath(stateDir, cfg)
	return path, stored != "" && stored != path
}

// persistLane writes a member's state in one lane whenever the coordinator
// changes it, atomically so that a restart in mid-write reads the old one.
func (d *Driver) persistLane(taskID string, key lane.Key, st lane.MemberState) {
	h, ok := d.tasks.Get(taskID)
	if !ok || h.LaneStateFile == "" {
		return
	}
	// A task's lanes persist from their own goroutines into one file.
	d.laneStateMu.Lock()
	defer d.laneStateMu.Unlock()
	states, err := readLaneStates(h.LaneStateFile)
	if err != nil || states == nil {
		states = laneStates{}
	}
	states[key.String()] = st
	if err := writeLaneStates(h.LaneStateFile, states); err != nil {
		h.Logger.Warn("lane state not saved; a driver restart would forget it", "error", err)
	}
}

func writeLaneStates(path string, states laneStates) error {
	data, err := json.Marshal(states)
	if err != nil {
		return err
	}
	// The directory is the driver's alone (safefile.PrivateDir), so a
	// plain temporary file and rename are safe there.
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return nil
}

// readLaneStates reads what writeLaneStates wrote; a missing file (a task
// that never switched, or a state from an older driver) is no state.
func readLaneStates(path string) (laneStates, error) {
	if path == "" {
		return nil, nil
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var states laneStates
	if err := json.Unmarshal(data, &states); err != nil {
		return nil, fmt.Errorf("lane state %s: %w", path, err)
	}
	for key, st := range states {
		for field, pids := range map[string][]int{"checkpointed": st.Checkpointed, "suspending": st.Suspending} {
			for _, pid := range pids {
				if pid <= 0 {
					return nil, fmt.Errorf("lane state %s: %s: %s: %d is no process ID", path, key, field, pid)
				}
			}
		}
	}
	return states, nil
}

// laneEvent turns a coordinator event into a task event.
func (d *Driver) laneEvent(e lane.Event) {
	h, ok := d.tasks.Get(e.TaskID)
	if !ok {
		return
	}
	d.emit(h, e.Message, e.Annotations, e.Err)
	if e.Annotations != nil && e.Annotations["mechanism"] != "" {
		for _, k := range []string{"suspend_latency", "resume_latency"} {
			if v, ok := e.Annotations[k]; ok {
				h.SetAttr("caravan.last_"+k, v)
			}
		}
	}
}

// resumeFailed ends a task whose resume failed, so that Nomad's restart
// policy brings it back rather than leaving it stopped forever.
func (d *Driver) resumeFailed(taskID string, err error) {
	h, ok := d.tasks.Get(taskID)
	if !ok {
		return
	}
	d.kill(h, "resume after a lane switch failed: "+err.Error())
}

// gpuFreeMiB is the memory free on a GPU now, as the backend tells it.
func (d *Driver) gpuFreeMiB(uuid string) (uint64, bool) {
	backend, err := d.gpuBackend()
	if err != nil || backend == nil {
		return 0, false
	}
	st, err := backend.Stats(uuid)
	if err != nil || st.TotalMemoryMiB == 0 || st.UsedMemoryMiB > st.TotalMemoryMiB {
		return 0, false
	}
	return st.TotalMemoryMiB - st.UsedMemoryMiB, true
}

// evictFromLane ends a task for its lane partners' sake: its lane could
// not suspend it, time after time, or it grew so that a partner's restore
// does not fit.
func (d *Driver) evictFromLane(taskID string, err error) {
	h, ok := d.tasks.Get(taskID)
	if !ok {
		return
	}
	d.kill(h, "lane: "+err.Error()+"; ended so that its lane partners can run")
}
