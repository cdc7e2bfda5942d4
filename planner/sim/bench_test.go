package sim

import (
	"fmt"
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

// BenchmarkSynergy is Synergy's sizing on its own cluster (64 servers of
// 8 GPUs, 24 cores and 500 GB) over the Philly-derived trace, each job
// given a model of sensitivity.csv at random as `caravan sim -seed 1`
// gives it: the proportional share, TUNE and GREEDY under fjf and 2D-LAS,
// the sizers with the reference's 300 s lease too, where a move costs 1 s
// (the reference's are free). avg÷prop is the average JCT over that of
// the same order's proportional share (docs/simulator.md, Synergy's
// lease). Up to 8 minutes a run; it skips when the shared data is
// absent.
func BenchmarkSynergy(b *testing.B) {
	jobs, err := trace.LoadJobs(sharedData(b, "philly/philly.csv"), "philly")
	if err != nil {
		b.Fatal(err)
	}
	sens, err := trace.LoadSensitivity(sharedData(b, "synergy/sensitivity.csv"))
	if err != nil {
		b.Fatal(err)
	}
	trace.AssignModels(jobs, sens.Models(), 1)
	cl := trace.Cluster{Name: "synergy64", Groups: []trace.NodeGroup{{Count: 64, GPUModel: "V100", GPUs: 8, CPUs: 24, MemoryGB: 500}}}
	for _, order := range []string{"fjf", "las"} {
		proportional := 0.0
		for _, sizing := range []struct {
			name, step string
			lease      float64
		}{{"proportional", "", 0}, {"tune", "+count+synergy-tune", 0}, {"greedy", "+count+synergy-greedy", 0},
			{"tune-lease300", "+count+synergy-tune", 300}, {"greedy-lease300", "+count+synergy-greedy", 300}} {
			b.Run(order+"/"+sizing.name, func(b *testing.B) {
				p, err := policy.Parse(order+sizing.step, policy.Config{Sensitivity: sens, SynergyLease: sizing.lease})
				if err != nil {
					b.Fatal(err)
				}
				for b.Loop() {
					res, err := Run(Config{Cluster: cl, Policy: p, MigrationCost: 1}, jobs)
					if err != nil {
						b.Fatal(err)
					}
					if sizing.step == "" {
						proportional = res.Summary.AvgJCT
					}
					b.ReportMetric(res.Summary.AvgJCT, "avgJCT_s")
					b.ReportMetric(float64(res.Summary.Migrations), "moves")
					if proportional > 0 {
						b.ReportMetric(res.Summary.AvgJCT/proportional, "avg÷prop")
					}
				}
			})
		}
	}
}

// BenchmarkHeterogeneity runs Gavel's msr-seed0 6214e9 trace (2,000 jobs in
// steps) with Gavel's throughputs on Gavel's 108-GPU shape, at the trace's
// own load and at 58 busy GPUs (fastest-model time), 80% of what the shape
// carries when every job runs on each model in proportion to its GPUs: each
// order agnostic and re-allocated every round (+rotate), against the same
// order aware without reading remaining work (+migrate-blind, and with the
// blind earliest placer, +earliest-blind+migrate-blind), with moves
// costing 1 s and 30 s. It skips when the shared data is absent.
func BenchmarkHeterogeneity(b *testing.B) {
	jobs, err := trace.LoadJobs(sharedData(b, "gavel/traces/msr-seed0/6214e9.trace"), "gavel")
	if err != nil {
		b.Fatal(err)
	}
	tp, err := trace.LoadThroughputs(sharedData(b, "gavel/simulation_throughputs.json"))
	if err != nil {
		b.Fatal(err)
	}
	cl, err := trace.ParseShorthand("36xV100,36xP100,36xK80")
	if err != nil {
		b.Fatal(err)
	}
	fastest := func(j *trace.Job) float64 {
		best := 0.0
		for _, g := range cl.Groups {
			best = max(best, tp.Solo(g.GPUModel, j.JobType, max(j.GPUs, 1)))
		}
		return j.Steps / best
	}
	loaded, err := trace.Sample(jobs, trace.SampleOptions{Load: 58, Seconds: fastest})
	if err != nil {
		b.Fatal(err)
	}
	for _, load := range []struct {
		name string
		jobs []trace.Job
	}{{"own", jobs}, {"load58", loaded}} {
		for _, cost := range []float64{1, 30} {
			for _, order := range []string{"las", "fjf"} {
				agnostic := 0.0
				for _, step := range []string{"rotate", "migrate-blind", "earliest-blind+migrate-blind"} {
					b.Run(fmt.Sprintf("%s/cost%g/%s+%s", load.name, cost, order, step), func(b *testing.B) {
						p, err := policy.Parse(order+"+"+step, policy.Config{MigrationCost: cost})
						if err != nil {
							b.Fatal(err)
						}
						for b.Loop() {
							res, err := Run(Config{Cluster: cl, Policy: p, Throughputs: tp, MigrationCost: cost}, load.jobs)
							if err != nil {
								b.Fatal(err)
							}
							if step == "rotate" {
								agnostic = res.Summary.AvgJCT
							}
							b.ReportMetric(res.Summary.AvgJCT/86400, "avgJCT_d")
							b.ReportMetric(float64(res.Summary.Migrations), "moves")
							if agnostic > 0 && step != "rotate" {
								b.ReportMetric(agnostic/res.Summary.AvgJCT, "rotate÷it")
							}
						}
					})
				}
			}
		}
	}
}
