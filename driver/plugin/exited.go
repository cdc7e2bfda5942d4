package plugin

import (
	"time"

	"github.com/caravan-gpu/caravan/driver/budget"
	"github.com/caravan-gpu/caravan/driver/task"
	"github.com/caravan-gpu/caravan/gpu"
)

// processStart is when a process started, as the kernel tells; zero when it
// cannot tell (the process is gone), which matches any start.
func processStart(pid int) time.Time {
	t, _ := gpu.ProcessStartTime(pid)
	return t
}

// exitedUsage returns, for each GPU of the node where any of gone (the
// task's processes that exited since the last sample) held memory, what
// the GPU's accounting of exited processes recorded of them: their peaks.
// A backend that keeps no such accounting gives nothing; the processes
// alive at a sample are judged all the same.
// A failure to read the accounting is a warning: the exited processes go
// unjudged on that GPU.
func exitedUsage(backend gpu.Backend, b budget.Budget, gone map[int]task.SeenProc, logger interface {
	Warn(string, ...any)
}) []budget.Usage {
	acct, ok := backend.(gpu.Accounting)
	if !ok || len(gone) == 0 {
		return nil
	}
	devs, err := backend.Devices()
	if err != nil {
		logger.Warn("cannot list the GPUs, so the task's exited processes go unjudged", "error", err)
		return nil
	}
	var out []budget.Usage
	for _, d := range devs {
		if d.MIGEnabled || acct.AccountingUnavailable(d.UUID) != "" {
			continue
		}
		procs, err := acct.AccountedProcesses(d.UUID)
		if err != nil {
			logger.Warn("cannot read the GPU's accounting, so the task's processes that exited go unjudged on it", "gpu", d.UUID, "error", err)
			continue
		}
		limit, _ := b.For(d.UUID)
		u := budget.Usage{UUID: d.UUID, LimitMiB: limit.LimitMiB}
		for _, p := range procs {
			seen, ok := gone[p.PID]
			if !ok || p.Running || p.PeakMemoryMiB == 0 || !p.BelongsTo(p.PID, seen.Start) {
				continue
			}
			u.Procs = append(u.Procs, budget.ProcUsage{PID: p.PID, Name: seen.Name, PeakMiB: p.PeakMemoryMiB, Exited: true})
		}
		if len(u.Procs) > 0 {
			out = append(out, u)
		}
	}
	return out
}

// judgeExited judges the peaks of the task's processes that have exited
// since the last sample (gone): past a process's share of a granted GPU's
// budget, or any memory on a GPU the task was not granted, is a breach.
func judgeExited(h *task.Handle, backend gpu.Backend, gone map[int]task.SeenProc) *budget.Breach {
	return h.Judge.Exited(h.Spec.Budget, exitedUsage(backend, h.Spec.Budget, gone, h.Logger))
}

// judgeAfterExit is the watchdog's last look at a task whose main process
// has exited: every process of it seen alive and not judged since it left
// is judged by what the GPU's accounting kept of it. A breach then is
// reported, and under gpu_memory_policy = "kill" it fails the task with the
// reason whatever its exit code.
func (d *Driver) judgeAfterExit(h *task.Handle, backend gpu.Backend) {
	if backend == nil {
		return
	}
	gone := h.NoteProcs(nil, processStart)
	if breach := judgeExited(h, backend, gone); breach != nil {
		d.report(h, breach, true)
	}
}
