package plugin

// This file holds the watchdog: sampling a task's GPU memory and acting on a breach.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/caravan-gpu/caravan/driver/budget"
	"github.com/caravan-gpu/caravan/driver/lane"
	"github.com/caravan-gpu/caravan/driver/proctree"
	"github.com/caravan-gpu/caravan/driver/task"
	"github.com/caravan-gpu/caravan/gpu"
)

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
	breach, news := h.Judge.Sample(h.Spec.Budget, b, usage, ungranted)
	if h.Spec.Budget.Enforced() && !(news && breach.Ungranted) {
		for _, u := range usage {
			d.reportUnknownMemory(h, u)
		}
	}
	if !news {
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
