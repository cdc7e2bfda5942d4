//go:build e2e

package e2e

import (
	"path/filepath"
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

func TestDriverLaneJobsAlternateAndBothComplete(t *testing.T) {
	c := harness.StartT(t, harness.Options{
		Fleet: laneFleet,
		DeviceConfig: `
    partition {
      model = "Tesla T4"
      lanes = 1
      slots = 2
    }`,
		DriverConfig: `
    time_slice_quantum = "1s"
    iteration_grace    = "500ms"`,
	})
	vars := workloadVars(c)
	vars["iterations"] = "15"
	a := c.RunJobspec(t, c.Jobspec("driver-lane-a.nomad.hcl"), vars)
	b := c.RunJobspec(t, c.Jobspec("driver-lane-b.nomad.hcl"), vars)
	for _, job := range []*api.Job{a, b} {
		allocs := c.WaitAllocs(t, *job.ID, 1, 3*time.Minute, harness.Terminal)
		// The client may report the final status a beat before the task's
		// last events, so read the status until the events are in.
		out := c.NomadCLI(t, "alloc", "status", allocs[0].ID)
		for deadline := time.Now().Add(15 * time.Second); !strings.Contains(out, "resumed in") && time.Now().Before(deadline); {
			time.Sleep(500 * time.Millisecond)
			out = c.NomadCLI(t, "alloc", "status", allocs[0].ID)
		}
		must.Eq(t, "complete", allocs[0].ClientStatus, must.Sprint(out))
		must.StrContains(t, out, "take turns")
		must.StrContains(t, out, "suspended in GPU-lane/lane0 via sigstop")
		must.StrContains(t, out, "resumed in GPU-lane/lane0")
	}
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
