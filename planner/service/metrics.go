package service

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are the planner's Prometheus series, on a registry of its own so
// that several planners can live in one process (tests, replicas).
type metrics struct {
	registry     *prometheus.Registry
	rounds       prometheus.Counter
	roundSeconds prometheus.Histogram
	writes       *prometheus.CounterVec
	actions      *prometheus.CounterVec
	plans        prometheus.Counter
	conflicts    prometheus.Counter
	managed      *prometheus.GaugeVec
	leader       prometheus.Gauge
	preemption   *prometheus.GaugeVec
	stopWait     prometheus.Histogram
	stopsPending prometheus.Counter
}

func newMetrics() *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		rounds: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "caravan_planner_rounds_total", Help: "Planning rounds run."}),
		roundSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "caravan_planner_round_duration_seconds", Help: "Time to read Nomad, plan and write one round.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14)}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "caravan_planner_job_writes_total", Help: "Job rewrites by outcome (written, unchanged, skipped, failed)."},
			[]string{"outcome"}),
		plans: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "caravan_planner_plans_total", Help: "Rounds that ran the policy: a job arrived or completed, GPUs changed, or the policy asked to plan again. Other rounds carry out the last plan."}),
		actions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "caravan_planner_actions_total", Help: "Job writes made, by what they do (start, hold, preempt, place, priority, restore)."},
			[]string{"action"}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "caravan_planner_write_conflicts_total", Help: "Job writes refused because the job changed since it was read, then retried."}),
		managed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "caravan_planner_managed_jobs", Help: "Managed GPU jobs by state."}, []string{"state"}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "caravan_planner_leader", Help: "1 when this replica holds the leader lock and writes."}),
		preemption: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "caravan_planner_nomad_preemption_enabled", Help: "1 when Nomad's scheduler may preempt jobs of this type."},
			[]string{"scheduler"}),
		stopWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "caravan_planner_stop_wait_seconds", Help: "Time a round waited, after its holds, for Nomad to mark the preempted allocations stopped before writing its starts.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 12)}),
		stopsPending: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "caravan_planner_stops_pending_total", Help: "Preempted jobs whose allocations Nomad had not marked stopped when a round stopped waiting and wrote its starts."}),
	}
	m.registry.MustRegister(m.rounds, m.roundSeconds, m.writes, m.actions, m.plans, m.conflicts, m.managed, m.leader, m.preemption,
		m.stopWait, m.stopsPending,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}
