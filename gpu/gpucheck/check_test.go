package gpucheck

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/caravan-gpu/caravan/gpu/nvml"
	"github.com/caravan-gpu/caravan/internal/cctest"
)

// fakeLibcuda is libcuda's allocation entry points at the hardware seam:
// each call is logged with its arguments, FAKE_CUDA_OOM makes an
// allocation of more than that many MiB fail with
// CUDA_ERROR_OUT_OF_MEMORY (2), and FAKE_CUDA_CAP makes one fail once the
// process would hold more than that many MiB.
const fakeLibcuda = `
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>

static void logf1(const char *what, unsigned long long v) {
	FILE *f = fopen(getenv("FAKE_CUDA_LOG"), "a");
	if (!f) return;
	fprintf(f, "%s %llu\n", what, v);
	fclose(f);
}

static int ctx_current = 0;
static unsigned long long next = 4096;

int cuInit(unsigned int flags) { logf1("init", flags); return 0; }
int cuDeviceGet(int *dev, int ordinal) { logf1("device", ordinal); *dev = ordinal; return 0; }
int cuDevicePrimaryCtxRetain(void **ctx, int dev) { logf1("retain", dev); *ctx = (void *)0x1; return 0; }
int cuCtxSetCurrent(void *ctx) { logf1("current", (unsigned long long)ctx); ctx_current = ctx != 0; return 0; }
int cuMemAlloc_v2(unsigned long long *ptr, size_t bytes) {
	logf1("alloc", bytes);
	if (!ctx_current) return 201;
	const char *oom = getenv("FAKE_CUDA_OOM");
	if (oom && bytes > (size_t)atoll(oom) << 20) return 2;
	const char *cap = getenv("FAKE_CUDA_CAP");
	if (cap && next - 4096 + bytes > (size_t)atoll(cap) << 20) return 2;
	*ptr = next;
	next += bytes;
	return 0;
}
int cuMemFree_v2(unsigned long long ptr) { logf1("free", ptr); return 0; }
`

// The child allocates through libcuda as a framework does: device 0's
// primary context made current, then cuMemAlloc; it says "ready" once it
// holds its memory, and frees a spike again.
func TestAllocThroughLibcuda(t *testing.T) {
	lib := cctest.SharedLib(t, "libcuda-alloc", fakeLibcuda)
	log := filepath.Join(t.TempDir(), "calls")
	t.Setenv("FAKE_CUDA_LOG", log)
	var out bytes.Buffer
	must.NoError(t, Alloc(lib, 1024, 2048, time.Millisecond, time.Millisecond, &out))
	must.Eq(t, "ready\n", out.String())
	data, err := os.ReadFile(log)
	must.NoError(t, err)
	must.Eq(t, []string{"init 0", "device 0", "retain 0", "current 1",
		"alloc 1073741824", "alloc 2147483648", "free 1073745920"}, strings.Split(strings.TrimSpace(string(data)), "\n"))

	t.Setenv("FAKE_CUDA_OOM", "512")
	out.Reset()
	err = Alloc(lib, 1024, 0, 0, 0, &out)
	must.ErrorContains(t, err, "cuMemAlloc 1024 MiB: CUresult 2")
	must.Eq(t, "", out.String(), must.Sprint("a child that holds nothing must not say ready"))

	// -mib 0 holds a context and no allocation.
	must.NoError(t, os.Remove(log))
	out.Reset()
	must.NoError(t, Alloc(lib, 0, 0, 0, 0, &out))
	must.Eq(t, "ready\n", out.String())
	data, err = os.ReadFile(log)
	must.NoError(t, err)
	must.StrNotContains(t, string(data), "alloc")

	_, err = OpenCUDA(filepath.Join(t.TempDir(), "missing.so"))
	must.ErrorContains(t, err, "not found")
}

// The probe child holds as much as its limit lets it, a step at a time,
// and says how much.
func TestProbeHoldsUpToItsLimit(t *testing.T) {
	lib := cctest.SharedLib(t, "libcuda-probe", fakeLibcuda)
	t.Setenv("FAKE_CUDA_LOG", filepath.Join(t.TempDir(), "calls"))
	t.Setenv("FAKE_CUDA_CAP", "1000")
	var out bytes.Buffer
	must.NoError(t, Probe(lib, 64, 0, &out))
	must.Eq(t, "ready 960\n", out.String())
	must.ErrorContains(t, Probe(lib, 0, 0, &out), "step is 0 MiB")
}

// Where NVML does not load there is nothing to measure: Run says so with
// ErrNoGPU, which the command reports and exits 0 on.
func TestRunWithoutAGPU(t *testing.T) {
	if b, err := nvml.New(nil); err == nil {
		b.Close()
		t.Skip("NVML loads here")
	}
	_, err := Run(context.Background(), Options{Self: os.Args[0]})
	must.True(t, errors.Is(err, ErrNoGPU), must.Sprint(err))
	must.ErrorContains(t, err, "libnvidia-ml")
}

func TestReportFiles(t *testing.T) {
	rep := Report{Driver: "570.1", CUDA: "12.8", GPU: "GPU-x", Model: "NVIDIA H100", MemoryMiB: 81559,
		Rows: []Row{{Check: "MPS server limit", Result: "refused", Detail: "a | b"}}}
	dir := t.TempDir()
	must.NoError(t, rep.WriteFiles(dir))
	md, err := os.ReadFile(filepath.Join(dir, "gpu-check.md"))
	must.NoError(t, err)
	must.StrContains(t, string(md), "| MPS server limit | refused | a \\| b |")
	js, err := os.ReadFile(filepath.Join(dir, "gpu-check.json"))
	must.NoError(t, err)
	must.StrContains(t, string(js), `"check": "MPS server limit"`)
}
