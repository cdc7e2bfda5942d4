package command

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/cli"
	"github.com/hashicorp/go-hclog"

	"github.com/caravan-gpu/caravan/planner/consulx"
	"github.com/caravan-gpu/caravan/planner/plannerapi"
	"github.com/caravan-gpu/caravan/planner/policy"
	"github.com/caravan-gpu/caravan/planner/replay"
	"github.com/caravan-gpu/caravan/planner/sim"
	"github.com/caravan-gpu/caravan/planner/trace"
)

func init() {
	register("replay", func(ui cli.Ui) (cli.Command, error) {
		c := &replayCommand{ui: ui}
		if b, ok := ui.(*cli.BasicUi); ok {
			c.stderr = b.ErrorWriter
		}
		return c, nil
	})
}

type replayCommand struct {
	ui cli.Ui
	// stderr receives logs and the progress bar; nil means os.Stderr.
	stderr io.Writer
}

func (c *replayCommand) Synopsis() string {
	return "Replay a job trace on Nomad under the live planner and compare it with the simulator"
}

func (c *replayCommand) Help() string {
	return helpText("caravan replay -trace FILE -cluster SPEC -policy P -time-scale S -workload PATH [options]", `
Submits each trace job to Nomad at its arrival divided by the time scale, as
a batch job with one allocation per GPU running caravan-workload for the
job's duration divided by the time scale, held until the planner starts it.
A planner must already run against this Nomad with policy P. When every
job is done, each job's start and finish are read back from Nomad, in trace
seconds, and printed beside the simulator's run of the same trace,
cluster and policy. The replay's jobs (IDs replay-<run>-<trace id>) are
purged on every exit, Ctrl-C included.

Trace and policy (as caravan sim):
  -trace FILE, -format F, -cluster SPEC, -policy P (one), -job-sizes FILE,
  -throughputs FILE, -queue-cuts A,B, -promote-knob K, -fairness F,
  -jobs N, -load L, -seed S, -sizes SHAPE, -vc G, -max-duration S, -max-gpus N,
  -skip N, -take N
  -sensitivity FILE    Synergy's sensitivity.csv, for a synergy sizer: each
                       job gets a model from it (as caravan sim, by -seed),
                       a profile named after the model with its
                       sensitivity, and a workload as fast as its task's
                       CPU and memory allow over the cluster's share
  -core-mhz MHZ        with -sensitivity: the MHz of one profiled core, the
                       planner's planning.core_mhz (default 1000)
  -synergy-lease S     Synergy's lease in trace seconds (caravan sim
                       -synergy-lease); the planner's planning.synergy_lease
                       must be S ÷ the time scale
  -lanes N, -lane-memory MB   the cluster's GPUs are cut into N lanes (the
                       simulator cuts every GPU so); each job's workload
                       then runs at 0.6 of its speed beside each partner
                       on its GPU, the simulator's co-location factor

Replay:
  -time-scale S        one real second stands for S trace seconds (required)
  -workload PATH       caravan-workload's path on the client nodes (required)
  -checkpoint-dir DIR  where each allocation keeps its checkpoint; shared
                       storage on a cluster of several nodes (default: a
                       new directory under $TMPDIR, removed at the end)
  -held=false          submit without the planner's hold (default true)
  -gangs=false         run the allocations of a job of several GPUs each on
                       its own course from its own start, with its own
                       checkpoint, rather than as a gang that makes progress
                       once all have started (default true)
  -iteration D         real time of one workload iteration, the most a
                       preemption loses (default 200ms)
  -cpu MHZ, -memory MB what each allocation asks for (default 20, 64; with
                       -sensitivity, the cluster's proportional share per
                       GPU, so that a job the policy does not size runs at
                       it, as simulated)
  -timeout D           stop waiting after D; jobs left are unfinished
                       (default: 3 × the simulated makespan ÷ S + 2m)
  -run ID              run ID in job IDs (default: random)
  -start-latency S     trace seconds from the event that lets a job start
                       to its task running, in the simulator's run (caravan
                       sim -start-latency); default: measured on the live
                       run, the planner's and Nomad's parts and the
                       clients' delay fitted to their starts
  -round-delay S       trace seconds each round of the simulator's run
                       decides after the event that calls for it (caravan
                       sim -round-delay), taken out of -start-latency;
                       default: the planner's part of the live starts,
                       where the start latency is measured so; 0 charges
                       it in the start latency, each round deciding at
                       its event
  -completion-lag S    trace seconds after a job's work ends that the
                       simulated cluster learns of it (caravan sim
                       -completion-lag); default: measured with
                       -round-delay, which is then the planner's wait for
                       the starts that answered their arrival, and this
                       how much longer it waited for those that answered
                       a completion; 0 charges every round the mean wait
  -start-spread S      trace seconds of the clients' set-up each task
                       needs (shared), or the cluster takes to start each
                       task one after another (queue), in the simulator's
                       run (caravan sim -start-spread); default: fitted to
                       the clients' starts on the live run
  -gang-spread S       with -start-model queue: trace seconds between a
                       gang's tasks' starts, in the simulator's run
                       (caravan sim -gang-spread); default: the live
                       gangs' mean, first task to last
  -start-model M       how the simulator models the clients' starts:
                       shared (the tasks under way share the set-up, a
                       spread of it each; a gang's tasks end theirs
                       together) or queue (one task after another, a
                       spread apart); default shared
  -run-overhead S      trace seconds a task runs longer live than its job
                       simulated, in the simulator's run (caravan sim
                       -run-overhead); default: the live run's mean
  -stop-latency S      trace seconds from the planner's hold to a preempted
                       job's stop, in the simulator's run (caravan sim
                       -stop-latency); default: the live run's median
  -unblock-latency S   trace seconds more that a start waiting for a
                       preemption's stop takes to be placed after it than
                       a start with free GPUs, in the simulator's run
                       (caravan sim -unblock-latency); default: measured
                       on the live run's placements after stops, less
                       Nomad's part of a start with free GPUs
  -abort-latency S     trace seconds from the planner's hold to the GPUs
                       of a start taken back before its tasks ran coming
                       free, in the simulator's run (caravan sim
                       -abort-latency); default: the live run's mean,
                       0 where it took none back
  -start-jitter F      also run the simulator 15 times with each start's
                       latency drawn between 1 − F and 1 + F times the
                       charged one (caravan sim -start-jitter), and report
                       the spread of their average JCT; 0 skips it, as
                       does a run charged no start latency (default 0.3)
  -seed-history        with -job-sizes: replace the planner's completed-job
                       sample in Consul KV with those sizes ÷ S (2D-Gittins)
  -prepare-only        write the profiles (and -seed-history's sample) to
                       Consul KV and exit; the planner reads KV when it
                       starts or takes the lead
  -from DIR            report again a run made before, from the folder its
                       -out wrote, with its costs measured by this build
                       and the simulator run beside it, without Nomad; give
                       the trace flags and -lanes it ran with (its time
                       scale and gangs are read from DIR)

Nomad, Consul and the planner:
  -address ADDR        Nomad's HTTP address (default $NOMAD_ADDR)
  -token TOKEN         Nomad ACL token (default $NOMAD_TOKEN)
  -planner ADDR        the planner's API (default $CARAVAN_PLANNER_ADDR,
                       then Consul, then 127.0.0.1:4680)
  -planner-token TOKEN the planner's API token, when it has one (default
                       $CARAVAN_PLANNER_TOKEN)
  Consul from $CONSUL_HTTP_ADDR, for the throughput profiles of Gavel jobs.

Output:
  -json                one object {"live": ..., "sim": ...}, each side as
                       caravan sim -json prints it, and the jobs whose live
                       JCT differs most from the simulated
  -out DIR             live/ and sim/ as caravan sim -out writes them,
                       replay.json, and jobs.csv: every job's live and
                       simulated start, finish and preemptions side by side;
                       live/timeline.json holds every task's runs, the
                       planner's releases and the preemptions' stops
  -progress            progress bar even when stderr is not a terminal
  -log-level L         trace, debug, info, warn, error (default info)`)
}

