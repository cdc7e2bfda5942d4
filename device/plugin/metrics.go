package plugin

import (
	"github.com/caravan-gpu/caravan/device/gpu"
	"github.com/caravan-gpu/caravan/device/metrics"
)

// recordOffered sets the fingerprint's metrics: GPUs and lanes by model and
// health, each GPU's health, MPS state and checkpoint support.
func (d *Device) recordOffered(s *settings, backend gpu.Backend, insts []instance, health map[string]gpu.Health, mpsErr error) {
	m := d.metrics
	m.GPUs.Reset()
	m.Lanes.Reset()
	m.GPUHealthy.Reset()
	seen := map[string]bool{}
	for _, in := range insts {
		model := modelOf(in.device)
		healthy, state := 0.0, metrics.Unhealthy
		if health[in.device.UUID].Healthy {
			healthy, state = 1, metrics.Healthy
		}
		if in.isLane() {
			m.Lanes.WithLabelValues(model, state).Inc()
		}
		if !seen[in.device.UUID] {
			seen[in.device.UUID] = true
			m.GPUs.WithLabelValues(model, state).Inc()
			m.GPUHealthy.WithLabelValues(in.device.UUID, model).Set(healthy)
		}
	}
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
