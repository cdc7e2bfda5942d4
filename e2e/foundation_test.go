//go:build e2e

// Package e2e tests caravan against real Nomad and Consul agents. Run it with
// `make e2e`, which builds the agents and the plugins first.
package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync"
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

// A port taken between the harness picking it and an agent binding it
// (another process got there first) makes the agent exit as it starts.
// The harness then starts a fresh cluster on new ports in its place.
func TestHarnessStartsAgainWhenAPortIsTaken(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	must.NoError(t, err)
	defer held.Close()
	taken := held.Addr().(*net.TCPAddr).Port
	var mu sync.Mutex
	var picks [][]int
	var lines []string
	c := harness.StartT(t, harness.Options{
		Logf: func(format string, args ...any) {
			mu.Lock()
			lines = append(lines, fmt.Sprintf(format, args...))
			mu.Unlock()
			t.Logf(format, args...)
		},
		PickPorts: func(n int) ([]int, error) {
			ports, err := harness.FreePorts(n)
			if err == nil && len(picks) == 0 {
				ports[0] = taken
			}
			picks = append(picks, ports)
			return ports, err
		},
	})
	must.Len(t, 2, picks, must.Sprintf("picks: %v", picks))
	must.SliceNotContains(t, picks[1], taken)
	mu.Lock()
	log := strings.Join(lines, "\n")
	mu.Unlock()
	must.StrContains(t, log, "lost a port to another process before binding it")
	must.StrContains(t, log, fmt.Sprintf("127.0.0.1:%d", taken))
	_, err = c.WaitNodeReady(t.Context())
	must.NoError(t, err)
}
