package switcher

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/caravan-gpu/caravan/driver/proctree"
	"github.com/shoenig/test/must"
)

func waitState(t *testing.T, pid int, want byte) {
	t.Helper()
	var got byte
	for i := 0; i < 200; i++ {
		p, err := proctree.Read(pid)
		must.NoError(t, err)
		if got = p.State; got == want {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("pid %d: state %c, want %c", pid, got, want)
}

func TestSignalsSuspendAndResume(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	must.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid := cmd.Process.Pid
	m := Signals{}
	must.NoError(t, m.Suspend(context.Background(), []int{pid}, nil))
	waitState(t, pid, 'T')
	must.NoError(t, m.Resume(context.Background(), []int{pid}, nil))
	waitState(t, pid, 'S')
}

func TestSignalsIgnoreExitedProcesses(t *testing.T) {
	cmd := exec.Command("true")
	must.NoError(t, cmd.Run())
	must.NoError(t, Signals{}.Suspend(context.Background(), []int{cmd.Process.Pid}, nil))
}

func TestSelect(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "cuda-checkpoint")
	must.NoError(t, os.WriteFile(fake, []byte("#!/bin/sh\nexit 0\n"), 0o755))

	cases := []struct {
		name, want, path, driver string
		real                     bool
		mechanism                string
		wantErr                  bool
	}{
		{"sim falls back", "auto", fake, "550.54.15", false, "sigstop", false},
		{"real gpu with tool", "auto", fake, "550.54.15", true, "cuda-checkpoint", false},
		{"old driver", "auto", fake, "535.1", true, "sigstop", false},
		{"missing tool", "auto", filepath.Join(dir, "nope"), "560.1", true, "sigstop", false},
		{"forced sigstop", "sigstop", fake, "560.1", true, "sigstop", false},
		{"forced checkpoint unusable", "cuda-checkpoint", fake, "550.1", false, "", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Select(c.want, c.path, c.real, c.driver)
			if c.wantErr {
				must.ErrorContains(t, err, "switch_mechanism")
				return
			}
			must.NoError(t, err)
			must.Eq(t, c.mechanism, got.Mechanism.Name())
			must.NotEq(t, "", got.Reason)
		})
	}
}

func TestCUDACheckpointReportsToolFailure(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "cuda-checkpoint")
	must.NoError(t, os.WriteFile(fake, []byte("#!/bin/sh\necho restore failed >&2\nexit 1\n"), 0o755))
	cmd := exec.Command("sleep", "30")
	must.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	err := CUDACheckpoint{Path: fake}.Resume(context.Background(), []int{cmd.Process.Pid}, []int{cmd.Process.Pid})
	must.ErrorContains(t, err, "restore failed")
}
