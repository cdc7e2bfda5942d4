package plugin

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/plugins/base"
	"github.com/hashicorp/nomad/plugins/device"
	"github.com/hashicorp/nomad/plugins/shared/structs"
	"github.com/shoenig/test/must"

	"github.com/caravan-gpu/caravan/gpu"
	"github.com/caravan-gpu/caravan/gpu/sim"
)

const h100Lanes = `
partition {
  model = "NVIDIA H100*"
  lanes = 4
}`

func TestFingerprint_Attributes(t *testing.T) {
	d, _ := newSimDevice(t, testFleet, h100Lanes)
	groups := firstFingerprint(t, d)

	var names []string
	for _, g := range groups {
		must.Eq(t, "nvidia", g.Vendor)
		names = append(names, g.Type+"/"+g.Name)
	}
	// Lanes are a device type of their own: a plain nvidia/gpu request
	// never gets one.
	must.Eq(t, []string{
		"gpu/NVIDIA A100-SXM4-40GB",
		"gpu/NVIDIA A100-SXM4-40GB MIG 3g.20gb",
		"gpu/Tesla T4",
		"lane/NVIDIA H100 80GB HBM3 [4 lanes x 20389 MiB] lane 0",
		"lane/NVIDIA H100 80GB HBM3 [4 lanes x 20389 MiB] lane 1",
		"lane/NVIDIA H100 80GB HBM3 [4 lanes x 20389 MiB] lane 2",
		"lane/NVIDIA H100 80GB HBM3 [4 lanes x 20389 MiB] lane 3",
	}, names)

	// A lane group is one lane index across the layout's GPUs, one
	// instance per GPU, so that a request for N lanes gets N GPUs.
	lanes := groupNamed(groups, "NVIDIA H100 80GB HBM3 [4 lanes x 20389 MiB] lane 1")
	want := map[string]*structs.Attribute{
		"memory":             structs.NewIntAttribute(20389, structs.UnitMiB),
		"gpu_memory":         structs.NewIntAttribute(81559, structs.UnitMiB),
		"model":              structs.NewStringAttribute("NVIDIA H100 80GB HBM3"),
		"compute_capability": structs.NewStringAttribute("9.0"),
		"architecture":       structs.NewStringAttribute("hopper"),
		"sm_count":           structs.NewIntAttribute(132, ""),
		"pci_bus_id":         structs.NewStringAttribute("00000000:10:00.0,00000000:10:01.0"),
		"pci_bandwidth":      structs.NewIntAttribute(63015, structs.UnitMBPerS),
		"driver_version":     structs.NewStringAttribute("550.54.15"),
		"cuda_version":       structs.NewStringAttribute("12.4"),
		"mig":                structs.NewBoolAttribute(false),
		"lanes_per_gpu":      structs.NewIntAttribute(4, ""),
		"lane_share":         structs.NewIntAttribute(25, ""),
		"slots":              structs.NewIntAttribute(1, ""),
		"layout":             structs.NewStringAttribute("NVIDIA H100 80GB HBM3 [4 lanes x 20389 MiB]"),
		"lane":               structs.NewIntAttribute(1, ""),
		"slot":               structs.NewIntAttribute(0, ""),
	}
	must.Eq(t, want, lanes.Attributes)
	must.Len(t, 2, lanes.Devices)
	must.Eq(t, "GPU-h100-00:lane1:slot0", lanes.Devices[0].ID)
	must.Eq(t, "GPU-h100-01:lane1:slot0", lanes.Devices[1].ID)
	must.True(t, lanes.Devices[0].Healthy)
	must.Eq(t, "00000000:10:00.0", lanes.Devices[0].HwLocality.PciBusID)

	// Memory compares by unit, as a jobspec constraint does.
	ten := structs.ParseAttribute("10 GiB")
	cmp, ok := lanes.Attributes["memory"].Compare(ten)
	must.True(t, ok)
	must.Eq(t, 1, cmp)

	mig := groupNamed(groups, "NVIDIA A100-SXM4-40GB MIG")
	must.Eq(t, structs.NewBoolAttribute(true), mig.Attributes["mig"])
	must.Eq(t, structs.NewStringAttribute("NVIDIA A100-SXM4-40GB"), mig.Attributes["model"])
	must.Eq(t, structs.NewIntAttribute(20096, structs.UnitMiB), mig.Attributes["memory"])
	must.Eq(t, structs.NewStringAttribute("3g.20gb"), mig.Attributes["mig_profile"])
	must.Len(t, 2, mig.Devices)
	must.StrHasPrefix(t, "MIG-a100-mig-", mig.Devices[0].ID)
}

