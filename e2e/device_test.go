//go:build e2e

package e2e

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caravan-gpu/caravan/e2e/harness"
	"github.com/caravan-gpu/caravan/gpu/reservation"
	"github.com/caravan-gpu/caravan/gpu/sim"
	"github.com/hashicorp/nomad/api"
	"github.com/hashicorp/nomad/helper/pointer"
	"github.com/shoenig/test/must"
)

// deviceFleet is the heterogeneous fleet of the device tests: 2x H100 80GB,
// 2x A100 40GB and 4x T4.
const deviceFleet = harness.DefaultFleet

// h100Lanes cuts every H100 into four lanes; the A100s and T4s stay whole.
const h100Lanes = `
    partition {
      model = "NVIDIA H100*"
      lanes = 4
    }
`

// laneGroup is the H100s' lane layout: caravan-device offers it as a
// device group per lane index, "<layout> lane <L>", each with one instance
// per GPU.
const laneGroup = "NVIDIA H100 80GB HBM3 [4 lanes x 20389 MiB]"

// layoutName is the lane layout a device group belongs to (its layout
// attribute), or the group's own name for whole GPUs.
func layoutName(d *api.NodeDeviceResource) string {
	if a := d.Attributes["layout"]; a != nil && a.StringVal != nil {
		return *a.StringVal
	}
	return d.Name
}

// The device tests run tasks with raw_exec, so they exercise the device
// plugin and Nomad's scheduler on their own; the caravan driver has its own
// tests. The jobspecs default to the caravan driver.
const deviceTestDriver = "raw_exec"

