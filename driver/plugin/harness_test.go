package plugin

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/client/lib/cgroupslib"
	"github.com/hashicorp/nomad/helper/uuid"
	"github.com/hashicorp/nomad/nomad/structs"
	"github.com/hashicorp/nomad/plugins/base"
	"github.com/hashicorp/nomad/plugins/drivers"
	dtestutil "github.com/hashicorp/nomad/plugins/drivers/testutils"
	"github.com/shoenig/test/must"
)

// harnessDrivers maps each harness to the driver behind it, for helpers
// that need both.
var harnessDrivers sync.Map

// newHarness starts a driver behind Nomad's gRPC plugin harness, configured
// with conf (defaults filled in).
func newHarness(t *testing.T, conf Config) (*dtestutil.DriverHarness, *Driver) {
	h, d, _ := newStoppableHarness(t, conf)
	return h, d
}

// newStoppableHarness also returns a func that ends the driver's background
// work, as the death of the plugin process would.
func newStoppableHarness(t *testing.T, conf Config) (*dtestutil.DriverHarness, *Driver, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	d := New(ctx, hclog.New(&hclog.LoggerOptions{Name: t.Name(), Level: hclog.Warn, Output: os.Stderr}))
	h := dtestutil.NewDriverHarness(t, d)
	harnessDrivers.Store(h, d)
	t.Cleanup(func() { harnessDrivers.Delete(h) })
	// A task a test leaves running keeps its executor process alive after
	// the test binary exits: destroy what is left.
	t.Cleanup(func() {
		for _, th := range d.tasks.All() {
			_ = d.DestroyTask(th.Config.ID, true)
		}
	})
	// No h.Kill at cleanup: MkAllocDir's cleanup closes the client, which
	// stops the server over gRPC, and a second, direct Stop races with it
	// inside go-plugin.
	if conf.StateDir == "" {
		conf.StateDir = testStateDir
	}
	if conf.UIDRange == "" {
		// Tests run their tasks as root unless they say otherwise.
		conf.UIDRange = "none"
	}
	if conf.DefaultUser == "" {
		conf.DefaultUser = "root"
		conf.AllowRoot = true
	}
	var data []byte
	must.NoError(t, base.MsgPackEncode(&data, conf.withDefaults()))
	must.NoError(t, h.SetConfig(&base.Config{PluginConfig: data}))
	return h, d, cancel
}

// cgroupsNotReady says why Nomad's cgroups could not be set up as a Nomad
// client would (TestMain); empty when they are ready or the host has none.
var cgroupsNotReady string

// testStateDir is the drivers' state_dir unless a test names its own.
var testStateDir string

// newTask returns a task config for command with its alloc dir, cgroup and
// log fifos ready.
func newTask(t *testing.T, h *dtestutil.DriverHarness, name string, tc TaskConfig, deviceEnv map[string]string) *drivers.TaskConfig {
	t.Helper()
	cfg := newTaskWithoutCgroup(t, h, name, tc, deviceEnv)
	if cgroupslib.GetMode() != cgroupslib.OFF {
		h.MakeTaskCgroup(cfg.AllocID, name)
	}
	return cfg
}

// newTaskWithoutCgroup is newTask without the cgroup the Nomad client makes
// for every task.
func newTaskWithoutCgroup(t *testing.T, h *dtestutil.DriverHarness, name string, tc TaskConfig, deviceEnv map[string]string) *drivers.TaskConfig {
	t.Helper()
	if cgroupsNotReady != "" {
		t.Skip(cgroupsNotReady)
	}
	allocID := uuid.Generate()
	cfg := &drivers.TaskConfig{
		ID:        uuid.Generate(),
		AllocID:   allocID,
		Name:      name,
		DeviceEnv: deviceEnv,
		Env:       map[string]string{},
		Resources: &drivers.Resources{
			NomadResources: &structs.AllocatedTaskResources{
				Memory: structs.AllocatedMemoryResources{MemoryMB: 128},
				Cpu:    structs.AllocatedCpuResources{CpuShares: 100},
			},
			LinuxResources: &drivers.LinuxResources{
				MemoryLimitBytes: 128 << 20,
				CPUShares:        100,
				CpusetCgroupPath: cgroupslib.LinuxResourcesPath(allocID, name, false),
			},
		},
	}
	for k, v := range deviceEnv {
		cfg.Env[k] = v
	}
	if tc.FrameworkHints == false && tc.GPUMemoryPolicy == "" {
		tc.FrameworkHints = true
	}
	if tc.GPUProcesses == 0 {
		tc.GPUProcesses = 1 // the hclspec default a jobspec gets
	}
	must.NoError(t, cfg.EncodeConcreteDriverConfig(&tc))
	cleanup := h.MkAllocDir(cfg, true)
	t.Cleanup(cleanup)
	return cfg
}

func waitExit(t *testing.T, h *dtestutil.DriverHarness, id string, timeout time.Duration) *drivers.ExitResult {
	t.Helper()
	ch, err := h.WaitTask(context.Background(), id)
	must.NoError(t, err)
	select {
	case res := <-ch:
		return res
	case <-time.After(timeout):
		t.Fatalf("task %s did not exit within %s", id, timeout)
		return nil
	}
}

// readLog returns a task's log once it holds whole lines, or what it holds
// after 5 s.
func readLog(t *testing.T, cfg *drivers.TaskConfig, stream string) string {
	t.Helper()
	return waitLog(t, cfg, stream, "\n")
}

// waitLog returns a task's log once it ends with suffix (and is not
// empty), or what it holds after 5 s: a running task's log can be read
// between two of its writes.
func waitLog(t *testing.T, cfg *drivers.TaskConfig, stream, suffix string) string {
	t.Helper()
	path := filepath.Join(cfg.TaskDir().LogDir, cfg.Name+"."+stream+".0")
	var data []byte
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		data, _ = os.ReadFile(path)
		if len(data) > 0 && strings.HasSuffix(string(data), suffix) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	return string(data)
}

func TestStartWaitRunsCommandToCompletionWithLogs(t *testing.T) {
	h, _ := newHarness(t, Config{})
	cfg := newTask(t, h, "hello", TaskConfig{Command: "/bin/sh", Args: []string{"-c", "echo out-line; echo err-line >&2; exit 3"}}, nil)
	_, _, err := h.StartTask(cfg)
	must.NoError(t, err)
	res := waitExit(t, h, cfg.ID, 20*time.Second)
	must.Eq(t, 3, res.ExitCode)
	must.StrContains(t, readLog(t, cfg, "stdout"), "out-line")
	must.StrContains(t, readLog(t, cfg, "stderr"), "err-line")
	status, err := h.InspectTask(cfg.ID)
	must.NoError(t, err)
	must.Eq(t, drivers.TaskStateExited, status.State)
	must.NoError(t, h.DestroyTask(cfg.ID, false))
	_, err = h.InspectTask(cfg.ID)
	must.ErrorContains(t, err, drivers.ErrTaskNotFound.Error())
}
