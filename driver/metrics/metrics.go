// Package metrics exports the driver's switch latencies, budget breaches and
// per-task GPU memory to Prometheus.
package metrics

import (
	"net"
	"net/http"
	"time"

	"github.com/caravan-gpu/caravan/internal/metricsserver"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics holds the driver's collectors in their own registry.
type Metrics struct {
	Registry       *prometheus.Registry
	SwitchSeconds  *prometheus.HistogramVec
	SwitchFailures *prometheus.CounterVec
	Breaches       *prometheus.CounterVec
	TaskGPUMemory  *prometheus.GaugeVec
	TaskGPUBudget  *prometheus.GaugeVec
	LaneMembers    *prometheus.GaugeVec
}

// New registers every collector.
func New() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		SwitchSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "caravan_driver_switch_seconds",
			Help:    "Latency of suspending or resuming a co-located task.",
			Buckets: prometheus.ExponentialBuckets(10e-6, 4, 12), // 10µs .. ~42s
		}, []string{"op", "mechanism"}),
		SwitchFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "caravan_driver_switch_failures_total",
			Help: "Suspends or resumes that failed.",
		}, []string{"op", "mechanism"}),
		Breaches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "caravan_driver_budget_breaches_total",
			Help: "GPU memory budget breaches seen by the watchdog.",
		}, []string{"policy"}),
		TaskGPUMemory: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "caravan_driver_task_gpu_memory_mib",
			Help: "GPU memory held by a task's processes.",
		}, []string{"alloc_id", "task", "gpu"}),
		TaskGPUBudget: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "caravan_driver_task_gpu_budget_mib",
			Help: "A task's GPU memory budget.",
		}, []string{"alloc_id", "task", "gpu"}),
		LaneMembers: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "caravan_driver_lane_tasks",
			Help: "Tasks sharing a lane.",
		}, []string{"lane"}),
	}
	m.Registry.MustRegister(m.SwitchSeconds, m.SwitchFailures, m.Breaches, m.TaskGPUMemory, m.TaskGPUBudget, m.LaneMembers)
	return m
}

// SetLaneMembers records how many tasks share a lane; a lane of none is
// dropped, so that lanes that are gone leave no series behind.
func (m *Metrics) SetLaneMembers(lane string, tasks int) {
	if tasks <= 0 {
		m.LaneMembers.DeleteLabelValues(lane)
		return
	}
	m.LaneMembers.WithLabelValues(lane).Set(float64(tasks))
}

// ObserveSwitch records one suspend or resume.
func (m *Metrics) ObserveSwitch(op, mechanism string, d time.Duration, err error) {
	if err != nil {
		m.SwitchFailures.WithLabelValues(op, mechanism).Inc()
		return
	}
	m.SwitchSeconds.WithLabelValues(op, mechanism).Observe(d.Seconds())
}

// Serve exposes /metrics on addr until the returned server is closed.
func (m *Metrics) Serve(addr string) (*http.Server, net.Addr, error) {
	return metricsserver.Serve(m.Registry, addr)
}
