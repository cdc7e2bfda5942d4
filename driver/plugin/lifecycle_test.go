package plugin

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/hashicorp/nomad/plugins/drivers"
	dtestutil "github.com/hashicorp/nomad/plugins/drivers/testutils"
	"github.com/shoenig/test/must"

	"github.com/caravan-gpu/caravan/driver/workload"
	"github.com/caravan-gpu/caravan/gpu/reservation"
)

func TestPluginInfoCapabilitiesAndFingerprint(t *testing.T) {
	conf, stateDir := simConfig(t)
	h, _ := newHarness(t, conf)
	caps, err := h.Capabilities()
	must.NoError(t, err)
	must.True(t, caps.SendSignals)
	must.True(t, caps.Exec)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := h.Fingerprint(ctx)
	must.NoError(t, err)
	fp := <-ch
	must.Eq(t, drivers.HealthStateHealthy, fp.Health)
	must.Eq(t, "sim", *fp.Attributes["driver.caravan.gpu_backend"].String)
	// The simulated GPU checkpoints, as a real one with driver 550 or later.
	must.Eq(t, "cuda-checkpoint", *fp.Attributes["driver.caravan.switch_mechanism"].String)
	must.Eq(t, "sim", *fp.Attributes["driver.caravan.checkpoint_via"].String)
	must.Eq(t, processControl(), *fp.Attributes["driver.caravan.process_control"].String)
	must.Eq(t, int64(1), *fp.Attributes["driver.caravan.gpus_healthy"].Int)

	// A GPU fault shows in the next fingerprint.
	must.NoError(t, os.MkdirAll(stateDir+"/faults", 0o755))
	must.NoError(t, os.WriteFile(stateDir+"/faults/GPU-test", []byte("Xid 79: fell off the bus\n"), 0o644))
	d := h.Impl().(*Driver)
	fp = d.buildFingerprint()
	must.Eq(t, drivers.HealthStateUnhealthy, fp.Health)
	must.StrContains(t, fp.HealthDescription, "fell off the bus")
}

func TestBadPluginConfigNamesTheField(t *testing.T) {
	cases := []struct {
		conf Config
		want string
	}{
		{Config{GPUBackend: "cuda"}, "gpu_backend:"},
		{Config{GPUBackend: "sim"}, "sim.fleet_file:"},
		{Config{WatchdogInterval: "soon"}, "watchdog_interval:"},
		{Config{TimeSliceQuantum: "-1s"}, "time_slice_quantum:"},
		{Config{BudgetPolicy: "ignore"}, "budget_policy:"},
		{Config{SwitchMechanism: "pause"}, "switch_mechanism:"},
		{Config{MPS: "maybe"}, "mps:"},
		{Config{MeasureIterations: -2}, "measure_iterations:"},
		{Config{StateDir: "var/lib/caravan"}, "state_dir:"},
		{Config{UIDRange: "70000"}, "uid_range:"},
		{Config{UIDRange: "0-100"}, "uid_range:"},
		{Config{UIDRange: "80000-70000"}, "uid_range:"},
		{Config{UIDRange: "1000-99999999"}, "uid_range:"},
		{Config{UIDRange: "2000-4294967295"}, "uid_range:"},
	}
	for _, c := range cases {
		_, err := c.conf.parse()
		must.ErrorContains(t, err, c.want)
	}
}

func TestStopTaskSignalsThenKillsAfterTimeout(t *testing.T) {
	conf, _ := simConfig(t)
	h, _ := newHarness(t, conf)
	cfg := workloadTask(t, h, "stubborn", workload.Config{Iterations: 1000, IterationTime: 100 * time.Millisecond,
		Mode: workload.ModeIgnoreSignal}, TaskConfig{}, nil)
	_, _, err := h.StartTask(cfg)
	must.NoError(t, err)
	must.NoError(t, h.WaitUntilStarted(cfg.ID, 5*time.Second))
	// Its first progress line comes after it has started ignoring signals.
	must.StrContains(t, readLog(t, cfg, "stdout"), `"iteration":1`)
	start := time.Now()
	must.NoError(t, h.StopTask(cfg.ID, 700*time.Millisecond, "SIGTERM"))
	took := time.Since(start)
	must.Greater(t, 600*time.Millisecond, took) // it ignored SIGTERM for the whole timeout
	res := waitExit(t, h, cfg.ID, 5*time.Second)
	must.Eq(t, 9, res.Signal)
	must.NoError(t, h.DestroyTask(cfg.ID, false))
}