func TestDevice(t *testing.T) {
	c := harness.StartT(t, harness.Options{Fleet: deviceFleet, DeviceConfig: h100Lanes})

	t.Run("lanes appear as devices", func(t *testing.T) {
		node := waitDeviceGroups(t, c, map[string]int{
			laneGroup:               8,
			"NVIDIA A100-SXM4-40GB": 2,
			"Tesla T4":              4,
		})
		for _, d := range node.NodeResources.Devices {
			if d.Name == "NVIDIA H100 80GB HBM3" {
				t.Fatalf("an H100 cut into lanes is also offered whole: %v", d.Instances)
			}
			if layoutName(d) != laneGroup {
				continue
			}
			must.StrHasPrefix(t, laneGroup+" lane ", d.Name)
			must.Len(t, 2, d.Instances, must.Sprint("one lane of each H100"))
			must.Eq(t, "nvidia", d.Vendor)
			must.Eq(t, "lane", d.Type, must.Sprint("lanes are a device type of their own"))
			for _, in := range d.Instances {
				must.StrContains(t, in.ID, ":lane")
				must.True(t, in.Healthy)
			}
			mem := d.Attributes["memory"]
			must.Eq(t, int64(20389), *mem.IntVal)
			must.Eq(t, "MiB", mem.Unit)
			must.Eq(t, int64(4), *d.Attributes["lanes_per_gpu"].IntVal)
			must.Eq(t, int64(25), *d.Attributes["lane_share"].IntVal)
		}
		out := c.NomadCLI(t, "node", "status", "-verbose", node.ID)
		must.StrContains(t, out, "nvidia/lane/"+laneGroup)
		must.StrContains(t, out, "nvidia/gpu/Tesla T4")
	})

	t.Run("a job asking for a lane of 10 GiB gets one", func(t *testing.T) {
		for i := 0; i < 3; i++ {
			job := runDeviceJob(t, c, "device-lane.nomad.hcl", fmt.Sprintf("lane-%d", i), map[string]string{"min_memory": "10 GiB"})
			alloc := waitRunning(t, c, job)
			dev := allocDevice(t, alloc)
			must.StrHasPrefix(t, laneGroup+" lane ", dev.Name)
			must.StrContains(t, dev.DeviceIDs[0], ":lane")
		}

		// The task sees the lane's grant in its environment.
		job := "lane-0"
		allocs, _, err := c.Nomad.Jobs().Allocations(job, false, nil)
		must.NoError(t, err)
		logs := waitLogs(t, c, allocs[0].ID, "CARAVAN_DEV_")
		var grant reservation.Grant
		for _, line := range strings.Split(logs, "\n") {
			if k, v, ok := strings.Cut(line, "="); ok && strings.HasPrefix(k, reservation.EnvPrefix) {
				grant, err = reservation.Parse(v)
				must.NoError(t, err)
			}
		}
		must.Eq(t, uint64(20389), grant.MemoryMiB)
		must.Eq(t, 25, grant.SharePercent)
		must.StrContains(t, logs, "CUDA_VISIBLE_DEVICES="+grant.GPUUUID)

		// The lane's memory comes from the processes granted it: put 5000 MiB
		// on the task's process in the simulated GPU and read it back from
		// the node's device stats.
		pid := pidWithEnv(t, grant.EnvName()+"="+grant.EnvValue())
		must.NoError(t, sim.SetProcessMemory(c.StateDir, grant.GPUUUID, pid, 5000))
		node, err := c.Node()
		must.NoError(t, err)
		out := waitCLI(t, c, "5000 / 20389 MiB", "node", "status", "-verbose", node.ID)
		must.StrContains(t, lineWith(out, "["+grant.InstanceID+"]"), "5000 / 20389 MiB")
		out = waitCLI(t, c, "memory_used", "node", "status", "-verbose", "-stats", node.ID)
		must.StrContains(t, out, "lane_share")

		// Nomad shows an allocation's device stats beside its task's own
		// stats, so they appear when the task driver reports task stats.
		out = c.NomadCLI(t, "alloc", "status", "-stats", allocs[0].ID)
		if strings.Contains(out, "Memory Stats") || strings.Contains(out, "CPU Stats") {
			must.StrContains(t, out, "Device Stats")
			must.StrContains(t, out, "memory_used")
		} else {
			t.Logf("%s reports no task stats here, so Nomad shows no device stats for the allocation", deviceTestDriver)
		}
		stopJobs(t, c, "lane-0", "lane-1", "lane-2")
	})

	t.Run("a whole-GPU job never gets a GPU cut into lanes", func(t *testing.T) {
		// Only the A100s are 40 GiB whole GPUs; the 80 GiB H100s are lanes.
		var jobs []string
		for i := 0; i < 3; i++ {
			jobs = append(jobs, *runDeviceJob(t, c, "device-whole.nomad.hcl", fmt.Sprintf("whole-%d", i), map[string]string{"min_memory": "40 GiB"}).ID)
		}
		running, waiting := 0, 0
		deadline := time.Now().Add(60 * time.Second)
		for time.Now().Before(deadline) {
			running, waiting = 0, 0
			for _, id := range jobs {
				allocs, _, err := c.Nomad.Jobs().Allocations(id, false, nil)
				must.NoError(t, err)
				if len(allocs) > 0 && allocs[0].ClientStatus == "running" {
					running++
				} else if len(allocs) == 0 && hasBlockedEval(t, c, id) {
					waiting++
				}
			}
			if running == 2 && waiting == 1 {
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
		must.Eq(t, 2, running)
		must.Eq(t, 1, waiting)
		for _, id := range jobs {
			allocs, _, _ := c.Nomad.Jobs().Allocations(id, false, nil)
			for _, stub := range allocs {
				alloc, _, err := c.Nomad.Allocations().Info(stub.ID, nil)
				must.NoError(t, err)
				dev := allocDevice(t, alloc)
				must.Eq(t, "NVIDIA A100-SXM4-40GB", dev.Name)
				must.StrNotContains(t, dev.DeviceIDs[0], "h100")
			}
		}
		stopJobs(t, c, jobs...)
	})

	// Lanes are asked for by name: a plain request for two GPUs gets two
	// whole GPUs, never lanes, and never one GPU twice.
	t.Run("count = 2 gets two GPUs", func(t *testing.T) {
		for i := 0; i < 3; i++ {
			id := fmt.Sprintf("two-gpus-%d", i)
			alloc := waitRunning(t, c, registerSleepJob(t, c, id, "nvidia/gpu", 2))
			ids := allocDeviceIDs(alloc)
			must.Len(t, 2, ids)
			must.NotEq(t, ids[0], ids[1])
			for _, dev := range ids {
				must.StrNotContains(t, dev, ":lane", must.Sprintf("%s got a lane for a plain GPU request", id))
			}
			stopJobs(t, c, id)
		}
	})

	// Nomad takes a request's instances from one device group, and each
	// lane group holds one lane of each GPU: a request for two lanes runs
	// on two GPUs, every time, and is never refused.
	t.Run("count = 2 lanes are two GPUs, every time", func(t *testing.T) {
		for i := 0; i < 20; i++ {
			id := fmt.Sprintf("two-lanes-%d", i)
			alloc := waitRunning(t, c, registerSleepJob(t, c, id, "nvidia/lane", 2))
			ids := allocDeviceIDs(alloc)
			must.Len(t, 2, ids)
			must.NotEq(t, gpuOfInstance(ids[0]), gpuOfInstance(ids[1]), must.Sprintf("%s runs on two lanes of one GPU", id))
			stopJobs(t, c, id)
		}
	})

	t.Run("a model affinity is honoured", func(t *testing.T) {
		for i, model := range []string{"Tesla T4", "NVIDIA A100-SXM4-40GB", "Tesla T4", "NVIDIA A100-SXM4-40GB"} {
			job := runDeviceJob(t, c, "device-affinity.nomad.hcl", fmt.Sprintf("affinity-%d", i), map[string]string{"model": model})
			alloc := waitRunning(t, c, job)
			dev := allocDevice(t, alloc)
			must.Eq(t, model, dev.Name, must.Sprintf("job %d preferred %s", i, model))
		}
	})
}

func TestDevice_FourLanesFillAndTheFifthWaits(t *testing.T) {
	// One H100 cut into four lanes, beside a GPU too small for the job.
	fleet := `{
  "gpus": [
    {"uuid": "GPU-h100", "model": "NVIDIA H100 80GB HBM3", "architecture": "hopper",
     "compute_capability": "9.0", "memory_mib": 81559, "sm_count": 132},
    {"uuid": "GPU-p4", "model": "Tesla P4", "architecture": "pascal",
     "compute_capability": "6.1", "memory_mib": 7680, "sm_count": 20}
  ]
}`
	c := harness.StartT(t, harness.Options{Fleet: fleet, DeviceConfig: h100Lanes})
	waitDeviceGroups(t, c, map[string]int{laneGroup: 4, "Tesla P4": 1})

	lanes := map[string]string{}
	for i := 0; i < 4; i++ {
		job := runDeviceJob(t, c, "device-lane.nomad.hcl", fmt.Sprintf("fill-%d", i), map[string]string{"min_memory": "10 GiB"})
		alloc := waitRunning(t, c, job)
		id := allocDevice(t, alloc).DeviceIDs[0]
		must.MapNotContainsKey(t, lanes, id, must.Sprintf("lane %s granted twice", id))
		lanes[id] = *job.ID
	}
	must.MapLen(t, 4, lanes)

	fifth := runDeviceJob(t, c, "device-lane.nomad.hcl", "fill-4", map[string]string{"min_memory": "10 GiB"})
	deadline := time.Now().Add(30 * time.Second)
	for !hasBlockedEval(t, c, *fifth.ID) {
		must.True(t, time.Now().Before(deadline), must.Sprint("the fifth job has no blocked evaluation"))
		time.Sleep(250 * time.Millisecond)
	}
	allocs, _, err := c.Nomad.Jobs().Allocations(*fifth.ID, false, nil)
	must.NoError(t, err)
	must.SliceEmpty(t, allocs, must.Sprint("the fifth job was placed although all four lanes are taken"))

	// Freeing a lane lets the fifth job in, on the lane that was freed.
	var freed string
	for id, job := range lanes {
		freed = id
		stopJobs(t, c, job)
		break
	}
	alloc := waitRunning(t, c, fifth)
	must.Eq(t, freed, allocDevice(t, alloc).DeviceIDs[0])
}

// runDeviceJob registers a jobspec from jobspecs/ under id.
func runDeviceJob(t *testing.T, c *harness.Cluster, file, id string, vars map[string]string) *api.Job {
	t.Helper()
	all := map[string]string{"driver": deviceTestDriver}
	for k, v := range vars {
		all[k] = v
	}
	job, err := c.ParseJobspec(c.Jobspec(file), all)
	must.NoError(t, err)
	job.ID, job.Name = &id, &id
	_, _, err = c.Nomad.Jobs().Register(job, nil)
	must.NoError(t, err)
	return job
}

func waitRunning(t *testing.T, c *harness.Cluster, job *api.Job) *api.Allocation {
	t.Helper()
	stubs := c.WaitAllocs(t, *job.ID, 1, 90*time.Second, harness.Running)
	alloc, _, err := c.Nomad.Allocations().Info(stubs[0].ID, nil)
	must.NoError(t, err)
	return alloc
}

func allocDevice(t *testing.T, alloc *api.Allocation) *api.AllocatedDeviceResource {
	t.Helper()
	for _, task := range alloc.AllocatedResources.Tasks {
		for _, d := range task.Devices {
			must.Len(t, 1, d.DeviceIDs)
			return d
		}
	}
	t.Fatalf("allocation %s has no device", alloc.ID)
	return nil
}

// registerSleepJob registers a raw_exec job whose one task asks for count
// devices of the request name.
func registerSleepJob(t *testing.T, c *harness.Cluster, id, name string, count uint64) *api.Job {
	t.Helper()
	job := api.NewBatchJob(id, id, "global", 50)
	task := api.NewTask("work", deviceTestDriver)
	task.Config = map[string]any{"command": "/bin/sleep", "args": []string{"3600"}}
	task.Require(&api.Resources{CPU: pointer.Of(50), MemoryMB: pointer.Of(32),
		Devices: []*api.RequestedDevice{{Name: name, Count: pointer.Of(count)}}})
	tg := api.NewTaskGroup("train", 1).AddTask(task)
	tg.RestartPolicy = &api.RestartPolicy{Attempts: pointer.Of(0), Mode: pointer.Of("fail")}
	tg.ReschedulePolicy = &api.ReschedulePolicy{Attempts: pointer.Of(0), Unlimited: pointer.Of(false)}
	job.AddTaskGroup(tg)
	_, _, err := c.Nomad.Jobs().Register(job, nil)
	must.NoError(t, err)
	return job
}

// allocDeviceIDs lists every device instance an allocation holds.
func allocDeviceIDs(alloc *api.Allocation) []string {
	var ids []string
	for _, task := range alloc.AllocatedResources.Tasks {
		for _, d := range task.Devices {
			ids = append(ids, d.DeviceIDs...)
		}
	}
	return ids
}

// gpuOfInstance is the GPU UUID of an instance ID ("GPU-x:lane2:slot0").
func gpuOfInstance(id string) string {
	gpu, _, _ := strings.Cut(id, ":")
	return gpu
}

func hasBlockedEval(t *testing.T, c *harness.Cluster, jobID string) bool {
	t.Helper()
	evals, _, err := c.Nomad.Jobs().Evaluations(jobID, nil)
	must.NoError(t, err)
	for _, e := range evals {
		if e.Status == "blocked" {
			return true
		}
	}
	return false
}

func stopJobs(t *testing.T, c *harness.Cluster, ids ...string) {
	t.Helper()
	for _, id := range ids {
		_, _, err := c.Nomad.Jobs().Deregister(id, true, nil)
		must.NoError(t, err)
	}
	for _, id := range ids {
		deadline := time.Now().Add(60 * time.Second)
		for {
			allocs, _, err := c.Nomad.Jobs().Allocations(id, true, nil)
			done := err == nil
			for _, a := range allocs {
				done = done && (a.ClientStatus != "running" && a.ClientStatus != "pending")
			}
			if done {
				break
			}
			must.True(t, time.Now().Before(deadline), must.Sprintf("job %s did not stop", id))
			time.Sleep(250 * time.Millisecond)
		}
	}
}

// waitDeviceGroups waits until the node shows exactly these caravan device
// groups with these instance counts.
func waitDeviceGroups(t *testing.T, c *harness.Cluster, want map[string]int) *api.Node {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var got map[string]int
	for time.Now().Before(deadline) {
		node, err := c.Node()
		if err == nil && node.NodeResources != nil {
			got = map[string]int{}
			for _, d := range node.NodeResources.Devices {
				if d.Vendor == "nvidia" && (d.Type == "gpu" || d.Type == "lane") {
					got[layoutName(d)] += len(d.Instances)
				}
			}
			if fmt.Sprint(got) == fmt.Sprint(want) {
				return node
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("device groups: want %v, have %v", want, got)
	return nil
}

func waitLogs(t *testing.T, c *harness.Cluster, allocID, want string) string {
	t.Helper()
	return waitCLI(t, c, want, "alloc", "logs", allocID, "work")
}

// waitCLI runs a nomad command until its output contains want.
func waitCLI(t *testing.T, c *harness.Cluster, want string, args ...string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var out string
	for time.Now().Before(deadline) {
		out, _ = c.NomadCommand(args...)
		if strings.Contains(out, want) {
			return out
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("nomad %s: no %q in:\n%s", strings.Join(args, " "), want, out)
	return ""
}

// pidWithEnv finds a process whose environment holds kv, as a task's
// processes hold the CARAVAN_DEV_ variable Reserve gave the task.
func pidWithEnv(t *testing.T, kv string) int {
	t.Helper()
	paths, err := filepath.Glob("/proc/[0-9]*/environ")
	must.NoError(t, err)
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		for _, e := range bytes.Split(data, []byte{0}) {
			if string(e) == kv {
				pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p)))
				must.NoError(t, err)
				return pid
			}
		}
	}
	t.Fatalf("no process has %s in its environment", kv)
	return 0
}

func lineWith(out, substr string) string {
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, substr) {
			return line
		}
	}
	return ""
}

// An MPS failure degrades MPS only: the node's GPUs and lanes stay listed in
// Nomad, their attributes say MPS is down and why, and a job still gets a
// lane, without MPS settings.
func TestDevice_MPSFailureKeepsTheGPUs(t *testing.T) {
	fleet := `{"gpus": [
    {"uuid": "GPU-h100", "model": "NVIDIA H100 80GB HBM3", "architecture": "hopper",
     "compute_capability": "9.0", "memory_mib": 81559, "sm_count": 132},
    {"uuid": "GPU-p4", "model": "Tesla P4", "memory_mib": 7680}]}`
	// A control binary that exits with an error, as a broken MPS install does.
	failing := filepath.Join(t.TempDir(), "nvidia-cuda-mps-control")
	must.NoError(t, os.WriteFile(failing, []byte("#!/bin/sh\necho 'cannot start the MPS control daemon' >&2\nexit 1\n"), 0o755))
	must.NoError(t, os.WriteFile(filepath.Join(filepath.Dir(failing), "nvidia-cuda-mps-server"), []byte("#!/bin/sh\n"), 0o755))
	// An operator's daemon, for contrast: its control pipe exists.
	listening := t.TempDir()
	must.NoError(t, os.WriteFile(filepath.Join(listening, "control"), nil, 0o644))

	cases := []struct {
		name    string
		mps     string
		state   string
		why     string
		taskEnv string // in the task's env when MPS serves it
	}{
		{"control binary missing", `control_bin = "/nonexistent/nvidia-cuda-mps-control"`, "down",
			"mps: /nonexistent/nvidia-cuda-mps-control not found", ""},
		{"control binary fails", `control_bin = "` + failing + `"`, "down",
			"cannot start the MPS control daemon", ""},
		{"operator's daemon listens", `mode = "external"
      pipe_dir = "` + listening + `"`, "ready", "", "CUDA_MPS_PIPE_DIRECTORY=" + listening},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pipeDir := ""
			if !strings.Contains(tc.mps, "pipe_dir") {
				pipeDir = `pipe_dir = "` + t.TempDir() + `"`
			}
			c := harness.StartT(t, harness.Options{Fleet: fleet, DeviceConfig: h100Lanes + `
    mps {
      enabled = true
      log_dir = "` + t.TempDir() + `"
      ` + pipeDir + `
      ` + tc.mps + `
    }`})
			node := waitDeviceGroups(t, c, map[string]int{laneGroup: 4, "Tesla P4": 1})
			for _, d := range node.NodeResources.Devices {
				must.Eq(t, tc.state, *d.Attributes["mps"].StringVal, must.Sprint(d.Name))
				if tc.why != "" {
					must.StrContains(t, *d.Attributes["mps_error"].StringVal, tc.why)
				}
				for _, in := range d.Instances {
					must.True(t, in.Healthy)
				}
			}

			job := runDeviceJob(t, c, "device-lane.nomad.hcl", "mps-lane", map[string]string{"min_memory": "10 GiB"})
			alloc := waitRunning(t, c, job)
			must.StrContains(t, allocDevice(t, alloc).DeviceIDs[0], ":lane")
			logs := waitLogs(t, c, alloc.ID, "CARAVAN_DEV_")
			if tc.taskEnv != "" {
				logs = waitLogs(t, c, alloc.ID, tc.taskEnv)
				must.StrContains(t, logs, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=20389M")
			} else {
				must.StrNotContains(t, logs, "CUDA_MPS_")
			}
			stopJobs(t, c, *job.ID)
		})
	}
}

