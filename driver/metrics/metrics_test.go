package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/shoenig/test/must"
)

func TestSetLaneMembers(t *testing.T) {
	m := New()
	steps := []struct {
		lane  string
		tasks int
		want  map[string]float64
	}{
		{"GPU-a/lane0", 1, map[string]float64{"GPU-a/lane0": 1}},
		{"GPU-a/lane0", 2, map[string]float64{"GPU-a/lane0": 2}},
		{"GPU-a/lane1", 1, map[string]float64{"GPU-a/lane0": 2, "GPU-a/lane1": 1}},
		{"GPU-a/lane0", 0, map[string]float64{"GPU-a/lane1": 1}},
		{"GPU-a/lane1", 0, map[string]float64{}},
	}
	for _, s := range steps {
		m.SetLaneMembers(s.lane, s.tasks)
		must.Eq(t, s.want, laneGauges(t, m))
	}
}

// laneGauges reads caravan_driver_lane_tasks back from the registry that
// /metrics serves.
func laneGauges(t *testing.T, m *Metrics) map[string]float64 {
	t.Helper()
	families, err := m.Registry.Gather()
	must.NoError(t, err)
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "caravan_driver_lane_tasks" {
			continue
		}
		for _, mt := range f.GetMetric() {
			out[mt.GetLabel()[0].GetValue()] = mt.GetGauge().GetValue()
		}
	}
	must.Eq(t, len(out), testutil.CollectAndCount(m.LaneMembers))
	return out
}
