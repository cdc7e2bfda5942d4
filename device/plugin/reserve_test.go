package plugin

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/caravan-gpu/caravan/gpu/reservation"
	"github.com/hashicorp/nomad/plugins/device"
	"github.com/shoenig/test/must"
)

func TestReserve(t *testing.T) {
	d, _ := newSimDevice(t, testFleet, `
partition {
  model = "NVIDIA H100*"
  lanes = 4
  slots = 2
}`)
	cases := []struct {
		name    string
		ids     []string
		visible string
		grants  []reservation.Grant
		err     string
	}{
		{"nothing", nil, "", nil, ""},
		{"whole GPU", []string{"GPU-t4-02"}, "GPU-t4-02", []reservation.Grant{
			{InstanceID: "GPU-t4-02", GPUUUID: "GPU-t4-02", Lane: -1, Slots: 1, MemoryMiB: 15360, SharePercent: 100},
		}, ""},
		{"MIG instance", []string{"MIG-a100-mig-1"}, "MIG-a100-mig-1", []reservation.Grant{
			{InstanceID: "MIG-a100-mig-1", GPUUUID: "MIG-a100-mig-1", Lane: -1, Slots: 1, MemoryMiB: 20096, SharePercent: 100},
		}, ""},
		{"lanes of two GPUs", []string{"GPU-h100-01:lane3:slot1", "GPU-h100-00:lane0:slot0"},
			"GPU-h100-00,GPU-h100-01", []reservation.Grant{
				{InstanceID: "GPU-h100-00:lane0:slot0", GPUUUID: "GPU-h100-00", Lane: 0, Slot: 0, Slots: 2, MemoryMiB: 20389, SharePercent: 25},
				{InstanceID: "GPU-h100-01:lane3:slot1", GPUUUID: "GPU-h100-01", Lane: 3, Slot: 1, Slots: 2, MemoryMiB: 20389, SharePercent: 25},
			}, ""},
		// Nomad picks a request's instances without regard to their GPU; two
		// on one GPU would show the task one GPU for a request of two.
		{"two lanes of one GPU", []string{"GPU-h100-01:lane3:slot1", "GPU-h100-00:lane0:slot0", "GPU-h100-00:lane1:slot0"}, "", nil,
			"a request for 3 devices was given GPU-h100-00:lane0:slot0 and GPU-h100-00:lane1:slot0, two lanes of GPU GPU-h100-00"},
		{"two slots of one lane", []string{"GPU-h100-00:lane0:slot0", "GPU-h100-00:lane0:slot1"}, "", nil, "two lanes of GPU GPU-h100-00"},
		{"unknown", []string{"GPU-t4-00", "GPU-h100-00:lane9:slot0"}, "", nil, `unknown device instance "GPU-h100-00:lane9:slot0"`},
		{"a GPU cut into lanes is not reservable whole", []string{"GPU-h100-00"}, "", nil, `unknown device instance "GPU-h100-00"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, err := d.Reserve(tc.ids)
			if tc.err != "" {
				must.ErrorContains(t, err, tc.err)
				return
			}
			must.NoError(t, err)
			if len(tc.ids) == 0 {
				must.MapEmpty(t, res.Envs)
				return
			}
			must.Eq(t, tc.visible, res.Envs["CUDA_VISIBLE_DEVICES"])
			must.Eq(t, tc.visible, res.Envs["NVIDIA_VISIBLE_DEVICES"])
			grants, err := reservation.FromEnv(res.Envs)
			must.NoError(t, err)
			must.Eq(t, tc.grants, grants)
			must.SliceEmpty(t, res.Mounts)
		})
	}
}

func TestReserve_EnvNamesDoNotCollideAcrossDeviceBlocks(t *testing.T) {
	d, _ := newSimDevice(t, testFleet, h100Lanes)
	// Nomad calls Reserve once per device block and merges the envs.
	first, err := d.Reserve([]string{"GPU-h100-00:lane0:slot0"})
	must.NoError(t, err)
	second, err := d.Reserve([]string{"GPU-t4-01"})
	must.NoError(t, err)
	merged := map[string]string{}
	for _, r := range []*device.ContainerReservation{first, second} {
		for k, v := range r.Envs {
			merged[k] = v
		}
	}
	grants, err := reservation.FromEnv(merged)
	must.NoError(t, err)
	must.Len(t, 2, grants)
	// The driver recovers every GPU from the grants even though the last
	// CUDA_VISIBLE_DEVICES won the merge.
	must.Eq(t, "GPU-h100-00,GPU-t4-01", reservation.VisibleDevices(grants))
}

func TestReserve_MPS(t *testing.T) {
	pipe := t.TempDir()
	// The operator's daemon listens.
	must.NoError(t, os.WriteFile(filepath.Join(pipe, "control"), nil, 0o644))
	d, _ := newSimDevice(t, testFleet, h100Lanes+`
mps {
  enabled       = true
  mode          = "external"
  pipe_dir      = "`+pipe+`"
  task_pipe_dir = "/run/mps"
}`)
	res, err := d.Reserve([]string{"GPU-t4-00", "GPU-h100-00:lane2:slot0", "GPU-h100-01:lane3:slot0"})
	must.NoError(t, err)
	must.Eq(t, []*device.Mount{{TaskPath: "/run/mps", HostPath: pipe}}, res.Mounts)
	must.Eq(t, "/run/mps", res.Envs["CUDA_MPS_PIPE_DIRECTORY"])
	// CUDA_VISIBLE_DEVICES is "GPU-h100-00,GPU-h100-01,GPU-t4-00": the
	// H100s are devices 0 and 1, each with one lane's memory.
	must.Eq(t, "0=20389M,1=20389M", res.Envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"])
	must.Eq(t, "25", res.Envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"])

	whole, err := d.Reserve([]string{"GPU-t4-00"})
	must.NoError(t, err)
	must.Len(t, 1, whole.Mounts)
	must.MapNotContainsKey(t, whole.Envs, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT")
}

func TestMPSDefaultCommands(t *testing.T) {
	devs := fleetDevices(t, testFleet)
	cases := []struct {
		name  string
		rules []rule
		want  []string
	}{
		{"no lanes", nil, nil},
		{"same share everywhere", []rule{{model: "NVIDIA H100*", lanes: 4, slots: 1}}, []string{
			"set_default_device_pinned_mem_limit GPU-h100-00 20389M",
			"set_default_device_pinned_mem_limit GPU-h100-01 20389M",
			"set_default_active_thread_percentage 25",
		}},
		{"mixed shares leave the thread default alone", []rule{
			{model: "NVIDIA H100*", lanes: 4, slots: 1},
			{model: "Tesla T4", lanes: 2, slots: 1},
		}, []string{
			"set_default_device_pinned_mem_limit GPU-h100-00 20389M",
			"set_default_device_pinned_mem_limit GPU-h100-01 20389M",
			"set_default_device_pinned_mem_limit GPU-t4-00 7680M",
			"set_default_device_pinned_mem_limit GPU-t4-01 7680M",
			"set_default_device_pinned_mem_limit GPU-t4-02 7680M",
			"set_default_device_pinned_mem_limit GPU-t4-03 7680M",
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			insts, _ := layout(devs, &settings{rules: tc.rules, ignored: map[string]bool{}})
			m := map[string]instance{}
			for _, in := range insts {
				m[in.id] = in
			}
			must.Eq(t, tc.want, mpsDefaultCommands(m))
		})
	}
}
