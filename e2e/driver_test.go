//go:build e2e

package e2e

import (
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caravan-gpu/caravan/e2e/harness"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// laneFleet is one T4 that the device plugin cuts into one lane of two slots.
const laneFleet = `{"driver_version": "550.54.15", "cuda_version": "12.4", "gpus": [
  {"uuid": "GPU-lane", "model": "Tesla T4", "architecture": "turing", "compute_capability": "7.5",
   "memory_mib": 15360, "sm_count": 40}]}`

func workloadVars(c *harness.Cluster) map[string]string {
	return map[string]string{"workload": filepath.Join(c.BinDir, "caravan-workload")}
}

func TestDriverOverBudgetIsKilledWithReason(t *testing.T) {
	c := harness.StartT(t, harness.Options{})
	job := c.RunJobspec(t, c.Jobspec("driver-over-budget.nomad.hcl"), workloadVars(c))
	allocs := c.WaitAllocs(t, *job.ID, 1, 2*time.Minute, harness.Terminal)
	must.Eq(t, "failed", allocs[0].ClientStatus)
	out := c.NomadCLI(t, "alloc", "status", allocs[0].ID)
	must.StrContains(t, out, "GPU memory budget exceeded")
	must.StrContains(t, out, "2048 MiB budget")
}

// TestDriverMillisecondSpikeIsKilledWithReason: the job goes past its budget
// for about a millisecond per iteration, between the watchdog's samples
// (every 500 ms). The peak the GPU recorded for the process still shows it,
// and the task is killed with that peak in its reason.
func TestDriverMillisecondSpikeIsKilledWithReason(t *testing.T) {
	c := harness.StartT(t, harness.Options{})
	job := c.RunJobspec(t, c.Jobspec("driver-spike-over-budget.nomad.hcl"), workloadVars(c))
	allocs := c.WaitAllocs(t, *job.ID, 1, 2*time.Minute, harness.Terminal)
	out := c.NomadCLI(t, "alloc", "status", allocs[0].ID)
	must.Eq(t, "failed", allocs[0].ClientStatus, must.Sprint(out))
	must.StrContains(t, out, "GPU memory budget exceeded")
	must.StrContains(t, out, "2561 MiB of its 2048 MiB budget")
}

// TestDriverMillisecondSpikeUnderMPSFailsAtAllocation: where MPS runs, the
// task's MPS client limit refuses the spike when it is allocated (the sim
// backend models the MPS server's check); the job sees CUDA's out-of-memory
// error and fails, and nothing was held past the budget.
func TestDriverMillisecondSpikeUnderMPSFailsAtAllocation(t *testing.T) {
	c := harness.StartT(t, harness.Options{DriverConfig: `
    mps = "on"`})
	job := c.RunJobspec(t, c.Jobspec("driver-spike-over-budget.nomad.hcl"), workloadVars(c))
	allocs := c.WaitAllocs(t, *job.ID, 1, 2*time.Minute, harness.Terminal)
	out := c.NomadCLI(t, "alloc", "status", allocs[0].ID)
	must.Eq(t, "failed", allocs[0].ClientStatus, must.Sprint(out))
	must.StrContains(t, out, "Exit Code: 1")
	must.StrNotContains(t, out, "GPU memory budget exceeded")
	stderr := c.NomadCLI(t, "alloc", "logs", "-stderr", allocs[0].ID, "train")
	must.StrContains(t, stderr, "CUDA error: out of memory: 2561 MiB is past the MPS pinned device memory limit of 2048 MiB")
}

// TestDriverTwoProcessesAreHeldToTheirShares: the GPU records peaks per
// process, so a task's processes are each held to a share of the budget
// (gpu_processes). One task's two processes spike past their shares for a
// millisecond, each still far within the whole budget; another runs a
// second process it did not declare. Both are killed with the reason.
func TestDriverTwoProcessesAreHeldToTheirShares(t *testing.T) {
	c := harness.StartT(t, harness.Options{})
	job := c.RunJobspec(t, c.Jobspec("driver-two-processes.nomad.hcl"), workloadVars(c))
	allocs := c.WaitAllocs(t, *job.ID, 2, 2*time.Minute, harness.Terminal)
	want := map[string]string{
		"declared":   "peaked at 2561 MiB of its 2048 MiB share of the 4096 MiB budget (gpu_processes = 2) between two samples",
		"undeclared": "2 processes hold memory there and gpu_processes = 1 allows 1",
	}
	for _, a := range allocs {
		out := c.NomadCLI(t, "alloc", "status", a.ID)
		must.Eq(t, "failed", a.ClientStatus, must.Sprint(out))
		must.StrContains(t, out, "GPU memory budget exceeded")
		must.StrContains(t, out, want[a.TaskGroup], must.Sprint(a.TaskGroup))
	}
}

// TestDriverTwoProcessesUnderMPSAreLimitedToTheirShares: under MPS each of
// the task's two processes is an MPS client limited to its share, so each
// spike fails at allocation and nothing is held past a share.
func TestDriverTwoProcessesUnderMPSAreLimitedToTheirShares(t *testing.T) {
	c := harness.StartT(t, harness.Options{DriverConfig: `
    mps = "on"`})
	job := c.RunJobspec(t, c.Jobspec("driver-two-processes.nomad.hcl"), workloadVars(c))
	allocs := c.WaitAllocs(t, *job.ID, 2, 2*time.Minute, harness.Terminal)
	for _, a := range allocs {
		if a.TaskGroup != "declared" {
			continue
		}
		out := c.NomadCLI(t, "alloc", "status", a.ID)
		must.Eq(t, "failed", a.ClientStatus, must.Sprint(out))
		must.StrContains(t, out, "Exit Code: 1")
		must.StrNotContains(t, out, "GPU memory budget exceeded")
		stderr := c.NomadCLI(t, "alloc", "logs", "-stderr", a.ID, "train")
		must.Eq(t, 2, strings.Count(stderr, "CUDA error: out of memory: 2561 MiB is past the MPS pinned device memory limit of 2048 MiB"), must.Sprint(stderr))
		return
	}
	t.Fatal("no allocation of the declared group")
}

// processControl is how the node's caravan driver reaches tasks' processes
// (driver.caravan.process_control).
func processControl(t *testing.T, c *harness.Cluster) string {
	t.Helper()
	node, err := c.Node()
	must.NoError(t, err)
	pc := node.Drivers["caravan"].Attributes["driver.caravan.process_control"]
	must.NotEq(t, "", pc, must.Sprint("the driver fingerprints no driver.caravan.process_control"))
	return pc
}

// breachPID finds the process a breach names; the kernel cuts command
// names to 15 bytes ("caravan-workloa").
var breachPID = regexp.MustCompile(`pid (\d+) \(caravan-worklo`)

// TestDriverSetsidEscapeIsKilledWithReason: the task's GPU work runs in a
// process that left the task's process tree and process group (setsid from
// a child that exits). The driver still counts it against the budget
// through the task's cgroup and kills it with the task.
func TestDriverSetsidEscapeIsKilledWithReason(t *testing.T) {
	c := harness.StartT(t, harness.Options{})
	if pc := processControl(t, c); pc == "signals" {
		t.Skip("this host has no freezable cgroups for tasks (driver.caravan.process_control = signals): a setsid escape is not contained")
	}
	job := c.RunJobspec(t, c.Jobspec("driver-setsid-escape.nomad.hcl"), workloadVars(c))
	allocs := c.WaitAllocs(t, *job.ID, 1, 2*time.Minute, harness.Terminal)
	out := c.NomadCLI(t, "alloc", "status", allocs[0].ID)
	must.Eq(t, "failed", allocs[0].ClientStatus, must.Sprint(out))
	must.StrContains(t, out, "GPU memory budget exceeded")
	must.StrContains(t, out, "2048 MiB budget")
	// The process over budget is the escaped workload, not the task's shell.
	m := breachPID.FindStringSubmatch(out)
	must.SliceLen(t, 2, m, must.Sprintf("no caravan-workload pid in:\n%s", out))
	pid, _ := strconv.Atoi(m[1])
	must.False(t, runs(pid), must.Sprintf("escaped pid %d outlived its task", pid))
}

// runs reports whether pid is a live process (not a zombie).
func runs(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] != 'Z'
}

