package sim

import (
	"testing"

	"github.com/caravan-gpu/caravan/planner/policy"
	"github.com/caravan-gpu/caravan/planner/trace"
)

// BenchmarkPhilly runs the full Philly-derived trace (82,247 jobs), one
// sub-benchmark per cluster and policy: on n256g8 (2,048 GPUs) the trace
// never fills the cluster; on n64g8 (512 GPUs) queues grow to tens of
// thousands of jobs. Target: ≤ 1 s and ≤ 500 MB per run on two cores (3 s
// on n256g8). It skips when the shared data is absent.
func BenchmarkPhilly(b *testing.B) {
	jobs, err := trace.LoadJobs(sharedData(b, "philly/philly.csv"), "philly")
	if err != nil {
		b.Fatal(err)
	}
	for _, spec := range []string{"n256g8", "n64g8"} {
		cl, err := trace.ParseShorthand(spec)
		if err != nil {
			b.Fatal(err)
		}
		for _, name := range []string{"fifo", "fjf", "srtf", "srsf", "las", "gittins", "hare", "predict"} {
			b.Run(spec+"/"+name, func(b *testing.B) {
				p, err := policy.Parse(name, policy.Config{})
				if err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				for b.Loop() {
					res, err := Run(Config{Cluster: cl, Policy: p}, jobs)
					if err != nil {
						b.Fatal(err)
					}
					b.ReportMetric(res.Summary.AvgJCT, "avgJCT_s")
					b.ReportMetric(float64(res.Rounds), "rounds")
				}
			})
		}
	}
}

// BenchmarkSynthetic needs no data file: 10,000 Philly-like jobs on n64g8.
func BenchmarkSynthetic(b *testing.B) {
	jobs := trace.Synthetic(trace.SyntheticOptions{Jobs: 10000, Seed: 1})
	cl, _ := trace.ParseShorthand("n64g8")
	for _, name := range []string{"fjf", "las"} {
		b.Run(name, func(b *testing.B) {
			p, err := policy.Parse(name, policy.Config{})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Run(Config{Cluster: cl, Policy: p}, jobs); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
