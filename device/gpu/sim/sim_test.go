package sim

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/caravan-gpu/caravan/device/gpu"
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
		{"compute process", `"uuid": "GPU-a"`, false, gpu.Process{UsedMemoryMiB: 3000}},
		{"MPS client", `"uuid": "GPU-a", "mps_clients": true`, false, gpu.Process{UsedMemoryMiB: 3000}},
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