// The device plugin's figures reach the operator through its Prometheus
// endpoint while it runs inside a real Nomad client: the fleet's GPUs and
// lanes by health, GPU and lane memory from the stats Nomad asks for, and a
// GPU fault as it happens.
func TestDevice_MetricsReachPrometheus(t *testing.T) {
	addr := freeAddr(t)
	c := harness.StartT(t, harness.Options{Fleet: deviceFleet, DeviceConfig: h100Lanes + `
    metrics_address = "` + addr + `"
`})
	url := "http://" + addr + "/metrics"
	const h100 = `model="NVIDIA H100 80GB HBM3"`
	var samples []metricSample
	scrapeUntil := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for time.Now().Before(deadline) {
			if body, err := httpGet(url); err == nil {
				samples = parseMetrics(string(body))
				if ok() {
					return
				}
			}
			time.Sleep(500 * time.Millisecond)
		}
		t.Fatalf("metrics at %s never showed %s: %v", url, what, samples)
	}
	value := func(name string, labels ...string) float64 {
		for _, s := range samples {
			if s.name != name {
				continue
			}
			all := true
			for _, l := range labels {
				all = all && strings.Contains(s.labels, l)
			}
			if all {
				return s.value
			}
		}
		return -1
	}

	scrapeUntil("the fleet and its memory", func() bool {
		return value("caravan_device_gpus", h100, `health="healthy"`) == 2 &&
			value("caravan_device_lanes", h100, `health="healthy"`) == 8 &&
			value("caravan_device_gpus", `model="NVIDIA A100-SXM4-40GB"`, `health="healthy"`) == 2 &&
			value("caravan_device_gpus", `model="Tesla T4"`, `health="healthy"`) == 4 &&
			value("caravan_device_gpu_memory_total_mib", `gpu="GPU-h100-00"`) == 81559 &&
			value("caravan_device_lane_memory_size_mib", `gpu="GPU-h100-01"`, `lane="GPU-h100-01:lane3:slot0"`) == 20389
	})
	must.Eq(t, 1, value("caravan_device_mps_state", `state="off"`))
	must.Eq(t, 1, value("caravan_device_checkpoint_supported", `mechanism="sim"`))
	must.Positive(t, value("caravan_device_fingerprint_seconds_count"))
	must.Eq(t, 0, value("caravan_device_fingerprint_errors_total"))

	must.NoError(t, sim.InjectFault(c.StateDir, "GPU-h100-01", "Xid 79: GPU has fallen off the bus"))
	scrapeUntil("the faulty GPU", func() bool {
		return value("caravan_device_gpus", h100, `health="unhealthy"`) == 1 &&
			value("caravan_device_lanes", h100, `health="unhealthy"`) == 4 &&
			value("caravan_device_gpu_healthy", `gpu="GPU-h100-01"`) == 0 &&
			value("caravan_device_gpu_healthy", `gpu="GPU-h100-00"`) == 1
	})
}
