package sim

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/shoenig/test/must"
)

// A process's sharers are the other processes that hold memory on its GPU
// and still run: not itself, not one that exited, not one checkpointed
// off the GPU, and none on another GPU.
func TestSharersCountsOtherRunningProcessesOnTheGPU(t *testing.T) {
	b := simGPU(t)
	self := os.Getpid()
	n, err := Sharers(b.stateDir, "GPU-a", self)
	must.NoError(t, err)
	must.Eq(t, 0, n, must.Sprint("a GPU nobody used has no sharers"))

	must.NoError(t, SetProcessMemory(b.stateDir, "GPU-a", self, 100))
	partner := exec.Command("sleep", "30")
	must.NoError(t, partner.Start())
	t.Cleanup(func() { _ = partner.Process.Kill(); _ = partner.Wait() })
	must.NoError(t, SetProcessMemory(b.stateDir, "GPU-a", partner.Process.Pid, 200))
	must.NoError(t, SetProcessMemory(b.stateDir, "GPU-a", 1<<30, 300)) // cannot be alive

	n, err = Sharers(b.stateDir, "GPU-a", self)
	must.NoError(t, err)
	must.Eq(t, 1, n)
	// A record the reader cannot read (another tenant's is mode 0600,
	// its own user's; here one it cannot parse, which takes the same
	// way, also as root): counted while its process runs.
	unreadable := filepath.Join(b.stateDir, "procs", "GPU-a", strconv.Itoa(partner.Process.Pid))
	must.NoError(t, os.WriteFile(unreadable, []byte("not a record"), 0o600))
	n, err = Sharers(b.stateDir, "GPU-a", self)
	must.NoError(t, err)
	must.Eq(t, 1, n, must.Sprint("counted by its name"))
	must.NoError(t, SetProcessMemory(b.stateDir, "GPU-a", partner.Process.Pid, 200))
	n, err = Sharers(b.stateDir, "GPU-a", partner.Process.Pid)
	must.NoError(t, err)
	must.Eq(t, 1, n, must.Sprint("each sees the other"))
	n, err = Sharers(b.stateDir, "GPU-b", self)
	must.NoError(t, err)
	must.Eq(t, 0, n, must.Sprint("processes on another GPU are not sharers"))

	must.NoError(t, b.Checkpoint(context.Background(), partner.Process.Pid))
	n, err = Sharers(b.stateDir, "GPU-a", self)
	must.NoError(t, err)
	must.Eq(t, 0, n, must.Sprint("a checkpointed process holds no compute"))
}
