// Package task keeps the driver's per-task state: the handle of a running
// task, the state stored with Nomad for recovery, and the store of handles.
package task

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"github.com/hashicorp/nomad/drivers/shared/executor"
	"github.com/hashicorp/nomad/plugins/drivers"

	"github.com/caravan-gpu/caravan/driver/budget"
	"github.com/caravan-gpu/caravan/driver/switcher"
)

// Processes reaches every process of a task: through the task's cgroup
// (driver/cgroup), or through its process tree and signals where it has no
// usable cgroup (driver/proctree).
type Processes interface {
	switcher.Freezer
	// PIDs lists the task's processes.
	PIDs() ([]int, error)
	// Frozen reports whether the task is frozen, as after a driver restart
	// while it waited for its turn in a lane.
	Frozen() (bool, error)
	// Kill sends SIGKILL to every process of the task.
	Kill(ctx context.Context) error
}

// Handle is one running (or finished) task.
type Handle struct {
	Exec         executor.Executor
	PluginClient *plugin.Client
	Pid          int
	// Procs is how the driver lists, freezes and kills the task's
	// processes.
	Procs  Processes
	Config *drivers.TaskConfig
	Spec   Spec
	Logger hclog.Logger
	// LaneStateFile is State.LaneStateFile; empty outside a lane.
	LaneStateFile string
	// DevicesCgroup is the cgroup v1 devices cgroup the task is held to;
	// empty on v2 and where it is not held.
	DevicesCgroup string

	// Done is closed when the process has exited and ExitResult is final.
	Done chan struct{}
	// Judge holds what the watchdog has judged of the task already.
	Judge budget.Judge

	mu          sync.RWMutex
	state       drivers.TaskState
	startedAt   time.Time
	completedAt time.Time
	exitResult  *drivers.ExitResult
	// killReason, when set, replaces the executor's view of why the task
	// ended: the driver killed it on purpose (budget breach, failed resume).
	killReason string
	attrs      map[string]string
	gpuUsage   []budget.Usage
	// unknownMemory holds the PIDs already reported as holding memory the
	// GPU does not tell.
	unknownMemory map[int]bool
	// seen are the task's processes the watchdog has seen and not yet seen
	// go, with their starts.
	seen map[int]SeenProc
}

// SeenProc is a process of the task that the watchdog saw, and when it
// started, to tell it in the GPU's accounting from a later process with
// the same PID.
type SeenProc struct {
	Name  string
	Start time.Time
}

// NoteProcs records the task's processes alive now (pid → name), reading
// a new one's start with startOf, and returns those seen before that are
// gone now: exited since, their peaks to be judged from the GPU's
// accounting. With now empty (the task has exited) it returns every
// process still recorded.
func (h *Handle) NoteProcs(now map[int]string, startOf func(pid int) time.Time) (gone map[int]SeenProc) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.seen == nil {
		h.seen = map[int]SeenProc{}
	}
	for pid, p := range h.seen {
		if _, alive := now[pid]; !alive {
			if gone == nil {
				gone = map[int]SeenProc{}
			}
			gone[pid] = p
			delete(h.seen, pid)
		}
	}
	for pid, name := range now {
		p, ok := h.seen[pid]
		switch {
		case !ok:
			h.seen[pid] = SeenProc{Name: name, Start: startOf(pid)}
		case name != "" && name != p.Name:
			// The process exec'd (caravan-run-as into the task's command).
			p.Name = name
			h.seen[pid] = p
		}
	}
	return gone
}

// SetGPUUsage records the watchdog's latest sample.
func (h *Handle) SetGPUUsage(u []budget.Usage) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.gpuUsage = u
}

// GPUUsage is the watchdog's latest sample.
func (h *Handle) GPUUsage() []budget.Usage {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.gpuUsage
}

// NoteUnknownMemory records processes whose GPU memory the backend does not
// tell and returns those not noted before, so that each is reported once.
func (h *Handle) NoteUnknownMemory(pids []int) (news []int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, pid := range pids {
		if !h.unknownMemory[pid] {
			if h.unknownMemory == nil {
				h.unknownMemory = map[int]bool{}
			}
			h.unknownMemory[pid] = true
			news = append(news, pid)
		}
	}
	return news
}

// NewHandle returns a handle for a process that is running now.
func NewHandle(exec executor.Executor, client *plugin.Client, pid int, procs Processes, cfg *drivers.TaskConfig, spec Spec, startedAt time.Time, logger hclog.Logger) *Handle {
	return &Handle{
		Exec: exec, PluginClient: client, Pid: pid, Procs: procs, Config: cfg, Spec: spec, Logger: logger,
		Done:      make(chan struct{}),
		state:     drivers.TaskStateRunning,
		startedAt: startedAt,
		attrs:     map[string]string{},
	}
}

// Run waits for the process to exit, runs cleanup, and then records the
// result. It returns when the task has exited. The exit is published only
// after cleanup, so that whoever waits on the task (Nomad, a restart) finds
// nothing of it left, such as a process that escaped the main one's tree.
func (h *Handle) Run(cleanup func()) {
	defer close(h.Done)
	ps, err := h.Exec.Wait(context.Background())
	if cleanup != nil {
		cleanup()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.completedAt = time.Now()
	if err != nil {
		h.state = drivers.TaskStateUnknown
		h.exitResult = &drivers.ExitResult{ExitCode: -1, Err: err}
		return
	}
	h.state = drivers.TaskStateExited
	h.exitResult = &drivers.ExitResult{ExitCode: ps.ExitCode, Signal: ps.Signal, OOMKilled: ps.OOMKilled}
	if !ps.Time.IsZero() {
		h.completedAt = ps.Time
	}
	if h.killReason != "" {
		h.exitResult.Err = killError(h.killReason)
	}
}

type killError string

func (e killError) Error() string { return string(e) }

// MarkKilled records why the driver is about to kill the task, so that the
// exit result Nomad sees says so.
func (h *Handle) MarkKilled(reason string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.killReason == "" {
		h.killReason = reason
	}
}

// KillReason is the reason recorded by MarkKilled, if any.
func (h *Handle) KillReason() string {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.killReason
}

// ExitResult returns the result once the task has exited, else nil.
func (h *Handle) ExitResult() *drivers.ExitResult {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.exitResult == nil {
		return nil
	}
	return h.exitResult.Copy()
}

// IsRunning reports whether the process still runs.
func (h *Handle) IsRunning() bool {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.state == drivers.TaskStateRunning
}

// SetAttr sets a driver attribute shown by InspectTask.
func (h *Handle) SetAttr(key, value string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.attrs[key] = value
}

// Status is the task's status for InspectTask.
func (h *Handle) Status() *drivers.TaskStatus {
	h.mu.RLock()
	defer h.mu.RUnlock()
	attrs := map[string]string{"pid": strconv.Itoa(h.Pid)}
	for k, v := range h.attrs {
		attrs[k] = v
	}
	var res *drivers.ExitResult
	if h.exitResult != nil {
		res = h.exitResult.Copy()
	}
	return &drivers.TaskStatus{
		ID:               h.Config.ID,
		Name:             h.Config.Name,
		State:            h.state,
		StartedAt:        h.startedAt,
		CompletedAt:      h.completedAt,
		ExitResult:       res,
		DriverAttributes: attrs,
	}
}