// lanes_as_gpus offers lanes as type gpu, to every nvidia/gpu request.
func TestFingerprint_LanesAsGPUs(t *testing.T) {
	d, _ := newSimDevice(t, testFleet, h100Lanes+"\nlanes_as_gpus = true\n")
	for _, g := range firstFingerprint(t, d) {
		must.Eq(t, "gpu", g.Type, must.Sprint(g.Name))
	}
}

// nextFingerprint waits for a fingerprint message, or returns nil after wait.
func nextFingerprint(t *testing.T, ch <-chan *device.FingerprintResponse, wait time.Duration) *device.FingerprintResponse {
	t.Helper()
	select {
	case resp := <-ch:
		return resp
	case <-time.After(wait):
		return nil
	}
}

func TestFingerprint_ReEmitsOnHealthAndAttributeChange(t *testing.T) {
	d, stateDir := newSimDevice(t, testFleet, h100Lanes)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := d.Fingerprint(ctx)
	must.NoError(t, err)
	must.NotNil(t, nextFingerprint(t, ch, 5*time.Second))

	// Nothing changed: no message over several periods (100ms each).
	must.Nil(t, nextFingerprint(t, ch, 500*time.Millisecond))

	// A fault on one GPU marks its four lanes unhealthy, with the reason.
	must.NoError(t, sim.InjectFault(stateDir, "GPU-h100-01", "Xid 79: GPU has fallen off the bus"))
	resp := nextFingerprint(t, ch, 5*time.Second)
	must.NotNil(t, resp)
	unhealthy := 0
	for _, dev := range layoutDevices(resp.Devices, "NVIDIA H100") {
		if !dev.Healthy {
			unhealthy++
			must.StrHasPrefix(t, "GPU-h100-01:", dev.ID)
			must.StrContains(t, dev.HealthDesc, "GPU-h100-01")
			must.StrContains(t, dev.HealthDesc, "Xid 79")
		}
	}
	must.Eq(t, 4, unhealthy)

	// Clearing the fault re-emits too.
	must.NoError(t, sim.InjectFault(stateDir, "GPU-h100-01", ""))
	resp = nextFingerprint(t, ch, 5*time.Second)
	must.NotNil(t, resp)
	for _, dev := range groupNamed(resp.Devices, "NVIDIA H100").Devices {
		must.True(t, dev.Healthy)
	}
}

