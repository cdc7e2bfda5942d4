//go:build e2e

package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/caravan-gpu/caravan/e2e/harness"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// The tenant boundary: the driver runs as root and every task is hostile.
// Each test runs one attack as a task through `nomad job run` and checks
// that it is contained.

// allocInfo reads an allocation in full (task states, restarts, events).
func allocInfo(t *testing.T, c *harness.Cluster, id string) *api.Allocation {
	t.Helper()
	alloc, _, err := c.Nomad.Allocations().Info(id, nil)
	must.NoError(t, err)
	return alloc
}

// TestTenantSymlinkedIterationFileIsNotFollowed: the driver creates the
// task's iteration file as root at every start, in the task directory,
// which the task may write. A task that replaced it with a symlink to a
// root-owned file and got restarted must not have the driver truncate or
// chown that file.
func TestTenantSymlinkedIterationFileIsNotFollowed(t *testing.T) {
	// In a 0700 directory of root's: the task cannot reach it by itself.
	victim := filepath.Join(t.TempDir(), "victim")
	const content = "root's own data\n"
	must.NoError(t, os.WriteFile(victim, []byte(content), 0o600))

	c := harness.StartT(t, harness.Options{})
	job := c.RunJobspec(t, c.Jobspec("tenant-symlinked-iterations.nomad.hcl"), map[string]string{"victim": victim})
	stub := c.WaitAllocs(t, *job.ID, 1, 2*time.Minute, harness.Terminal)[0]
	alloc := allocInfo(t, c, stub.ID)
	logs := c.NomadCLI(t, "alloc", "logs", stub.ID, "plant")
	status := c.NomadCLI(t, "alloc", "status", stub.ID)
	t.Logf("the task's log:\n%s", logs)
	// The first run planted the symlink and the driver started the task
	// again over it.
	must.Eq(t, 1, alloc.TaskStates["plant"].Restarts, must.Sprintf("%s\n%s", status, logs))

	// Content, mode and owner in one line, so that a failure shows all.
	describe := func() string {
		data, err := os.ReadFile(victim)
		must.NoError(t, err)
		st, err := os.Lstat(victim)
		must.NoError(t, err)
		sys := st.Sys().(*syscall.Stat_t)
		return fmt.Sprintf("content %q, mode %v, owner %d:%d", data, st.Mode(), sys.Uid, sys.Gid)
	}
	must.Eq(t, fmt.Sprintf("content %q, mode %v, owner 0:0", content, os.FileMode(0o600)), describe(),
		must.Sprint("the driver changed the victim through the planted symlink"))
	// The driver replaces the symlink with a file of its own and runs the
	// task as usual.
	must.Eq(t, "complete", stub.ClientStatus, must.Sprintf("%s\n%s", status, logs))
}

// TestTenantForgedLaneStateIsNotBelieved: the driver keeps a lane task's
// lane state (profile, mode, turn, suspension, checkpointed PIDs) where a
// new driver process reads it back after a client restart. A task that
// forges that state must not have it believed. The assertion is on the
// profile and mode the recovered task rejoins its lane with: the profile
// is what the lane's admission (Σ (persistent + ephemeral) ≤ lane)
// rests on, so a forged tiny one lets the task run concurrently beside a
// neighbour it must take turns with, and the recovery event and the join
// name exactly what the new driver believed.
func TestTenantForgedLaneStateIsNotBelieved(t *testing.T) {
	c := harness.StartT(t, harness.Options{Fleet: laneFleet, DeviceConfig: oneLaneTwoSlots})
	job := c.RunJobspec(t, c.Jobspec("tenant-forged-lane-state.nomad.hcl"), nil)
	stub := c.WaitAllocs(t, *job.ID, 1, 2*time.Minute, harness.Running)[0]
	waitCLI(t, c, "forging the lane state", "alloc", "logs", stub.ID, "forge")
	// The task rewrites its forgery every 200 ms: let it land after the
	// driver's own writes.
	time.Sleep(time.Second)

	c.RestartClientT(t)

	var after string
	for end := time.Now().Add(60 * time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		text := strings.Join(taskEvents(t, c, *job.ID), "\n")
		if i := strings.Index(text, "recovered by a new driver process"); i >= 0 {
			if after = text[i:]; strings.Contains(after, "joined ") {
				break
			}
		}
	}
	t.Logf("events since the restart:\n%s", after)
	must.StrContains(t, after, "recovered by a new driver process")
	must.StrContains(t, after, "joined ")
	must.StrNotContains(t, after, "4242 MiB", must.Sprint("the forged profile was believed"))
	must.StrNotContains(t, after, `mode "concurrent"`, must.Sprint("the forged mode was believed"))
}

