package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TaskLane is one co-located task's state in its lane.
type TaskLane struct {
	AllocID, Task, Lane string
	// Suspended is true while the task waits for another task's turn.
	Suspended bool
	// Switches counts the times the task was suspended.
	Switches int
	// Iterations counts the iteration boundaries the task marked.
	Iterations              int64
	LastSuspend, LastResume time.Duration
}

var (
	taskLaneLabels    = []string{"alloc_id", "task", "lane"}
	taskSuspendedDesc = prometheus.NewDesc("caravan_driver_task_suspended",
		"1 while a co-located task is suspended for another task's turn in its lane.", taskLaneLabels, nil)
	taskSwitchesDesc = prometheus.NewDesc("caravan_driver_task_switches_total",
		"Times a co-located task was suspended.", taskLaneLabels, nil)
	taskIterationsDesc = prometheus.NewDesc("caravan_driver_task_iterations_total",
		"Iteration boundaries a co-located task marked in its iteration file.", taskLaneLabels, nil)
	taskLastSuspendDesc = prometheus.NewDesc("caravan_driver_task_last_suspend_seconds",
		"Latency of a co-located task's last suspend.", taskLaneLabels, nil)
	taskLastResumeDesc = prometheus.NewDesc("caravan_driver_task_last_resume_seconds",
		"Latency of a co-located task's last resume.", taskLaneLabels, nil)
)

// WatchLanes exports the lane state of the tasks that list returns, read
// afresh at every scrape, so that a task that is gone leaves no series.
func (m *Metrics) WatchLanes(list func() []TaskLane) {
	m.Registry.MustRegister(laneCollector(list))
}

type laneCollector func() []TaskLane

func (c laneCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{taskSuspendedDesc, taskSwitchesDesc, taskIterationsDesc, taskLastSuspendDesc, taskLastResumeDesc} {
		ch <- d
	}
}

func (c laneCollector) Collect(ch chan<- prometheus.Metric) {
	for _, t := range c() {
		labels := []string{t.AllocID, t.Task, t.Lane}
		suspended := 0.0
		if t.Suspended {
			suspended = 1
		}
		ch <- prometheus.MustNewConstMetric(taskSuspendedDesc, prometheus.GaugeValue, suspended, labels...)
		ch <- prometheus.MustNewConstMetric(taskSwitchesDesc, prometheus.CounterValue, float64(t.Switches), labels...)
		ch <- prometheus.MustNewConstMetric(taskIterationsDesc, prometheus.CounterValue, float64(t.Iterations), labels...)
		ch <- prometheus.MustNewConstMetric(taskLastSuspendDesc, prometheus.GaugeValue, t.LastSuspend.Seconds(), labels...)
		ch <- prometheus.MustNewConstMetric(taskLastResumeDesc, prometheus.GaugeValue, t.LastResume.Seconds(), labels...)
	}
}
