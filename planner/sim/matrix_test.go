package sim

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/caravan-gpu/caravan/internal/shareddata"
	"github.com/caravan-gpu/caravan/planner/policy"
	"github.com/caravan-gpu/caravan/planner/trace"
)

// The default policy's goal against 2D-LAS in every cell: average JCT no
// more than 3% worse, p99 no more than 10% worse.
const (
	defaultAvgFloor = 1 / 1.03 // 2D-LAS's average ÷ the default's
	defaultP99Cap   = 1.10     // the default's p99 ÷ 2D-LAS's
)

// matrixCell is one trace on one cluster, with what the default gave
// there when it was last changed: Avg is 2D-LAS's average JCT ÷ the
// default's, P99 the default's p99 ÷ 2D-LAS's. A cell may fall short of
// the goal, but not of what it gave.
type matrixCell struct {
	name     string
	cluster  string
	jobs     func(tb testing.TB) []trace.Job
	tputs    string // Gavel throughputs, shared-data path
	avg, p99 float64
}

var (
	phillyOnce sync.Once
	phillyJobs []trace.Job
	phillyErr  error
)

func philly(tb testing.TB) []trace.Job {
	path := shareddata.Require(tb, "philly/philly.csv")
	phillyOnce.Do(func() { phillyJobs, phillyErr = trace.LoadJobs(path, "philly") })
	if phillyErr != nil {
		tb.Fatal(phillyErr)
	}
	return phillyJobs
}

func phillyVC(vc string) func(tb testing.TB) []trace.Job {
	return func(tb testing.TB) []trace.Job {
		jobs, err := trace.Sample(philly(tb), trace.SampleOptions{Group: vc})
		if err != nil {
			tb.Fatal(err)
		}
		return jobs
	}
}

func traceFile(rel string) func(tb testing.TB) []trace.Job {
	return func(tb testing.TB) []trace.Job {
		jobs, err := trace.LoadJobs(shareddata.Require(tb, rel), "")
		if err != nil {
			tb.Fatal(err)
		}
		return jobs
	}
}

func synthetic(shape trace.SizeShape) func(tb testing.TB) []trace.Job {
	return func(testing.TB) []trace.Job {
		return trace.Synthetic(trace.SyntheticOptions{Jobs: 20000, Seed: 1, Load: 124, Sizes: shape})
	}
}

// defaultMatrix is the matrix of traces and clusters the default is held to:
// the full Philly trace at 512 and 384 GPUs; each Philly virtual cluster
// of more than 5,000 jobs at two loads (offered busy GPUs ÷ GPUs: 6214e9
// 0.79 and 0.95, 11cb48 0.55 and 0.83, 6c71a0 0.80 and 0.95, b436b2 0.71
// and 0.88); Gavel's msr 6214e9 trace on 128 and 64 V100s; synthetic
// traces of four size shapes at 0.97; and Tiresias' 60 jobs from an empty
// history. The default's constants were chosen on other traces
// (docs/simulator.md, A default that never loses).
var defaultMatrix = []matrixCell{
	{name: "philly/n64g8", cluster: "n64g8", jobs: philly, avg: 1.336, p99: 0.392},
	{name: "philly/n48g8", cluster: "n48g8", jobs: philly, avg: 1.534, p99: 0.199},
	{name: "philly-6214e9/n6g8", cluster: "n6g8", jobs: phillyVC("6214e9"), avg: 1.216, p99: 0.352},
	{name: "philly-6214e9/n5g8", cluster: "n5g8", jobs: phillyVC("6214e9"), avg: 1.226, p99: 0.445},
	{name: "philly-11cb48/n3g8", cluster: "n3g8", jobs: phillyVC("11cb48"), avg: 1.159, p99: 0.839},
	{name: "philly-11cb48/n2g8", cluster: "n2g8", jobs: phillyVC("11cb48"), avg: 1.126, p99: 0.942},
	{name: "philly-6c71a0/n6g8", cluster: "n6g8", jobs: phillyVC("6c71a0"), avg: 1.464, p99: 0.512},
	{name: "philly-6c71a0/n5g8", cluster: "n5g8", jobs: phillyVC("6c71a0"), avg: 1.483, p99: 0.539},
	{name: "philly-b436b2/n10g8", cluster: "n10g8", jobs: phillyVC("b436b2"), avg: 0.912, p99: 1.004},
	{name: "philly-b436b2/n8g8", cluster: "n8g8", jobs: phillyVC("b436b2"), avg: 0.919, p99: 0.973},
	{name: "gavel-6214e9/n16g8", cluster: "n16g8", jobs: traceFile("gavel/traces/msr-seed0/6214e9.trace"),
		tputs: "gavel/simulation_throughputs.json", avg: 1.437, p99: 1.094},
	{name: "gavel-6214e9/n8g8", cluster: "n8g8", jobs: traceFile("gavel/traces/msr-seed0/6214e9.trace"),
		tputs: "gavel/simulation_throughputs.json", avg: 2.073, p99: 1.086},
	{name: "synthetic-lognormal/n16g8", cluster: "n16g8", jobs: synthetic(trace.SizesLognormal), avg: 1.053, p99: 0.904},
	{name: "synthetic-exponential/n16g8", cluster: "n16g8", jobs: synthetic(trace.SizesExponential), avg: 0.973, p99: 0.980},
	{name: "synthetic-bimodal/n16g8", cluster: "n16g8", jobs: synthetic(trace.SizesBimodal), avg: 1.013, p99: 0.994},
	{name: "synthetic-uniform/n16g8", cluster: "n16g8", jobs: synthetic(trace.SizesUniform), avg: 0.954, p99: 1.041},
	{name: "tiresias-60/n4g4", cluster: "n4g4", jobs: traceFile("tiresias/60_job.csv"), avg: 0.981, p99: 1.000},
}