type replayFlags struct {
	traceFlags
	nomad                        nomadFlags
	timeScale                    float64
	coreMHz                      float64 // -core-mhz, with -sensitivity
	cpuSet, memorySet            bool    // -cpu, -memory given, with -sensitivity
	startLatency, runOverhead    float64 // -1: measure on the live run
	roundDelay                   float64 // -1: measure on the live run
	completionLag                float64 // -1: measure on the live run
	unblockLatency               float64 // -1: measure on the live run
	startSpread, gangSpread      float64 // -1: measure on the live run
	stopLatency                  float64 // -1: measure on the live run
	abortLatency                 float64 // -1: measure on the live run
	startJitter                  float64 // 0: no runs with jittered starts
	startModel                   string
	workload, checkpointDir, run string
	planner, plannerToken        string
	out, logLevel                string
	from                         string // a saved run's -out folder to report again
	iteration, timeout           time.Duration
	cpu, memory                  int
	held, json, progress         bool
	gangs                        bool
	prepareOnly, seedHistory     bool
}

// defaultStartModel is how the simulator beside a replay models the
// clients' starts, unless -start-model says: shared fitted the live starts
// better than the queue in 56 of 57 saved replays (docs/replay.md, Starts
// as a shared set-up).
const defaultStartModel = "shared"

var runIDPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,31}$`)

func (f *replayFlags) check() error {
	if msg := f.traceFlags.check(); msg != "" {
		return usagef("%s", msg)
	}
	switch {
	case strings.Contains(f.policies, ","):
		return usagef("flag -policy: the live planner runs one policy, got %q", f.policies)
	case f.from != "" && (f.prepareOnly || f.seedHistory || f.timeScale != 0 || f.workload != ""):
		return usagef("flag -from reads a run made before, with its time scale: drop -time-scale, -workload, -prepare-only and -seed-history")
	case f.from == "" && (!(f.timeScale > 0) || math.IsInf(f.timeScale, 0)):
		return usagef("flag -time-scale is required and must be a positive number (trace seconds per real second)")
	case f.startLatency != -1 && !seconds(f.startLatency):
		return usagef("flag -start-latency must be a non-negative number of trace seconds")
	case f.roundDelay != -1 && !seconds(f.roundDelay):
		return usagef("flag -round-delay must be a non-negative number of trace seconds")
	case f.completionLag != -1 && !seconds(f.completionLag):
		return usagef("flag -completion-lag must be a non-negative number of trace seconds")
	case f.startSpread != -1 && !seconds(f.startSpread):
		return usagef("flag -start-spread must be a non-negative number of trace seconds")
	case f.gangSpread != -1 && !seconds(f.gangSpread):
		return usagef("flag -gang-spread must be a non-negative number of trace seconds")
	case f.runOverhead != -1 && !seconds(f.runOverhead):
		return usagef("flag -run-overhead must be a non-negative number of trace seconds")
	case f.startModel != "queue" && f.startModel != "shared":
		return usagef("flag -start-model: want queue or shared, got %q", f.startModel)
	case f.stopLatency != -1 && !seconds(f.stopLatency):
		return usagef("flag -stop-latency must be a non-negative number of trace seconds")
	case f.unblockLatency != -1 && !seconds(f.unblockLatency):
		return usagef("flag -unblock-latency must be a non-negative number of trace seconds")
	case f.abortLatency != -1 && !seconds(f.abortLatency):
		return usagef("flag -abort-latency must be a non-negative number of trace seconds")
	case !(f.startJitter >= 0 && f.startJitter < 1):
		return usagef("flag -start-jitter must be at least 0 and below 1 (a fraction of the start latency)")
	case !(f.coreMHz > 0) || math.IsInf(f.coreMHz, 0):
		return usagef("flag -core-mhz must be a positive number of MHz, got %g", f.coreMHz)
	case !seconds(f.synergyLease) || f.synergyLease > 0 && f.synergyLease < 1:
		return usagef("flag -synergy-lease must be 0 (none) or at least 1 trace second")
	case f.synergyLease > 0 && f.sensitivity == "":
		return usagef("flag -synergy-lease is Synergy's: it needs -sensitivity and a synergy sizer")
	case f.sensitivity != "" && f.throughputs != "":
		return usagef("flag -sensitivity: a replay job names one profile, so it takes -sensitivity or -throughputs, not both")
	case f.workload == "" && !f.prepareOnly && f.from == "":
		return usagef("flag -workload is required: the path of caravan-workload on the Nomad client nodes")
	case f.workload != "" && !filepath.IsAbs(f.workload):
		return usagef("flag -workload: want an absolute path on the client nodes, got %q", f.workload)
	case f.iteration <= 0:
		return usagef("flag -iteration must be a positive duration like \"200ms\"")
	case f.timeout < 0:
		return usagef("flag -timeout must not be negative")
	case f.cpu <= 0 || f.memory <= 0:
		return usagef("flags -cpu and -memory must be positive")
	case f.run != "" && !runIDPattern.MatchString(f.run):
		return usagef("flag -run: want 1 to 32 lower-case letters, digits and dashes, got %q", f.run)
	case f.seedHistory && f.jobSizes == "":
		return usagef("flag -seed-history needs -job-sizes")
	case f.lanes > 1 && f.throughputs != "":
		return usagef("flag -lanes: the replay's workload slows beside a partner on its GPU by one factor (%g), where -throughputs gives each pair its own; replay lanes without -throughputs", policy.DefaultColocationFactor)
	}
	switch f.logLevel {
	case "trace", "debug", "info", "warn", "error":
	default:
		return usagef("flag -log-level: want trace, debug, info, warn or error, got %q", f.logLevel)
	}
	return nil
}

func (c *replayCommand) Run(args []string) int {
	var f replayFlags
	fs := newFlags("replay")
	f.traceFlags.register(fs)
	f.nomad.register(fs)
	fs.StringVar(&f.sensitivity, "sensitivity", "", "")
	fs.Float64Var(&f.coreMHz, "core-mhz", replay.DefaultCoreMHz, "")
	fs.Float64Var(&f.synergyLease, "synergy-lease", 0, "")
	fs.Float64Var(&f.timeScale, "time-scale", 0, "")
	fs.Float64Var(&f.startLatency, "start-latency", -1, "")
	fs.Float64Var(&f.roundDelay, "round-delay", -1, "")
	fs.Float64Var(&f.completionLag, "completion-lag", -1, "")
	fs.Float64Var(&f.stopLatency, "stop-latency", -1, "")
	fs.Float64Var(&f.unblockLatency, "unblock-latency", -1, "")
	fs.Float64Var(&f.abortLatency, "abort-latency", -1, "")
	fs.Float64Var(&f.startJitter, "start-jitter", defaultStartJitter, "")
	fs.Float64Var(&f.startSpread, "start-spread", -1, "")
	fs.Float64Var(&f.gangSpread, "gang-spread", -1, "")
	fs.Float64Var(&f.runOverhead, "run-overhead", -1, "")
	fs.StringVar(&f.startModel, "start-model", defaultStartModel, "")
	fs.StringVar(&f.workload, "workload", "", "")
	fs.StringVar(&f.checkpointDir, "checkpoint-dir", "", "")
	fs.StringVar(&f.run, "run", "", "")
	fs.StringVar(&f.planner, "planner", "", "")
	fs.StringVar(&f.plannerToken, "planner-token", "", "")
	fs.StringVar(&f.out, "out", "", "")
	fs.StringVar(&f.from, "from", "", "")
	fs.StringVar(&f.logLevel, "log-level", "info", "")
	fs.DurationVar(&f.iteration, "iteration", replay.DefaultIteration, "")
	fs.DurationVar(&f.timeout, "timeout", 0, "")
	fs.IntVar(&f.cpu, "cpu", replay.DefaultCPU, "")
	fs.IntVar(&f.memory, "memory", replay.DefaultMemoryMB, "")
	fs.BoolVar(&f.held, "held", true, "")
	fs.BoolVar(&f.gangs, "gangs", true, "")
	fs.BoolVar(&f.json, "json", false, "")
	fs.BoolVar(&f.progress, "progress", false, "")
	fs.BoolVar(&f.prepareOnly, "prepare-only", false, "")
	fs.BoolVar(&f.seedHistory, "seed-history", false, "")
	if err := parse(fs, args); err != nil {
		return fail(c.ui, "replay", err)
	}
	if fs.NArg() > 0 {
		return fail(c.ui, "replay", usagef("unexpected argument %q", fs.Arg(0)))
	}
	if f.sensitivity != "" {
		// A job the policy does not size runs at its proportional share,
		// as the simulator runs it: each task asks for it unless told.
		fs.Visit(func(fl *flag.Flag) {
			f.cpuSet, f.memorySet = f.cpuSet || fl.Name == "cpu", f.memorySet || fl.Name == "memory"
		})
	}
	if err := f.check(); err != nil {
		return fail(c.ui, "replay", err)
	}
	ctx, stop := signalContext()
	defer stop()
	if err := c.run(ctx, &f); err != nil {
		return fail(c.ui, "replay", err)
	}
	return exitOK
}

func (c *replayCommand) run(ctx context.Context, f *replayFlags) error {
	stderr := c.stderr
	if stderr == nil {
		stderr = os.Stderr
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "caravan-replay", Level: hclog.LevelFromString(f.logLevel), Output: stderr})
	in, code, err := f.load()
	if err != nil {
		if code == exitUsage {
			return usagef("%v", err)
		}
		return err
	}
	pol := in.policies[0]
	// The live planner sees a client's GPUs by model name; so does the
	// simulator beside it.
	in.cluster = in.cluster.ByModelName()

	// The simulator first: it is quick, and its makespan bounds the wait.
	scfg := in.simConfig(pol)
	scfg.KeepUtil, scfg.KeepRestarts = true, true
	simRes, err := sim.Run(scfg, in.jobs)
	if err != nil {
		return fmt.Errorf("simulator: %w", err)
	}

	if f.from != "" {
		res, info, err := readSavedReplay(f.from, in)
		if err != nil {
			return err
		}
		f.timeScale, f.held, f.gangs = info.TimeScale, info.Held, info.Gangs
		res.SharedSpeed = sharedSpeed(f.lanes)
		return c.measureAndReport(f, in, pol, simRes, res, replayInfo{Run: info.Run, PlannerPolicy: info.PlannerPolicy,
			PlannerInterval: info.PlannerInterval, WritesPerJob: info.WritesPerJob}, log)
	}

	run := f.run
	if run == "" {
		run = randomRunID()
	}
	timeout := f.timeout
	if timeout == 0 {
		timeout = time.Duration(3*lastFinish(simRes)/f.timeScale*float64(time.Second)) + 2*time.Minute
	}
	bar := newProgressBar(stderr, f.progress, "replay "+pol.Name)
	var progress func(done, total int)
	if bar != nil {
		progress = bar.update
	}
	plan, err := replay.Prepare(replay.Config{
		Jobs: in.jobs, Cluster: in.cluster, Throughputs: in.tputs, Policy: pol.Name, Timeout: timeout, Log: log,
		Sensitivity: in.cfg.Sensitivity, CoreMHz: f.coreMHz, Align: time.Duration(f.synergyLease / f.timeScale * float64(time.Second)),
		Progress: progress,
		Job: replay.JobOptions{Prefix: "replay-" + run + "-", TimeScale: f.timeScale, Workload: f.workload,
			CheckpointDir: f.checkpointDir, Held: f.held, Iteration: f.iteration, CPU: f.taskCPU(), MemoryMB: f.taskMemory(),
			SharedSpeed: sharedSpeed(f.lanes), IndependentWorkers: !f.gangs},
	})
	if err != nil {
		return err
	}
	if err := c.writeKV(ctx, f, plan, log); err != nil {
		return err
	}
	if f.prepareOnly {
		c.ui.Output("Prepared Consul KV for the replay; start the planner, then run the replay without -prepare-only.")
		return nil
	}

	nomad, err := replay.NewAPI(f.nomad.address, f.nomad.token)
	if err != nil {
		return err
	}
	if err := plan.Check(ctx, nomad); err != nil {
		return err
	}
	planner, err := checkPlanner(ctx, f, pol, log)
	if err != nil {
		return err
	}
	if planner != nil {
		// The rounds that wrote each job split the planner's part of a
		// start into its wait and its work.
		client := plannerClient(ctx, f.planner, f.plannerToken)
		plan.Decisions(func(ctx context.Context) ([]plannerapi.Decision, error) {
			d, err := client.Decisions(ctx, 0)
			if err != nil {
				return nil, err
			}
			return d.Decisions, nil
		})
	}
	if _, err := os.Stat(f.workload); err != nil {
		log.Warn("the workload binary is not on this machine; it must be on every client node", "workload", f.workload)
	}

	log.Info("replaying", "jobs", len(in.jobs), "run", run, "time_scale", f.timeScale,
		"trace_span_s", in.jobs[len(in.jobs)-1].Arrival, "simulated_makespan_s", lastFinish(simRes),
		"timeout", timeout)
	res, err := plan.Run(ctx, nomad)
	if bar != nil {
		bar.finish()
	}
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return errors.New("interrupted; the replay's jobs were purged")
		}
		return err
	}

	info := replayInfo{Run: run, WritesPerJob: res.AvgWrites()}
	if planner != nil {
		info.PlannerPolicy, info.PlannerInterval = planner.Policy, planner.Interval.Seconds()
	}
	if err := c.measureAndReport(f, in, pol, simRes, res, info, log); err != nil {
		return err
	}
	if res.TimedOut {
		return fmt.Errorf("%d of %d jobs did not finish within -timeout %s", res.Sim.Summary.Unfinished, len(in.jobs), timeout)
	}
	return nil
}

// measureAndReport runs the simulator again with what a start, a run and
// a stop cost on the live run res (a planner round, Nomad's evaluation and
// placement, the task's start), beside ideal, its run without them, and
// reports both; info holds what the report takes from the replay itself.
func (c *replayCommand) measureAndReport(f *replayFlags, in *traceInputs, pol *policy.Policy, ideal *sim.Result,
	res *replay.Result, info replayInfo, log hclog.Logger) error {
	res.RoundEvery = info.PlannerInterval * f.timeScale
	costs := res.MeasureCosts(ideal, replay.Costs{StartLatency: f.startLatency, RoundDelay: f.roundDelay, CompletionLag: f.completionLag, StartSpread: f.startSpread,
		GangSpread: f.gangSpread, RunOverhead: f.runOverhead, StopLatency: f.stopLatency, UnblockLatency: f.unblockLatency, AbortLatency: f.abortLatency,
		Shared: f.startModel == "shared"})
	log.Info("start costs", "start_latency_s", costs.StartLatency, "measured_on_starts", costs.Starts, "round_delay_s", costs.RoundDelay, "completion_lag_s", costs.CompletionLag,
		"start_spread_s", costs.StartSpread, "measured_on_events", costs.Events,
		"gang_spread_s", costs.GangSpread, "measured_on_gangs", costs.Gangs, "run_overhead_s", costs.RunOverhead,
		"measured_on_runs", costs.Runs, "stop_latency_s", costs.StopLatency, "measured_on_preemptions", costs.Stops,
		"unblock_latency_s", costs.UnblockLatency, "measured_on_unblocks", costs.Unblocks,
		"abort_latency_s", costs.AbortLatency, "measured_on_aborts", costs.Aborts)
	simRes := ideal
	if costs.Any() {
		var err error
		if simRes, err = in.runCharged(pol, costs, func(cfg *sim.Config) { cfg.KeepUtil, cfg.KeepRestarts = true, true }); err != nil {
			return err
		}
	}
	info.StartLatencyMean, info.SimMeanLatencyAvgJCT = meanLatencyRun(in, pol, costs)
	if costs.Any() {
		band, err := costBand(in, pol, costs, simRes.Summary.AvgJCT)
		if err != nil {
			return err
		}
		info.SimCostBand = &band
		if info.SimJitter, err = jitterRuns(in, pol, costs, f.startJitter); err != nil {
			return err
		}
	}
	info.SimNoDelayAvgJCT = ideal.Summary.AvgJCT
	return c.report(f, in, replayReport{Replay: info}, costs, res, simRes)
}

// sharedSpeed is what a job of a replay on GPUs cut into lanes keeps of its
// speed beside each partner on its GPU: the simulator's co-location factor,
// with no measured pairs. 0 (the workload's speed left alone) on whole GPUs.
func sharedSpeed(lanes int) float64 {
	if lanes > 1 {
		return policy.DefaultColocationFactor
	}
	return 0
}

// meanLatencyRun is the mean start delay, beside the median the simulator
// is charged, and the simulator's average JCT charging it instead: a queue
// pays every start's delay, so a few slow starts cost it as much as many
// fast ones. Both are 0 where the delays were not measured from the gaps.
func meanLatencyRun(in *traceInputs, pol *policy.Policy, costs replay.Costs) (latency, avgJCT float64) {
	if len(costs.Delays) == 0 {
		return 0, 0
	}
	mean := costs
	mean.StartLatency = replay.Mean(costs.Delays)
	if m, err := in.runCharged(pol, mean, nil); err == nil {
		avgJCT = m.Summary.AvgJCT
	}
	return mean.StartLatency, avgJCT
}

// runCharged runs the simulator on the trace charged costs, with tweak,
// where not nil, changing one more setting of the run.
func (in *traceInputs) runCharged(pol *policy.Policy, costs replay.Costs, tweak func(*sim.Config)) (*sim.Result, error) {
	cfg := in.simConfig(pol)
	costs.Charge(&cfg)
	if tweak != nil {
		tweak(&cfg)
	}
	res, err := sim.Run(cfg, in.jobs)
	if err != nil {
		return nil, fmt.Errorf("simulator: %w", err)
	}
	return res, nil
}

// costBandStep is how far costBand moves each cost: less than the costs
// measured on two runs of one trace and policy differ.
const costBandStep = 0.05

// costBand is the least and the most average JCT of the simulator charged
// costs (avgJCT, as run) and of each run with one charged cost
// costBandStep lower or higher. A policy whose order turns on near ties
// moves far within it: a preemption falls on the other side of one, and
// the jobs after it with it.
func costBand(in *traceInputs, pol *policy.Policy, costs replay.Costs, avgJCT float64) ([2]float64, error) {
	band := [2]float64{avgJCT, avgJCT}
	// Each cost in turn, by its place among the charged ones.
	charged := func(c *replay.Costs) []*float64 {
		return []*float64{&c.StartLatency, &c.StartSpread, &c.GangSpread, &c.RunOverhead, &c.StopLatency, &c.AbortLatency, &c.RoundDelay, &c.UnblockLatency, &c.CompletionLag}
	}
	for k := range len(charged(&costs)) {
		for _, f := range []float64{1 - costBandStep, 1 + costBandStep} {
			c := costs
			cost := charged(&c)[k]
			if *cost <= 0 || cost == &c.GangSpread && c.Shared { // no gang spread is charged beside the shared set-up
				continue
			}
			*cost *= f
			res, err := in.runCharged(pol, c, nil)
			if err != nil {
				return band, err
			}
			band[0], band[1] = min(band[0], res.Summary.AvgJCT), max(band[1], res.Summary.AvgJCT)
		}
	}
	return band, nil
}

// defaultStartJitter is -start-jitter's default: the measured start
// latency of one trace and policy moves by more than that between two
// runs, so a start's own latency may well be that far from the median.
const defaultStartJitter = 0.3

// jitterDraws is how many runs jitterRuns makes.
const jitterDraws = 15

// jitterRuns runs the simulator charged costs jitterDraws times, each
// start's latency drawn within ±jitter of the charged one from a seed of
// its own (sim.Config.StartJitter), and gives the spread of their average
// JCT; nil where jitter is 0 or no start latency is charged. Where a
// policy's order turns on near ties, one run as charged is one draw among
// these: a live run outside their spread parts from the simulation by
// more than the starts' timing explains.
func jitterRuns(in *traceInputs, pol *policy.Policy, costs replay.Costs, jitter float64) (*jitterSpread, error) {
	if jitter <= 0 || costs.StartLatency <= 0 {
		return nil, nil
	}
	avg := make([]float64, 0, jitterDraws)
	for seed := range uint64(jitterDraws) {
		res, err := in.runCharged(pol, costs, func(cfg *sim.Config) { cfg.StartJitter, cfg.JitterSeed = jitter, seed+1 })
		if err != nil {
			return nil, err
		}
		avg = append(avg, res.Summary.AvgJCT)
	}
	slices.Sort(avg)
	return &jitterSpread{Jitter: jitter, Runs: len(avg), Min: avg[0], Q1: sim.Percentile(avg, 25), Median: sim.Percentile(avg, 50),
		Q3: sim.Percentile(avg, 75), Max: avg[len(avg)-1]}, nil
}

// writeKV writes the jobs' throughput profiles and, with -seed-history,
// the job-size sample into Consul KV.
func (c *replayCommand) writeKV(ctx context.Context, f *replayFlags, plan *replay.Plan, log hclog.Logger) error {
	profiles, err := replay.Profiles(plan.Works)
	if err != nil {
		return err
	}
	if len(profiles) == 0 && !f.seedHistory {
		return nil
	}
	addr := os.Getenv("CONSUL_HTTP_ADDR")
	if addr == "" {
		addr = "127.0.0.1:8500"
	}
	consul, err := consulx.New("")
	if err != nil {
		return err
	}
	if len(profiles) > 0 {
		n, err := plan.WriteProfiles(ctx, consul)
		if err != nil {
			return fmt.Errorf("consul at %s (CONSUL_HTTP_ADDR): %w", addr, err)
		}
		log.Info("wrote throughput profiles to Consul KV", "profiles", n, "prefix", consulx.ProfilesPrefix)
	}
	if f.seedHistory {
		sizes, err := trace.LoadJobSizeSample(f.jobSizes)
		if err != nil {
			return err
		}
		if err := replay.SeedHistory(ctx, consul, sizes, f.timeScale); err != nil {
			return fmt.Errorf("consul at %s (CONSUL_HTTP_ADDR): %w", addr, err)
		}
		log.Info("replaced the planner's completed-job sample", "key", consulx.HistoryKey, "sizes", len(sizes))
	}
	return nil
}

// checkPlanner asks the planner for its status: held jobs need one, and
// its policy should be the simulated one. It returns the status, nil
// where no planner answers and jobs are not held.
func checkPlanner(ctx context.Context, f *replayFlags, pol *policy.Policy, log hclog.Logger) (*plannerapi.Status, error) {
	client := plannerClient(ctx, f.planner, f.plannerToken)
	addr := client.Address
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := client.Status(sctx)
	var auth *plannerapi.AuthError
	if errors.As(err, &auth) {
		return nil, plannerError(err)
	}
	if err != nil {
		if f.held {
			return nil, fmt.Errorf("no caravan planner answers at %s (-planner): held jobs would never start; start one with `caravan planner run`, or pass -held=false: %w", addr, err)
		}
		log.Warn("no caravan planner answers; jobs run in Nomad's own order", "planner", addr, "error", err)
		return nil, nil
	}
	if expandPolicy(st.Policy) != expandPolicy(pol.Name) {
		log.Warn("the planner runs another policy than the simulator; the live side is the planner's", "planner", st.Policy, "sim", pol.Name)
	}
	order := strings.SplitN(expandPolicy(pol.Name), "+", 2)[0]
	if f.timeScale != 1 && (order == "las" || order == "gittins") {
		cuts := []float64{3250, 7200}
		if c, _ := parseCuts(f.queueCuts); c != nil {
			cuts = c
		}
		scaled := make([]string, len(cuts))
		for i, v := range cuts {
			scaled[i] = fmt.Sprintf("%g", v/f.timeScale)
		}
		log.Info("the planner counts attained service in real GPU-seconds: for the simulator's queue cuts its planning.queue_cuts should be the cuts ÷ the time scale",
			"queue_cuts", "["+strings.Join(scaled, ", ")+"]")
	}
	if f.timeScale != 1 && order == "predict" {
		log.Info("the planner counts attained service in real GPU-seconds: for the simulator's floor its planning.predict_floor should be 1s ÷ the time scale",
			"predict_floor", (time.Duration(policy.DefaultPredictFloor / f.timeScale * float64(time.Second))).String())
	}
	return st, nil
}

func expandPolicy(name string) string {
	n := strings.ToLower(strings.TrimSpace(name))
	if full, ok := policy.Shorthands[n]; ok {
		return full
	}
	return n
}

// lastFinish is the simulated run's last finish in trace seconds.
func lastFinish(r *sim.Result) float64 {
	last := 0.0
	for _, j := range r.Jobs {
		if !math.IsNaN(j.Finish) {
			last = max(last, j.Finish)
		}
	}
	return last
}

func randomRunID() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// taskCPU is -cpu, or 0 where a sensitivity table sizes jobs and -cpu was
// not given: each task then asks for the cluster's proportional share
// (replay.Prepare).
func (f *replayFlags) taskCPU() int {
	if f.sensitivity != "" && !f.cpuSet {
		return 0
	}
	return f.cpu
}

// taskMemory is -memory, as taskCPU is -cpu.
func (f *replayFlags) taskMemory() int {
	if f.sensitivity != "" && !f.memorySet {
		return 0
	}
	return f.memory
}