var taskUID = regexp.MustCompile(`(victim|prober) uid=(\d+) user=(\S+)`)

// TestDriverDynamicUsersCannotSignalEachOther: with dynamic_users the Nomad
// client gives each task of a job that names no user a UID of its own, and
// one task's kill(2) of the other is refused.
func TestDriverDynamicUsersCannotSignalEachOther(t *testing.T) {
	c := harness.StartT(t, harness.Options{DriverConfig: `
    dynamic_users = true`})
	job := c.RunJobspec(t, c.Jobspec("driver-dynamic-users.nomad.hcl"), nil)
	allocs := c.WaitAllocs(t, *job.ID, 1, 2*time.Minute, harness.Terminal)
	status := c.NomadCLI(t, "alloc", "status", allocs[0].ID)
	logs := c.NomadCLI(t, "alloc", "logs", allocs[0].ID, "prober") + c.NomadCLI(t, "alloc", "logs", allocs[0].ID, "victim")
	must.Eq(t, "complete", allocs[0].ClientStatus, must.Sprintf("%s\n%s", status, logs))
	must.StrContains(t, logs, "prober was refused")
	uids := map[string]int{}
	for _, m := range taskUID.FindAllStringSubmatch(logs, -1) {
		uid, _ := strconv.Atoi(m[2])
		uids[m[1]] = uid
		must.Eq(t, "nomad-"+m[2], m[3])
		must.Between(t, 80000, uid, 89999) // the client's default pool
	}
	must.MapLen(t, 2, uids, must.Sprint(logs))
	must.NotEq(t, uids["victim"], uids["prober"])
}

