package plugin

import (
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/plugins/drivers"
	"github.com/shoenig/test/must"

	"github.com/caravan-gpu/caravan/driver/workload"
)

// scrape reads the series of one metric from the registry the driver's
// /metrics endpoint serves, keyed by their labels ("k=v,k=v").
func scrape(t *testing.T, d *Driver, name string) map[string]float64 {
	t.Helper()
	families, err := d.metrics.Registry.Gather()
	must.NoError(t, err)
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			sort.Strings(labels)
			v := m.GetGauge().GetValue()
			if m.GetCounter() != nil {
				v = m.GetCounter().GetValue()
			}
			out[strings.Join(labels, ",")] = v
		}
	}
	return out
}

func TestLaneMembersMetricFollowsTasks(t *testing.T) {
	conf, _ := simConfig(t)
	h, d := newHarness(t, conf)
	// They run until stopped, so that both are in the lane however slowly
	// the second one starts.
	w := workload.Config{Iterations: 1000, IterationTime: 100 * time.Millisecond, PersistentMiB: 1000, EphemeralMiB: 100}
	profile := TaskConfig{MemoryProfile: MemoryProfile{Persistent: "1000MiB", Ephemeral: "100MiB"}}
	a := workloadTask(t, h, "a", w, profile, grantEnv(laneGrant(0)))
	b := workloadTask(t, h, "b", w, profile, grantEnv(laneGrant(1)))
	must.MapEmpty(t, scrape(t, d, "caravan_driver_lane_tasks"))
	_, _, err := h.StartTask(a)
	must.NoError(t, err)
	must.Eq(t, map[string]float64{"lane=GPU-test/lane0": 1}, scrape(t, d, "caravan_driver_lane_tasks"))
	_, _, err = h.StartTask(b)
	must.NoError(t, err)
	must.Eq(t, map[string]float64{"lane=GPU-test/lane0": 2}, scrape(t, d, "caravan_driver_lane_tasks"))
	must.NoError(t, h.StopTask(a.ID, 5*time.Second, "SIGTERM"))
	must.Eq(t, map[string]float64{"lane=GPU-test/lane0": 1}, scrape(t, d, "caravan_driver_lane_tasks"))
	must.NoError(t, h.StopTask(b.ID, 5*time.Second, "SIGTERM"))
	// The lane is left when a task is stopped, and again as its process is
	// reaped; either way none is left.
	deadline := time.Now().Add(5 * time.Second)
	for len(scrape(t, d, "caravan_driver_lane_tasks")) > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	must.MapEmpty(t, scrape(t, d, "caravan_driver_lane_tasks"))
}

// Tasks that take turns in a lane show their turns in the driver's metrics
// while they run, and leave no series once they are gone.
func TestTaskLaneMetricsFollowTurns(t *testing.T) {
	conf, _ := simConfig(t)
	conf.TimeSliceQuantum = "200ms"
	conf.IterationGrace = "0s"
	h, d := newHarness(t, conf)
	events := collectEvents(t, h)
	w := workload.Config{Iterations: 15, IterationTime: 100 * time.Millisecond, PersistentMiB: 5000, EphemeralMiB: 1000}
	profile := TaskConfig{MemoryProfile: MemoryProfile{Persistent: "5000MiB", Ephemeral: "1000MiB"}}
	a := workloadTask(t, h, "a", w, profile, grantEnv(laneGrant(0)))
	b := workloadTask(t, h, "b", w, profile, grantEnv(laneGrant(1)))
	_, _, err := h.StartTask(a)
	must.NoError(t, err)
	_, _, err = h.StartTask(b)
	must.NoError(t, err)

	series := func(cfg *drivers.TaskConfig) string {
		return "alloc_id=" + cfg.AllocID + ",lane=GPU-test/lane0,task=" + cfg.Name
	}
	// Over a few quanta each is suspended at least once.
	deadline := time.Now().Add(10 * time.Second)
	var switches, suspended map[string]float64
	for time.Now().Before(deadline) {
		switches = scrape(t, d, "caravan_driver_task_switches_total")
		suspended = scrape(t, d, "caravan_driver_task_suspended")
		if switches[series(a)] > 0 && switches[series(b)] > 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	must.MapLen(t, 2, switches)
	must.Positive(t, switches[series(a)], must.Sprint(switches))
	must.Positive(t, switches[series(b)], must.Sprint(switches))
	must.MapContainsKeys(t, suspended, []string{series(a), series(b)})
	lastSuspend := scrape(t, d, "caravan_driver_task_last_suspend_seconds")
	must.Positive(t, lastSuspend[series(a)])

	for _, task := range []*drivers.TaskConfig{a, b} {
		if code := waitExit(t, h, task.ID, 30*time.Second).ExitCode; code != 0 {
			var told []string
			for _, ev := range events(task.ID, "") {
				told = append(told, ev.Message)
			}
			t.Fatalf("task %s exited %d; its events: %q", task.Name, code, told)
		}
	}
	deadline = time.Now().Add(5 * time.Second)
	for len(scrape(t, d, "caravan_driver_task_switches_total")) > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	must.MapEmpty(t, scrape(t, d, "caravan_driver_task_switches_total"))
}
