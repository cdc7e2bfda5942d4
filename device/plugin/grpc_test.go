package plugin

import (
	"context"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/caravan-gpu/caravan/gpu"
	nvmlbackend "github.com/caravan-gpu/caravan/gpu/nvml"
	"github.com/caravan-gpu/caravan/gpu/nvml/nvmltest"
	"github.com/caravan-gpu/caravan/gpu/reservation"
	log "github.com/hashicorp/go-hclog"
	plugin "github.com/hashicorp/go-plugin"
	"github.com/hashicorp/nomad/plugins/base"
	"github.com/hashicorp/nomad/plugins/device"
	"github.com/shoenig/test/must"
)

// dispense serves d over a real gRPC connection, as the Nomad client talks
// to an external plugin, and returns the client side.
func dispense(t *testing.T, d *Device) device.DevicePlugin {
	t.Helper()
	client, _ := plugin.TestPluginGRPCConn(t, true, map[string]plugin.Plugin{
		base.PluginTypeBase:   &base.PluginBase{Impl: d},
		base.PluginTypeDevice: &device.PluginDevice{Impl: d},
	})
	// Closing the client shuts the server down through go-plugin's
	// controller; stopping it here as well would race with that.
	t.Cleanup(func() { client.Close() })
	raw, err := client.Dispense(base.PluginTypeDevice)
	must.NoError(t, err)
	return raw.(device.DevicePlugin)
}

func TestGRPC_SimFleet(t *testing.T) {
	fleetPath, stateDir := simFiles(t, testFleet)
	p := dispense(t, New(testLogger(t)))

	info, err := p.PluginInfo()
	must.NoError(t, err)
	must.Eq(t, "caravan-device", info.Name)
	must.Eq(t, base.PluginTypeDevice, info.Type)

	_, err = p.ConfigSchema()
	must.NoError(t, err)

	bad, err := encodeConfig(t, `backend = "gpu"`)
	must.NoError(t, err)
	must.ErrorContains(t, p.SetConfig(&base.Config{PluginConfig: bad}), `backend: must be "nvml" or "sim"`)

	good, err := encodeConfig(t, simConfig(fleetPath, stateDir)+h100Lanes)
	must.NoError(t, err)
	must.NoError(t, p.SetConfig(&base.Config{PluginConfig: good}))

	groups := firstFingerprint(t, p)
	lanes := groupNamed(groups, "NVIDIA H100 80GB HBM3 [4 lanes")
	must.NotNil(t, lanes)
	must.Len(t, 8, layoutDevices(groups, "NVIDIA H100 80GB HBM3 [4 lanes"))
	mem, ok := lanes.Attributes["memory"].GetInt()
	must.True(t, ok)
	must.Eq(t, int64(20389), mem)
	must.Eq(t, "MiB", lanes.Attributes["memory"].Unit)

	res, err := p.Reserve([]string{"GPU-h100-01:lane3:slot0"})
	must.NoError(t, err)
	must.Eq(t, "GPU-h100-01", res.Envs["CUDA_VISIBLE_DEVICES"])
	grants, err := reservation.FromEnv(res.Envs)
	must.NoError(t, err)
	must.Eq(t, 3, grants[0].Lane)

	_, err = p.Reserve([]string{"GPU-bogus"})
	must.ErrorContains(t, err, "unknown device instance")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stats, err := p.Stats(ctx, 100*time.Millisecond)
	must.NoError(t, err)
	select {
	case s := <-stats:
		must.NoError(t, s.Error)
		total := 0
		for _, g := range s.Groups {
			total += len(g.InstanceStats)
		}
		must.Eq(t, 15, total)
	case <-time.After(5 * time.Second):
		t.Fatal("no stats over gRPC")
	}
}

// nvmlDevice is the plugin with backend = "nvml" running on a mock fleet.
func nvmlDevice(t *testing.T, fleet *nvmltest.Fleet) *Device {
	t.Helper()
	d := New(testLogger(t))
	d.openBackend = func(*settings, log.Logger) (gpu.Backend, error) {
		return nvmlbackend.NewWithLibrary(fleet, nil)
	}
	return d
}

func TestGRPC_NVMLMixedFleetWithMIG(t *testing.T) {
	fleet := nvmltest.New(gpus.H100_SXM5_80GB, gpus.H100_SXM5_80GB, gpus.A100_SXM4_40GB, gpus.A30_PCIE_24GB)
	must.NoError(t, fleet.EnableMIG(2, nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.GPU_INSTANCE_PROFILE_2_SLICE))
	p := dispense(t, nvmlDevice(t, fleet))
	cfg, err := encodeConfig(t, `
backend            = "nvml"
fingerprint_period = "100ms"
partition {
  model       = "NVIDIA H100*"
  lane_memory = "20GiB"
}`)
	must.NoError(t, err)
	must.NoError(t, p.SetConfig(&base.Config{PluginConfig: cfg}))

	groups := firstFingerprint(t, p)
	got := map[string]int{}
	for _, g := range groups {
		got[layoutOf(g.Name)] += len(g.Devices)
	}
	a100 := "Mock NVIDIA A100-SXM4-40GB"
	must.Eq(t, map[string]int{
		"NVIDIA H100 80GB HBM3 [4 lanes x 20480 MiB]": 8,
		a100 + " MIG 1g.5gb":                          2,
		a100 + " MIG 2g.10gb":                         1,
		"NVIDIA A30-PCIE-24GB":                        1,
	}, got)
	lanes := groupNamed(groups, "NVIDIA H100")
	must.Eq(t, "hopper", mustString(t, lanes, "architecture"))
	must.Eq(t, "12.4", mustString(t, lanes, "cuda_version"))

	// A critical Xid on the first H100 reaches Nomad as unhealthy lanes.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := p.Fingerprint(ctx)
	must.NoError(t, err)
	must.NotNil(t, nextFingerprint(t, ch, 5*time.Second))
	fleet.InjectXid(0, 48)
	resp := nextFingerprint(t, ch, 5*time.Second)
	must.NotNil(t, resp)
	bad := 0
	for _, dev := range layoutDevices(resp.Devices, "NVIDIA H100") {
		if !dev.Healthy {
			bad++
			must.StrContains(t, dev.HealthDesc, "critical Xid 48: double-bit ECC error")
		}
	}
	must.Eq(t, 4, bad)
}

func TestFingerprint_NVMLAbsentIsAClearError(t *testing.T) {
	d := New(testLogger(t))
	d.openBackend = func(*settings, log.Logger) (gpu.Backend, error) {
		return nvmlbackend.NewWithLibrary(&nvmlMissing{}, nil)
	}
	cfg, err := encodeConfig(t, `backend = "nvml"`)
	must.NoError(t, err)
	// SetConfig succeeds so that an agent on a node without a GPU still starts.
	must.NoError(t, d.SetConfig(&base.Config{PluginConfig: cfg}))
	ch, err := d.Fingerprint(context.Background())
	must.NoError(t, err)
	resp := nextFingerprint(t, ch, 5*time.Second)
	must.NotNil(t, resp)
	must.ErrorContains(t, resp.Error, "libnvidia-ml.so.1 not found")
}

func mustString(t *testing.T, g *device.DeviceGroup, name string) string {
	t.Helper()
	v, ok := g.Attributes[name].GetString()
	must.True(t, ok, must.Sprint(name))
	return v
}

// nvmlMissing is NVML as seen on a machine without the driver.
type nvmlMissing struct{ nvml.Interface }

func (nvmlMissing) Init() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }
