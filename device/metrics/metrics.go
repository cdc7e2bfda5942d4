// Package metrics exports what the device plugin sees of its GPUs to
// Prometheus: the GPUs and lanes it offers and their health, GPU and lane
// memory from the stats it gathers for Nomad, MPS state, checkpoint support,
// and how its fingerprints and stats fare.
package metrics

import (
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/caravan-gpu/caravan/internal/metricsserver"
	"github.com/prometheus/client_golang/prometheus"
)

// MPS states as the mps_state metric labels them.
const (
	MPSUp   = "up"
	MPSDown = "down"
	MPSOff  = "off"
)

// Health label values.
const (
	Healthy   = "healthy"
	Unhealthy = "unhealthy"
)

// Metrics holds the device plugin's collectors in their own registry.
type Metrics struct {
	Registry            *prometheus.Registry
	GPUs                *prometheus.GaugeVec
	Lanes               *prometheus.GaugeVec
	GPUHealthy          *prometheus.GaugeVec
	GPUMemoryTotal      *prometheus.GaugeVec
	GPUMemoryUsed       *prometheus.GaugeVec
	LaneMemoryUsed      *prometheus.GaugeVec
	LaneMemorySize      *prometheus.GaugeVec
	MPSState            *prometheus.GaugeVec
	CheckpointSupported *prometheus.GaugeVec
	FingerprintErrors   prometheus.Counter
	FingerprintSeconds  prometheus.Histogram
	StatsSeconds        prometheus.Histogram
	StatsErrors         prometheus.Counter

	heldMu sync.Mutex
	held   map[*prometheus.GaugeVec]map[string][]string // see Rebuild
}

// New registers every collector.
func New() *Metrics {
	durations := prometheus.ExponentialBuckets(100e-6, 4, 10) // 100µs .. ~26s
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		GPUs: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "caravan_device_gpus",
			Help: "GPUs (and MIG instances) the plugin sees at the last fingerprint, whole or cut into lanes.",
		}, []string{"model", "health"}),
		Lanes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "caravan_device_lanes",
			Help: "Lane instances offered to Nomad at the last fingerprint.",
		}, []string{"model", "health"}),
		GPUHealthy: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "caravan_device_gpu_healthy",
			Help: "1 when the GPU is healthy at the last fingerprint, 0 when not.",
		}, []string{"gpu", "model"}),
		GPUMemoryTotal: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "caravan_device_gpu_memory_total_mib",
			Help: "A GPU's memory, from the last stats sample.",
		}, []string{"gpu", "model"}),
		GPUMemoryUsed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "caravan_device_gpu_memory_used_mib",
			Help: "Memory in use on a GPU, from the last stats sample.",
		}, []string{"gpu", "model"}),
		LaneMemoryUsed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "caravan_device_lane_memory_used_mib",
			Help: "Memory held by the processes granted a lane instance, from the last stats sample.",
		}, []string{"gpu", "lane"}),
		LaneMemorySize: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "caravan_device_lane_memory_size_mib",
			Help: "A lane instance's memory budget.",
		}, []string{"gpu", "lane"}),
		MPSState: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "caravan_device_mps_state",
			Help: "1 for the MPS state at the last fingerprint (up, down, or off when not configured), 0 for the others.",
		}, []string{"state"}),
		CheckpointSupported: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "caravan_device_checkpoint_supported",
			Help: "1 when the backend can checkpoint GPU processes, by mechanism; 0 when it cannot.",
		}, []string{"mechanism"}),
		FingerprintErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "caravan_device_fingerprint_errors_total",
			Help: "Fingerprints that failed (the last good one is kept).",
		}),
		FingerprintSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "caravan_device_fingerprint_seconds",
			Help:    "Time to fingerprint the GPUs.",
			Buckets: durations,
		}),
		StatsSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "caravan_device_stats_seconds",
			Help:    "Time to gather one round of device stats.",
			Buckets: durations,
		}),
		StatsErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "caravan_device_stats_errors_total",
			Help: "Stats rounds that failed as a whole.",
		}),
	}
	m.Registry.MustRegister(m.GPUs, m.Lanes, m.GPUHealthy, m.GPUMemoryTotal, m.GPUMemoryUsed,
		m.LaneMemoryUsed, m.LaneMemorySize, m.MPSState, m.CheckpointSupported,
		m.FingerprintErrors, m.FingerprintSeconds, m.StatsSeconds, m.StatsErrors)
	m.SetMPSState(MPSOff)
	return m
}

// SetMPSState marks state as the current one and the others as not.
func (m *Metrics) SetMPSState(state string) {
	for _, s := range []string{MPSUp, MPSDown, MPSOff} {
		v := 0.0
		if s == state {
			v = 1
		}
		m.MPSState.WithLabelValues(s).Set(v)
	}
}

// SetCheckpoint records whether the backend can checkpoint; mechanism is
// empty when it cannot.
func (m *Metrics) SetCheckpoint(mechanism string) {
	m.CheckpointSupported.Reset()
	if mechanism == "" {
		m.CheckpointSupported.WithLabelValues("none").Set(0)
		return
	}
	m.CheckpointSupported.WithLabelValues(mechanism).Set(1)
}

// ObserveFingerprint records one fingerprint's duration, or its failure.
func (m *Metrics) ObserveFingerprint(d time.Duration, err error) {
	if err != nil {
		m.FingerprintErrors.Inc()
		return
	}
	m.FingerprintSeconds.Observe(d.Seconds())
}

// ObserveStats records one stats round's duration, or its failure.
func (m *Metrics) ObserveStats(d time.Duration, err error) {
	if err != nil {
		m.StatsErrors.Inc()
		return
	}
	m.StatsSeconds.Observe(d.Seconds())
}

// Serve exposes /metrics on addr until the returned server is closed.
func (m *Metrics) Serve(addr string) (*http.Server, net.Addr, error) {
	return metricsserver.Serve(m.Registry, addr)
}

// Series is one labelled value of a gauge vector.
type Series struct {
	Labels []string
	Value  float64
}

// Rebuild makes series the whole content of vec: it sets each, then deletes
// the series vec held from the last Rebuild that series lacks. A Reset
// followed by the sets would let a scrape in between see every GPU and lane
// gone.
func (m *Metrics) Rebuild(vec *prometheus.GaugeVec, series []Series) {
	m.heldMu.Lock()
	defer m.heldMu.Unlock()
	if m.held == nil {
		m.held = map[*prometheus.GaugeVec]map[string][]string{}
	}
	now := make(map[string][]string, len(series))
	for _, s := range series {
		vec.WithLabelValues(s.Labels...).Set(s.Value)
		now[strings.Join(s.Labels, "\xff")] = s.Labels
	}
	for key, labels := range m.held[vec] {
		if _, ok := now[key]; !ok {
			vec.DeleteLabelValues(labels...)
		}
	}
	m.held[vec] = now
}
