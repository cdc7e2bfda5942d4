package plugin

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/client/lib/cgroupslib"
	"github.com/hashicorp/nomad/plugins/drivers"
	dtestutil "github.com/hashicorp/nomad/plugins/drivers/testutils"
	"github.com/shoenig/test/must"
	"github.com/shoenig/test/wait"

	"github.com/caravan-gpu/caravan/driver/cgroup"
	"github.com/caravan-gpu/caravan/driver/proctree"
	"github.com/caravan-gpu/caravan/driver/task"
	"github.com/caravan-gpu/caravan/driver/workload"
	"github.com/caravan-gpu/caravan/gpu/reservation"
)

// escapeTask is a task whose main process starts the workload w in a new
// session from a child that exits at once, so that the workload leaves the
// task's process tree and process group, and then sleeps. Only the
// escaped workload touches the GPU.
func escapeTask(t *testing.T, h *dtestutil.DriverHarness, name string, w workload.Config, deviceEnv map[string]string, cgroup bool) *drivers.TaskConfig {
	t.Helper()
	if w.Steps == 0 {
		w.Steps = 2
	}
	exe, err := os.Executable()
	must.NoError(t, err)
	tc := TaskConfig{Command: "/bin/sh", Args: []string{"-c", `sh -c 'setsid "$ESCAPEE" &'; exec sleep 300`}}
	var cfg *drivers.TaskConfig
	if cgroup {
		cfg = newTask(t, h, name, tc, deviceEnv)
	} else {
		cfg = newTaskWithoutCgroup(t, h, name, tc, deviceEnv)
	}
	raw, _ := json.Marshal(w)
	cfg.Env[workloadEnv] = string(raw)
	cfg.Env["ESCAPEE"] = exe
	return cfg
}

var breachPID = regexp.MustCompile(`[:;] pid (\d+) \(`)

// TestSetsidEscapeIsKilledOverBudget: a process that left the task's
// process tree still counts against the task's budget, and the kill takes
// it with the rest of the task.
func TestSetsidEscapeIsKilledOverBudget(t *testing.T) {
	if processControl() == proctree.Method {
		t.Skip("this host has no freezable cgroups for tasks (driver.caravan.process_control = signals)")
	}
	conf, _ := simConfig(t)
	h, _ := newHarness(t, conf)
	events := collectEvents(t, h)
	grant := reservation.Grant{InstanceID: "GPU-test", GPUUUID: "GPU-test", Lane: -1, Slots: 1, MemoryMiB: 2048, SharePercent: 100}
	cfg := escapeTask(t, h, "escapee", workload.Config{Iterations: 200, IterationTime: 100 * time.Millisecond,
		PersistentMiB: 1024, EphemeralMiB: 512, Mode: workload.ModeExceed, ExceedAfter: 2}, grantEnv(grant), true)
	handle, _, err := h.StartTask(cfg)
	must.NoError(t, err)
	var state struct{ Pid int }
	must.NoError(t, handle.GetDriverState(&state))

	res := waitExit(t, h, cfg.ID, 30*time.Second)
	must.Error(t, res.Err, must.Sprint("the task was not killed: its escaped process went unseen"))
	must.StrContains(t, res.Err.Error(), "GPU memory budget exceeded on GPU-test")
	m := breachPID.FindStringSubmatch(res.Err.Error())
	must.SliceLen(t, 2, m, must.Sprintf("no pid in %q", res.Err.Error()))
	escaped, _ := strconv.Atoi(m[1])
	must.NotEq(t, state.Pid, escaped)
	mustBeDead(t, escaped, "the kill")
	must.SliceNotEmpty(t, waitEvents(events, cfg.ID, "killing the task", 5*time.Second))
	status, err := h.InspectTask(cfg.ID)
	must.NoError(t, err)
	must.Eq(t, processControl(), status.DriverAttributes["caravan.process_control"])
}

// TestWithoutCgroupFallsBackToSignalsAndSaysSo: a task that is in no cgroup
// of its own is reached through its process tree, which the escaped
// workload leaves, and the driver says so.
func TestWithoutCgroupFallsBackToSignalsAndSaysSo(t *testing.T) {
	if cgroupslib.GetMode() == cgroupslib.CG2 {
		t.Skip("on cgroups v2 the executor refuses to start a task whose cgroup is missing")
	}
	conf, _ := simConfig(t)
	h, _ := newHarness(t, conf)
	events := collectEvents(t, h)
	grant := reservation.Grant{InstanceID: "GPU-test", GPUUUID: "GPU-test", Lane: -1, Slots: 1, MemoryMiB: 2048, SharePercent: 100}
	cfg := escapeTask(t, h, "outside", workload.Config{Iterations: 15, IterationTime: 100 * time.Millisecond,
		PersistentMiB: 1024, EphemeralMiB: 512, Mode: workload.ModeExceed, ExceedAfter: 2}, grantEnv(grant), false)
	_, _, err := h.StartTask(cfg)
	must.NoError(t, err)
	must.SliceNotEmpty(t, waitEvents(events, cfg.ID, "process control falls back to signals", 5*time.Second))
	status, err := h.InspectTask(cfg.ID)
	must.NoError(t, err)
	must.Eq(t, proctree.Method, status.DriverAttributes["caravan.process_control"])
	// The escaped workload goes over budget unseen: the known gap.
	time.Sleep(2 * time.Second)
	must.SliceEmpty(t, events(cfg.ID, "GPU memory budget exceeded"))
	must.NoError(t, h.StopTask(cfg.ID, time.Second, "SIGKILL"))
}

