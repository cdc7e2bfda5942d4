package command

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"slices"
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
	queueCuts, weights, sizes                                                    string
	promoteKnob, fairness, migrationCost, synergyLease, rotationPeriod           float64
	offeredLoad                                                                  setFloat
	jobs                                                                         int
	seed                                                                         uint64
	// A sample of the trace (trace.SampleOptions); -load is its load.
	group       string
	maxDuration float64
	maxGPUs     int
	// lanes and laneMemory split every GPU into lanes (-lanes,
	// -lane-memory), as the cluster's device plugin does.
	lanes, laneMemory int
	skip, take        int
}

// setFloat is a float flag that knows whether it was given.
type setFloat struct {
	v   float64
	set bool
}

func (f *setFloat) String() string { return strconv.FormatFloat(f.v, 'g', -1, 64) }

func (f *setFloat) Set(s string) error {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return errors.New("want a number")
	}
	f.v, f.set = v, true
	return nil
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
	fs.Float64Var(&f.rotationPeriod, "rotation-period", policy.DefaultRotationPeriod, "")
	f.offeredLoad = setFloat{v: 374}
	fs.Var(&f.offeredLoad, "load", "")
	fs.StringVar(&f.group, "vc", "", "")
	fs.Float64Var(&f.maxDuration, "max-duration", 0, "")
	fs.IntVar(&f.maxGPUs, "max-gpus", 0, "")
	fs.IntVar(&f.lanes, "lanes", 0, "")
	fs.IntVar(&f.laneMemory, "lane-memory", 0, "")
	fs.IntVar(&f.skip, "skip", 0, "")
	fs.IntVar(&f.take, "take", 0, "")
	fs.IntVar(&f.jobs, "jobs", 10000, "")
	fs.Uint64Var(&f.seed, "seed", 1, "")
	fs.StringVar(&f.sizes, "sizes", "", "")
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
	case !(f.rotationPeriod > 0) || math.IsInf(f.rotationPeriod, 0):
		return "flag -rotation-period must be a positive number of seconds"
	case f.jobs <= 0:
		return "flag -jobs must be positive"
	case !(f.offeredLoad.v > 0) || math.IsInf(f.offeredLoad.v, 0):
		return "flag -load must be a positive number of busy GPUs"
	case !(f.maxDuration >= 0) || math.IsInf(f.maxDuration, 0):
		return "flag -max-duration must be a positive number of seconds (0: any)"
	case f.maxGPUs < 0:
		return "flag -max-gpus must not be negative (0: any)"
	case f.lanes < 0 || f.laneMemory < 0:
		return "flags -lanes and -lane-memory must not be negative"
	case f.skip < 0:
		return "flag -skip must not be negative"
	case f.take < 0:
		return "flag -take must not be negative (0: every job)"
	}
	if _, err := trace.ParseSizeShape(f.sizes); err != nil {
		return "flag -sizes: " + err.Error()
	}
	if f.sizes != "" && f.trace != "" && f.format != "synthetic" {
		return "flag -sizes shapes a synthetic trace; a -trace file has its own durations"
	}
	if f.trace == "" || f.format == "synthetic" {
		for _, c := range []struct {
			name string
			set  bool
		}{{"vc", f.group != ""}, {"max-duration", f.maxDuration > 0}, {"max-gpus", f.maxGPUs > 0}, {"skip", f.skip > 0}, {"take", f.take > 0}} {
			if c.set {
				return "flag -" + c.name + " cuts a sample from a -trace file; a synthetic trace has -jobs and -load"
			}
		}
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
	// lanes and laneMemory split every GPU (sim.Config.Lanes).
	lanes, laneMemory int
}

