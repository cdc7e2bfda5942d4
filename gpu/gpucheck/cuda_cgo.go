//go:build linux && cgo

package gpucheck

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>
#include <stddef.h>

typedef int (*cu_init_fn)(unsigned int);
typedef int (*cu_devget_fn)(int *, int);
typedef int (*cu_retain_fn)(void **, int);
typedef int (*cu_setcur_fn)(void *);
typedef int (*cu_alloc_fn)(unsigned long long *, size_t);
typedef int (*cu_free_fn)(unsigned long long);

typedef struct {
	cu_alloc_fn alloc;
	cu_free_fn free;
} cu_mem_api;

// cu_mem_open loads libcuda at path and makes device 0's primary context
// current, so that allocations land on it.
static const char *cu_mem_open(const char *path, cu_mem_api *api, int *res) {
	*res = 0;
	void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!lib) return "not found";
	cu_init_fn init = (cu_init_fn)dlsym(lib, "cuInit");
	cu_devget_fn devget = (cu_devget_fn)dlsym(lib, "cuDeviceGet");
	cu_retain_fn retain = (cu_retain_fn)dlsym(lib, "cuDevicePrimaryCtxRetain");
	cu_setcur_fn setcur = (cu_setcur_fn)dlsym(lib, "cuCtxSetCurrent");
	api->alloc = (cu_alloc_fn)dlsym(lib, "cuMemAlloc_v2");
	api->free = (cu_free_fn)dlsym(lib, "cuMemFree_v2");
	if (!init || !devget || !retain || !setcur || !api->alloc || !api->free) return "lacks a CUDA driver API entry point";
	int dev = 0;
	void *ctx = 0;
	if ((*res = init(0)) != 0) return "cuInit failed";
	if ((*res = devget(&dev, 0)) != 0) return "cuDeviceGet failed";
	if ((*res = retain(&ctx, dev)) != 0) return "cuDevicePrimaryCtxRetain failed";
	if ((*res = setcur(ctx)) != 0) return "cuCtxSetCurrent failed";
	return 0;
}

static int cu_alloc(cu_mem_api *api, unsigned long long *ptr, size_t bytes) { return api->alloc(ptr, bytes); }
static int cu_free(cu_mem_api *api, unsigned long long ptr) { return api->free(ptr); }
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// CUDA allocates device memory on GPU 0 through libcuda's driver API, as a
// training job's framework does; CUDA_VISIBLE_DEVICES picks the GPU.
type CUDA struct{ api C.cu_mem_api }

// OpenCUDA loads the libcuda at path ("libcuda.so.1" on a GPU host).
func OpenCUDA(path string) (*CUDA, error) {
	c := &CUDA{}
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var res C.int
	if why := C.cu_mem_open(cpath, &c.api, &res); why != nil {
		return nil, fmt.Errorf("%s: %s (CUresult %d)", path, C.GoString(why), int(res))
	}
	return c, nil
}

// Alloc allocates mib MiB and returns the device pointer.
func (c *CUDA) Alloc(mib uint64) (uint64, error) {
	var ptr C.ulonglong
	if r := C.cu_alloc(&c.api, &ptr, C.size_t(mib<<20)); r != 0 {
		return 0, fmt.Errorf("cuMemAlloc %d MiB: CUresult %d", mib, int(r))
	}
	return uint64(ptr), nil
}

// Free frees what Alloc returned.
func (c *CUDA) Free(ptr uint64) error {
	if r := C.cu_free(&c.api, C.ulonglong(ptr)); r != 0 {
		return fmt.Errorf("cuMemFree: CUresult %d", int(r))
	}
	return nil
}
