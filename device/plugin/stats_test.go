package plugin

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caravan-gpu/caravan/gpu/reservation"
	"github.com/caravan-gpu/caravan/gpu/sim"
	"github.com/hashicorp/nomad/plugins/device"
	"github.com/shoenig/test/must"
)

// startLaneProcess starts a real process with the environment Reserve gave
// for ids, as a task would have.
func startLaneProcess(t *testing.T, d *Device, ids ...string) int {
	t.Helper()
	res, err := d.Reserve(ids)
	must.NoError(t, err)
	cmd := exec.Command("sleep", "60")
	for k, v := range res.Envs {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	must.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	// Until the child has exec'd, /proc shows the test's own environment,
	// and the plugin finds no grant there: a loaded machine can read it in
	// between. Wait until the plugin's own read finds one.
	deadline := time.Now().Add(10 * time.Second)
	for len(environGrants(cmd.Process.Pid)) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("process %d never showed its reservation's environment", cmd.Process.Pid)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return cmd.Process.Pid
}

func instanceStat(t *testing.T, groups []*device.DeviceGroupStats, id string) *device.DeviceStats {
	t.Helper()
	for _, g := range groups {
		if s, ok := g.InstanceStats[id]; ok {
			return s
		}
	}
	t.Fatalf("no stats for %s", id)
	return nil
}

func TestStats_LaneMemoryFromItsProcesses(t *testing.T) {
	d, stateDir := newSimDevice(t, testFleet, h100Lanes)
	firstFingerprint(t, d)

	lane1 := "GPU-h100-00:lane1:slot0"
	lane2 := "GPU-h100-00:lane2:slot0"
	pidA := startLaneProcess(t, d, lane1)
	pidB := startLaneProcess(t, d, lane2)
	must.NoError(t, sim.SetProcessMemory(stateDir, "GPU-h100-00", pidA, 6000))
	must.NoError(t, sim.SetProcessMemory(stateDir, "GPU-h100-00", pidB, 9000))

	groups, err := d.collectStats()
	must.NoError(t, err)
	// Nomad matches stats to fingerprinted groups by vendor, type and name.
	for _, g := range groups {
		for id := range g.InstanceStats {
			want := "gpu"
			if gpuOfLane(id) != id {
				want = "lane"
			}
			must.Eq(t, want, g.Type, must.Sprint(id))
		}
	}

	cases := []struct {
		id         string
		used       int64
		total      int64
		procs      int64
		gpuMemUsed int64
	}{
		{lane1, 6000, 20389, 1, 15000},
		{lane2, 9000, 20389, 1, 15000},
		{"GPU-h100-00:lane0:slot0", 0, 20389, 0, 15000},
		{"GPU-h100-01:lane0:slot0", 0, 20389, 0, 0},
	}
	for _, tc := range cases {
		t.Run(tc.id, func(t *testing.T) {
			s := instanceStat(t, groups, tc.id)
			must.Eq(t, tc.used, *s.Summary.IntNumeratorVal)
			must.Eq(t, tc.total, *s.Summary.IntDenominatorVal)
			attrs := s.Stats.Attributes
			must.Eq(t, tc.used, *attrs[statMemoryUsed].IntNumeratorVal)
			must.Eq(t, tc.total, *attrs[statMemoryTotal].IntNumeratorVal)
			must.Eq(t, tc.procs, *attrs[statProcesses].IntNumeratorVal)
			must.Eq(t, tc.gpuMemUsed, *attrs[statGPUMemoryUsed].IntNumeratorVal)
			must.Eq(t, int64(25), *attrs[statLaneShare].IntNumeratorVal)
			for _, name := range []string{statGPUUtil, statMemUtil, statPower, statTemperature, statECCL1, statECCL2, statECCDevice} {
				must.NotNil(t, attrs[name], must.Sprint(name))
			}
		})
	}

	// Whole GPUs and MIG instances report the device's own memory.
	t4 := instanceStat(t, groups, "GPU-t4-00")
	must.Eq(t, int64(15360), *t4.Summary.IntDenominatorVal)
	must.Nil(t, t4.Stats.Attributes[statProcesses])
	mig := instanceStat(t, groups, "MIG-a100-mig-0")
	must.Eq(t, int64(20096), *mig.Summary.IntDenominatorVal)
}

func TestStats_Stream(t *testing.T) {
	d, _ := newSimDevice(t, testFleet, h100Lanes)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := d.Stats(ctx, 50*time.Millisecond)
	must.NoError(t, err)
	for i := 0; i < 2; i++ {
		select {
		case resp := <-ch:
			must.NoError(t, resp.Error)
			instances := 0
			for _, g := range resp.Groups {
				instances += len(g.InstanceStats)
			}
			must.Eq(t, 15, instances)
		case <-time.After(5 * time.Second):
			t.Fatal("no stats")
		}
	}
	cancel()
	for range ch {
	}
}

func gpuOfLane(id string) string {
	gpu, _, _ := strings.Cut(id, ":")
	return gpu
}

// freshCgroup makes a cgroup in the v1 freezer hierarchy (or v2) and moves
// pid into it; it skips the test where it cannot (not root, no hierarchy).
func freshCgroup(t *testing.T, pid int) string {
	t.Helper()
	name := fmt.Sprintf("caravan-test-%d-%d", os.Getpid(), pid)
	for _, root := range []string{"/sys/fs/cgroup/freezer", "/sys/fs/cgroup"} {
		dir := filepath.Join(root, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
			_ = os.Remove(dir)
			continue
		}
		t.Cleanup(func() {
			// The process is killed by its own cleanup, registered first
			// and so run after this one: move it out before removing.
			_ = os.WriteFile(filepath.Join(root, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644)
			_ = os.Remove(dir)
		})
		return name
	}
	t.Skip("cannot make a cgroup here (needs root and a cgroup hierarchy)")
	return ""
}

// A process of a task the driver recorded is counted in the lane its cgroup
// was granted, whatever CARAVAN_DEV_ variables its environment claims; a
// process in no recorded cgroup is still found by its environment.
func TestStats_LaneByCgroupNotEnvironment(t *testing.T) {
	d, stateDir := newSimDevice(t, testFleet, h100Lanes)
	firstFingerprint(t, d)
	grantsDir = filepath.Join(t.TempDir(), "grants")
	t.Cleanup(func() { grantsDir = reservation.GrantsDir })

	lane1 := "GPU-h100-00:lane1:slot0"
	lane2 := "GPU-h100-00:lane2:slot0"
	// The task was granted lane1; its process claims lane2 in its env.
	forger := startLaneProcess(t, d, lane2)
	cg := freshCgroup(t, forger)
	insts, _, err := d.currentInstances()
	must.NoError(t, err)
	must.NoError(t, reservation.WriteTaskGrants(grantsDir, cg, []reservation.Grant{insts[lane1].grant()}))
	other := startLaneProcess(t, d, lane2)
	must.NoError(t, sim.SetProcessMemory(stateDir, "GPU-h100-00", forger, 6000))
	must.NoError(t, sim.SetProcessMemory(stateDir, "GPU-h100-00", other, 1000))

	groups, err := d.collectStats()
	must.NoError(t, err)
	must.Eq(t, int64(6000), *instanceStat(t, groups, lane1).Summary.IntNumeratorVal)
	must.Eq(t, int64(1000), *instanceStat(t, groups, lane2).Summary.IntNumeratorVal)
}
