package budget

import (
	"testing"

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
