package sim

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/shoenig/test/must"
	"github.com/shoenig/test/wait"

	"github.com/caravan-gpu/caravan/gpu"
)

func simBackend(t *testing.T, memMiB string) *Backend {
	t.Helper()
	dir := t.TempDir()
	fleet := filepath.Join(dir, "fleet.json")
	must.NoError(t, os.WriteFile(fleet, []byte(`{"gpus":[{"uuid": "GPU-a", "model": "Tesla T4", "memory_mib": `+memMiB+`}]}`), 0o644))
	b, err := New(fleet, filepath.Join(dir, "state"))
	must.NoError(t, err)
	return b
}

func sleeper(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	must.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd.Process.Pid
}

// A checkpointed process leaves the process list and frees its memory, as
// with cuda-checkpoint; restore brings both back.
func TestCheckpointFreesAndRestoreBringsBack(t *testing.T) {
	b := simBackend(t, "15360")
	ctx := context.Background()
	pid := sleeper(t)
	must.NoError(t, SetProcessMemory(b.stateDir, "GPU-a", pid, 3000))

	must.NoError(t, b.Checkpoint(ctx, pid))
	procs, err := b.Processes("GPU-a")
	must.NoError(t, err)
	must.SliceEmpty(t, procs)
	st, err := b.Stats("GPU-a")
	must.NoError(t, err)
	must.Eq(t, 0, st.UsedMemoryMiB)
	must.True(t, Checkpointed(b.stateDir, pid))

	// The workload's allocations while checkpointed land in host memory.
	must.NoError(t, SetProcessMemory(b.stateDir, "GPU-a", pid, 3100))
	procs, _ = b.Processes("GPU-a")
	must.SliceEmpty(t, procs)

	must.NoError(t, b.Restore(ctx, pid))
	procs, err = b.Processes("GPU-a")
	must.NoError(t, err)
	must.Len(t, 1, procs)
	must.Eq(t, 3100, procs[0].UsedMemoryMiB)
	must.False(t, Checkpointed(b.stateDir, pid))
}

// With a fleet's checkpoint timing, a checkpoint holds the memory for as
// long as the copy takes, and a restore takes its memory at once and then
// takes its time, as on the hardware.
func TestCheckpointTakesTheFleetsTiming(t *testing.T) {
	dir := t.TempDir()
	fleet := filepath.Join(dir, "fleet.json")
	must.NoError(t, os.WriteFile(fleet, []byte(`{"gpus":[{"uuid": "GPU-a", "model": "H100", "memory_mib": 81559,
		"checkpoint_timing": {"checkpoint_ms": 50, "checkpoint_ms_per_gib": 100, "restore_ms": 20, "restore_ms_per_gib": 40}}]}`), 0o644))
	b, err := New(fleet, filepath.Join(dir, "state"))
	must.NoError(t, err)
	ctx := context.Background()
	pid := sleeper(t)
	must.NoError(t, SetProcessMemory(b.stateDir, "GPU-a", pid, 2048))

	start := time.Now()
	must.NoError(t, b.Checkpoint(ctx, pid))
	must.GreaterEq(t, 250*time.Millisecond, time.Since(start))

	done := make(chan error, 1)
	start = time.Now()
	go func() { done <- b.Restore(ctx, pid) }()
	must.Wait(t, wait.InitialSuccess(wait.BoolFunc(func() bool {
		st, _ := b.Stats("GPU-a")
		return st.UsedMemoryMiB == 2048
	}), wait.Timeout(time.Second), wait.Gap(time.Millisecond)))
	must.NoError(t, <-done)
	must.GreaterEq(t, 100*time.Millisecond, time.Since(start))
}

