package plugin

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/caravan-gpu/caravan/gpu/sim"
	"github.com/hashicorp/nomad/plugins/base"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/shoenig/test/must"
)

const h100Model = "NVIDIA H100 80GB HBM3"

// A fault on a GPU of the sim fleet shows in the GPU and lane counts by
// health and in the GPU's own health, and clearing it shows too.
func TestMetrics_FingerprintFollowsHealth(t *testing.T) {
	d, stateDir := newSimDevice(t, testFleet, h100Lanes)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := d.Fingerprint(ctx)
	must.NoError(t, err)
	must.NotNil(t, nextFingerprint(t, ch, 5*time.Second))

	m := d.metrics
	type counts struct{ gpusOK, gpusBad, lanesOK, lanesBad, h100Healthy float64 }
	read := func() counts {
		return counts{
			gpusOK:      testutil.ToFloat64(m.GPUs.WithLabelValues(h100Model, "healthy")),
			gpusBad:     testutil.ToFloat64(m.GPUs.WithLabelValues(h100Model, "unhealthy")),
			lanesOK:     testutil.ToFloat64(m.Lanes.WithLabelValues(h100Model, "healthy")),
			lanesBad:    testutil.ToFloat64(m.Lanes.WithLabelValues(h100Model, "unhealthy")),
			h100Healthy: testutil.ToFloat64(m.GPUHealthy.WithLabelValues("GPU-h100-01", h100Model)),
		}
	}
	must.Eq(t, counts{gpusOK: 2, lanesOK: 8, h100Healthy: 1}, read())
	must.Eq(t, 4.0, testutil.ToFloat64(m.GPUs.WithLabelValues("Tesla T4", "healthy")))
	must.Eq(t, 0.0, testutil.ToFloat64(m.Lanes.WithLabelValues("Tesla T4", "healthy")))
	must.Eq(t, 1.0, testutil.ToFloat64(m.MPSState.WithLabelValues("off")))
	must.Eq(t, 0.0, testutil.ToFloat64(m.MPSState.WithLabelValues("up")))
	must.Eq(t, 1.0, testutil.ToFloat64(m.CheckpointSupported.WithLabelValues("sim")))
	must.Positive(t, testutil.CollectAndCount(m.FingerprintSeconds))

	must.NoError(t, sim.InjectFault(stateDir, "GPU-h100-01", "Xid 79: GPU has fallen off the bus"))
	must.NotNil(t, nextFingerprint(t, ch, 5*time.Second))
	must.Eq(t, counts{gpusOK: 1, gpusBad: 1, lanesOK: 4, lanesBad: 4, h100Healthy: 0}, read())

	must.NoError(t, sim.InjectFault(stateDir, "GPU-h100-01", ""))
	must.NotNil(t, nextFingerprint(t, ch, 5*time.Second))
	must.Eq(t, counts{gpusOK: 2, lanesOK: 8, h100Healthy: 1}, read())
}

// GPU and lane memory come from the stats gathered for Nomad: a process
// granted a lane shows in that lane and in its GPU.
func TestMetrics_StatsMemory(t *testing.T) {
	d, stateDir := newSimDevice(t, testFleet, h100Lanes)
	firstFingerprint(t, d)
	lane1 := "GPU-h100-00:lane1:slot0"
	pid := startLaneProcess(t, d, lane1)
	m := d.metrics

	cases := []struct {
		name     string
		usedMiB  uint64
		laneUsed float64
		gpuUsed  float64
	}{
		{"idle", 0, 0, 0},
		{"process holds memory", 6000, 6000, 6000},
		{"process grows", 9000, 9000, 9000},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			must.NoError(t, sim.SetProcessMemory(stateDir, "GPU-h100-00", pid, tc.usedMiB))
			_, err := d.collectStats()
			must.NoError(t, err)
			must.Eq(t, tc.laneUsed, testutil.ToFloat64(m.LaneMemoryUsed.WithLabelValues("GPU-h100-00", lane1)))
			must.Eq(t, 20389.0, testutil.ToFloat64(m.LaneMemorySize.WithLabelValues("GPU-h100-00", lane1)))
			must.Eq(t, tc.gpuUsed, testutil.ToFloat64(m.GPUMemoryUsed.WithLabelValues("GPU-h100-00", h100Model)))
			must.Eq(t, 81559.0, testutil.ToFloat64(m.GPUMemoryTotal.WithLabelValues("GPU-h100-00", h100Model)))
			must.Eq(t, 0.0, testutil.ToFloat64(m.LaneMemoryUsed.WithLabelValues("GPU-h100-01", "GPU-h100-01:lane0:slot0")))
		})
	}
}

// A metrics address that cannot be bound fails SetConfig, naming the field.
func TestSetConfig_MetricsAddressInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must.NoError(t, err)
	defer ln.Close()
	fleetPath, stateDir := simFiles(t, testFleet)
	data, err := encodeConfig(t, simConfig(fleetPath, stateDir)+`metrics_address = "`+ln.Addr().String()+`"`)
	must.NoError(t, err)
	err = New(testLogger(t)).SetConfig(&base.Config{PluginConfig: data})
	must.ErrorContains(t, err, "metrics_address:")
}
