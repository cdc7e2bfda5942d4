//go:build e2e

// Package e2e tests caravan against real Nomad and Consul agents. Run it with
// `make e2e`, which builds the agents and the plugins first.
package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/caravan-gpu/caravan/e2e/harness"
	"github.com/shoenig/test/must"
)

func TestFoundation(t *testing.T) {
	c := harness.StartT(t, harness.Options{})

	t.Run("driver healthy and devices listed", func(t *testing.T) {
		node, err := c.Node()
		must.NoError(t, err)
		drv := node.Drivers["caravan"]
		must.NotNil(t, drv)
		must.True(t, drv.Detected, must.Sprint("caravan driver not detected"))
		must.True(t, drv.Healthy, must.Sprintf("caravan driver unhealthy: %s", drv.HealthDescription))

		var models []string
		instances := 0
		for _, d := range node.NodeResources.Devices {
			if d.Vendor == "nvidia" && d.Type == "gpu" {
				models = append(models, d.Name)
				instances += len(d.Instances)
			}
		}
		// The default fleet has 2 H100, 2 A100 and 4 T4.
		must.Eq(t, 8, instances, must.Sprintf("device groups: %v", models))

		out := c.NomadCLI(t, "node", "status", "-verbose", node.ID)
		must.StrContains(t, out, "caravan")
		must.StrContains(t, out, "nvidia/gpu")
	})

	t.Run("caravan job runs to completion with logs", func(t *testing.T) {
		job := c.RunJobspec(t, c.Jobspec("hello.nomad.hcl"), nil)
		allocs := c.WaitAllocs(t, *job.ID, 1, 2*time.Minute, harness.Terminal)
		must.Eq(t, "complete", allocs[0].ClientStatus, must.Sprint(c.NomadCLI(t, "alloc", "status", allocs[0].ID)))

		logs := c.NomadCLI(t, "alloc", "logs", allocs[0].ID, "hello")
		must.StrContains(t, logs, "hello from caravan on GPU-")
	})

	t.Run("nomad registered in consul", func(t *testing.T) {
		deadline := time.Now().Add(30 * time.Second)
		var services map[string][]string
		for time.Now().Before(deadline) {
			out, err := c.ConsulCommand("catalog", "services", "-tags")
			if err == nil && strings.Contains(out, "nomad-client") {
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
		resp, err := httpGet("http://" + c.ConsulAddr + "/v1/catalog/services")
		must.NoError(t, err)
		must.NoError(t, json.Unmarshal(resp, &services))
		must.MapContainsKeys(t, services, []string{"nomad", "nomad-client"})
	})
}
