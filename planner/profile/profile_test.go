package profile

import (
	"math"
	"testing"

	"github.com/shoenig/test/must"
)

// A sensitivity point of throughput 0 is one where the model cannot train
// (Synergy's table has them, where memory runs out): it is kept, so that
// the planner's grid is the simulator's. A negative or unbounded one, or
// a point with no CPUs, is refused by its index.
func TestSensitivityPointsMayBeZero(t *testing.T) {
	p := Profile{Name: "alexnet", Throughput: map[string]float64{"V100": 1},
		Sensitivity: []SensitivityPoint{{GPUs: 1, CPUsPerGPU: 1, MemGBPerGPU: 62.5, Throughput: 0.3}, {GPUs: 2, CPUsPerGPU: 12, MemGBPerGPU: 20.83, Throughput: 0}}}
	must.NoError(t, p.Validate())
	for _, bad := range []SensitivityPoint{
		{GPUs: 1, CPUsPerGPU: 1, MemGBPerGPU: 62.5, Throughput: -0.1},
		{GPUs: 1, CPUsPerGPU: 1, MemGBPerGPU: 62.5, Throughput: math.Inf(1)},
		{GPUs: 1, CPUsPerGPU: 0, MemGBPerGPU: 62.5, Throughput: 1},
	} {
		q := p
		q.Sensitivity = append(append([]SensitivityPoint{}, p.Sensitivity...), bad)
		must.ErrorContains(t, q.Validate(), "sensitivity[2]")
	}
}