// A restore that runs out of memory loses the process, as measured on an
// H100: it stays checkpointed, and a restore once the memory is free fails
// too. A new checkpoint of the same PID (a new process) clears the mark.
func TestRestoreThatDoesNotFitLosesTheProcess(t *testing.T) {
	b := simBackend(t, "10000")
	ctx := context.Background()
	pid, other := sleeper(t), sleeper(t)
	must.NoError(t, SetProcessMemory(b.stateDir, "GPU-a", pid, 6000))
	must.NoError(t, b.Checkpoint(ctx, pid))
	must.NoError(t, SetProcessMemory(b.stateDir, "GPU-a", other, 5000))

	err := b.Restore(ctx, pid)
	must.ErrorContains(t, err, "OUT_OF_MEMORY")
	must.ErrorIs(t, err, gpu.ErrRestoreLost)
	must.True(t, Checkpointed(b.stateDir, pid))

	must.NoError(t, SetProcessMemory(b.stateDir, "GPU-a", other, 0))
	err = b.Restore(ctx, pid)
	must.ErrorContains(t, err, "CUDA_ERROR_OPERATING_SYSTEM")
	must.ErrorIs(t, err, gpu.ErrRestoreLost)
	state, err := b.CheckpointState(ctx, pid)
	must.NoError(t, err)
	must.Eq(t, gpu.CheckpointCheckpointed, state)

	// A mark left for another process of the same PID (its start time
	// differs) does not apply.
	reused := sleeper(t)
	must.NoError(t, os.Rename(lostPath(b.stateDir, pid), lostPath(b.stateDir, reused)))
	must.NoError(t, SetProcessMemory(b.stateDir, "GPU-a", reused, 1000))
	must.NoError(t, b.Checkpoint(ctx, reused))
	must.NoError(t, os.WriteFile(lostPath(b.stateDir, reused), []byte("12345"), 0o644))
	must.NoError(t, b.Restore(ctx, reused))
}

func TestCheckpointRefusesAsTheHardwareDoes(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name  string
		setup func(b *Backend, pid int)
		op    func(b *Backend, pid int) error
		want  string
	}{
		{"no CUDA state", func(*Backend, int) {}, (*Backend).checkpoint, "holds no CUDA state"},
		{"checkpointed twice", func(b *Backend, pid int) { must.NoError(t, b.Checkpoint(ctx, pid)) }, (*Backend).checkpoint, "already checkpointed"},
		{"restore of a running process", func(*Backend, int) {}, (*Backend).restore, "not checkpointed"},
		{"stopped process", func(b *Backend, pid int) {
			must.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
			for i := 0; i < 200 && stoppedWhy(pid) == ""; i++ {
				time.Sleep(5 * time.Millisecond)
			}
		}, (*Backend).checkpoint, "stopped"},
		{"injected fault", func(b *Backend, pid int) { must.NoError(t, InjectCheckpointFault(b.stateDir, pid, "checkpoint", 1)) }, (*Backend).checkpoint, "injected"},
		{"restore that does not fit", func(b *Backend, pid int) {
			must.NoError(t, b.Checkpoint(ctx, pid))
			must.NoError(t, SetProcessMemory(b.stateDir, "GPU-a", os.Getpid(), 14000))
		}, (*Backend).restore, "OUT_OF_MEMORY"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := simBackend(t, "15360")
			pid := sleeper(t)
			if tc.name != "no CUDA state" {
				must.NoError(t, SetProcessMemory(b.stateDir, "GPU-a", pid, 3000))
			}
			tc.setup(b, pid)
			err := tc.op(b, pid)
			must.ErrorContains(t, err, tc.want)
		})
	}
}

// An injected fault fails as many calls as asked, then clears.
func TestInjectedCheckpointFaultCounts(t *testing.T) {
	b := simBackend(t, "15360")
	ctx := context.Background()
	pid := sleeper(t)
	must.NoError(t, SetProcessMemory(b.stateDir, "GPU-a", pid, 3000))
	must.NoError(t, b.Checkpoint(ctx, pid))
	must.NoError(t, InjectCheckpointFault(b.stateDir, pid, "restore", 2))
	must.Error(t, b.Restore(ctx, pid))
	must.Error(t, b.Restore(ctx, pid))
	must.NoError(t, b.Restore(ctx, pid))
}

func (b *Backend) checkpoint(pid int) error { return b.Checkpoint(context.Background(), pid) }

func (b *Backend) restore(pid int) error { return b.Restore(context.Background(), pid) }

// A process's allocations race its checkpoint: an allocation in flight
// when the checkpoint moves its record must land in host memory, as CUDA's
// checkpoint lock waits for the calls in flight, and never leave the
// process on the GPU and checkpointed at once.
func TestAllocationsInFlightDuringACheckpointStayOffTheGPU(t *testing.T) {
	b := simBackend(t, "15360")
	ctx := context.Background()
	pid := sleeper(t)
	must.NoError(t, SetProcessMemory(b.stateDir, "GPU-a", pid, 1000))
	onGPU := filepath.Join(b.stateDir, "procs", "GPU-a", strconv.Itoa(pid))
	stop := make(chan struct{})
	writes := make(chan error, 1)
	go func() {
		for mib := uint64(1000); ; mib++ {
			select {
			case <-stop:
				writes <- nil
				return
			default:
			}
			if err := SetProcessMemory(b.stateDir, "GPU-a", pid, mib); err != nil {
				writes <- err
				return
			}
		}
	}()
	for i := range 300 {
		must.NoError(t, b.Checkpoint(ctx, pid), must.Sprintf("checkpoint %d", i))
		_, err := os.Stat(onGPU)
		must.True(t, os.IsNotExist(err), must.Sprintf("checkpoint %d: an allocation in flight put the process back on the GPU", i))
		must.NoError(t, b.Restore(ctx, pid), must.Sprintf("restore %d", i))
	}
	close(stop)
	must.NoError(t, <-writes)
}

