package enact

import (
	"fmt"
	"testing"

	"github.com/caravan-gpu/caravan/planner/policy"
)

// BenchmarkPlan10kJobs is the change layer's share of a round with 10,000
// managed jobs on a cluster of two models: 5,000 running that keep running,
// 2,500 held that wait, 1,000 held that start and 1,500 running that are
// preempted.
func BenchmarkPlan10kJobs(b *testing.B) {
	inv := Inventory{Offers: map[string]Offer{"T4": {Whole: true}, "H100": {Lanes: true, Whole: true}}, MHzPerCore: 2000,
		Smallest: map[string]Capacity{"": {CPUs: 16, MemoryGB: 64}, "T4": {CPUs: 16, MemoryGB: 64}, "H100": {CPUs: 32, MemoryGB: 256}}}
	jobs := make([]Job, 10000)
	ds := make([]policy.Decision, len(jobs))
	for i := range jobs {
		jobs[i] = Job{Key: fmt.Sprintf("default/j%d", i), Priority: 80, Tasks: 1}
		ds[i] = policy.Decision{Job: i, GPUModel: "H100"}
		switch {
		case i < 5000:
			jobs[i].Live, ds[i].Run = true, true
		case i < 7500:
			jobs[i].Held = true
		case i < 8500:
			jobs[i].Held, ds[i].Run, ds[i].CPUs, ds[i].MemoryGB = true, true, 8, 32
		default:
			jobs[i].Live, ds[i].Band = true, 1
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		if got := Plan(inv, jobs, ds); got.Len() != 2500 {
			b.Fatalf("%d changes, want 2500", got.Len())
		}
	}
}
