package plugin

import (
	"testing"

	"github.com/hashicorp/nomad/plugins/drivers"
	"github.com/shoenig/test/must"

	"github.com/caravan-gpu/caravan/gpu"
	"github.com/caravan-gpu/caravan/gpu/reservation"
)

// A task's gpu_memory is read with the same units as the device plugin's
// lane_memory, so the same words mean the same budget on both sides.
func TestPlanSpecReadsSizesAsTheDevicePluginDoes(t *testing.T) {
	laneMiB, err := gpu.ParseMemoryMiB("20GB") // lane_memory = "20GB"
	must.NoError(t, err)
	grant := reservation.Grant{InstanceID: "GPU-x:lane0:slot0", GPUUUID: "GPU-x", Lane: 0, Slots: 1, MemoryMiB: laneMiB, SharePercent: 25}
	s, err := Config{}.parse()
	must.NoError(t, err)
	cases := []struct {
		gpuMemory string
		want      uint64
		err       string
	}{
		{"20GB", laneMiB, ""},
		{"19073", 19073, ""},
		{"10GiB", 10240, ""},
		{"20GiB", 0, "gpu_memory: 20480 MiB is more than the 19073 MiB granted on GPU-x"},
		{"20G", 0, `gpu_memory: "20G": unit "G" is ambiguous`},
		{"0.5KiB", 0, "gpu_memory: must be more than 0"},
	}
	for _, tc := range cases {
		t.Run(tc.gpuMemory, func(t *testing.T) {
			cfg := &drivers.TaskConfig{DeviceEnv: map[string]string{grant.EnvName(): grant.EnvValue()}}
			spec, _, err := planSpec(s, cfg, TaskConfig{Command: "/bin/true", GPUMemory: tc.gpuMemory, GPUProcesses: 1})
			if tc.err != "" {
				must.ErrorContains(t, err, tc.err)
				return
			}
			must.NoError(t, err)
			must.Eq(t, tc.want, spec.Budget.GPUs[0].LimitMiB)
		})
	}
}

// gpu_processes splits each GPU's budget into equal shares; a count the
// driver cannot honour is refused with the field named.
func TestPlanSpecGPUProcesses(t *testing.T) {
	grant := reservation.Grant{InstanceID: "GPU-x", GPUUUID: "GPU-x", Lane: -1, Slots: 1, MemoryMiB: 16000, SharePercent: 100}
	s, err := Config{}.parse()
	must.NoError(t, err)
	for _, tc := range []struct {
		processes int
		share     uint64
		err       string
	}{
		{1, 16000, ""},
		{4, 4000, ""},
		{0, 0, "gpu_processes: must be from 1 to 48, got 0"},
		{49, 0, "gpu_processes: must be from 1 to 48, got 49"},
	} {
		cfg := &drivers.TaskConfig{DeviceEnv: map[string]string{grant.EnvName(): grant.EnvValue()}}
		spec, _, err := planSpec(s, cfg, TaskConfig{Command: "/bin/true", GPUProcesses: tc.processes})
		if tc.err != "" {
			must.ErrorContains(t, err, tc.err)
			continue
		}
		must.NoError(t, err)
		must.Eq(t, tc.share, spec.Budget.ShareMiB(spec.Budget.GPUs[0].LimitMiB))
	}
}
