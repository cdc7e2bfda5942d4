package plugin

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/client/allocdir"
	"github.com/hashicorp/nomad/client/lib/cgroupslib"
	"github.com/hashicorp/nomad/helper/uuid"
	"github.com/hashicorp/nomad/nomad/structs"
	"github.com/hashicorp/nomad/plugins/base"
	"github.com/hashicorp/nomad/plugins/drivers"
	"github.com/hashicorp/nomad/plugins/drivers/fsisolation"

	"github.com/caravan-gpu/caravan/gpu/reservation"
	"github.com/caravan-gpu/caravan/gpu/sim"
)

// benchDriver is a configured driver on a simulated GPU, called in process.
func benchDriver(b *testing.B, watchdog string) (*Driver, string) {
	dir := b.TempDir()
	fleet := filepath.Join(dir, "fleet.json")
	if err := os.WriteFile(fleet, []byte(testFleet), 0o644); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	d := New(ctx, hclog.NewNullLogger())
	conf := Config{GPUBackend: "sim", Sim: SimConfig{FleetFile: fleet, StateDir: filepath.Join(dir, "state")},
		WatchdogInterval: watchdog, AllowRoot: true, DefaultUser: "root"}
	var data []byte
	if err := base.MsgPackEncode(&data, conf.withDefaults()); err != nil {
		b.Fatal(err)
	}
	if err := d.SetConfig(&base.Config{PluginConfig: data}); err != nil {
		b.Fatal(err)
	}
	return d, conf.Sim.StateDir
}

// benchTask builds an alloc dir and cgroup the way the Nomad client does.
func benchTask(b *testing.B, command string, args ...string) *drivers.TaskConfig {
	if cgroupsNotReady != "" {
		b.Skip(cgroupsNotReady)
	}
	allocID, name := uuid.Generate(), "bench"
	root, mounts := b.TempDir(), b.TempDir()
	ad := allocdir.NewAllocDir(hclog.NewNullLogger(), root, mounts, allocID)
	if err := ad.Build(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = ad.Destroy() }) // unmounts the secrets tmpfs
	for _, f := range []string{"stdout", "stderr"} {
		if err := os.WriteFile(filepath.Join(root, f), nil, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	td := ad.NewTaskDir(&structs.Task{Name: name})
	if err := td.Build(fsisolation.None, nil, "root"); err != nil {
		b.Fatal(err)
	}
	if cgroupslib.GetMode() != cgroupslib.OFF {
		f := cgroupslib.Factory(allocID, name, false)
		if err := f.Setup(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = f.Kill(); _ = f.Teardown() })
	}
	grant := reservation.Grant{InstanceID: "GPU-test", GPUUUID: "GPU-test", Lane: -1, Slots: 1, MemoryMiB: 2048}
	cfg := &drivers.TaskConfig{
		ID: uuid.Generate(), AllocID: allocID, Name: name, AllocDir: ad.AllocDir,
		Env: map[string]string{}, DeviceEnv: grantEnv(grant),
		StdoutPath: filepath.Join(root, "stdout"), StderrPath: filepath.Join(root, "stderr"),
		Resources: &drivers.Resources{
			NomadResources: &structs.AllocatedTaskResources{Memory: structs.AllocatedMemoryResources{MemoryMB: 128}},
			LinuxResources: &drivers.LinuxResources{MemoryLimitBytes: 128 << 20, CPUShares: 100,
				CpusetCgroupPath: cgroupslib.LinuxResourcesPath(allocID, name, false)},
		},
	}
	if err := cfg.EncodeConcreteDriverConfig(&TaskConfig{Command: command, Args: args, FrameworkHints: true, GPUProcesses: 1}); err != nil {
		b.Fatal(err)
	}
	return cfg
}

func benchWait(b *testing.B, d *Driver, id string) *drivers.ExitResult {
	ch, err := d.WaitTask(context.Background(), id)
	if err != nil {
		b.Fatal(err)
	}
	select {
	case res := <-ch:
		return res
	case <-time.After(30 * time.Second):
		b.Fatal("task did not exit")
		return nil
	}
}

// BenchmarkForkExec is the baseline for BenchmarkStartTask: a plain
// fork/exec of the same command, run to completion.
func BenchmarkForkExec(b *testing.B) {
	for i := 0; i < b.N; i++ {
		if err := exec.Command("/bin/true").Run(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStartTask starts /bin/true through the driver (executor process,
// cgroups, budget and env) and waits for it to exit.
func BenchmarkStartTask(b *testing.B) {
	d, _ := benchDriver(b, "500ms")
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		cfg := benchTask(b, "/bin/true")
		b.StartTimer()
		if _, _, err := d.StartTask(cfg); err != nil {
			b.Fatal(err)
		}
		if res := benchWait(b, d, cfg.ID); res.ExitCode != 0 {
			b.Fatalf("exit %d", res.ExitCode)
		}
		b.StopTimer()
		_ = d.DestroyTask(cfg.ID, true)
		b.StartTimer()
	}
}

// BenchmarkBudgetBreachReaction measures the time from a task's GPU memory
// going over budget to the task having exited, with a 10ms watchdog.
func BenchmarkBudgetBreachReaction(b *testing.B) {
	d, stateDir := benchDriver(b, "10ms")
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		cfg := benchTask(b, "/bin/sleep", "600")
		if _, _, err := d.StartTask(cfg); err != nil {
			b.Fatal(err)
		}
		status, err := d.InspectTask(cfg.ID)
		if err != nil {
			b.Fatal(err)
		}
		pid, _ := strconv.Atoi(status.DriverAttributes["pid"])
		time.Sleep(30 * time.Millisecond) // a few clean samples first
		b.StartTimer()
		if err := sim.SetProcessMemory(stateDir, "GPU-test", pid, 4096); err != nil {
			b.Fatal(err)
		}
		if res := benchWait(b, d, cfg.ID); res.Err == nil {
			b.Fatal("task was not killed for its breach")
		}
		b.StopTimer()
		_ = d.DestroyTask(cfg.ID, true)
		b.StartTimer()
	}
}
