package plugin

// This file holds a task's lanes: joining them, their state across restarts, their events.

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

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/plugins/drivers"

	"github.com/caravan-gpu/caravan/driver/budget"
	"github.com/caravan-gpu/caravan/driver/lane"
	"github.com/caravan-gpu/caravan/driver/task"
	"github.com/caravan-gpu/caravan/gpu"
)

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
		TaskID:       h.Config.ID,
		Name:         h.Config.Name,
		Profile:      spec.Profile,
		Processes:    h.Procs,
		GPUProcesses: func() []lane.GPUProcess { return freshGPUProcesses(h, backend) },
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

// freshGPUProcesses lists the task's processes holding memory on any of
// its lanes' GPUs, sampled now, each with what it holds on each: a suspend
// stops the whole task, so it checkpoints them all, and the watchdog's last
// sample may predate the task's first allocation. Without a fresh sample
// it falls back to the watchdog's last. Where a GPU does not tell a
// process's memory, the task is taken to hold at least its lanes' memory
// there, so that its restore waits for room rather than run out of it.
func freshGPUProcesses(h *task.Handle, backend gpu.Backend) []lane.GPUProcess {
	own := taskProcs(h)
	laneMiB := map[string]uint64{} // the task's lanes' memory on each GPU
	var b budget.Budget
	for _, l := range h.Spec.AllLanes() {
		if _, ok := laneMiB[l.Key.GPU]; !ok {
			b.GPUs = append(b.GPUs, budget.GPU{UUID: l.Key.GPU})
		}
		laneMiB[l.Key.GPU] += l.MemoryMiB
	}
	usage := h.GPUUsage()
	if backend != nil {
		if fresh, err := budget.Measure(backend, b, own); err == nil {
			usage = fresh
		}
	}
	at := map[int]int{} // PID → its place in out
	var out []lane.GPUProcess
	for _, u := range usage {
		for _, p := range u.Procs {
			if _, ok := own[p.PID]; !ok {
				continue // a sample from before a PID was reused
			}
			k, seen := at[p.PID]
			if !seen {
				k = len(out)
				at[p.PID] = k
				out = append(out, lane.GPUProcess{PID: p.PID, MiB: map[string]uint64{}})
			}
			if p.MemoryUnknown {
				if out[k].Untold == nil {
					out[k].Untold = map[string]uint64{}
				}
				out[k].Untold[u.UUID] = laneMiB[u.UUID]
			} else {
				out[k].MiB[u.UUID] += p.UsedMiB
			}
		}
	}
	slices.SortFunc(out, func(a, b lane.GPUProcess) int { return a.PID - b.PID })
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
