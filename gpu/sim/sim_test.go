package sim

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/caravan-gpu/caravan/gpu"
	"github.com/shoenig/test/must"
)

// The simulated GPUs list their processes the ways NVML does: as compute
// processes or only as MPS clients, with memory figures or none.
func TestProcessesListedAsNVMLListsThem(t *testing.T) {
	cases := []struct {
		name     string
		gpu      string
		notAvail bool // this process's state file says N/A
		want     gpu.Process
	}{
		{"compute process", `"uuid": "GPU-a"`, false, gpu.Process{UsedMemoryMiB: 3000, PeakMemoryMiB: 3000}},
		{"MPS client", `"uuid": "GPU-a", "mps_clients": true`, false, gpu.Process{UsedMemoryMiB: 3000, PeakMemoryMiB: 3000}},
		{"memory not available on the GPU", `"uuid": "GPU-a", "process_memory_not_available": true`, false, gpu.Process{MemoryUnknown: true}},
		{"memory not available for the process", `"uuid": "GPU-a"`, true, gpu.Process{MemoryUnknown: true}},
		{"MPS client without figures", `"uuid": "GPU-a", "mps_clients": true, "process_memory_not_available": true`, false, gpu.Process{MemoryUnknown: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			fleet := filepath.Join(dir, "fleet.json")
			must.NoError(t, os.WriteFile(fleet, []byte(`{"gpus":[{`+tc.gpu+`, "model": "Tesla T4", "memory_mib": 15360}]}`), 0o644))
			b, err := New(fleet, filepath.Join(dir, "state"))
			must.NoError(t, err)
			pid := os.Getpid()
			if tc.notAvail {
				must.NoError(t, SetProcessMemoryNotAvailable(b.stateDir, "GPU-a", pid))
			} else {
				must.NoError(t, SetProcessMemory(b.stateDir, "GPU-a", pid, 3000))
			}
			procs, err := b.Processes("GPU-a")
			must.NoError(t, err)
			want := tc.want
			want.PID = pid
			must.Eq(t, []gpu.Process{want}, procs)

			// The GPU's own total still counts what it can.
			st, err := b.Stats("GPU-a")
			must.NoError(t, err)
			if tc.notAvail {
				must.Eq(t, uint64(0), st.UsedMemoryMiB)
			} else {
				must.Eq(t, uint64(3000), st.UsedMemoryMiB)
			}
		})
	}
}

func TestProcessesDropExitedOnes(t *testing.T) {
	dir := t.TempDir()
	fleet := filepath.Join(dir, "fleet.json")
	must.NoError(t, os.WriteFile(fleet, []byte(`{"gpus":[{"uuid":"GPU-a","model":"Tesla T4","memory_mib":15360}]}`), 0o644))
	b, err := New(fleet, filepath.Join(dir, "state"))
	must.NoError(t, err)
	procs, err := b.Processes("GPU-a")
	must.NoError(t, err)
	must.SliceEmpty(t, procs)
	// A PID that cannot be alive: its memory is gone with it.
	must.NoError(t, SetProcessMemory(b.stateDir, "GPU-a", 1<<30, 100))
	procs, err = b.Processes("GPU-a")
	must.NoError(t, err)
	must.SliceEmpty(t, procs)
}

func simGPU(t *testing.T) *Backend {
	t.Helper()
	dir := t.TempDir()
	fleet := filepath.Join(dir, "fleet.json")
	must.NoError(t, os.WriteFile(fleet, []byte(`{"gpus":[{"uuid":"GPU-a","model":"Tesla T4","memory_mib":15360}]}`), 0o644))
	b, err := New(fleet, filepath.Join(dir, "state"))
	must.NoError(t, err)
	return b
}

