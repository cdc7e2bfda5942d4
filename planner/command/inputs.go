package command

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/caravan-gpu/caravan/planner/policy"
	"github.com/caravan-gpu/caravan/planner/sim"
	"github.com/caravan-gpu/caravan/planner/trace"
)

// traceFlags are the inputs that caravan sim and caravan replay share: the
// trace, the cluster, the policies and the tables the policies read.
type traceFlags struct {
	trace, format, cluster, policies, compat, jobSizes, throughputs, sensitivity string
	queueCuts, weights                                                           string
	promoteKnob, fairness, offeredLoad, migrationCost                            float64
	jobs                                                                         int
	seed                                                                         uint64
}

// register adds the shared flags; -compat and -sensitivity are sim's alone.
func (f *traceFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.trace, "trace", "", "")
	fs.StringVar(&f.format, "format", "", "")
	fs.StringVar(&f.cluster, "cluster", "", "")
	fs.StringVar(&f.policies, "policy", "", "")
	fs.StringVar(&f.jobSizes, "job-sizes", "", "")
	fs.StringVar(&f.throughputs, "throughputs", "", "")
	fs.StringVar(&f.queueCuts, "queue-cuts", "", "")
	fs.Float64Var(&f.promoteKnob, "promote-knob", 0, "")
	fs.Float64Var(&f.fairness, "fairness", 0, "")
	fs.Float64Var(&f.migrationCost, "migration-cost", policy.DefaultMigrationCost, "")
	fs.Float64Var(&f.offeredLoad, "load", 374, "")
	fs.IntVar(&f.jobs, "jobs", 10000, "")
	fs.Uint64Var(&f.seed, "seed", 1, "")
}

// check validates the shared flags that need no file access.
func (f *traceFlags) check() string {
	switch {
	case f.cluster == "":
		return "flag -cluster is required"
	case f.policies == "":
		return "flag -policy is required"
	case f.promoteKnob < 0:
		return "flag -promote-knob must not be negative"
	case f.fairness < 0 || f.fairness > 1:
		return "flag -fairness must be in [0,1]"
	case !(f.migrationCost > 0) || math.IsInf(f.migrationCost, 0):
		return "flag -migration-cost must be a positive number of seconds"
	case f.jobs <= 0:
		return "flag -jobs must be positive"
	case f.offeredLoad <= 0:
		return "flag -load must be positive"
	}
	switch f.format {
	case "", "tiresias", "philly", "gavel", "synthetic":
	default:
		return fmt.Sprintf("flag -format: unknown format %q (want tiresias, philly, gavel or synthetic)", f.format)
	}
	if f.trace == "" && f.format != "" && f.format != "synthetic" {
		return "flag -format " + f.format + " needs -trace"
	}
	if _, err := parseCuts(f.queueCuts); err != nil {
		return "flag -queue-cuts: " + err.Error()
	}
	if _, err := parseWeights(f.weights); err != nil {
		return "flag -weights: " + err.Error()
	}
	return ""
}

// traceInputs are the loaded trace, cluster and policies.
type traceInputs struct {
	cluster   trace.Cluster
	cfg       policy.Config
	tputs     *trace.Throughputs
	policies  []*policy.Policy
	jobs      []trace.Job
	traceName string
}

// load reads every file the flags name and parses the policies. The exit
// code is 2 for a bad flag value, 1 for a file that cannot be read.
func (f *traceFlags) load() (*traceInputs, int, error) {
	in := &traceInputs{}
	var err error
	if in.cluster, err = trace.LoadCluster(f.cluster); err != nil {
		var pe *trace.ParseError
		if errors.As(err, &pe) || errors.Is(err, os.ErrNotExist) {
			return nil, 1, err
		}
		return nil, 2, fmt.Errorf("flag -cluster: %w", err) // a malformed nNgG or mix
	}
	in.cfg = policy.Config{PromoteKnob: f.promoteKnob, Fairness: f.fairness, Compat: f.compat == "tiresias",
		MigrationCost: f.migrationCost}
	in.cfg.QueueCuts, _ = parseCuts(f.queueCuts)
	if f.jobSizes != "" {
		if in.cfg.JobSizes, err = trace.LoadJobSizes(f.jobSizes); err != nil {
			return nil, 1, err
		}
	}
	if f.throughputs != "" {
		if in.tputs, err = trace.LoadThroughputs(f.throughputs); err != nil {
			return nil, 1, err
		}
		in.cfg.Colocation = in.tputs.Colocation()
	}
	if f.sensitivity != "" {
		if in.cfg.Sensitivity, err = trace.LoadSensitivity(f.sensitivity); err != nil {
			return nil, 1, err
		}
	}
	for _, name := range strings.Split(f.policies, ",") {
		p, err := policy.Parse(name, in.cfg)
		if err != nil {
			return nil, 2, fmt.Errorf("flag -policy: %w", err)
		}
		in.policies = append(in.policies, p)
	}
	in.traceName = f.trace
	if f.trace == "" || f.format == "synthetic" {
		in.jobs = trace.Synthetic(trace.SyntheticOptions{Jobs: f.jobs, Seed: f.seed, Load: f.offeredLoad})
		in.traceName = fmt.Sprintf("synthetic(jobs=%d,load=%g,seed=%d)", f.jobs, f.offeredLoad, f.seed)
	} else if in.jobs, err = trace.LoadJobs(f.trace, f.format); err != nil {
		return nil, 1, err
	}
	if in.cfg.Sensitivity != nil {
		trace.AssignModels(in.jobs, in.cfg.Sensitivity.Models(), f.seed)
	}
	ws, _ := parseWeights(f.weights)
	trace.AssignWeights(in.jobs, ws, f.seed)
	return in, 0, nil
}

// simConfig is the simulator's configuration for policy p on these inputs.
func (in *traceInputs) simConfig(p *policy.Policy) sim.Config {
	return sim.Config{Cluster: in.cluster, Policy: p, Throughputs: in.tputs, Colocation: in.cfg.Colocation,
		Compat: in.cfg.Compat, MigrationCost: in.cfg.MigrationCost}
}

// parseWeights reads -weights: positive numbers separated by commas.
func parseWeights(s string) ([]float64, error) {
	if s == "" {
		return nil, nil
	}
	var ws []float64
	for _, p := range strings.Split(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil || !(v > 0) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("want positive numbers separated by commas, got %q", s)
		}
		ws = append(ws, v)
	}
	return ws, nil
}
