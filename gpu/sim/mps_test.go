package sim

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/caravan-gpu/caravan/gpu"
)

// A client's limit is its server's; its own environment can lower it but
// never raise it, and a client that looks for the daemon elsewhere runs
// outside MPS.
func TestConnectMPSTakesTheServersLimit(t *testing.T) {
	state, pipe := t.TempDir(), t.TempDir()
	d := MPSDaemon{StateDir: state, PipeDir: pipe}
	uid := uint32(os.Getuid())
	must.NoError(t, d.LimitServer(uid, map[string]uint64{"GPU-a": 2048, "GPU-b": 4096}))
	// A later limit on one GPU leaves the other's as it was.
	must.NoError(t, d.LimitServer(uid, map[string]uint64{"GPU-b": 3072}))

	own := t.TempDir() // a daemon of the task's own
	must.NoError(t, os.WriteFile(filepath.Join(own, "control"), nil, 0o600))
	cases := []struct {
		name   string
		gpu    string
		pipe   string
		client uint64
		want   MPSConnection
	}{
		{"server limit", "GPU-a", pipe, 0, MPSConnection{Connected: true, Served: true, LimitMiB: 2048, FromServer: true}},
		{"client asks for more", "GPU-a", pipe, 1 << 20, MPSConnection{Connected: true, Served: true, LimitMiB: 2048, FromServer: true}},
		{"client asks for less", "GPU-a", pipe, 1024, MPSConnection{Connected: true, Served: true, LimitMiB: 1024}},
		{"later limit", "GPU-b", pipe, 0, MPSConnection{Connected: true, Served: true, LimitMiB: 3072, FromServer: true}},
		{"GPU with no server limit", "GPU-c", pipe, 0, MPSConnection{Connected: true, Served: true}},
		{"own daemon", "GPU-a", own, 1 << 20, MPSConnection{Connected: true, LimitMiB: 1 << 20}},
		{"no daemon", "GPU-a", t.TempDir(), 1024, MPSConnection{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ConnectMPS(context.Background(), state, tc.gpu, tc.pipe, tc.client)
			must.NoError(t, err)
			must.Eq(t, tc.want, got)
		})
	}
}

// The daemon keeps its servers' limits only where no task can write: a
// directory planted by another user is refused, not used.
func TestMPSDaemonRefusesAPlantedServersDirectory(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("planting a directory of another user needs root")
	}
	state := t.TempDir()
	dir := filepath.Join(state, "mps")
	must.NoError(t, os.Mkdir(dir, 0o777))
	must.NoError(t, os.Chown(dir, 70001, 70001))
	err := MPSDaemon{StateDir: state, PipeDir: t.TempDir()}.LimitServer(70001, map[string]uint64{"GPU-a": 1})
	must.ErrorContains(t, err, "owned by uid 70001")
}

// On a GPU in exclusive-process mode the one context is the MPS server's:
// a process that left MPS, or talks to a daemon of its own, is refused
// while the simulated daemon serves the GPU; its clients are not.
func TestCheckContextUnderExclusiveProcessMode(t *testing.T) {
	b := simGPU(t)
	state := b.stateDir
	pipe := t.TempDir()
	mode, err := b.ComputeMode("GPU-a")
	must.NoError(t, err)
	must.Eq(t, gpu.ComputeDefault, mode)

	outside := MPSConnection{}
	own := MPSConnection{Connected: true}
	served := MPSConnection{Connected: true, Served: true}
	// Default mode, or no server yet: everyone gets a context.
	must.NoError(t, CheckContext(state, "GPU-a", outside))
	must.NoError(t, b.SetComputeMode("GPU-a", gpu.ComputeExclusiveProcess))
	must.NoError(t, CheckContext(state, "GPU-a", outside))

	must.NoError(t, MPSDaemon{StateDir: state, PipeDir: pipe}.LimitServer(uint32(os.Getuid()), map[string]uint64{"GPU-a": 1024}))
	must.ErrorIs(t, CheckContext(state, "GPU-a", outside), ErrDevicesUnavailable)
	must.ErrorIs(t, CheckContext(state, "GPU-a", own), ErrDevicesUnavailable)
	must.NoError(t, CheckContext(state, "GPU-a", served))
	conn, err := ConnectMPS(context.Background(), state, "GPU-a", pipe, 0)
	must.NoError(t, err)
	must.NoError(t, CheckContext(state, "GPU-a", conn))

	must.NoError(t, b.SetComputeMode("GPU-a", gpu.ComputeProhibited))
	must.ErrorIs(t, CheckContext(state, "GPU-a", served), ErrDevicesUnavailable)
	must.ErrorContains(t, b.SetComputeMode("GPU-a", "shared"), `unknown compute mode "shared"`)
	_, err = b.ComputeMode("GPU-nope")
	must.Error(t, err)
}