// TestTenantKillMinusOneSparesNeighbours: with the driver's default users,
// a task that signals every process its user may signal (kill -9 -1) must
// not reach a task of another allocation.
func TestTenantKillMinusOneSparesNeighbours(t *testing.T) {
	c := harness.StartT(t, harness.Options{})
	neighbour := c.RunJobspec(t, c.Jobspec("tenant-neighbour.nomad.hcl"), nil)
	victim := c.WaitAllocs(t, *neighbour.ID, 1, 2*time.Minute, harness.Running)[0]
	waitCLI(t, c, "neighbour up", "alloc", "logs", victim.ID, "sleep")

	attack := c.RunJobspec(t, c.Jobspec("tenant-kill-all.nomad.hcl"), nil)
	killer := c.WaitAllocs(t, *attack.ID, 1, 2*time.Minute, harness.Terminal)[0]
	logs := c.NomadCLI(t, "alloc", "logs", killer.ID, "kill")
	t.Logf("the attacker's log:\n%s", logs)
	must.Eq(t, "complete", killer.ClientStatus, must.Sprint(logs))
	must.StrContains(t, logs, "kill -9 -1 done")
	// Long enough for the client to see a killed neighbour exit.
	time.Sleep(2 * time.Second)

	alloc := allocInfo(t, c, victim.ID)
	state := alloc.TaskStates["sleep"]
	what := must.Sprintf("attacker's log:\n%s\nneighbour:\n%s", logs, c.NomadCLI(t, "alloc", "status", victim.ID))
	must.Eq(t, "running", alloc.ClientStatus, what)
	must.Eq(t, "running", state.State, what)
	must.Eq(t, 0, state.Restarts, what)
}

// TestTenantCannotReadNeighboursEnviron: with the driver's default users, a
// task must not read the environment (here a secret) of a task of another
// allocation through /proc/<pid>/environ.
func TestTenantCannotReadNeighboursEnviron(t *testing.T) {
	buf := make([]byte, 16)
	_, err := rand.Read(buf)
	must.NoError(t, err)
	secret := "tenant-secret-" + hex.EncodeToString(buf)

	c := harness.StartT(t, harness.Options{})
	neighbour := c.RunJobspec(t, c.Jobspec("tenant-neighbour.nomad.hcl"), map[string]string{"secret": secret})
	victim := c.WaitAllocs(t, *neighbour.ID, 1, 2*time.Minute, harness.Running)[0]
	waitCLI(t, c, "neighbour up", "alloc", "logs", victim.ID, "sleep")

	attack := c.RunJobspec(t, c.Jobspec("tenant-environ-scan.nomad.hcl"), nil)
	scanner := c.WaitAllocs(t, *attack.ID, 1, 2*time.Minute, harness.Terminal)[0]
	logs := c.NomadCLI(t, "alloc", "logs", scanner.ID, "scan")
	t.Logf("the scanner's log:\n%s", logs)
	must.Eq(t, "complete", scanner.ClientStatus, must.Sprint(logs))
	must.StrContains(t, logs, "scan done")
	must.StrNotContains(t, logs, secret, must.Sprint("the scanner read the neighbour's secret"))
	// The neighbour was there to be read all along.
	must.Eq(t, "running", allocInfo(t, c, victim.ID).ClientStatus)
}

