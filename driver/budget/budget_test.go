package budget

import (
	"testing"

	"github.com/caravan-gpu/caravan/device/gpu"
	"github.com/caravan-gpu/caravan/device/reservation"
	"github.com/shoenig/test/must"
)

func TestPlanAndEnv(t *testing.T) {
	grants := []reservation.Grant{
		{InstanceID: "b", GPUUUID: "GPU-b", Lane: 0, Slots: 2, MemoryMiB: 8000, SharePercent: 50},
		{InstanceID: "a", GPUUUID: "GPU-a", Lane: -1, Slots: 1, MemoryMiB: 40000, SharePercent: 100},
	}
	b, err := Plan(grants, 0, PolicyKill)
	must.NoError(t, err)
	must.SliceLen(t, 2, b.GPUs)
	env := Env(grants, b, EnvOptions{MPS: true, FrameworkHints: true, DeviceMemoryMiB: map[string]uint64{"GPU-a": 80000, "GPU-b": 16000},
		DeviceModel: map[string]string{"GPU-a": "NVIDIA H100 80GB HBM3", "GPU-b": "Tesla T4"}})
	must.Eq(t, "GPU-a,GPU-b", env["CUDA_VISIBLE_DEVICES"])
	must.Eq(t, "NVIDIA H100 80GB HBM3", env[ModelEnv])
	must.Eq(t, "0=40000M,1=8000M", env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"])
	must.Eq(t, "50", env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"])
	must.Eq(t, "0.500", env["XLA_PYTHON_CLIENT_MEM_FRACTION"])

	_, err = Plan(grants, 9000, PolicyKill)
	must.ErrorContains(t, err, "gpu_memory: 9000 MiB is more than the 8000 MiB granted on GPU-b")
	lowered, err := Plan(grants, 4000, PolicyWarn)
	must.NoError(t, err)
	must.Eq(t, uint64(4000), lowered.GPUs[0].LimitMiB)

	none, err := Plan(nil, 1024, PolicyKill)
	must.NoError(t, err)
	g, ok := none.For("GPU-anything")
	must.True(t, ok)
	must.Eq(t, uint64(1024), g.LimitMiB)
}

func TestCheckNamesTheLargestProcess(t *testing.T) {
	b := Budget{Policy: PolicyKill, GPUs: []GPU{{UUID: "GPU-a", LimitMiB: 1000}}}
	u := []Usage{{UUID: "GPU-a", LimitMiB: 1000, UsedMiB: 1500, Procs: []ProcUsage{{PID: 7, Name: "python3", UsedMiB: 1200}, {PID: 8, Name: "worker", UsedMiB: 300}}}}
	br := Check(b, u)
	must.NotNil(t, br)
	must.Eq(t, "GPU memory budget exceeded on GPU-a: task uses 1500 MiB of its 1000 MiB budget; pid 7 (python3) holds 1200 MiB", br.Reason())
	u[0].UsedMiB = 1000
	must.Nil(t, Check(b, u))
}

type fakeSampler map[string][]gpu.Process

func (f fakeSampler) Processes(uuid string) ([]gpu.Process, error) { return f[uuid], nil }
func (f fakeSampler) Devices() ([]gpu.Device, error) {
	var out []gpu.Device
	for uuid := range f {
		out = append(out, gpu.Device{UUID: uuid})
	}
	return out, nil
}

// Memory the GPU does not report is neither counted nor guessed: it cannot
// cause a kill, it cannot hide a breach of the known processes, and it is
// reported.
func TestMeasureAndCheckWithUnknownMemory(t *testing.T) {
	unknown := func(pid int) gpu.Process { return gpu.Process{PID: pid, MemoryUnknown: true} }
	known := func(pid int, mib uint64) gpu.Process { return gpu.Process{PID: pid, UsedMemoryMiB: mib} }
	cases := []struct {
		name    string
		procs   []gpu.Process
		used    uint64
		breach  string
		unknown string
	}{
		{"all known, within", []gpu.Process{known(7, 900)}, 900, "", ""},
		{"all known, over", []gpu.Process{known(7, 1200)}, 1200, "pid 7 (python3) holds 1200 MiB", ""},
		{"unknown alone never breaches", []gpu.Process{unknown(7)}, 0, "",
			"the GPU does not report the memory of pid 7 (python3) on GPU-a (NVML_VALUE_NOT_AVAILABLE): the budget of 1000 MiB is checked on the task's other processes only (0 MiB known)"},
		{"unknown beside known within", []gpu.Process{unknown(7), known(8, 600)}, 600, "", "pid 7 (python3)"},
		{"known over beside unknown", []gpu.Process{unknown(7), known(8, 1600)}, 1600,
			"pid 8 (worker) holds 1600 MiB (and 1 process(es) whose memory the GPU does not report)", "pid 7 (python3)"},
		{"other tasks' processes are ignored", []gpu.Process{unknown(99), known(98, 5000)}, 0, "", ""},
	}
	b := Budget{Policy: PolicyKill, GPUs: []GPU{{UUID: "GPU-a", LimitMiB: 1000}}}
	names := map[int]string{7: "python3", 8: "worker"}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			usage, err := Measure(fakeSampler{"GPU-a": tc.procs}, b, names)
			must.NoError(t, err)
			must.SliceLen(t, 1, usage)
			must.Eq(t, tc.used, usage[0].UsedMiB)
			br := Check(b, usage)
			if tc.breach == "" {
				must.Nil(t, br)
			} else {
				must.NotNil(t, br)
				must.StrContains(t, br.Reason(), tc.breach)
			}
			if tc.unknown == "" {
				must.Eq(t, "", usage[0].UnknownReport())
			} else {
				must.StrContains(t, usage[0].UnknownReport(), tc.unknown)
			}
		})
	}
}

// A task is told the policy only when the watchdog acts on it.
func TestEnvPolicyOnlyWhenWatched(t *testing.T) {
	grants := []reservation.Grant{{InstanceID: "a", GPUUUID: "GPU-a", Lane: -1, Slots: 1, MemoryMiB: 4000, SharePercent: 100}}
	b, err := Plan(grants, 0, PolicyKill)
	must.NoError(t, err)
	for _, tc := range []struct {
		watchdog bool
		policy   string
	}{{true, "kill"}, {false, ""}} {
		env := Env(grants, b, EnvOptions{Watchdog: tc.watchdog})
		must.Eq(t, tc.policy, env["CARAVAN_BUDGET_POLICY"])
		must.Eq(t, "4000", env["CARAVAN_GPU_MEMORY_MIB"])
	}
}