// TestRecoverTaskFoundFrozen: a driver that restarts while a task waits for
// its turn finds the task's cgroup frozen, records the task as suspended,
// and resumes it once it is alone in its lane.
func TestRecoverTaskFoundFrozen(t *testing.T) {
	if processControl() == proctree.Method {
		t.Skip("this host has no freezable cgroups for tasks (driver.caravan.process_control = signals)")
	}
	conf, _ := simConfig(t)
	h1, _, stopDriver := newStoppableHarness(t, conf)
	cfg := workloadTask(t, h1, "frozen", workload.Config{Iterations: 10, IterationTime: 100 * time.Millisecond,
		PersistentMiB: 1024, EphemeralMiB: 256}, TaskConfig{}, grantEnv(laneGrant(0)))
	handle, _, err := h1.StartTask(cfg)
	must.NoError(t, err)
	must.NoError(t, h1.WaitUntilStarted(cfg.ID, 5*time.Second))
	stopDriver()
	var state task.State
	must.NoError(t, handle.GetDriverState(&state))
	must.NotEq(t, "", state.Cgroup)
	g, err := cgroup.Open(state.Cgroup)
	must.NoError(t, err)
	must.NoError(t, g.Freeze(context.Background()))

	h2, _ := newHarness(t, conf)
	events := collectEvents(t, h2)
	must.NoError(t, h2.RecoverTask(handle))
	// The recovery event goes out once Nomad waits on the task.
	res := waitExit(t, h2, cfg.ID, 30*time.Second)
	must.Eq(t, 0, res.ExitCode)
	must.SliceNotEmpty(t, waitEvents(events, cfg.ID, "(suspended: true", 5*time.Second))
	must.SliceNotEmpty(t, waitEvents(events, cfg.ID, "resumed in GPU-test/lane0 via cuda-checkpoint (sim, "+g.Method()+")", 5*time.Second))
}

// TestLeftoversAreKilledWhenTheMainProcessExits: what escaped the task's
// process tree does not outlive the task's main process.
func TestLeftoversAreKilledWhenTheMainProcessExits(t *testing.T) {
	if processControl() == proctree.Method {
		t.Skip("this host has no freezable cgroups for tasks (driver.caravan.process_control = signals)")
	}
	h, _ := newHarness(t, Config{})
	events := collectEvents(t, h)
	cfg := newTask(t, h, "leaver", TaskConfig{Command: "/bin/sh", Args: []string{"-c",
		`sh -c 'setsid sh -c "echo \$\$ > $0; exec sleep 300" &' "$NOMAD_TASK_DIR/escaped.pid"; sleep 0.5`}}, nil)
	cfg.Env["NOMAD_TASK_DIR"] = cfg.TaskDir().LocalDir
	handle, _, err := h.StartTask(cfg)
	must.NoError(t, err)
	var state task.State
	must.NoError(t, handle.GetDriverState(&state))
	must.NotEq(t, "", state.Cgroup)
	must.Eq(t, 0, waitExit(t, h, cfg.ID, 10*time.Second).ExitCode)
	// The exit is published only once nothing is left in the cgroup.
	left, err := os.ReadFile(filepath.Join(state.Cgroup, "cgroup.procs"))
	if err == nil {
		must.Eq(t, "", strings.TrimSpace(string(left)), must.Sprint("the exit came before the leftovers were killed"))
	}
	data, err := os.ReadFile(cfg.TaskDir().LocalDir + "/escaped.pid")
	must.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	must.NoError(t, err)
	found := waitEvents(events, cfg.ID, "killed 1 process(es) left in the task's cgroup", 5*time.Second)
	must.SliceNotEmpty(t, found)
	must.Eq(t, "["+strconv.Itoa(pid)+"]", found[0].Annotations["pids"])
	mustBeDead(t, pid, "the task")
}

// mustBeDead fails unless pid is gone or a zombie within a second. A task's
// exit is published once its cgroup is empty, and the kernel drops a dying
// process from cgroup.procs a moment before it is a zombie.
func mustBeDead(t *testing.T, pid int, what string) {
	t.Helper()
	must.Wait(t, wait.InitialSuccess(wait.BoolFunc(func() bool { return !running(pid) }),
		wait.Timeout(time.Second), wait.Gap(10*time.Millisecond)), must.Sprintf("escaped pid %d outlived %s", pid, what))
}