// A spike that is freed again before anyone samples stays in the process's
// peak, as NVML's accounting keeps maxMemoryUsage.
func TestPeakOutlivesASpike(t *testing.T) {
	b := simGPU(t)
	pid := os.Getpid()
	for _, mib := range []uint64{1024, 1536, 2600, 1024, 1536} {
		must.NoError(t, SetProcessMemory(b.stateDir, "GPU-a", pid, mib))
	}
	procs, err := b.Processes("GPU-a")
	must.NoError(t, err)
	must.Eq(t, []gpu.Process{{PID: pid, UsedMemoryMiB: 1536, PeakMemoryMiB: 2600}}, procs)
	// Released and allocated again, the process starts a new record.
	must.NoError(t, ReleaseProcess(b.stateDir, "GPU-a", pid))
	must.NoError(t, SetProcessMemory(b.stateDir, "GPU-a", pid, 100))
	procs, err = b.Processes("GPU-a")
	must.NoError(t, err)
	must.Eq(t, uint64(100), procs[0].PeakMemoryMiB)
}

// Past an MPS client limit an allocation fails as CUDA's does and nothing
// is counted; within it, it is recorded.
func TestAllocationPastTheMPSLimitFails(t *testing.T) {
	cases := []struct {
		name     string
		mib      uint64
		limit    uint64
		wantErr  bool
		wantUsed uint64
		wantPeak uint64
	}{
		{"no limit", 4096, 0, false, 4096, 4096},
		{"within", 2048, 2048, false, 2048, 2048},
		{"past", 2561, 2048, true, 1024, 1024},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := simGPU(t)
			pid := os.Getpid()
			must.NoError(t, SetProcessMemory(b.stateDir, "GPU-a", pid, 1024))
			err := AllocateProcessMemory(b.stateDir, "GPU-a", pid, tc.mib, tc.limit)
			if tc.wantErr {
				must.ErrorIs(t, err, ErrOutOfMemory)
				must.ErrorContains(t, err, "MPS pinned device memory limit of 2048 MiB")
			} else {
				must.NoError(t, err)
			}
			procs, err := b.Processes("GPU-a")
			must.NoError(t, err)
			must.Eq(t, []gpu.Process{{PID: pid, UsedMemoryMiB: tc.wantUsed, PeakMemoryMiB: tc.wantPeak}}, procs)
		})
	}
}

func TestParseHeld(t *testing.T) {
	cases := []struct {
		text string
		ok   bool
		want heldMemory
	}{
		{"1024\n", true, heldMemory{mib: 1024, known: true, peak: 1024}},
		{"1024 2048\n", true, heldMemory{mib: 1024, known: true, peak: 2048}},
		{"N/A 512", true, heldMemory{peak: 512}},
		{"N/A", true, heldMemory{}},
		{"100 900 123456789\n", true, heldMemory{mib: 100, known: true, peak: 900, startTicks: 123456789}},
		{"N/A 900 123456789", true, heldMemory{peak: 900, startTicks: 123456789}},
		{"1 2 0", true, heldMemory{mib: 1, known: true, peak: 2}},
		{"", false, heldMemory{}},
		{"1 2 3 4", false, heldMemory{}},
		{"1 2 -3", false, heldMemory{}},
		{"1 2 x", false, heldMemory{}},
		{"x 2", false, heldMemory{}},
		{"1 -2", false, heldMemory{}},
	}
	for _, tc := range cases {
		h, ok := parseHeld(tc.text)
		must.Eq(t, tc.ok, ok, must.Sprint(tc.text))
		must.Eq(t, tc.want, h, must.Sprint(tc.text))
	}
}

func FuzzParseHeld(f *testing.F) {
	for _, s := range []string{"1024", "1024 2048", "N/A 5", "N/A", "", "100 900 123456789"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		h, ok := parseHeld(text)
		if !ok {
			return
		}
		if h.known && h.peak < h.mib {
			t.Fatalf("peak %d below current %d for %q", h.peak, h.mib, text)
		}
		if h.mib >= 1<<40 || h.peak >= 1<<40 || h.startTicks >= 1<<50 {
			t.Fatalf("figure out of range for %q", text)
		}
		// What a record reads as, it is written as.
		if again, ok := parseHeld(h.String()); !ok || again != h {
			t.Fatalf("%q reads as %+v, written as %q, which reads as %+v", text, h, h.String(), again)
		}
	})
}