// matrixPolicy is the policy held to the matrix: the default, or
// CARAVAN_MATRIX_POLICY to print another's matrix (a candidate for the
// default, or a composition) without holding it to the default's cells.
func matrixPolicy() string {
	if p := os.Getenv("CARAVAN_MATRIX_POLICY"); p != "" {
		return p
	}
	return policy.Default
}

// TestDefaultPolicyMatrix runs 2D-LAS and the default on every cell of
// the matrix and fails when a cell gives less than it did when the
// default last changed (the simulator is deterministic, so a cell moves
// only with the code). It prints the matrix, marking the cells short of
// the goal. It takes about half a minute without the race detector, so it
// runs only with CARAVAN_POLICY_MATRIX=1, as make test's second pass and
// make bench set it.
func TestDefaultPolicyMatrix(t *testing.T) {
	if os.Getenv("CARAVAN_POLICY_MATRIX") != "1" {
		t.Skip("set CARAVAN_POLICY_MATRIX=1 (make test does, without the race detector)")
	}
	const slack = 0.002 // the recorded ratios are rounded to three places
	type row struct {
		avg, p99      float64
		lasAvg, itAvg float64
	}
	if p := matrixPolicy(); p != policy.Default {
		t.Logf("CARAVAN_MATRIX_POLICY=%s: its matrix is printed, not held to the default's cells", p)
	}
	rows := make([]*row, len(defaultMatrix)) // nil: the cell skipped or failed
	t.Run("cells", func(t *testing.T) {
		for k, c := range defaultMatrix {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				jobs := c.jobs(t)
				cl, err := trace.ParseShorthand(c.cluster)
				if err != nil {
					t.Fatal(err)
				}
				cfg := Config{Cluster: cl}
				if c.tputs != "" {
					if cfg.Throughputs, err = trace.LoadThroughputs(shareddata.Require(t, c.tputs)); err != nil {
						t.Fatal(err)
					}
				}
				run := func(name string) *Result {
					p, err := policy.Parse(name, policy.Config{})
					if err != nil {
						t.Fatal(err)
					}
					cfg.Policy = p
					res, err := Run(cfg, jobs)
					if err != nil {
						t.Fatal(err)
					}
					return res
				}
				las, it := run("las").Summary, run(matrixPolicy()).Summary
				r := &row{avg: las.AvgJCT / it.AvgJCT, p99: it.P99JCT / las.P99JCT, lasAvg: las.AvgJCT, itAvg: it.AvgJCT}
				rows[k] = r
				if matrixPolicy() != policy.Default {
					return
				}
				if r.avg < c.avg-slack {
					t.Errorf("average JCT: 2D-LAS ÷ %s %.3f, down from %.3f", matrixPolicy(), r.avg, c.avg)
				}
				if r.p99 > c.p99+slack {
					t.Errorf("p99 JCT: %s ÷ 2D-LAS %.3f, up from %.3f", matrixPolicy(), r.p99, c.p99)
				}
			})
		}
	})
	var b strings.Builder
	fmt.Fprintf(&b, "\n%-28s %12s %12s %10s %10s  %s\n", "cell", "las avg", matrixPolicy()+" avg", "las÷it", "p99 it÷las", "goal")
	met, ran := 0, 0
	for k, c := range defaultMatrix {
		r := rows[k]
		if r == nil {
			continue
		}
		ran++
		goal := "met"
		switch {
		case r.avg < defaultAvgFloor && r.p99 > defaultP99Cap:
			goal = "SHORT: average and p99"
		case r.avg < defaultAvgFloor:
			goal = "SHORT: average"
		case r.p99 > defaultP99Cap:
			goal = "SHORT: p99"
		default:
			met++
		}
		fmt.Fprintf(&b, "%-28s %11.0fs %11.0fs %10.3f %10.3f  %s\n", c.name, r.lasAvg, r.itAvg, r.avg, r.p99, goal)
	}
	fmt.Fprintf(&b, "%d of %d cells meet the goal (average ≤ 3%% worse, p99 ≤ 10%% worse than 2D-LAS)\n", met, ran)
	t.Log(b.String())
}