// oneLaneTwoSlots makes laneFleet's T4 one lane of two slots, so that two
// jobs share it.
const oneLaneTwoSlots = `
    partition {
      model = "Tesla T4"
      lanes = 1
      slots = 2
    }`

// timeSlicing is the driver config of tests whose lane jobs take turns,
// switching every quantum at an iteration boundary.
func timeSlicing(quantum string) string {
	return "\n    time_slice_quantum = \"" + quantum + "\"\n    iteration_grace    = \"500ms\""
}

func TestDriverLaneJobsAlternateAndBothComplete(t *testing.T) {
	c := harness.StartT(t, harness.Options{
		Fleet:        laneFleet,
		DeviceConfig: oneLaneTwoSlots,
		DriverConfig: timeSlicing("1s"),
	})
	vars := workloadVars(c)
	vars["iterations"] = "25"
	a := c.RunJobspec(t, c.Jobspec("driver-lane-a.nomad.hcl"), vars)
	b := c.RunJobspec(t, c.Jobspec("driver-lane-b.nomad.hcl"), vars)

	// Nomad keeps only a task's last 10 events, and each turn adds two, so
	// gather them while the jobs run rather than read them once at the end.
	seen := map[string][]string{}
	collect := func() (terminal int) {
		for _, job := range []*api.Job{a, b} {
			stubs, _, err := c.Nomad.Jobs().Allocations(*job.ID, false, nil)
			must.NoError(t, err)
			for _, stub := range stubs {
				if harness.Terminal(stub) {
					terminal++
				}
				alloc, _, err := c.Nomad.Allocations().Info(stub.ID, nil)
				must.NoError(t, err)
				for _, state := range alloc.TaskStates {
					for _, ev := range state.Events {
						seen[*job.ID] = appendNew(seen[*job.ID], ev.DisplayMessage)
					}
				}
			}
		}
		return terminal
	}
	deadline := time.Now().Add(3 * time.Minute)
	for collect() < 2 && time.Now().Before(deadline) {
		time.Sleep(300 * time.Millisecond)
	}
	for _, job := range []*api.Job{a, b} {
		allocs := c.WaitAllocs(t, *job.ID, 1, 10*time.Second, harness.Terminal)
		if allocs[0].ClientStatus != "complete" {
			t.Log(c.NomadCLI(t, "alloc", "logs", "-stderr", allocs[0].ID, "train"))
			t.Log(c.NomadCLI(t, "alloc", "logs", allocs[0].ID, "train"))
		}
		must.Eq(t, "complete", allocs[0].ClientStatus, must.Sprint(strings.Join(seen[*job.ID], "\n")))
	}
	// The client may report the final status a beat before the last
	// events, so keep reading a little longer until they are in.
	for end := time.Now().Add(15 * time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		collect()
		if anyContains(seen[*a.ID], "resumed in") && anyContains(seen[*b.ID], "resumed in") {
			break
		}
	}
	// Each task is checkpointed on the simulated GPU, as auto picks on a GPU
	// that can, and frozen the way the node says it reaches processes.
	via := "suspended in GPU-lane/lane0 via cuda-checkpoint (sim, " + processControl(t, c) + ")"
	for _, job := range []*api.Job{a, b} {
		events := strings.Join(seen[*job.ID], "\n")
		must.StrContains(t, events, "take turns")
		must.StrContains(t, events, via)
		must.StrContains(t, events, "resumed in GPU-lane/lane0")
	}
}

