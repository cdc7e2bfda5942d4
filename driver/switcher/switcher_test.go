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

func TestFreezeSuspendsAndResumes(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	must.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid := cmd.Process.Pid
	m := Freeze{}
	procs := proctree.Signals{Root: pid}
	must.NoError(t, m.Suspend(context.Background(), procs, nil))
	waitState(t, pid, 'T')
	must.NoError(t, m.Resume(context.Background(), procs, nil))
	waitState(t, pid, 'S')
}

// recorder is a Freezer that notes what was done, in order, in a log that
// a fake cuda-checkpoint also writes to.
type recorder struct{ log string }

func (r recorder) Method() string { return "recorded" }

func (r recorder) Freeze(context.Context) error { return r.note("freeze") }

func (r recorder) Thaw(context.Context) error { return r.note("thaw") }

func (r recorder) note(what string) error {
	f, err := os.OpenFile(r.log, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.WriteString(what + "\n")
	return err
}

// TestCUDACheckpointTogglesWhileTheTaskRuns: cuda-checkpoint needs the
// process running, so it comes before the freeze and after the thaw.
func TestCUDACheckpointTogglesWhileTheTaskRuns(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "log")
	fake := filepath.Join(dir, "cuda-checkpoint")
	must.NoError(t, os.WriteFile(fake, []byte("#!/bin/sh\necho \"toggle $3\" >> "+log+"\n"), 0o755))
	m := CUDACheckpoint{Path: fake}
	procs := recorder{log: log}
	must.NoError(t, m.Suspend(context.Background(), procs, []int{41, 42}))
	must.NoError(t, m.Resume(context.Background(), procs, []int{41, 42}))
	data, err := os.ReadFile(log)
	must.NoError(t, err)
	must.Eq(t, "toggle 41\ntoggle 42\nfreeze\nthaw\ntoggle 41\ntoggle 42\n", string(data))
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
		{"sim falls back", "auto", fake, "550.54.15", false, "freeze", false},
		{"real gpu with tool", "auto", fake, "550.54.15", true, "cuda-checkpoint", false},
		{"old driver", "auto", fake, "535.1", true, "freeze", false},
		{"missing tool", "auto", filepath.Join(dir, "nope"), "560.1", true, "freeze", false},
		{"forced freeze", "freeze", fake, "560.1", true, "freeze", false},
		{"former name of freeze", "sigstop", fake, "560.1", true, "freeze", false},
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
	err := CUDACheckpoint{Path: fake}.Resume(context.Background(), proctree.Signals{Root: cmd.Process.Pid}, []int{cmd.Process.Pid})
	must.ErrorContains(t, err, "restore failed")
}