func TestSignalExecAndStats(t *testing.T) {
	conf, _ := simConfig(t)
	h, _ := newHarness(t, conf)
	grant := reservation.Grant{InstanceID: "GPU-test", GPUUUID: "GPU-test", Lane: -1, Slots: 1, MemoryMiB: 8192}
	cfg := workloadTask(t, h, "busy", workload.Config{Iterations: 1000, IterationTime: 100 * time.Millisecond,
		PersistentMiB: 3000, EphemeralMiB: 100}, TaskConfig{}, grantEnv(grant))
	_, _, err := h.StartTask(cfg)
	must.NoError(t, err)
	must.NoError(t, h.WaitUntilStarted(cfg.ID, 5*time.Second))

	res, err := h.ExecTask(cfg.ID, []string{"/bin/sh", "-c", "echo exec-ok"}, 5*time.Second)
	must.NoError(t, err)
	must.StrContains(t, string(res.Stdout), "exec-ok")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// CPU and memory over gRPC, as Nomad sees them.
	remote, err := h.TaskStats(ctx, cfg.ID, 100*time.Millisecond)
	must.NoError(t, err)
	select {
	case u := <-remote:
		must.NotNil(t, u.ResourceUsage.CpuStats)
		must.NotNil(t, u.ResourceUsage.MemoryStats)
	case <-time.After(5 * time.Second):
		t.Fatal("no stats over gRPC")
	}
	// Nomad's driver protocol has no field for GPU figures: the watchdog's
	// samples go to the driver's Prometheus metrics.
	d := h.Impl().(*Driver)
	series := "alloc_id=" + cfg.AllocID + ",gpu=GPU-test,task=" + cfg.Name
	deadline := time.Now().Add(5 * time.Second)
	for scrape(t, d, "caravan_driver_task_gpu_memory_mib")[series] < 3000 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	must.GreaterEq(t, 3000, scrape(t, d, "caravan_driver_task_gpu_memory_mib")[series])
	must.Eq(t, map[string]float64{series: 8192}, scrape(t, d, "caravan_driver_task_gpu_budget_mib"))

	must.NoError(t, h.SignalTask(cfg.ID, "SIGTERM"))
	r := waitExit(t, h, cfg.ID, 5*time.Second)
	must.NotEq(t, 0, r.ExitCode+r.Signal)
	must.ErrorContains(t, h.SignalTask("nope", "SIGTERM"), "task not found")
}

func TestRecoverTaskKeepsBudgetInNewDriver(t *testing.T) {
	conf, _ := simConfig(t)
	h1, _, stopDriver := newStoppableHarness(t, conf)
	grant := reservation.Grant{InstanceID: "GPU-test", GPUUUID: "GPU-test", Lane: -1, Slots: 1, MemoryMiB: 2048}
	// It exceeds its budget only after the first driver is gone.
	cfg := workloadTask(t, h1, "survivor", workload.Config{Iterations: 100, IterationTime: 200 * time.Millisecond,
		PersistentMiB: 1024, EphemeralMiB: 256, Mode: workload.ModeExceed, ExceedAfter: 8}, TaskConfig{}, grantEnv(grant))
	handle, _, err := h1.StartTask(cfg)
	must.NoError(t, err)
	must.NoError(t, h1.WaitUntilStarted(cfg.ID, 5*time.Second))
	// The plugin process goes away; the executor and the task stay. (The
	// harness itself is closed at cleanup: closing it twice races inside
	// go-plugin.)
	stopDriver()

	h2, _ := newHarness(t, conf)
	events := collectEvents(t, h2)
	must.NoError(t, h2.RecoverTask(handle))
	status, err := h2.InspectTask(cfg.ID)
	must.NoError(t, err)
	must.Eq(t, drivers.TaskStateRunning, status.State)
	must.Eq(t, "2048 MiB", status.DriverAttributes["caravan.budget.GPU-test"])
	must.Eq(t, "true", status.DriverAttributes["caravan.recovered"])

	res := waitExit(t, h2, cfg.ID, 20*time.Second)
	must.ErrorContains(t, res.Err, "of its 2048 MiB budget")
	must.SliceNotEmpty(t, waitEvents(events, cfg.ID, "recovered by a new driver process", 5*time.Second))
	must.NoError(t, h2.DestroyTask(cfg.ID, true))
}

var _ = dtestutil.NewDriverHarness
