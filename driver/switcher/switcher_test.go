package switcher

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/caravan-gpu/caravan/driver/proctree"
	"github.com/caravan-gpu/caravan/gpu"
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
	_, err := m.Suspend(context.Background(), procs, nil)
	must.NoError(t, err)
	waitState(t, pid, 'T')
	_, err = m.Resume(context.Background(), procs, nil)
	must.NoError(t, err)
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

// fakeGPU is a Checkpointer that notes each call in the recorder's log.
type fakeGPU struct {
	recorder
	mechanism string
	failOn    int
}

func (g fakeGPU) CheckpointMechanism() string   { return g.mechanism }
func (g fakeGPU) CheckpointUnavailable() string { return "no way to checkpoint here" }
func (g fakeGPU) Checkpoint(_ context.Context, pid int) error {
	if pid == g.failOn {
		return errors.New("checkpoint failed")
	}
	return g.note(fmt.Sprint("checkpoint ", pid))
}
func (g fakeGPU) Restore(_ context.Context, pid int) error {
	return g.note(fmt.Sprint("restore ", pid))
}
func (g fakeGPU) CheckpointState(context.Context, int) (gpu.CheckpointState, error) {
	return gpu.CheckpointRunning, nil
}

// fakeBackend is a GPU backend that can checkpoint.
type fakeBackend struct {
	gpu.Backend
	fakeGPU
}

func (fakeBackend) Name() string { return "fake" }

// Checkpointing needs the process running, so it comes before the freeze
// and the restore after the thaw; a suspend that fails partway restores
// only what it checkpointed.
func TestCUDACheckpointOrderAndRollback(t *testing.T) {
	cases := []struct {
		name   string
		failOn int
		want   string
	}{
		{"round trip", 0, "checkpoint 41\ncheckpoint 42\nfreeze\nthaw\nrestore 41\nrestore 42\n"},
		{"second checkpoint fails", 42, "checkpoint 41\nrestore 41\n"},
		{"first checkpoint fails", 41, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			log := filepath.Join(t.TempDir(), "log")
			procs := recorder{log: log}
			m := CUDACheckpoint{GPU: fakeGPU{recorder: procs, mechanism: "fake", failOn: tc.failOn}}
			checkpointed, err := m.Suspend(context.Background(), procs, []int{41, 42})
			if tc.failOn != 0 {
				must.ErrorContains(t, err, "checkpoint failed")
				must.SliceEmpty(t, checkpointed)
			} else {
				must.NoError(t, err)
				must.Eq(t, []int{41, 42}, checkpointed)
				left, err := m.Resume(context.Background(), procs, checkpointed)
				must.NoError(t, err)
				must.SliceEmpty(t, left)
			}
			data, _ := os.ReadFile(log)
			must.Eq(t, tc.want, string(data))
		})
	}
}

func TestSelect(t *testing.T) {
	log := filepath.Join(t.TempDir(), "log")
	can := fakeBackend{fakeGPU: fakeGPU{recorder: recorder{log: log}, mechanism: "cuda-driver-api"}}
	cannot := fakeBackend{fakeGPU: fakeGPU{recorder: recorder{log: log}}}
	cases := []struct {
		name, want string
		backend    gpu.Backend
		driver     string
		mechanism  string
		wantErr    bool
	}{
		{"backend checkpoints", "auto", can, "570.86.15", "cuda-checkpoint", false},
		{"old driver", "auto", can, "535.1", "freeze", false},
		{"backend cannot here", "auto", cannot, "570.1", "freeze", false},
		{"no backend", "auto", nil, "", "freeze", false},
		{"forced freeze", "freeze", can, "570.1", "freeze", false},
		{"former name of freeze", "sigstop", can, "570.1", "freeze", false},
		{"forced checkpoint unusable", "cuda-checkpoint", cannot, "570.1", "", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Select(c.want, c.backend, c.driver)
			if c.wantErr {
				must.ErrorContains(t, err, "switch_mechanism")
				must.ErrorContains(t, err, "no way to checkpoint here")
				return
			}
			must.NoError(t, err)
			must.Eq(t, c.mechanism, got.Mechanism.Name())
			must.NotEq(t, "", got.Reason)
			if c.mechanism == "cuda-checkpoint" {
				must.Eq(t, "cuda-driver-api", got.Mechanism.Via())
				must.StrContains(t, got.Reason, "cuda-driver-api")
			}
		})
	}
}

// A process stopped by a signal is not checkpointed: on the hardware the
// checkpoint's lock would wait out its whole timeout (measured on an H100),
// holding up the lane.
func TestAStoppedProcessIsNotCheckpointed(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	must.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid := cmd.Process.Pid
	must.NoError(t, cmd.Process.Signal(syscall.SIGSTOP))
	waitState(t, pid, 'T')

	log := filepath.Join(t.TempDir(), "log")
	procs := recorder{log: log}
	m := CUDACheckpoint{GPU: fakeGPU{recorder: procs, mechanism: "fake"}}
	checkpointed, err := m.Suspend(context.Background(), procs, []int{pid})
	must.ErrorContains(t, err, "stopped by a signal")
	must.SliceEmpty(t, checkpointed)
	data, _ := os.ReadFile(log)
	must.Eq(t, "", string(data))
}
