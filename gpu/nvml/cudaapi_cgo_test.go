//go:build linux && cgo

package nvml

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shoenig/test/must"
	"github.com/shoenig/test/wait"

	"github.com/caravan-gpu/caravan/gpu"
	"github.com/caravan-gpu/caravan/internal/cctest"
)

// fakeLibcuda is libcuda at the hardware seam: the checkpoint entry points
// with CUDA 12.8's signatures, keeping one process's state as the driver
// does (running, locked, checkpointed), refusing a call from the wrong
// state with CUDA_ERROR_ILLEGAL_STATE (401), and logging each call with its
// pid and the argument struct as it arrived: the lock timeout in its first
// four bytes, and whether the other 60 bytes are zero. FAKE_CUDA_FAIL names
// a call to fail with CUresult 999; FAKE_CUDA_INIT_FAIL fails cuInit;
// FAKE_CUDA_LOCK_HANG_MS holds the lock call that long, past its timeout,
// as the driver does for a stopped process.
const fakeLibcuda = `
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int state = 0;

static void logcall(const char *fn, int pid, const unsigned char *args) {
	FILE *f = fopen(getenv("FAKE_CUDA_LOG"), "a");
	if (!f) return;
	fprintf(f, "%s %d", fn, pid);
	if (args) {
		unsigned int timeout;
		int rest = 1;
		memcpy(&timeout, args, sizeof timeout);
		for (int i = 4; i < 64; i++) if (args[i]) rest = 0;
		fprintf(f, " timeout=%u rest_zero=%d", timeout, rest);
	}
	fprintf(f, "\n");
	fclose(f);
}

static int fails(const char *fn) {
	const char *f = getenv("FAKE_CUDA_FAIL");
	return f && strcmp(f, fn) == 0;
}

static int move(const char *fn, int pid, const unsigned char *args, int from, int to) {
	logcall(fn, pid, args);
	if (state != from) return 401;
	if (fails(fn)) return 999;
	state = to;
	return 0;
}

int cuInit(unsigned int flags) { return getenv("FAKE_CUDA_INIT_FAIL") ? 3 : 0; }
int cuCheckpointProcessLock(int pid, void *args) {
	const char *hang = getenv("FAKE_CUDA_LOCK_HANG_MS");
	if (hang) usleep(atoi(hang) * 1000);
	return move("lock", pid, args, 0, 1);
}
int cuCheckpointProcessCheckpoint(int pid, void *args) { return move("checkpoint", pid, args, 1, 2); }
int cuCheckpointProcessRestore(int pid, void *args) { return move("restore", pid, args, 2, 1); }
int cuCheckpointProcessUnlock(int pid, void *args) { return move("unlock", pid, args, 1, 0); }
int cuCheckpointProcessGetState(int pid, int *st) { logcall("state", pid, 0); *st = state; return 0; }
`

func fakeCalls(t *testing.T, log string) []string {
	t.Helper()
	data, err := os.ReadFile(log)
	must.NoError(t, err)
	return strings.Split(strings.TrimSpace(string(data)), "\n")
}

// The driver-API path calls libcuda in the order and with the argument
// layout CUDA 12.8 defines: lock (with the timeout left of the context)
// then checkpoint; state, restore, then unlock; and a restore of a process
// that runs already calls nothing that moves it.
func TestCUDAAPICallSequenceAndArguments(t *testing.T) {
	lib := cctest.SharedLib(t, "libcuda-fake", fakeLibcuda)
	log := filepath.Join(t.TempDir(), "calls")
	t.Setenv("FAKE_CUDA_LOG", log)
	api, err := openCUDACheckpointAPIAt(lib)
	must.NoError(t, err)
	must.Eq(t, "cuda-driver-api", api.CheckpointMechanism())

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	must.NoError(t, api.Checkpoint(ctx, 4242))
	state, err := api.CheckpointState(ctx, 4242)
	must.NoError(t, err)
	must.Eq(t, gpu.CheckpointCheckpointed, state)
	must.NoError(t, api.Restore(ctx, 4242))
	must.NoError(t, api.Restore(ctx, 4242)) // runs already: nothing to do

	calls := fakeCalls(t, log)
	must.SliceLen(t, 7, calls, must.Sprint(calls))
	lock := strings.Fields(calls[0])
	must.Eq(t, []string{"lock", "4242"}, lock[:2])
	must.Eq(t, "rest_zero=1", lock[3])
	timeout, err := strconv.Atoi(strings.TrimPrefix(lock[2], "timeout="))
	must.NoError(t, err)
	must.Between(t, 19000, timeout, 20000, must.Sprint("the lock timeout is what is left of the context, in ms"))
	must.Eq(t, []string{
		"checkpoint 4242 timeout=0 rest_zero=1",
		"state 4242",
		"state 4242",
		"restore 4242 timeout=0 rest_zero=1",
		"unlock 4242 timeout=0 rest_zero=1",
		"state 4242",
	}, calls[1:])
}

