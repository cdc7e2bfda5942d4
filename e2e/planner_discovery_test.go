//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/caravan-gpu/caravan/e2e/harness"
	"github.com/caravan-gpu/caravan/planner/plannerapi"
	"github.com/shoenig/test/must"
)

// With NOMAD_ADDR unset, the planner finds Nomad through Consul's "nomad"
// service and goes on to manage jobs there.
func TestPlannerFindsNomadThroughConsul(t *testing.T) {
	c := harness.StartT(t, harness.Options{Fleet: oneT4})

	dir := t.TempDir()
	addr := freeAddr(t)
	cfg := filepath.Join(dir, "planner.hcl")
	must.NoError(t, os.WriteFile(cfg, []byte(fmt.Sprintf(`id = "discovery"
http { address = %q }
planning {
  policy   = "las"
  interval = "1s"
}
`, addr)), 0o644))

	var env []string
	for _, kv := range c.Env() {
		if !strings.HasPrefix(kv, "NOMAD_ADDR=") {
			env = append(env, kv)
		}
	}
	logPath := filepath.Join(dir, "planner.log")
	logFile, err := os.Create(logPath)
	must.NoError(t, err)
	cmd := exec.Command(filepath.Join(c.BinDir, "caravan"), "planner", "run", "-config", cfg)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logFile, logFile
	must.NoError(t, cmd.Start())
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logFile.Close(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			data, _ := os.ReadFile(logPath)
			t.Logf("==== planner log ====\n%s", data)
		}
	})

	api := plannerapi.NewClient(addr, "")
	waitFor(t, 90*time.Second, "the planner finds Nomad and leads", func() bool {
		s, err := api.Status(context.Background())
		return err == nil && s.Leader
	})
	data, err := os.ReadFile(logPath)
	must.NoError(t, err)
	must.StrContains(t, string(data), "found Nomad through Consul")

	c.RunJobspec(t, c.Jobspec("planner-batch.nomad.hcl"), trainVars(c, "found-through-consul", 5, ""))
	waitFor(t, 30*time.Second, "the planner sets the job's priority band", func() bool {
		return jobPriority(t, c, "found-through-consul") == 80
	})
}
