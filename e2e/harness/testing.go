package harness

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// StartT starts a cluster for a test. It is torn down when the test ends; on
// failure the tail of each agent log is written to the test output first.
func StartT(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if opts.Logf == nil {
		opts.Logf = t.Logf
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := Start(ctx, opts)
	if err != nil {
		t.Fatalf("start cluster: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			c.dumpLogs(t)
		}
		c.Stop()
		if left := ProcessesUnder(c.Dir); len(left) > 0 {
			t.Errorf("processes left behind after teardown: %v", left)
		}
	})
	return c
}

func (c *Cluster) dumpLogs(t testing.TB) {
	t.Log(c.logTails(300))
}

// Jobspec returns the path of a file in the repository's jobspecs/.
func (c *Cluster) Jobspec(name string) string {
	return filepath.Join(c.RepoRoot, "jobspecs", name)
}

// RunJobspec parses an HCL2 jobspec with the given variables through the
// Nomad agent, as `nomad job run -var` would, registers it and returns it.
func (c *Cluster) RunJobspec(t testing.TB, path string, vars map[string]string) *api.Job {
	t.Helper()
	job, err := c.ParseJobspec(path, vars)
	if err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	if _, _, err := c.Nomad.Jobs().Register(job, nil); err != nil {
		t.Fatalf("register %s: %v", path, err)
	}
	return job
}

// ParseJobspec parses an HCL2 jobspec with variables through the agent.
func (c *Cluster) ParseJobspec(path string, vars map[string]string) (*api.Job, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var vs strings.Builder
	for k, v := range vars {
		fmt.Fprintf(&vs, "%s = %q\n", k, v)
	}
	return c.Nomad.Jobs().ParseHCLOpts(&api.JobsParseRequest{
		JobHCL:       string(src),
		Variables:    vs.String(),
		Canonicalize: true,
	})
}

// WaitAllocs waits until the job has at least want allocations and every one
// of them satisfies done, and returns them.
func (c *Cluster) WaitAllocs(t testing.TB, jobID string, want int, timeout time.Duration, done func(*api.AllocationListStub) bool) []*api.AllocationListStub {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var allocs []*api.AllocationListStub
	for time.Now().Before(deadline) {
		var err error
		allocs, _, err = c.Nomad.Jobs().Allocations(jobID, true, nil)
		if err == nil && len(allocs) >= want {
			all := true
			for _, a := range allocs {
				all = all && done(a)
			}
			if all {
				return allocs
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	var states []string
	for _, a := range allocs {
		states = append(states, fmt.Sprintf("%s=%s/%s", a.ID[:8], a.ClientStatus, a.ClientDescription))
	}
	t.Fatalf("job %s: want %d allocations done within %s, have %v", jobID, want, timeout, states)
	return nil
}

// Complete reports an allocation that finished successfully.
func Complete(a *api.AllocationListStub) bool { return a.ClientStatus == "complete" }

// Running reports an allocation whose tasks run.
func Running(a *api.AllocationListStub) bool { return a.ClientStatus == "running" }

// Terminal reports an allocation that stopped, for good or ill.
func Terminal(a *api.AllocationListStub) bool {
	return a.ClientStatus == "complete" || a.ClientStatus == "failed" || a.ClientStatus == "lost"
}

// NomadCLI runs the real nomad binary against the cluster and returns its
// combined output.
func (c *Cluster) NomadCLI(t testing.TB, args ...string) string {
	t.Helper()
	out, err := c.NomadCommand(args...)
	if err != nil {
		t.Fatalf("nomad %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// NomadCommand runs the nomad binary and returns its output and error.
func (c *Cluster) NomadCommand(args ...string) (string, error) {
	cmd := exec.Command(c.NomadBin, args...)
	cmd.Env = c.Env()
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// ConsulCommand runs the consul binary against the cluster.
func (c *Cluster) ConsulCommand(args ...string) (string, error) {
	cmd := exec.Command(c.ConsulBin, args...)
	cmd.Env = c.Env()
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// Env returns the environment that points CLIs (nomad, consul, caravan) at
// this cluster.
func (c *Cluster) Env() []string {
	env := append(agentEnv(), "NOMAD_ADDR="+c.NomadAddr, "CONSUL_HTTP_ADDR="+c.ConsulAddr)
	if c.NomadToken != "" {
		env = append(env, "NOMAD_TOKEN="+c.NomadToken)
	}
	if c.ConsulToken != "" {
		env = append(env, "CONSUL_HTTP_TOKEN="+c.ConsulToken)
	}
	if t := c.TLS; t != nil {
		env = append(env, "NOMAD_CACERT="+t.CA, "NOMAD_CLIENT_CERT="+t.Cert, "NOMAD_CLIENT_KEY="+t.Key,
			"CONSUL_HTTP_SSL=true", "CONSUL_CACERT="+t.CA, "CONSUL_CLIENT_CERT="+t.Cert, "CONSUL_CLIENT_KEY="+t.Key)
	}
	return env
}

// RestartClientT restarts the Nomad client agent for a test.
func (c *Cluster) RestartClientT(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.RestartClient(ctx); err != nil {
		t.Fatalf("restart nomad client: %v", err)
	}
}
