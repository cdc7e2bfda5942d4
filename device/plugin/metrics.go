package plugin

import (
	"github.com/caravan-gpu/caravan/device/metrics"
	"github.com/caravan-gpu/caravan/gpu"
)

// recordOffered sets the fingerprint's metrics: GPUs and lanes by model and
// health, each GPU's health, MPS state and checkpoint support.
func (d *Device) recordOffered(s *settings, backend gpu.Backend, insts []instance, health map[string]gpu.Health, mpsErr error) {
	m := d.metrics
	gpus, lanes := map[[2]string]float64{}, map[[2]string]float64{}
	var healthy []metrics.Series
	seen := map[string]bool{}
	for _, in := range insts {
		model := modelOf(in.device)
		up, state := 0.0, metrics.Unhealthy
		if health[in.device.UUID].Healthy {
			up, state = 1, metrics.Healthy
		}
		if in.isLane() {
			lanes[[2]string{model, state}]++
		}
		if !seen[in.device.UUID] {
			seen[in.device.UUID] = true
			gpus[[2]string{model, state}]++
			healthy = append(healthy, metrics.Series{Labels: []string{in.device.UUID, model}, Value: up})
		}
	}
	m.Rebuild(m.GPUs, counted(gpus))
	m.Rebuild(m.Lanes, counted(lanes))
	m.Rebuild(m.GPUHealthy, healthy)
	switch {
	case !s.mps.Enabled:
		m.SetMPSState(metrics.MPSOff)
	case mpsErr != nil:
		m.SetMPSState(metrics.MPSDown)
	default:
		m.SetMPSState(metrics.MPSUp)
	}
	mechanism := ""
	if c, ok := backend.(gpu.Checkpointer); ok {
		mechanism = c.CheckpointMechanism()
	}
	m.SetCheckpoint(mechanism)
}

// counted turns counts by (model, health) into series.
func counted(n map[[2]string]float64) []metrics.Series {
	out := make([]metrics.Series, 0, len(n))
	for k, v := range n {
		out = append(out, metrics.Series{Labels: []string{k[0], k[1]}, Value: v})
	}
	return out
}
