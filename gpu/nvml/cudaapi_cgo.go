//go:build linux && cgo

package nvml

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

// The checkpoint entry points of libcuda (CUDA 12.8, driver 570). Their
// argument structs are 64 bytes of which only the lock timeout is set.
typedef int (*cu_init_fn)(unsigned int);
typedef int (*cu_ckpt_fn)(int, void *);
typedef int (*cu_state_fn)(int, int *);

typedef struct {
	cu_ckpt_fn lock, checkpoint, restore, unlock;
	cu_state_fn state;
} cu_ckpt_api;

static const char *cu_ckpt_open(const char *path, cu_ckpt_api *api) {
	void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!lib) return "not found";
	cu_init_fn init = (cu_init_fn)dlsym(lib, "cuInit");
	api->lock = (cu_ckpt_fn)dlsym(lib, "cuCheckpointProcessLock");
	api->checkpoint = (cu_ckpt_fn)dlsym(lib, "cuCheckpointProcessCheckpoint");
	api->restore = (cu_ckpt_fn)dlsym(lib, "cuCheckpointProcessRestore");
	api->unlock = (cu_ckpt_fn)dlsym(lib, "cuCheckpointProcessUnlock");
	api->state = (cu_state_fn)dlsym(lib, "cuCheckpointProcessGetState");
	if (!init || !api->lock || !api->checkpoint || !api->restore || !api->unlock || !api->state) {
		dlclose(lib);
		return "libcuda has no cuCheckpointProcess* (driver older than 570)";
	}
	if (init(0) != 0) {
		dlclose(lib);
		return "cuInit failed";
	}
	return 0;
}

static int cu_ckpt_call(cu_ckpt_fn fn, int pid, unsigned int timeout_ms) {
	unsigned char args[64];
	memset(args, 0, sizeof args);
	memcpy(args, &timeout_ms, sizeof timeout_ms);
	return fn(pid, args);
}

static int cu_ckpt_state(cu_state_fn fn, int pid, int *state) { return fn(pid, state); }
*/
import "C"

import (
	"context"
	"fmt"
	"sync"
	"time"
	"unsafe"

	"github.com/caravan-gpu/caravan/gpu"
)

// cudaAPI checkpoints through the CUDA driver API, with no attach per call.
type cudaAPI struct {
	api C.cu_ckpt_api
}

func openCUDACheckpointAPI() (*cudaAPI, error) { return openCUDACheckpointAPIAt("libcuda.so.1") }

// openCUDACheckpointAPIAt opens the checkpoint API of the libcuda at path
// (a name the dynamic loader searches for, or a path).
func openCUDACheckpointAPIAt(path string) (*cudaAPI, error) {
	a := &cudaAPI{}
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	if why := C.cu_ckpt_open(cpath, &a.api); why != nil {
		return nil, fmt.Errorf("%s: %s", path, C.GoString(why))
	}
	return a, nil
}

func (*cudaAPI) CheckpointMechanism() string { return "cuda-driver-api" }

func (*cudaAPI) CheckpointUnavailable() string { return "" }

// Checkpoint locks the process's CUDA calls, then moves its state to host
// memory; a failed checkpoint unlocks it again.
func (a *cudaAPI) Checkpoint(ctx context.Context, pid int) error {
	if r, answered := a.lock(pid, timeoutMs(ctx)); !answered {
		return fmt.Errorf("cuCheckpointProcessLock pid %d: no answer within its timeout (a stopped process holds the lock past it)", pid)
	} else if r != 0 {
		if r == 801 { // CUDA_ERROR_NOT_SUPPORTED: an MPS client, for one
			return fmt.Errorf("cuCheckpointProcessLock pid %d: CUresult %d (not supported): %w", pid, int(r), gpu.ErrCheckpointUnsupported)
		}
		return fmt.Errorf("cuCheckpointProcessLock pid %d: CUresult %d", pid, int(r))
	}
	if r := C.cu_ckpt_call(a.api.checkpoint, C.int(pid), 0); r != 0 {
		_ = C.cu_ckpt_call(a.api.unlock, C.int(pid), 0)
		return fmt.Errorf("cuCheckpointProcessCheckpoint pid %d: CUresult %d", pid, int(r))
	}
	return nil
}

// Restore moves the state back to the GPU and unlocks the process. A
// process that already runs is left alone, so that a restore repeated after
// a driver restart is harmless.
func (a *cudaAPI) Restore(_ context.Context, pid int) error {
	var state C.int
	r := C.cu_ckpt_state(a.api.state, C.int(pid), &state)
	if r != 0 {
		return fmt.Errorf("cuCheckpointProcessGetState pid %d: CUresult %d", pid, int(r))
	}
	if state == 0 { // CU_PROCESS_STATE_RUNNING
		return nil
	}
	if state == 2 { // CU_PROCESS_STATE_CHECKPOINTED
		if r := C.cu_ckpt_call(a.api.restore, C.int(pid), 0); r != 0 {
			if r == 2 { // CUDA_ERROR_OUT_OF_MEMORY: the process stays checkpointed for good
				return fmt.Errorf("cuCheckpointProcessRestore pid %d: CUresult %d (out of memory): %w", pid, int(r), gpu.ErrRestoreLost)
			}
			return fmt.Errorf("cuCheckpointProcessRestore pid %d: CUresult %d", pid, int(r))
		}
	}
	if r := C.cu_ckpt_call(a.api.unlock, C.int(pid), 0); r != 0 {
		return fmt.Errorf("cuCheckpointProcessUnlock pid %d: CUresult %d", pid, int(r))
	}
	return nil
}

// lock calls cuCheckpointProcessLock and waits for it a little past its
// timeout: on an H100 (driver 580) the lock of a stopped process does not
// return within its timeout, and a lane must not wait on it for good. A
// lock that succeeds after it was given up is undone, so that the process
// is not left locked.
func (a *cudaAPI) lock(pid int, timeoutMs uint) (r C.int, answered bool) {
	var mu sync.Mutex
	abandoned := false
	done := make(chan C.int, 1)
	go func() {
		r := C.cu_ckpt_call(a.api.lock, C.int(pid), C.uint(timeoutMs))
		mu.Lock()
		defer mu.Unlock()
		if abandoned {
			if r == 0 {
				_ = C.cu_ckpt_call(a.api.unlock, C.int(pid), 0)
			}
			return
		}
		done <- r
	}()
	limit := time.Duration(timeoutMs)*time.Millisecond*11/10 + 500*time.Millisecond
	select {
	case r := <-done:
		return r, true
	case <-time.After(limit):
		mu.Lock()
		defer mu.Unlock()
		select {
		case r := <-done:
			return r, true
		default:
			abandoned = true
			return 0, false
		}
	}
}

// CheckpointState reads cuCheckpointProcessGetState.
func (a *cudaAPI) CheckpointState(_ context.Context, pid int) (gpu.CheckpointState, error) {
	var state C.int
	if r := C.cu_ckpt_state(a.api.state, C.int(pid), &state); r != 0 {
		return 0, fmt.Errorf("cuCheckpointProcessGetState pid %d: CUresult %d", pid, int(r))
	}
	switch state {
	case 0: // CU_PROCESS_STATE_RUNNING
		return gpu.CheckpointRunning, nil
	case 1: // CU_PROCESS_STATE_LOCKED
		return gpu.CheckpointLocked, nil
	case 2: // CU_PROCESS_STATE_CHECKPOINTED
		return gpu.CheckpointCheckpointed, nil
	}
	return 0, fmt.Errorf("cuCheckpointProcessGetState pid %d: the process is in state %d (CU_PROCESS_STATE_FAILED is 3)", pid, int(state))
}

func timeoutMs(ctx context.Context) uint {
	if dl, ok := ctx.Deadline(); ok {
		if ms := int64(time.Until(dl) / 1e6); ms > 0 {
			return uint(ms)
		}
	}
	return uint(checkpointTimeout.Milliseconds())
}
