package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/plugins/drivers"
	dtestutil "github.com/hashicorp/nomad/plugins/drivers/testutils"
	"github.com/shoenig/test/must"
	"github.com/shoenig/test/wait"

	"github.com/caravan-gpu/caravan/driver/workload"
	"github.com/caravan-gpu/caravan/gpu/reservation"
	"github.com/caravan-gpu/caravan/internal/nomadcgroups"
)

// The test binary doubles as the workload: a task whose env carries
// workloadEnv runs workload.Run with the JSON config in it.
const workloadEnv = "CARAVAN_TEST_WORKLOAD"

func TestMain(m *testing.M) {
	if raw := os.Getenv(workloadEnv); raw != "" {
		var c workload.Config
		if err := json.Unmarshal([]byte(raw), &c); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		env := map[string]string{}
		for _, kv := range os.Environ() {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
		if err := c.FromEnv(env); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		if err := workload.Run(context.Background(), c, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	// Tasks go in Nomad's cgroups, which a Nomad client sets up when it
	// starts; a host where none has run has them half made or not at all.
	cgroupsNotReady = nomadcgroups.Init()
	// Nomad's driver harness leaves two directories per task and go-plugin
	// a socket per driver in the temp dir: keep them in one of the binary's
	// own, removed at the end, not in the host's /tmp.
	scratch, err := os.MkdirTemp("", "caravan-driver-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	// Open as /tmp is, for tasks that run as other users.
	if err := os.Chmod(scratch, 0o777|os.ModeSticky); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if err := os.Setenv("TMPDIR", scratch); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	// Tasks' grants are recorded for caravan-device in a directory of the
	// test's own, not the host's.
	dir, err := os.MkdirTemp(scratch, "caravan-grants-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	grantsDir = dir
	// So is the driver's state_dir, one for the binary so that a second
	// driver recovers what the first kept.
	if testStateDir, err = os.MkdirTemp(scratch, "caravan-driver-state-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	code := m.Run()
	_ = os.RemoveAll(scratch)
	os.Exit(code)
}

const testFleet = `{"gpus":[{"uuid":"GPU-test","count":1,"model":"Sim GPU","memory_mib":16384}]}`

// simConfig returns a plugin config on a fresh simulated fleet.
func simConfig(t *testing.T) (Config, string) {
	dir := t.TempDir()
	fleet := filepath.Join(dir, "fleet.json")
	must.NoError(t, os.WriteFile(fleet, []byte(testFleet), 0o644))
	c := Config{GPUBackend: "sim", Sim: SimConfig{FleetFile: fleet, StateDir: filepath.Join(dir, "state")},
		WatchdogInterval: "50ms", AllowRoot: true, DefaultUser: "root"}
	return c, c.Sim.StateDir
}

func grantEnv(g reservation.Grant) map[string]string {
	return map[string]string{g.EnvName(): g.EnvValue(), "CUDA_VISIBLE_DEVICES": g.GPUUUID}
}

// testBinary is this test binary, which runs as a workload under
// workloadEnv.
func testBinary(t *testing.T) string {
	exe, err := os.Executable()
	must.NoError(t, err)
	return exe
}

func workloadTask(t *testing.T, h *dtestutil.DriverHarness, name string, w workload.Config, tc TaskConfig, deviceEnv map[string]string) *drivers.TaskConfig {
	t.Helper()
	if w.Steps == 0 {
		w.Steps = 2
	}
	if w.Mode == "" {
		w.Mode = workload.ModeNormal
	}
	tc.Command = testBinary(t)
	cfg := newTask(t, h, name, tc, deviceEnv)
	raw, _ := json.Marshal(w)
	cfg.Env[workloadEnv] = string(raw)
	return cfg
}

// collectEvents gathers task events until the test ends. It returns once
// the driver's side of the event stream is open: the harness opens it over
// gRPC after TaskEvents returns, and an event the driver emits before then
// reaches no one.
func collectEvents(t *testing.T, h *dtestutil.DriverHarness) func(taskID, sub string) []*drivers.TaskEvent {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ch, err := h.TaskEvents(ctx)
	must.NoError(t, err)
	var mu = make(chan struct{}, 1)
	mu <- struct{}{}
	var events []*drivers.TaskEvent
	go func() {
		for ev := range ch {
			<-mu
			events = append(events, ev)
			mu <- struct{}{}
		}
	}()
	find := func(taskID, sub string) []*drivers.TaskEvent {
		<-mu
		defer func() { mu <- struct{}{} }()
		var out []*drivers.TaskEvent
		for _, ev := range events {
			if ev.TaskID == taskID && strings.Contains(ev.Message, sub) {
				out = append(out, ev)
			}
		}
		return out
	}
	d, ok := harnessDrivers.Load(h)
	must.True(t, ok, must.Sprint("collectEvents needs a harness from newHarness"))
	const probe = "collectEvents-probe"
	must.Wait(t, wait.InitialSuccess(wait.BoolFunc(func() bool {
		_ = d.(*Driver).eventer.EmitEvent(&drivers.TaskEvent{TaskID: probe, Message: probe, Timestamp: time.Now()})
		return len(find(probe, probe)) > 0
	}), wait.Timeout(10*time.Second), wait.Gap(20*time.Millisecond)), must.Sprint("the driver's event stream did not open"))
	return find
}

func TestBudgetBreachKillsTaskAndSaysWhy(t *testing.T) {
	conf, _ := simConfig(t)
	h, _ := newHarness(t, conf)
	events := collectEvents(t, h)
	grant := reservation.Grant{InstanceID: "GPU-test", GPUUUID: "GPU-test", Lane: -1, Slots: 1, MemoryMiB: 2048, SharePercent: 100}
	cfg := workloadTask(t, h, "greedy", workload.Config{Iterations: 50, IterationTime: 100 * time.Millisecond,
		PersistentMiB: 1024, EphemeralMiB: 512, Mode: workload.ModeExceed, ExceedAfter: 2}, TaskConfig{}, grantEnv(grant))
	_, _, err := h.StartTask(cfg)
	must.NoError(t, err)
	res := waitExit(t, h, cfg.ID, 20*time.Second)
	must.Error(t, res.Err)
	must.StrContains(t, res.Err.Error(), "GPU memory budget exceeded on GPU-test")
	must.StrContains(t, res.Err.Error(), "of its 2048 MiB budget")
	must.StrContains(t, res.Err.Error(), "pid ")
	must.NotEq(t, 0, res.ExitCode+res.Signal)
	must.SliceNotEmpty(t, waitEvents(events, cfg.ID, "killing the task", 5*time.Second))
}

func TestBudgetWarnPolicyLetsTaskFinish(t *testing.T) {
	conf, _ := simConfig(t)
	h, _ := newHarness(t, conf)
	events := collectEvents(t, h)
	grant := reservation.Grant{InstanceID: "GPU-test", GPUUUID: "GPU-test", Lane: -1, Slots: 1, MemoryMiB: 2048}
	// Over budget for about 1.8 s, so that a watchdog on a loaded machine
	// still samples it many times.
	cfg := workloadTask(t, h, "warned", workload.Config{Iterations: 20, IterationTime: 100 * time.Millisecond,
		PersistentMiB: 1024, EphemeralMiB: 512, Mode: workload.ModeExceed, ExceedAfter: 2},
		TaskConfig{GPUMemoryPolicy: "warn"}, grantEnv(grant))
	_, _, err := h.StartTask(cfg)
	must.NoError(t, err)
	res := waitExit(t, h, cfg.ID, 20*time.Second)
	must.Eq(t, 0, res.ExitCode)
	must.NoError(t, res.Err)
	must.SliceNotEmpty(t, waitEvents(events, cfg.ID, "warning: GPU memory budget exceeded", 5*time.Second))
}

// waitEvents polls for matching events: they travel over their own stream
// and may arrive after the task's exit.
func waitEvents(events func(taskID, sub string) []*drivers.TaskEvent, taskID, sub string, timeout time.Duration) []*drivers.TaskEvent {
	deadline := time.Now().Add(timeout)
	for {
		found := events(taskID, sub)
		if len(found) > 0 || time.Now().After(deadline) {
			return found
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestTaskCannotRaiseItsBudgetThroughEnv(t *testing.T) {
	conf, _ := simConfig(t)
	h, _ := newHarness(t, conf)
	grant := reservation.Grant{InstanceID: "GPU-test:lane0:slot0", GPUUUID: "GPU-test", Lane: 0, Slots: 2, MemoryMiB: 4096, SharePercent: 50}
	cfg := newTask(t, h, "sneaky", TaskConfig{Command: "/bin/sh", Args: []string{"-c", "env | sort"}}, grantEnv(grant))
	forged := grant
	forged.InstanceID, forged.MemoryMiB = "forged", 999999
	cfg.Env[forged.EnvName()] = forged.EnvValue()
	cfg.Env["CARAVAN_GPU_MEMORY_MIB"] = "999999"
	cfg.Env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = "0=999999M"
	_, _, err := h.StartTask(cfg)
	must.NoError(t, err)
	must.Eq(t, 0, waitExit(t, h, cfg.ID, 10*time.Second).ExitCode)
	out := readLog(t, cfg, "stdout")
	must.StrContains(t, out, "CARAVAN_GPU_MEMORY_MIB=4096\n")
	must.StrNotContains(t, out, "999999")
	must.StrContains(t, out, "TF_FORCE_GPU_ALLOW_GROWTH=true")
	must.StrContains(t, out, "XLA_PYTHON_CLIENT_MEM_FRACTION=0.25")
	must.StrContains(t, out, "CARAVAN_LANE=GPU-test/lane0")
	status, err := h.InspectTask(cfg.ID)
	must.NoError(t, err)
	must.Eq(t, "4096 MiB", status.DriverAttributes["caravan.budget.GPU-test"])
}

func TestBadTaskConfigNamesTheField(t *testing.T) {
	conf, _ := simConfig(t)
	h, _ := newHarness(t, conf)
	grant := reservation.Grant{InstanceID: "GPU-test", GPUUUID: "GPU-test", Lane: -1, Slots: 1, MemoryMiB: 2048}
	cases := []struct {
		tc   TaskConfig
		want string
	}{
		{TaskConfig{Command: "/bin/true", GPUMemory: "lots"}, "gpu_memory:"},
		{TaskConfig{Command: "/bin/true", GPUMemory: "4GiB"}, "gpu_memory: 4096 MiB is more than the 2048 MiB granted"},
		{TaskConfig{Command: "/bin/true", GPUMemoryPolicy: "pray"}, "gpu_memory_policy:"},
		{TaskConfig{Command: "/bin/true", MemoryProfile: MemoryProfile{Persistent: "x"}}, "memory_profile.persistent:"},
		{TaskConfig{Command: "/bin/true", MemoryProfile: MemoryProfile{Persistent: "0", Ephemeral: "512KiB"}}, "memory_profile: persistent + ephemeral must be at least 1 MiB"},
		{TaskConfig{Command: "/bin/true", WorkDir: "relative"}, "work_dir:"},
	}
	for _, c := range cases {
		cfg := newTask(t, h, "bad", c.tc, grantEnv(grant))
		_, _, err := h.StartTask(cfg)
		must.ErrorContains(t, err, c.want)
	}
}

func TestRootRefusedUnlessAllowed(t *testing.T) {
	conf, _ := simConfig(t)
	conf.AllowRoot = false
	conf.DefaultUser = "nobody"
	h, _ := newHarness(t, conf)
	cfg := newTask(t, h, "root", TaskConfig{Command: "/bin/true"}, nil)
	cfg.User = "root"
	_, _, err := h.StartTask(cfg)
	must.ErrorContains(t, err, "allow_root")

	cfg = newTask(t, h, "nobody", TaskConfig{Command: "/bin/sh", Args: []string{"-c", "id -un"}}, nil)
	// The harness makes its alloc dir 0700; Nomad's own are traversable.
	must.NoError(t, os.Chmod(filepath.Dir(cfg.AllocDir), 0o755))
	_, _, err = h.StartTask(cfg)
	must.NoError(t, err)
	must.Eq(t, 0, waitExit(t, h, cfg.ID, 10*time.Second).ExitCode)
	must.StrContains(t, readLog(t, cfg, "stdout"), "nobody")
}
