package plugin

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/caravan-gpu/caravan/driver/lane"
	"github.com/caravan-gpu/caravan/driver/proctree"
	"github.com/caravan-gpu/caravan/gpu/reservation"
)

// twoGPUConfig is simConfig on a fleet of two 16 GiB GPUs, GPU-a and GPU-b.
func twoGPUConfig(t *testing.T) Config {
	dir := t.TempDir()
	fleet := filepath.Join(dir, "fleet.json")
	must.NoError(t, os.WriteFile(fleet, []byte(`{"gpus":[{"uuid":"GPU-a","model":"Sim GPU","memory_mib":16384},{"uuid":"GPU-b","model":"Sim GPU","memory_mib":16384}]}`), 0o644))
	return Config{GPUBackend: "sim", Sim: SimConfig{FleetFile: fleet, StateDir: filepath.Join(dir, "state")},
		WatchdogInterval: "50ms", AllowRoot: true, DefaultUser: "root"}
}

func grantsEnv(grants ...reservation.Grant) map[string]string {
	env := map[string]string{}
	for _, g := range grants {
		env[g.EnvName()] = g.EnvValue()
	}
	env["CUDA_VISIBLE_DEVICES"] = reservation.VisibleDevices(grants)
	return env
}

// A task on lanes of two GPUs has each lane's budget on its GPU, is told
// each, and is a member of both lanes.
func TestTaskOnTwoLanesHasABudgetAndALanePerGPU(t *testing.T) {
	h, d := newHarness(t, twoGPUConfig(t))
	a := reservation.Grant{InstanceID: "GPU-a/lane0", GPUUUID: "GPU-a", Lane: 0, Slots: 1, MemoryMiB: 4096, SharePercent: 25}
	b := reservation.Grant{InstanceID: "GPU-b/lane1", GPUUUID: "GPU-b", Lane: 1, Slots: 1, MemoryMiB: 8192, SharePercent: 50}
	cfg := newTask(t, h, "wide", TaskConfig{Command: "/bin/sh", Args: []string{"-c", "env | sort; sleep 2"}}, grantsEnv(a, b))
	_, _, err := h.StartTask(cfg)
	must.NoError(t, err)

	must.Eq(t, []string{cfg.ID}, d.coord.Members(lane.Key{GPU: "GPU-a", Lane: 0}))
	must.Eq(t, []string{cfg.ID}, d.coord.Members(lane.Key{GPU: "GPU-b", Lane: 1}))
	status, err := h.InspectTask(cfg.ID)
	must.NoError(t, err)
	must.Eq(t, "4096 MiB", status.DriverAttributes["caravan.budget.GPU-a"])
	must.Eq(t, "8192 MiB", status.DriverAttributes["caravan.budget.GPU-b"])
	must.Eq(t, "GPU-a/lane0,GPU-b/lane1", status.DriverAttributes["caravan.lane"])

	must.Eq(t, 0, waitExit(t, h, cfg.ID, 10*time.Second).ExitCode)
	out := readLog(t, cfg, "stdout")
	must.StrContains(t, out, "CARAVAN_GPU_MEMORY_MIB_PER_GPU=0=4096,1=8192\n")
	must.StrContains(t, out, "CARAVAN_GPU_MEMORY_MIB=4096\n")
	must.StrContains(t, out, "CARAVAN_LANE=GPU-a/lane0,GPU-b/lane1\n")
}

// Two device blocks whose grants landed on one GPU are refused, naming the
// instances.
func TestTaskWithTwoInstancesOnOneGPUIsRefused(t *testing.T) {
	h, _ := newHarness(t, twoGPUConfig(t))
	a0 := reservation.Grant{InstanceID: "GPU-a/lane0", GPUUUID: "GPU-a", Lane: 0, Slots: 1, MemoryMiB: 4096}
	a1 := reservation.Grant{InstanceID: "GPU-a/lane1", GPUUUID: "GPU-a", Lane: 1, Slots: 1, MemoryMiB: 4096}
	cfg := newTask(t, h, "doubled", TaskConfig{Command: "/bin/true"}, grantsEnv(a0, a1))
	_, _, err := h.StartTask(cfg)
	must.ErrorContains(t, err, "instances GPU-a/lane0, GPU-a/lane1 are all on GPU GPU-a")
}

// A task with a cgroup is recorded for caravan-device by its cgroup, with
// the grants of its device env, until it is destroyed.
func TestGrantsRecordedByCgroup(t *testing.T) {
	if processControl() == proctree.Method {
		t.Skip("this host has no freezable cgroups for tasks (driver.caravan.process_control = signals)")
	}
	h, d := newHarness(t, twoGPUConfig(t))
	a := reservation.Grant{InstanceID: "GPU-a:lane0:slot0", GPUUUID: "GPU-a", Lane: 0, Slots: 1, MemoryMiB: 4096, SharePercent: 25}
	cfg := newTask(t, h, "recorded", TaskConfig{Command: "/bin/sh", Args: []string{"-c", "sleep 1"}}, grantsEnv(a))
	_, _, err := h.StartTask(cfg)
	must.NoError(t, err)
	th, ok := d.tasks.Get(cfg.ID)
	must.True(t, ok)
	name := filepath.Base(cgroupDir(th.Procs))
	recorded, err := reservation.ReadTaskGrants(grantsDir, os.Geteuid())
	must.NoError(t, err)
	must.Eq(t, []reservation.Grant{a}, recorded[name])

	must.Eq(t, 0, waitExit(t, h, cfg.ID, 10*time.Second).ExitCode)
	must.NoError(t, h.DestroyTask(cfg.ID, true))
	recorded, err = reservation.ReadTaskGrants(grantsDir, os.Geteuid())
	must.NoError(t, err)
	must.MapNotContainsKey(t, recorded, name)
}