// The simulated daemon runs one user's server at a time, as
// nvidia-cuda-mps-control does: a client of another UID than a live
// client's waits until that client is gone, and then connects.
func TestMPSServesOneUIDAtATime(t *testing.T) {
	state, pipe := t.TempDir(), t.TempDir()
	d := MPSDaemon{StateDir: state, PipeDir: pipe}
	must.NoError(t, d.LimitServer(uint32(os.Getuid()), map[string]uint64{"GPU-a": 2048}))
	// A live client of another UID, as another task's process would be.
	other := exec.Command("sleep", "60")
	must.NoError(t, other.Start())
	t.Cleanup(func() {
		_ = other.Process.Kill()
		_ = other.Wait()
	})
	pid := other.Process.Pid
	record := filepath.Join(clientsDir(state), "70001."+strconv.Itoa(pid))
	must.NoError(t, os.WriteFile(record, []byte(strconv.FormatUint(startTicks(pid), 10)), 0o644))

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := ConnectMPS(ctx, state, "GPU-a", pipe, 0)
	must.ErrorContains(t, err, "waited for the MPS server of uid 70001")

	// Once that client is gone, this one connects with its server's limit.
	_ = other.Process.Kill()
	_ = other.Wait()
	conn, err := ConnectMPS(context.Background(), state, "GPU-a", pipe, 0)
	must.NoError(t, err)
	must.Eq(t, uint64(2048), conn.LimitMiB)
	_, err = os.Stat(record)
	must.ErrorIs(t, err, os.ErrNotExist, must.Sprint("the record of a client gone stays"))
	// A second client of the same UID connects at once.
	_, err = ConnectMPS(context.Background(), state, "GPU-a", pipe, 0)
	must.NoError(t, err)
}

// An MPS client cannot be checkpointed, as measured on an H100
// (cuCheckpointProcessLock: CUDA_ERROR_NOT_SUPPORTED): it can only be
// frozen, its memory staying on the GPU.
func TestAnMPSClientCannotBeCheckpointed(t *testing.T) {
	b := simGPU(t)
	pipe := t.TempDir()
	must.NoError(t, MPSDaemon{StateDir: b.stateDir, PipeDir: pipe}.LimitServer(uint32(os.Getuid()), map[string]uint64{"GPU-a": 4096}))
	pid := os.Getpid()
	must.NoError(t, SetProcessMemory(b.stateDir, "GPU-a", pid, 1000))
	must.NoError(t, b.Checkpoint(context.Background(), pid), must.Sprint("not a client yet"))
	must.NoError(t, b.Restore(context.Background(), pid))

	_, err := ConnectMPS(context.Background(), b.stateDir, "GPU-a", pipe, 0)
	must.NoError(t, err)
	err = b.Checkpoint(context.Background(), pid)
	must.ErrorIs(t, err, gpu.ErrCheckpointUnsupported)
	must.ErrorContains(t, err, "CUDA_ERROR_NOT_SUPPORTED")
	must.False(t, Checkpointed(b.stateDir, pid))
}