func TestFingerprint_ReEmitsWhenTheFleetChanges(t *testing.T) {
	d, _ := newSimDevice(t, testFleet, "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := d.Fingerprint(ctx)
	must.NoError(t, err)
	first := nextFingerprint(t, ch, 5*time.Second)
	must.NotNil(t, first)

	// A driver upgrade changes an attribute but no UUID.
	fleetPath := d.settings.sim.FleetFile
	updated := strings.Replace(testFleet, "550.54.15", "560.28.03", 1)
	must.NoError(t, os.WriteFile(fleetPath, []byte(updated), 0o644))
	future := time.Now().Add(2 * time.Second)
	must.NoError(t, os.Chtimes(fleetPath, future, future))

	resp := nextFingerprint(t, ch, 5*time.Second)
	must.NotNil(t, resp)
	must.Eq(t, structs.NewStringAttribute("560.28.03"), resp.Devices[0].Attributes["driver_version"])
}

// fakeMPSControl writes an nvidia-cuda-mps-control (with a server beside it)
// that logs each command it is given to the returned file. With -d it
// starts "the daemon" by creating the control pipe, unless failStart is
// set, when it fails as a broken MPS install does.
func fakeMPSControl(t *testing.T, failStart bool) (bin, log string) {
	t.Helper()
	dir := t.TempDir()
	bin, log = filepath.Join(dir, "nvidia-cuda-mps-control"), filepath.Join(dir, "commands")
	start := `mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" && : > "$CUDA_MPS_PIPE_DIRECTORY/control"`
	if failStart {
		start = `echo "An instance of this daemon is already running" >&2; exit 1`
	}
	script := "#!/bin/sh\nif [ \"$1\" = -d ]; then echo -d >> " + log + "; " + start + "; exit 0; fi\n" +
		"read line; echo \"$line\" >> " + log + "; echo ok\n"
	must.NoError(t, os.WriteFile(bin, []byte(script), 0o755))
	must.NoError(t, os.WriteFile(filepath.Join(dir, "nvidia-cuda-mps-server"), []byte("#!/bin/sh\n"), 0o755))
	return bin, log
}

// An MPS failure degrades MPS only: the GPUs and lanes stay offered and
// healthy, the groups say MPS is down and why, and reservations work
// without MPS settings.
func TestFingerprint_MPSFailureDegradesOnlyMPS(t *testing.T) {
	failing, _ := fakeMPSControl(t, true)
	cases := []struct {
		name   string
		mps    string
		noPath bool
		want   string
	}{
		{"control binary missing", `control_bin = "nvidia-cuda-mps-control"`, true,
			"mps: nvidia-cuda-mps-control not found"},
		{"control binary at a path that does not exist", `control_bin = "/nonexistent/nvidia-cuda-mps-control"`, false,
			"mps: /nonexistent/nvidia-cuda-mps-control not found"},
		{"daemon fails to start", `control_bin = "` + failing + `"`, false,
			"-d: exit status 1: An instance of this daemon is already running"},
		{"no operator daemon", `mode = "external"`, false, "no MPS daemon listens at"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.noPath {
				t.Setenv("PATH", t.TempDir())
			}
			d, _ := newSimDevice(t, testFleet, h100Lanes+`
mps {
  enabled  = true
  pipe_dir = "`+t.TempDir()+`"
  `+tc.mps+`
}`)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			ch, err := d.Fingerprint(ctx)
			must.NoError(t, err)
			resp := nextFingerprint(t, ch, 5*time.Second)
			must.NotNil(t, resp)
			must.NoError(t, resp.Error)
			must.Len(t, 7, resp.Devices) // 3 whole-GPU groups, 4 lane groups
			for _, g := range resp.Devices {
				must.Eq(t, structs.NewStringAttribute("down"), g.Attributes["mps"])
				must.StrContains(t, *g.Attributes["mps_error"].String, tc.want)
				for _, dev := range g.Devices {
					must.True(t, dev.Healthy)
					must.StrContains(t, dev.HealthDesc, "without MPS")
				}
			}
			res, err := d.Reserve([]string{"GPU-h100-00:lane1:slot0"})
			must.NoError(t, err)
			must.SliceEmpty(t, res.Mounts)
			must.Eq(t, "GPU-h100-00", res.Envs["CUDA_VISIBLE_DEVICES"])
			for k := range res.Envs {
				must.StrNotContains(t, k, "CUDA_MPS_")
			}
		})
	}
}

// A pipe directory that someone else could write to (one a task made first
// under /tmp, say) is not handed to the control daemon: its pipes would let
// that user drive the daemon.
func TestFingerprint_MPSRefusesAPipeDirOthersCanWrite(t *testing.T) {
	control, _ := fakeMPSControl(t, false)
	pipe := filepath.Join(t.TempDir(), "nvidia-mps")
	must.NoError(t, os.Mkdir(pipe, 0o777))
	must.NoError(t, os.Chmod(pipe, 0o777))
	d, _ := newSimDevice(t, testFleet, h100Lanes+mpsBlock(`pipe_dir = "`+pipe+`"`, `control_bin = "`+control+`"`))
	_, resp := startFingerprint(t, d)
	must.Eq(t, structs.NewStringAttribute("down"), resp.Devices[0].Attributes["mps"])
	must.StrContains(t, *resp.Devices[0].Attributes["mps_error"].String, "writable by others")
}

// mpsBlock is an enabled mps block with the given settings.
func mpsBlock(settings ...string) string {
	return "\nmps {\n  enabled = true\n  " + strings.Join(settings, "\n  ") + "\n}"
}

// startFingerprint starts d's fingerprint stream and returns it with its
// first answer.
func startFingerprint(t *testing.T, d *Device) (<-chan *device.FingerprintResponse, *device.FingerprintResponse) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ch, err := d.Fingerprint(ctx)
	must.NoError(t, err)
	resp := nextFingerprint(t, ch, 5*time.Second)
	must.NotNil(t, resp)
	return ch, resp
}

