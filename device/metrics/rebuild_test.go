package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/shoenig/test/must"
)

// Rebuild sets the round's series and deletes only those the round lacks:
// a GPU that stays keeps its series throughout, one that goes loses it.
func TestRebuildKeepsAndDeletes(t *testing.T) {
	m := New()
	m.Rebuild(m.GPUHealthy, []Series{{Labels: []string{"GPU-a", "T4"}, Value: 1}, {Labels: []string{"GPU-b", "T4"}, Value: 1}})
	must.Eq(t, 2, testutil.CollectAndCount(m.GPUHealthy))
	m.Rebuild(m.GPUHealthy, []Series{{Labels: []string{"GPU-a", "T4"}, Value: 0}})
	must.Eq(t, 1, testutil.CollectAndCount(m.GPUHealthy))
	must.Eq(t, 0.0, testutil.ToFloat64(m.GPUHealthy.WithLabelValues("GPU-a", "T4")))
	m.Rebuild(m.GPUHealthy, nil)
	must.Eq(t, 0, testutil.CollectAndCount(m.GPUHealthy))
}