// load reads every file the flags name and parses the policies. The exit
// code is 2 for a bad flag value, 1 for a file that cannot be read.
func (f *traceFlags) load() (*traceInputs, int, error) {
	in := &traceInputs{lanes: f.lanes, laneMemory: f.laneMemory}
	var err error
	if in.cluster, err = trace.LoadCluster(f.cluster); err != nil {
		var pe *trace.ParseError
		if errors.As(err, &pe) || errors.Is(err, os.ErrNotExist) {
			return nil, 1, err
		}
		return nil, 2, fmt.Errorf("flag -cluster: %w", err) // a malformed nNgG or mix
	}
	in.cfg = policy.Config{PromoteKnob: f.promoteKnob, Fairness: f.fairness, Compat: f.compat == "tiresias",
		MigrationCost: f.migrationCost, SynergyLease: f.synergyLease, RotationPeriod: f.rotationPeriod}
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
	if f.synergyLease > 0 && !slices.ContainsFunc(in.policies, (*policy.Policy).KeepsLease) {
		return nil, 2, errors.New("flag -synergy-lease: no policy in -policy has a synergy sizer to keep it")
	}
	in.traceName = f.trace
	if f.trace == "" || f.format == "synthetic" {
		shape, _ := trace.ParseSizeShape(f.sizes)
		in.jobs = trace.Synthetic(trace.SyntheticOptions{Jobs: f.jobs, Seed: f.seed, Load: f.offeredLoad.v, Sizes: shape})
		name := fmt.Sprintf("jobs=%d,load=%g,seed=%d", f.jobs, f.offeredLoad.v, f.seed)
		if f.sizes != "" {
			name += ",sizes=" + string(shape)
		}
		in.traceName = "synthetic(" + name + ")"
	} else {
		if in.jobs, err = trace.LoadJobs(f.trace, f.format); err != nil {
			return nil, 1, err
		}
		if s, ok := f.sample(); ok {
			s.Seconds = in.fastestSeconds
			if in.jobs, err = trace.Sample(in.jobs, s); err != nil {
				return nil, 2, fmt.Errorf("sample of %s: %w", f.trace, err)
			}
			in.traceName = fmt.Sprintf("%s(%s)", f.trace, f.sampleName())
		}
	}
	if in.cfg.Sensitivity != nil {
		trace.AssignModels(in.jobs, in.cfg.Sensitivity.Models(), f.seed)
	}
	ws, _ := parseWeights(f.weights)
	trace.AssignWeights(in.jobs, ws, f.seed)
	return in, 0, nil
}

// fastestSeconds is a job given in steps' run time on the cluster's
// fastest model for it, by the throughputs; 0 without them.
func (in *traceInputs) fastestSeconds(j *trace.Job) float64 {
	if in.tputs == nil || j.Steps <= 0 || j.JobType == "" {
		return 0
	}
	best := 0.0
	for _, g := range in.cluster.Groups {
		best = max(best, in.tputs.Solo(g.GPUModel, j.JobType, max(j.GPUs, 1)))
	}
	if best <= 0 {
		return 0
	}
	return j.Steps / best
}

// sample is the sample the flags cut from a trace file, if any.
func (f *traceFlags) sample() (trace.SampleOptions, bool) {
	s := trace.SampleOptions{Group: f.group, MaxDuration: f.maxDuration, MaxGPUs: f.maxGPUs, Skip: f.skip, Take: f.take}
	if f.offeredLoad.set {
		s.Load = f.offeredLoad.v
	}
	cut := s.Group != "" || s.MaxDuration != 0 || s.MaxGPUs != 0 || s.Skip != 0 || s.Take != 0 || s.Load != 0
	return s, cut
}

// sampleName names the sample in reports, flag by flag.
func (f *traceFlags) sampleName() string {
	var parts []string
	if f.group != "" {
		parts = append(parts, "vc="+f.group)
	}
	if f.maxDuration > 0 {
		parts = append(parts, fmt.Sprintf("max-duration=%g", f.maxDuration))
	}
	if f.maxGPUs > 0 {
		parts = append(parts, fmt.Sprintf("max-gpus=%d", f.maxGPUs))
	}
	if f.skip > 0 {
		parts = append(parts, fmt.Sprintf("skip=%d", f.skip))
	}
	if f.take > 0 {
		parts = append(parts, fmt.Sprintf("take=%d", f.take))
	}
	if f.offeredLoad.set {
		parts = append(parts, fmt.Sprintf("load=%g", f.offeredLoad.v))
	}
	return strings.Join(parts, ",")
}

// simConfig is the simulator's configuration for policy p on these inputs.
func (in *traceInputs) simConfig(p *policy.Policy) sim.Config {
	return sim.Config{Cluster: in.cluster, Policy: p, Throughputs: in.tputs, Colocation: in.cfg.Colocation,
		Compat: in.cfg.Compat, MigrationCost: in.cfg.MigrationCost, Lanes: in.lanes, LaneMemoryMB: in.laneMemory}
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