// MPS that comes back is used again, and the fingerprint says so.
func TestFingerprint_MPSComesBack(t *testing.T) {
	pipe := t.TempDir()
	d, _ := newSimDevice(t, testFleet, h100Lanes+mpsBlock(`mode = "external"`, `pipe_dir = "`+pipe+`"`))
	ch, resp := startFingerprint(t, d)
	must.Eq(t, structs.NewStringAttribute("down"), resp.Devices[0].Attributes["mps"])

	// The operator starts the daemon.
	must.NoError(t, os.WriteFile(filepath.Join(pipe, "control"), nil, 0o644))
	resp = nextFingerprint(t, ch, 5*time.Second)
	must.NotNil(t, resp)
	must.NoError(t, resp.Error)
	must.Eq(t, structs.NewStringAttribute("ready"), resp.Devices[0].Attributes["mps"])
	must.MapNotContainsKey(t, resp.Devices[0].Attributes, "mps_error")
	must.Eq(t, "", resp.Devices[0].Devices[0].HealthDesc)
	res, err := d.Reserve([]string{"GPU-h100-00:lane1:slot0"})
	must.NoError(t, err)
	must.Eq(t, pipe, res.Envs["CUDA_MPS_PIPE_DIRECTORY"])
}

// A supervised daemon gets its lane defaults in the same round that starts
// it, not one fingerprint period later.
func TestFingerprint_MPSDefaultsSetWhenTheDaemonStarts(t *testing.T) {
	control, log := fakeMPSControl(t, false)
	d, _ := newSimDevice(t, testFleet, h100Lanes+`
mps {
  enabled     = true
  pipe_dir    = "`+t.TempDir()+`"
  control_bin = "`+control+`"
}`)
	d.settings.fingerprintPeriod = time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := d.Fingerprint(ctx)
	must.NoError(t, err)
	resp := nextFingerprint(t, ch, 5*time.Second)
	must.NotNil(t, resp)
	must.Eq(t, structs.NewStringAttribute("ready"), resp.Devices[0].Attributes["mps"])
	data, err := os.ReadFile(log)
	must.NoError(t, err)
	must.Eq(t, []string{
		"-d",
		"set_default_device_pinned_mem_limit GPU-h100-00 20389M",
		"set_default_device_pinned_mem_limit GPU-h100-01 20389M",
		"set_default_active_thread_percentage 25",
	}, strings.Split(strings.TrimSpace(string(data)), "\n"))
}

// A supervised daemon's lane GPUs are put in exclusive-process compute
// mode, so that a process that leaves MPS finds no GPU; whole GPUs, and
// every GPU with compute_mode = "unchanged", are left as they are.
func TestFingerprint_MPSLaneGPUsAreExclusiveProcess(t *testing.T) {
	for _, tc := range []struct {
		setting string
		want    gpu.ComputeMode
	}{
		{"", gpu.ComputeExclusiveProcess},
		{`compute_mode = "unchanged"`, gpu.ComputeDefault},
	} {
		t.Run(string(tc.want), func(t *testing.T) {
			control, _ := fakeMPSControl(t, false)
			d, _ := newSimDevice(t, testFleet, h100Lanes+mpsBlock(`pipe_dir = "`+t.TempDir()+`"`, `control_bin = "`+control+`"`, tc.setting))
			_, resp := startFingerprint(t, d)
			must.Eq(t, structs.NewStringAttribute("ready"), resp.Devices[0].Attributes["mps"])
			modes := d.backend.(gpu.ComputeModes)
			for _, u := range []string{"GPU-h100-00", "GPU-h100-01"} {
				m, err := modes.ComputeMode(u)
				must.NoError(t, err)
				must.Eq(t, tc.want, m, must.Sprint(u))
			}
			m, err := modes.ComputeMode("GPU-a100-0") // a whole GPU
			must.NoError(t, err)
			must.Eq(t, gpu.ComputeDefault, m)
		})
	}
}

func TestConfig_MPSComputeModeMustBeKnown(t *testing.T) {
	d := New(testLogger(t))
	fleetPath, stateDir := simFiles(t, testFleet)
	data, err := encodeConfig(t, simConfig(fleetPath, stateDir)+mpsBlock(`compute_mode = "shared"`))
	must.NoError(t, err)
	must.ErrorContains(t, d.SetConfig(&base.Config{PluginConfig: data}), "mps.compute_mode")
}