// TestTenantBreachThenExitIsJudged: a task that goes over its GPU memory
// budget for 2 ms and exits 0 some 10 ms later, between two watchdog
// samples (2 s apart here, so that no sample can fall in between), must
// still end failed with the breach as the reason, not complete.
func TestTenantBreachThenExitIsJudged(t *testing.T) {
	c := harness.StartT(t, harness.Options{DriverConfig: `
    watchdog_interval = "2s"`})
	job := c.RunJobspec(t, c.Jobspec("tenant-breach-then-exit.nomad.hcl"), workloadVars(c))
	stub := c.WaitAllocs(t, *job.ID, 1, 2*time.Minute, harness.Terminal)[0]
	logs := c.NomadCLI(t, "alloc", "logs", stub.ID, "train")
	must.StrContains(t, logs, `"event":"exceeding budget"`, must.Sprint("the workload never went over its budget"))
	events := strings.Join(taskEvents(t, c, *job.ID), "\n")
	t.Logf("events:\n%s", events)
	must.Eq(t, "failed", stub.ClientStatus, must.Sprintf("events:\n%s", events))
	must.StrContains(t, events, "GPU memory budget exceeded")
	must.StrContains(t, events, "2048 MiB budget")
}

// twoGPUFleet is two whole GPUs, so that a task granted one has another
// beside it to reach for.
const twoGPUFleet = `{"driver_version": "550.54.15", "cuda_version": "12.4", "gpus": [
  {"uuid": "GPU-tenant-a", "model": "Tesla T4", "architecture": "turing", "compute_capability": "7.5",
   "memory_mib": 15360, "sm_count": 40},
  {"uuid": "GPU-tenant-b", "model": "Tesla T4", "architecture": "turing", "compute_capability": "7.5",
   "memory_mib": 15360, "sm_count": 40}]}`

var grantedAndOther = regexp.MustCompile(`granted (\S+); allocating on (\S+)`)

// TestTenantMemoryOnAnUngrantedGPUIsABreach: a task granted one GPU that
// allocates memory on another GPU of the node, one it chose itself, is
// killed with a reason naming that GPU.
func TestTenantMemoryOnAnUngrantedGPUIsABreach(t *testing.T) {
	c := harness.StartT(t, harness.Options{Fleet: twoGPUFleet})
	vars := workloadVars(c)
	vars["gpus"] = "GPU-tenant-a GPU-tenant-b"
	job := c.RunJobspec(t, c.Jobspec("tenant-ungranted-gpu.nomad.hcl"), vars)
	stub := c.WaitAllocs(t, *job.ID, 1, 2*time.Minute, harness.Terminal)[0]
	logs := c.NomadCLI(t, "alloc", "logs", stub.ID, "train")
	m := grantedAndOther.FindStringSubmatch(logs)
	must.SliceLen(t, 3, m, must.Sprint(logs))
	granted, other := m[1], m[2]
	must.NotEq(t, "", other, must.Sprint(logs))
	must.NotEq(t, granted, other)
	for _, id := range allocDeviceIDs(allocInfo(t, c, stub.ID)) {
		must.NotEq(t, other, gpuOfInstance(id), must.Sprint("the task was granted the GPU it attacked"))
	}
	events := strings.Join(taskEvents(t, c, *job.ID), "\n")
	stderr := c.NomadCLI(t, "alloc", "logs", "-stderr", stub.ID, "train")
	t.Logf("events:\n%s\nstderr:\n%s", events, stderr)
	must.Eq(t, "failed", stub.ClientStatus, must.Sprintf("events:\n%s", events))
	// The kernel refuses the open of the other GPU's device where the
	// driver holds the task to its devices (a task of its own UID); where
	// it cannot, the watchdog kills the task for the memory and names the
	// GPU. Either way the task fails over that GPU.
	refused := strings.Contains(stderr, "no CUDA-capable device is detected: GPU "+other)
	killed := strings.Contains(events, "GPU memory on "+other+", a GPU the task was not granted")
	must.True(t, refused || killed, must.Sprint("neither refused nor killed over the ungranted GPU"))
}