// TestDriverRefusesTwoInstancesOnOneGPU: a task whose two device blocks got
// the two slots of one GPU's lane is refused with an error naming them.
func TestDriverRefusesTwoInstancesOnOneGPU(t *testing.T) {
	c := harness.StartT(t, harness.Options{
		Fleet:        laneFleet,
		DeviceConfig: oneLaneTwoSlots,
	})
	job := c.RunJobspec(t, c.Jobspec("driver-two-blocks-one-gpu.nomad.hcl"), workloadVars(c))
	allocs := c.WaitAllocs(t, *job.ID, 1, 2*time.Minute, harness.Terminal)
	out := c.NomadCLI(t, "alloc", "status", allocs[0].ID)
	must.Eq(t, "failed", allocs[0].ClientStatus, must.Sprint(out))
	must.StrContains(t, out, "instances GPU-lane:lane0:slot0, GPU-lane:lane0:slot1 are all on GPU GPU-lane")
}

func appendNew(list []string, s string) []string {
	for _, have := range list {
		if have == s {
			return list
		}
	}
	return append(list, s)
}

func anyContains(list []string, sub string) bool {
	for _, s := range list {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

func TestDriverClientRestartRecoversTasks(t *testing.T) {
	c := harness.StartT(t, harness.Options{})
	job := c.RunJobspec(t, c.Jobspec("driver-long.nomad.hcl"), workloadVars(c))
	allocs := c.WaitAllocs(t, *job.ID, 1, 2*time.Minute, harness.Running)
	before := c.NomadCLI(t, "alloc", "status", allocs[0].ID)

	c.RestartClientT(t)

	// Still the same allocation, still running, with the recovery recorded.
	deadline := time.Now().Add(60 * time.Second)
	var out string
	for time.Now().Before(deadline) {
		out = c.NomadCLI(t, "alloc", "status", allocs[0].ID)
		if strings.Contains(out, "recovered by a new driver process") {
			break
		}
		time.Sleep(time.Second)
	}
	must.StrContains(t, out, "recovered by a new driver process", must.Sprintf("before restart:\n%s", before))
	after := c.WaitAllocs(t, *job.ID, 1, 30*time.Second, harness.Running)
	must.Eq(t, allocs[0].ID, after[0].ID)
	logs := c.NomadCLI(t, "alloc", "logs", allocs[0].ID, "train")
	must.StrContains(t, logs, `"its_per_sec"`)
}

// The driver's own figures (per-task GPU memory and budget, lane membership,
// turns) reach the operator through its Prometheus endpoint while the
// driver runs inside a real Nomad client.
func TestDriverMetricsReachPrometheus(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must.NoError(t, err)
	addr := ln.Addr().String()
	must.NoError(t, ln.Close())
	c := harness.StartT(t, harness.Options{
		Fleet:        laneFleet,
		DeviceConfig: oneLaneTwoSlots,
		DriverConfig: timeSlicing("1s") + `
    metrics_address    = "` + addr + `"`,
	})
	vars := workloadVars(c)
	vars["iterations"] = "40"
	a := c.RunJobspec(t, c.Jobspec("driver-lane-a.nomad.hcl"), vars)
	b := c.RunJobspec(t, c.Jobspec("driver-lane-b.nomad.hcl"), vars)
	allocA := c.WaitAllocs(t, *a.ID, 1, 2*time.Minute, harness.Running)[0].ID
	allocB := c.WaitAllocs(t, *b.ID, 1, 2*time.Minute, harness.Running)[0].ID

	url := "http://" + addr + "/metrics"
	var samples []metricSample
	// A task suspended with cuda-checkpoint holds no GPU memory, so each
	// task's memory is seen while it runs, not both at once.
	heldMemory := map[string]bool{}
	ready := func() bool {
		body, err := httpGet(url)
		if err != nil {
			return false
		}
		samples = parseMetrics(string(body))
		for _, alloc := range []string{allocA, allocB} {
			if sampleValue(samples, "caravan_driver_task_gpu_memory_mib", `alloc_id="`+alloc+`"`) > 0 {
				heldMemory[alloc] = true
			}
		}
		return sampleValue(samples, "caravan_driver_lane_tasks", `lane="GPU-lane/lane0"`) == 2 &&
			heldMemory[allocA] && heldMemory[allocB] &&
			sampleValue(samples, "caravan_driver_task_switches_total", `alloc_id="`+allocA+`"`) > 0 &&
			sampleValue(samples, "caravan_driver_task_switches_total", `alloc_id="`+allocB+`"`) > 0
	}
	deadline := time.Now().Add(90 * time.Second)
	for !ready() && time.Now().Before(deadline) {
		time.Sleep(500 * time.Millisecond)
	}
	must.True(t, ready(), must.Sprintf("metrics at %s: %v", url, samples))
	// Each task's budget is its lane slot's memory, as granted by caravan-device.
	must.Eq(t, 15360, sampleValue(samples, "caravan_driver_task_gpu_budget_mib", `alloc_id="`+allocA+`"`))
	must.Positive(t, sampleValue(samples, "caravan_driver_switch_seconds_count", `op="suspend"`))
	stopJobs(t, c, *a.ID, *b.ID)
}

type metricSample struct {
	name, labels string
	value        float64
}

// parseMetrics reads Prometheus' text format, enough for these tests.
func parseMetrics(body string) []metricSample {
	var out []metricSample
	for _, line := range strings.Split(body, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		name, labels, _ := strings.Cut(line[:i], "{")
		out = append(out, metricSample{name: name, labels: strings.TrimSuffix(labels, "}"), value: v})
	}
	return out
}

// sampleValue is the value of the first sample of name whose labels hold
// label, or -1.
func sampleValue(samples []metricSample, name, label string) float64 {
	for _, s := range samples {
		if s.name == name && strings.Contains(s.labels, label) {
			return s.value
		}
	}
	return -1
}

// A task suspended in its lane (checkpointed on the simulated GPU, frozen)
// stays so across a client restart, which restarts the driver: the new
// driver reads back what is checkpointed and whose turn it is, and resumes
// the task on schedule.
func TestDriverFrozenLaneSurvivesRestart(t *testing.T) {
	c := harness.StartT(t, harness.Options{
		Fleet:        laneFleet,
		DeviceConfig: oneLaneTwoSlots,
		DriverConfig: timeSlicing("5s"),
	})
	vars := workloadVars(c)
	// 40 iterations of 200 ms outlast a 5 s turn: with 25 the first task
	// could finish at the end of its first turn, and no task would ever
	// be suspended with a checkpoint.
	vars["iterations"] = "40"
	jobs := []*api.Job{c.RunJobspec(t, c.Jobspec("driver-lane-a.nomad.hcl"), vars), c.RunJobspec(t, c.Jobspec("driver-lane-b.nomad.hcl"), vars)}
	// events joins the job's task events, oldest first.
	events := func(job *api.Job) string { return strings.Join(taskEvents(t, c, *job.ID), "\n") }
	// Wait for one task to be suspended with its GPU process checkpointed.
	var frozen *api.Job
	for end := time.Now().Add(2 * time.Minute); frozen == nil && time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		for _, job := range jobs {
			text := events(job)
			lines := strings.Split(text, "\n")
			last := lines[len(lines)-1]
			if strings.HasPrefix(last, "suspended in GPU-lane/lane0 via cuda-checkpoint") && strings.Contains(last, "checkpointed PIDs") {
				frozen = job
			}
		}
	}
	must.NotNil(t, frozen, must.Sprint("no task was ever suspended with a checkpoint"))

	c.RestartClientT(t)

	var text string
	for end := time.Now().Add(60 * time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		if text = events(frozen); strings.Contains(text, "recovered by a new driver process") {
			break
		}
	}
	// Recovered as suspended with its checkpoint, not thawed into a lane of
	// one and not back to time-slicing from scratch.
	must.StrContains(t, text, "recovered by a new driver process; budget re-attached (suspended: true, checkpointed PIDs")
	must.StrContains(t, text, `mode "time-sliced"`)
	// Its turn comes and it is restored, then both jobs complete. (Nomad
	// keeps a task's last 10 events; the recovery is among them until then.)
	sinceRecovery := func(text string) string {
		if i := strings.Index(text, "recovered by a new driver process"); i >= 0 {
			return text[i:]
		}
		return ""
	}
	var after string
	for end := time.Now().Add(2 * time.Minute); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		if after = sinceRecovery(events(frozen)); strings.Contains(after, "resumed in GPU-lane/lane0") {
			break
		}
	}
	must.StrContains(t, after, "resumed in GPU-lane/lane0 via cuda-checkpoint (sim")
	must.StrContains(t, after, "restored PIDs")
	must.StrNotContains(t, after, "failed")
	for _, job := range jobs {
		allocs := c.WaitAllocs(t, *job.ID, 1, 3*time.Minute, harness.Terminal)
		must.Eq(t, "complete", allocs[0].ClientStatus)
	}
}