// A task frozen while its workload records an allocation holds its own
// record's lock until it is thawed. Another process on the same GPU must
// still record allocations and be checkpointed and restored meanwhile: a
// lock over the whole GPU left the next switch in a lane waiting for the
// frozen task, which only the switch could thaw.
func TestAFrozenLockHolderHoldsUpNoOtherProcess(t *testing.T) {
	b := simBackend(t, "15360")
	ctx := context.Background()
	frozen, other := sleeper(t), sleeper(t)
	must.NoError(t, SetProcessMemory(b.stateDir, "GPU-a", frozen, 1000))
	must.NoError(t, SetProcessMemory(b.stateDir, "GPU-a", other, 1000))
	unlock, err := lockProcess(b.stateDir, "GPU-a", frozen) // as a frozen workload mid-write
	must.NoError(t, err)
	defer unlock()
	done := make(chan error, 1)
	go func() {
		done <- errors.Join(SetProcessMemory(b.stateDir, "GPU-a", other, 2000), b.Checkpoint(ctx, other), b.Restore(ctx, other))
	}()
	select {
	case err := <-done:
		must.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("another process's allocation, checkpoint and restore waited for the frozen process's lock")
	}
}

// A process's lock file goes when its memory is released.
func TestReleasingAProcessRemovesItsLock(t *testing.T) {
	b := simBackend(t, "15360")
	pid := sleeper(t)
	must.NoError(t, SetProcessMemory(b.stateDir, "GPU-a", pid, 1000))
	_, err := os.Stat(lockPath(b.stateDir, "GPU-a", pid))
	must.NoError(t, err)
	must.NoError(t, ReleaseProcess(b.stateDir, "GPU-a", pid))
	_, err = os.Stat(lockPath(b.stateDir, "GPU-a", pid))
	must.True(t, os.IsNotExist(err))
}

// A link planted where a process's lock goes is not followed: the
// recording fails, and nothing is made where the link points.
func TestALockIsNotTakenThroughALink(t *testing.T) {
	b := simBackend(t, "15360")
	pid := sleeper(t)
	must.NoError(t, os.MkdirAll(filepath.Join(b.stateDir, "procs", "GPU-a"), 0o755))
	target := filepath.Join(t.TempDir(), "made-by-root")
	must.NoError(t, os.Symlink(target, lockPath(b.stateDir, "GPU-a", pid)))
	must.Error(t, SetProcessMemory(b.stateDir, "GPU-a", pid, 1000))
	_, err := os.Lstat(target)
	must.True(t, os.IsNotExist(err))
}

// A process that finishes while checkpointed, between the checkpoint and
// the freeze, leaves the GPU only once it is restored, as a CUDA call of a
// checkpointed process waits for the restore: its restore then finds its
// state, rather than fail and end the task.
func TestAProcessLeavingWhileCheckpointedWaitsForItsRestore(t *testing.T) {
	b := simBackend(t, "15360")
	ctx := context.Background()
	pid := sleeper(t)
	must.NoError(t, SetProcessMemory(b.stateDir, "GPU-a", pid, 1000))
	must.NoError(t, b.Checkpoint(ctx, pid))
	released := make(chan error, 1)
	go func() { released <- ReleaseOwnProcess(ctx, b.stateDir, "GPU-a", pid) }()
	select {
	case err := <-released:
		t.Fatalf("the release did not wait for the restore (err %v)", err)
	case <-time.After(100 * time.Millisecond):
	}
	must.NoError(t, b.Restore(ctx, pid))
	select {
	case err := <-released:
		must.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the release went on waiting after the restore")
	}
	procs, err := b.Processes("GPU-a")
	must.NoError(t, err)
	must.SliceEmpty(t, procs)

	// Until its context ends: a task being stopped is not held up.
	must.NoError(t, SetProcessMemory(b.stateDir, "GPU-a", pid, 1000))
	must.NoError(t, b.Checkpoint(ctx, pid))
	stopped, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	must.NoError(t, ReleaseOwnProcess(stopped, b.stateDir, "GPU-a", pid))
	must.Error(t, b.Restore(ctx, pid))
}