// TestTenantRaisedMPSLimitIsRefused: a task under MPS that raises its own
// pinned memory limit before CUDA starts is still held to its share by the
// limit the driver set on its MPS server: the allocation past it fails in
// the task, although the watchdog would only warn.
func TestTenantRaisedMPSLimitIsRefused(t *testing.T) {
	c := harness.StartT(t, harness.Options{DriverConfig: `
    mps = "on"`})
	job := c.RunJobspec(t, c.Jobspec("tenant-mps-raised-limit.nomad.hcl"), workloadVars(c))
	stub := c.WaitAllocs(t, *job.ID, 1, 2*time.Minute, harness.Terminal)[0]
	logs := c.NomadCLI(t, "alloc", "logs", stub.ID, "train")
	events := strings.Join(taskEvents(t, c, *job.ID), "\n")
	t.Logf("events:\n%s\nlogs:\n%s", events, logs)
	must.StrContains(t, logs, "limit given: 0=2048M", must.Sprint("the driver gave no MPS limit"))
	must.StrContains(t, events, "the MPS server of uid")
	must.Eq(t, "failed", stub.ClientStatus)
	must.StrContains(t, logs, "past the MPS pinned device memory limit of 2048 MiB")
	must.StrNotContains(t, events, "budget exceeded")
}

// TestTenantLeavingMPSFindsNoGPU: a lane task that points its MPS pipe
// directory elsewhere, to run outside its MPS server's limit, finds no GPU:
// caravan-device keeps lane GPUs in exclusive-process mode while it
// supervises MPS, and the one context there is the MPS server's.
func TestTenantLeavingMPSFindsNoGPU(t *testing.T) {
	pipe := t.TempDir()
	bin := filepath.Join(t.TempDir(), "nvidia-cuda-mps-control")
	// The control daemon at the hardware seam: -d makes its control pipe,
	// and every command is answered.
	must.NoError(t, os.WriteFile(bin, []byte("#!/bin/sh\nif [ \"$1\" = -d ]; then mkdir -p \"$CUDA_MPS_PIPE_DIRECTORY\" && : > \"$CUDA_MPS_PIPE_DIRECTORY/control\"; exit 0; fi\nread line; echo ok\n"), 0o755))
	must.NoError(t, os.WriteFile(filepath.Join(filepath.Dir(bin), "nvidia-cuda-mps-server"), []byte("#!/bin/sh\n"), 0o755))
	c := harness.StartT(t, harness.Options{
		DeviceConfig: h100Lanes + `
    mps {
      enabled     = true
      pipe_dir    = "` + pipe + `"
      log_dir     = "` + t.TempDir() + `"
      control_bin = "` + bin + `"
    }`,
		DriverConfig: `
    mps                = "on"
    mps_pipe_directory = "` + pipe + `"`})
	job := c.RunJobspec(t, c.Jobspec("tenant-mps-leave.nomad.hcl"), workloadVars(c))
	stub := c.WaitAllocs(t, *job.ID, 1, 2*time.Minute, harness.Terminal)[0]
	logs := c.NomadCLI(t, "alloc", "logs", stub.ID, "train")
	stderr := c.NomadCLI(t, "alloc", "logs", "-stderr", stub.ID, "train")
	events := strings.Join(taskEvents(t, c, *job.ID), "\n")
	t.Logf("events:\n%s\nlogs:\n%s\nstderr:\n%s", events, logs, stderr)
	must.StrContains(t, logs, "MPS pipe directory given: "+pipe)
	must.Eq(t, "failed", stub.ClientStatus)
	must.StrContains(t, stderr, "all CUDA-capable devices are busy or unavailable")
	must.StrContains(t, stderr, "exclusive-process compute mode")
}

// A task that declares a small profile to run beside a neighbour, then
// takes the rest of the lane, is ended for reaching past its share of the
// lane; the neighbour completes.
func TestTenantPastItsLaneShareIsEnded(t *testing.T) {
	c := harness.StartT(t, harness.Options{Fleet: laneFleet, DeviceConfig: oneLaneTwoSlots})
	job := c.RunJobspec(t, c.Jobspec("tenant-lane-share.nomad.hcl"), workloadVars(c))
	allocs := c.WaitAllocs(t, *job.ID, 2, 3*time.Minute, harness.Terminal)
	for _, a := range allocs {
		status := c.NomadCLI(t, "alloc", "status", a.ID)
		switch a.TaskGroup {
		case "grower":
			must.Eq(t, "failed", a.ClientStatus, must.Sprint(status))
			must.StrContains(t, status, "share of lane 0's 15360 MiB while the lane's tasks run concurrently")
		case "neighbour":
			must.Eq(t, "complete", a.ClientStatus, must.Sprint(status))
		}
	}
}
