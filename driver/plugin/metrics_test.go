package plugin

import (
	"sort"
	"strings"
	"testing"
	"time"

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
	w := workload.Config{Iterations: 3, IterationTime: 100 * time.Millisecond, PersistentMiB: 1000, EphemeralMiB: 100}
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
	must.Eq(t, 0, waitExit(t, h, a.ID, 20*time.Second).ExitCode)
	must.Eq(t, 0, waitExit(t, h, b.ID, 20*time.Second).ExitCode)
	// The lane is left as each task's process is reaped, just after its exit.
	deadline := time.Now().Add(5 * time.Second)
	for len(scrape(t, d, "caravan_driver_lane_tasks")) > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	must.MapEmpty(t, scrape(t, d, "caravan_driver_lane_tasks"))
}