// A lock that does not answer within its timeout is given up, so that the
// lane is not held for good; when it succeeds later it is undone.
func TestCUDAAPIGivesUpALockThatHangs(t *testing.T) {
	lib := cctest.SharedLib(t, "libcuda-fake", fakeLibcuda)
	log := filepath.Join(t.TempDir(), "calls")
	t.Setenv("FAKE_CUDA_LOG", log)
	t.Setenv("FAKE_CUDA_LOCK_HANG_MS", "2500")
	api, err := openCUDACheckpointAPIAt(lib)
	must.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = api.Checkpoint(ctx, 4243)
	must.ErrorContains(t, err, "no answer within its timeout")
	must.Less(t, 2*time.Second, time.Since(start))
	must.Wait(t, wait.InitialSuccess(wait.BoolFunc(func() bool {
		data, _ := os.ReadFile(log)
		return strings.Contains(string(data), "unlock 4243")
	}), wait.Timeout(5*time.Second), wait.Gap(20*time.Millisecond)))
	calls := fakeCalls(t, log)
	must.Eq(t, "lock 4243", strings.Join(strings.Fields(calls[0])[:2], " "))
	must.Eq(t, "unlock 4243 timeout=0 rest_zero=1", calls[1])
}

// A failed checkpoint unlocks the process again, and each failure is an
// error naming the call, the pid and the CUresult.
func TestCUDAAPIErrors(t *testing.T) {
	lib := cctest.SharedLib(t, "libcuda-fake", fakeLibcuda)
	log := filepath.Join(t.TempDir(), "calls")
	t.Setenv("FAKE_CUDA_LOG", log)
	api, err := openCUDACheckpointAPIAt(lib)
	must.NoError(t, err)
	ctx := context.Background()

	t.Setenv("FAKE_CUDA_FAIL", "checkpoint")
	err = api.Checkpoint(ctx, 7)
	must.ErrorContains(t, err, "cuCheckpointProcessCheckpoint pid 7: CUresult 999")
	state, err := api.CheckpointState(ctx, 7)
	must.NoError(t, err)
	must.Eq(t, gpu.CheckpointRunning, state, must.Sprint("a failed checkpoint left the process locked"))
	must.Eq(t, []string{"lock", "checkpoint", "unlock", "state"}, callNames(fakeCalls(t, log)))

	t.Setenv("FAKE_CUDA_FAIL", "")
	must.NoError(t, api.Checkpoint(ctx, 7))
	t.Setenv("FAKE_CUDA_FAIL", "restore")
	must.ErrorContains(t, api.Restore(ctx, 7), "cuCheckpointProcessRestore pid 7: CUresult 999")
	state, err = api.CheckpointState(ctx, 7)
	must.NoError(t, err)
	must.Eq(t, gpu.CheckpointCheckpointed, state)
	t.Setenv("FAKE_CUDA_FAIL", "")
	must.NoError(t, api.Restore(ctx, 7))
	must.NoError(t, api.Checkpoint(ctx, 7)) // it runs again, and can be checkpointed
	must.NoError(t, api.Restore(ctx, 7))
}

func callNames(calls []string) []string {
	out := make([]string, len(calls))
	for i, c := range calls {
		out[i], _, _ = strings.Cut(c, " ")
	}
	return out
}

// A libcuda without the checkpoint entry points (a driver before 570) or
// whose cuInit fails is not used, and says why.
func TestCUDAAPIRefusesAnOldOrBrokenLibcuda(t *testing.T) {
	old := cctest.SharedLib(t, "libcuda-old", "int cuInit(unsigned int flags) { return 0; }\n")
	_, err := openCUDACheckpointAPIAt(old)
	must.ErrorContains(t, err, "no cuCheckpointProcess* (driver older than 570)")

	lib := cctest.SharedLib(t, "libcuda-broken", fakeLibcuda)
	t.Setenv("FAKE_CUDA_INIT_FAIL", "1")
	_, err = openCUDACheckpointAPIAt(lib)
	must.ErrorContains(t, err, "cuInit failed")

	_, err = openCUDACheckpointAPIAt(filepath.Join(t.TempDir(), "missing.so"))
	must.ErrorContains(t, err, "not found")
}
