package plugin

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/hashicorp/nomad/client/lib/cgroupslib"
	"github.com/hashicorp/nomad/drivers/shared/executor"
	"github.com/hashicorp/nomad/plugins/drivers"

	"github.com/caravan-gpu/caravan/driver/cgroup"
	"github.com/caravan-gpu/caravan/driver/proctree"
	"github.com/caravan-gpu/caravan/driver/task"
	"github.com/caravan-gpu/caravan/gpu/reservation"
)

// processControl names how the driver reaches the processes of tasks on
// this host: through their cgroups ("cgroup-v2", "cgroup-v1-freezer") when
// the cgroups Nomad makes for tasks can be frozen, else "signals".
func processControl() string {
	root := cgroupslib.GetDefaultRoot()
	switch cgroupslib.GetMode() {
	case cgroupslib.CG1:
		if writable(filepath.Join(root, "freezer", cgroupslib.NomadCgroupParent, "freezer.state")) {
			return cgroup.MethodV1Freeze
		}
	case cgroupslib.CG2:
		if writable(filepath.Join(root, cgroupslib.NomadCgroupParent, "cgroup.freeze")) {
			return cgroup.MethodV2
		}
	}
	return proctree.Method
}

func writable(path string) bool {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return false
	}
	f.Close()
	return true
}

// taskCgroup is the cgroup Nomad's executor puts a task in (its
// StatsCgroup): on v2 the task's unified cgroup, on v1 its freezer cgroup.
// It depends only on the task's dir and resources.
func taskCgroup(cfg *drivers.TaskConfig) string {
	return (&executor.ExecCommand{TaskDir: cfg.TaskDir().Dir, Resources: cfg.Resources}).StatsCgroup()
}

// taskProcesses picks how the driver reaches the processes of the task
// whose main process is pid: through the cgroup at dir when it holds that
// process and can be frozen, else through the process tree and signals;
// why then says why.
func taskProcesses(dir string, pid int) (procs task.Processes, why string) {
	fallback := proctree.Signals{Root: pid}
	if dir == "" {
		return fallback, fmt.Sprintf("the host has no cgroups for tasks (driver.caravan.cgroups = %s)", cgroupMode())
	}
	g, err := cgroup.Open(dir)
	if err != nil {
		return fallback, err.Error()
	}
	pids, err := g.PIDs()
	if err != nil {
		return fallback, err.Error()
	}
	// A task that has already exited is in no cgroup; there is nothing
	// left to fall back for.
	if !slices.Contains(pids, pid) && running(pid) {
		return fallback, fmt.Sprintf("the task's process %d is not in cgroup %s", pid, dir)
	}
	return g, ""
}

func running(pid int) bool {
	p, err := proctree.Read(pid)
	return err == nil && p.State != 'Z'
}

// cgroupDir is the cgroup directory of procs, for the stored task state;
// empty when the task is reached by signals.
func cgroupDir(procs task.Processes) string {
	if g, ok := procs.(*cgroup.Group); ok {
		return g.Dir()
	}
	return ""
}

// fallbackMessage is the task event of a task that the driver can reach
// only through its process tree.
func fallbackMessage(why string) string {
	return "process control falls back to signals and the process tree (" + why +
		"): a process that calls setsid and forks escapes the GPU memory budget, kill and lane switches"
}

// killLeftovers kills what is left in a task's cgroup once its main process
// has exited, such as a process that escaped with setsid, so that it holds
// no GPU memory into the task's next run: the Nomad client kills the cgroup
// only when the task will not run again. A task reached by signals is left
// alone: its process tree is gone with its main process, and PIDs of a
// tree that has exited may already be someone else's.
func (d *Driver) killLeftovers(h *task.Handle) {
	if cgroupDir(h.Procs) == "" {
		return
	}
	left, err := h.Procs.PIDs()
	if err != nil || len(left) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(d.ctx, killTimeout)
	defer cancel()
	err = h.Procs.Kill(ctx)
	msg := fmt.Sprintf("killed %d process(es) left in the task's cgroup after its main process exited", len(left))
	if err != nil {
		msg = fmt.Sprintf("killing %d process(es) left in the task's cgroup after its main process exited failed: %v", len(left), err)
	}
	d.emit(h, msg, map[string]string{"pids": fmt.Sprint(left)}, err)
}

// grantsDir is where tasks' grants are recorded for caravan-device; a
// variable so tests can point it elsewhere.
var grantsDir = reservation.GrantsDir

// recordGrants lets caravan-device tell which lane a process on a GPU
// belongs to by its cgroup, which the task cannot choose, rather than by its
// environment, which it can. A task without a cgroup is not recorded.
func recordGrants(h *task.Handle, grants []reservation.Grant) {
	dir := cgroupDir(h.Procs)
	if dir == "" || len(grants) == 0 {
		return
	}
	if err := reservation.WriteTaskGrants(grantsDir, filepath.Base(dir), grants); err != nil {
		h.Logger.Warn("recording the task's grants for caravan-device failed; its lane stats go by the task's environment", "error", err)
	}
}

// forgetGrants removes what recordGrants recorded.
func forgetGrants(h *task.Handle) {
	if dir := cgroupDir(h.Procs); dir != "" {
		_ = reservation.RemoveTaskGrants(grantsDir, filepath.Base(dir))
	}
}
