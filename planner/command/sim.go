package command

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/cheggaaa/pb/v3"
	"github.com/hashicorp/cli"
	"github.com/mattn/go-isatty"
	"golang.org/x/term"

	"github.com/caravan-gpu/caravan/planner/policy"
	"github.com/caravan-gpu/caravan/planner/sim"
	"github.com/caravan-gpu/caravan/planner/simout"
)

func init() {
	register("sim", func(ui cli.Ui) (cli.Command, error) {
		c := &simCommand{ui: ui}
		if b, ok := ui.(*cli.BasicUi); ok {
			c.stderr = b.ErrorWriter
		}
		return c, nil
	})
}

type simCommand struct {
	ui cli.Ui
	// stderr receives the progress bar; nil means os.Stderr.
	stderr io.Writer
}

func (c *simCommand) Synopsis() string { return "Simulate scheduling policies on a job trace" }

func (c *simCommand) Help() string {
	return strings.TrimSpace(`
Usage: caravan sim -cluster SPEC [-policy P[,P2...]] [-trace FILE] [options]

  Runs each policy on the same trace and cluster and prints their job
  completion times side by side, with ratios to the first policy.

  -trace FILE          job trace; omit (or -format synthetic) for a
                       synthetic Philly-like trace
  -format F            tiresias, philly, gavel or synthetic (default: guess)
  -cluster SPEC        cluster spec file (Tiresias CSV or PAI machine spec),
                       nNgG (e.g. n32g4), or a mix like 32xV100,32xP100
  -policy P[,P2...]    shorthand (` + strings.Join(policy.Names(), ", ") + `)
                       or ORDER[+PLACER][+migrate|+migrate-blind|+rotate]
                       [+SIZER], e.g. las+match+synergy; migrate moves
                       running jobs to the GPU model where they add most
                       throughput (migrate-blind without reading their
                       remaining work); rotate draws every running job's
                       model again each 360 s round, blind to speed, as
                       an agnostic Gavel policy re-allocates
                       (default ` + policy.Default + `)
  -compat tiresias     follow Tiresias' reference simulator
  -job-sizes FILE      2D-Gittins size sample (default: learn online)
  -promote-knob K      2D-LAS/Gittins starvation knob (0: off)
  -queue-cuts A,B      queue thresholds in GPU-seconds (default 3250,7200)
  -throughputs FILE    Gavel simulation_throughputs.json
  -sensitivity FILE    Synergy sensitivity.csv (jobs without a model get
                       one at random, seeded)
  -synergy-lease S     Synergy's lease: at each multiple of S seconds its
                       sizer places every running job again, as the
                       reference does (300 there); a job it moves pays
                       -migration-cost (default 0: jobs keep their GPUs)
  -weights W1,W2,...   give every job a weight drawn from the list at
                       random, seeded (default: the trace's, else 1)
  -lanes N             split every GPU into N lanes (for pack)
  -lane-memory MB      memory per lane
  -fairness F          AlloX fairness knob in [0,1]
  -preemption-cost S   seconds a preempted job loses on resume (default 0)
  -migration-cost S    seconds a job moved to another GPU model by the
                       migrate or rotate step loses (checkpoint and
                       restart; migrate plans with it too; default 30)
  -rotation-period S   Gavel's round: rotate's period, and the least run
                       time the blind steps (migrate-blind, earliest-blind)
                       expect a job to have left (default 360)
  -start-latency S     seconds every start holds its GPUs before the task
                       runs, as a real cluster's planner round, placement
                       and task start do; not executed time (default 0)
  -round-delay S       seconds each round decides after the event that
                       calls for it, as a live planner waits for Nomad's
                       events and writes its decisions; jobs run on
                       meanwhile and the events of the delay join the
                       round; -start-latency is then what a start takes
                       after its round (default 0)
  -completion-lag S    seconds after a job's work ends that the cluster
                       learns of it, as a Nomad client reports a task's
                       end late: the job holds its GPUs and counts as
                       running until then, but its JCT ends with its work
                       (default 0)
  -start-jitter F      each start's latency drawn uniformly between 1 − F
                       and 1 + F times -start-latency, from -jitter-seed,
                       as live starts spread around their median; F at
                       least 0 and below 1 (default 0: none)
  -jitter-seed N       seed of -start-jitter's draws (default 1)
  -start-spread S      seconds more for each further task (one per GPU)
                       started at the same moment, as a cluster starts
                       them one after another; a gang runs once its last
                       task has (default 0)
  -gang-spread S       seconds between a gang's own tasks' starts, in place
                       of -start-spread within a gang, as a gang's tasks
                       start on several nodes among other jobs' (default
                       0: -start-spread)
  -starts-shared       the tasks under way share the clients' set-up, a
                       -start-spread of it each, after -start-latency, in
                       place of a queue of starts (caravan replay
                       -start-model shared); -gang-spread is not used
  -run-overhead S      seconds every run spends without progress (process
                       start, setup); executed time (default 0)
  -stop-latency S      seconds a preempted job keeps its GPUs: every start
                       of the round that preempts waits that much more, as
                       a real cluster stops the job first (default 0)
  -unblock-latency S   seconds more that a start waiting for a preemption's
                       stop takes to be placed once the GPUs free, as Nomad
                       places an allocation blocked on GPUs only after the
                       client reports the stop (default 0)
  -abort-latency S     seconds a start taken back before its tasks ran
                       keeps its GPUs, as a Nomad client takes seconds to
                       give up a task's set-up (default 0: free at once)
  -jobs N, -load L, -seed S   synthetic trace size, offered load, seed
  -sizes SHAPE         synthetic durations, each of Philly's mean:
                       lognormal (Philly's heavy tail; default),
                       exponential, bimodal or uniform
  -vc G, -max-duration S, -max-gpus N, -skip N, -take N, -load L
                       cut a sample from the trace: the jobs of virtual
                       cluster (group) G of at most S seconds and N GPUs,
                       in arrival
                       order, the first N skipped, then N taken, with
                       arrivals spread or squeezed to offer L busy GPUs
                       on average (synthetic trace: -load is its load)
  -json                print one JSON object instead of a table
  -out DIR             write summary.json, per-job and utilisation CSVs
                       and SVG plots
  -plot FILE           write the JCT CDF and utilisation plot (SVG)
  -progress            show a progress bar even when stderr is not a terminal
`)
}

type simFlags struct {
	traceFlags
	out, plot      string
	preemptionCost float64
	startLatency   float64
	roundDelay     float64
	completionLag  float64
	runOverhead    float64
	startSpread    float64
	gangSpread     float64
	startsShared   bool
	stopLatency    float64
	unblockLatency float64
	abortLatency   float64
	startJitter    float64
	jitterSeed     uint64
	json, progress bool
}

func (c *simCommand) Run(args []string) int {
	var f simFlags
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f.traceFlags.register(fs)
	f.policies = policy.Default
	fs.StringVar(&f.compat, "compat", "", "")
	fs.StringVar(&f.sensitivity, "sensitivity", "", "")
	fs.Float64Var(&f.synergyLease, "synergy-lease", 0, "")
	fs.StringVar(&f.weights, "weights", "", "")
	fs.StringVar(&f.out, "out", "", "")
	fs.StringVar(&f.plot, "plot", "", "")
	fs.Float64Var(&f.preemptionCost, "preemption-cost", 0, "")
	fs.Float64Var(&f.startLatency, "start-latency", 0, "")
	fs.Float64Var(&f.roundDelay, "round-delay", 0, "")
	fs.Float64Var(&f.completionLag, "completion-lag", 0, "")
	fs.Float64Var(&f.runOverhead, "run-overhead", 0, "")
	fs.Float64Var(&f.startSpread, "start-spread", 0, "")
	fs.Float64Var(&f.gangSpread, "gang-spread", 0, "")
	fs.BoolVar(&f.startsShared, "starts-shared", false, "")
	fs.Float64Var(&f.stopLatency, "stop-latency", 0, "")
	fs.Float64Var(&f.unblockLatency, "unblock-latency", 0, "")
	fs.Float64Var(&f.abortLatency, "abort-latency", 0, "")
	fs.Float64Var(&f.startJitter, "start-jitter", 0, "")
	fs.Uint64Var(&f.jitterSeed, "jitter-seed", 1, "")
	fs.BoolVar(&f.json, "json", false, "")
	fs.BoolVar(&f.progress, "progress", false, "")
	if err := fs.Parse(args); err != nil {
		return c.usage(err.Error())
	}
	if fs.NArg() > 0 {
		return c.usage(fmt.Sprintf("unexpected argument %q", fs.Arg(0)))
	}
	if msg := f.check(); msg != "" {
		return c.usage(msg)
	}
	code, err := c.run(&f)
	if err != nil {
		c.ui.Error("caravan sim: " + err.Error())
		if code == 2 {
			c.ui.Error(`Run "caravan sim -help" for usage.`)
		}
	}
	return code
}

func (c *simCommand) usage(msg string) int {
	c.ui.Error("caravan sim: " + msg)
	c.ui.Error(`Run "caravan sim -help" for usage.`)
	return 2
}

// check validates flags that need no file access.
func (f *simFlags) check() string {
	if msg := f.traceFlags.check(); msg != "" {
		return msg
	}
	switch {
	case f.compat != "" && f.compat != "tiresias":
		return fmt.Sprintf("flag -compat: unknown mode %q (want tiresias)", f.compat)
	case f.preemptionCost < 0:
		return "flag -preemption-cost must not be negative"
	case !seconds(f.startLatency):
		return "flag -start-latency must be a non-negative number of seconds"
	case !seconds(f.roundDelay):
		return "flag -round-delay must be a non-negative number of seconds"
	case !seconds(f.completionLag):
		return "flag -completion-lag must be a non-negative number of seconds"
	case !seconds(f.runOverhead):
		return "flag -run-overhead must be a non-negative number of seconds"
	case !seconds(f.startSpread):
		return "flag -start-spread must be a non-negative number of seconds"
	case !seconds(f.gangSpread):
		return "flag -gang-spread must be a non-negative number of seconds"
	case !seconds(f.stopLatency):
		return "flag -stop-latency must be a non-negative number of seconds"
	case !seconds(f.unblockLatency):
		return "flag -unblock-latency must be a non-negative number of seconds"
	case !seconds(f.abortLatency):
		return "flag -abort-latency must be a non-negative number of seconds"
	case !(f.startJitter >= 0 && f.startJitter < 1):
		return "flag -start-jitter must be at least 0 and below 1 (a fraction of -start-latency)"
	case f.startJitter > 0 && f.startLatency == 0:
		return "flag -start-jitter spreads -start-latency: give -start-latency too"
	case !seconds(f.synergyLease) || f.synergyLease > 0 && f.synergyLease < 1:
		return "flag -synergy-lease must be 0 (no lease) or at least 1 second"
	case f.synergyLease > 0 && f.sensitivity == "":
		return "flag -synergy-lease is Synergy's: it needs -sensitivity and a synergy sizer"
	}
	return ""
}

func parseCuts(s string) ([]float64, error) {
	if s == "" {
		return nil, nil
	}
	var cuts []float64
	for _, p := range strings.Split(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil || v <= 0 || math.IsInf(v, 0) || (len(cuts) > 0 && v <= cuts[len(cuts)-1]) {
			return nil, fmt.Errorf("want increasing positive GPU-seconds, got %q", s)
		}
		cuts = append(cuts, v)
	}
	return cuts, nil
}

// policyReport is one policy's line of the -json output.
type policyReport struct {
	sim.Summary
	AvgJCTRatio float64 `json:"avg_jct_ratio_to_first"`
}

type simReport struct {
	Trace   string `json:"trace"`
	Cluster string `json:"cluster"`
	GPUs    int    `json:"gpus"`
	Compat  string `json:"compat,omitempty"`
	// WeightedJCTBound is the lower bound on every policy's weighted_jct
	// from Hare's relaxation (sim.WeightedJCTBound).
	WeightedJCTBound float64        `json:"weighted_jct_bound"`
	Policies         []policyReport `json:"policies"`
}

// add appends a run's line, with its average JCT over the first run's.
func (rep *simReport) add(res *sim.Result) {
	pr := policyReport{Summary: res.Summary}
	if len(rep.Policies) == 0 {
		rep.WeightedJCTBound = sim.WeightedJCTBound(res.Jobs, res.GPUs)
		pr.AvgJCTRatio = 1
		if res.Summary.AvgJCT <= 0 {
			pr.AvgJCTRatio = 0
		}
	} else if first := rep.Policies[0].AvgJCT; first > 0 {
		pr.AvgJCTRatio = res.Summary.AvgJCT / first
	}
	rep.Policies = append(rep.Policies, pr)
}

func (c *simCommand) run(f *simFlags) (int, error) {
	in, code, err := f.load()
	if err != nil {
		return code, err
	}
	rep := simReport{Trace: in.traceName, Cluster: in.cluster.Name, GPUs: in.cluster.GPUs(), Compat: f.compat}
	var results []*sim.Result
	for _, p := range in.policies {
		scfg := in.simConfig(p)
		scfg.PreemptionCost = f.preemptionCost
		scfg.StartLatency, scfg.RunOverhead, scfg.StartSpread, scfg.StopLatency = f.startLatency, f.runOverhead, f.startSpread, f.stopLatency
		scfg.GangSpread, scfg.StartsShared, scfg.AbortLatency = f.gangSpread, f.startsShared, f.abortLatency
		scfg.StartJitter, scfg.JitterSeed, scfg.RoundDelay = f.startJitter, f.jitterSeed, f.roundDelay
		scfg.CompletionLag = f.completionLag
		scfg.UnblockLatency = f.unblockLatency
		scfg.KeepUtil = f.out != "" || f.plot != ""
		bar := newProgressBar(c.stderr, f.progress, p.Name)
		if bar != nil {
			scfg.Progress = bar.update
		}
		res, err := sim.Run(scfg, in.jobs)
		if bar != nil {
			bar.finish()
		}
		if err != nil {
			return 1, fmt.Errorf("policy %s: %w", p.Name, err)
		}
		results = append(results, res)
		rep.add(res)
	}
	if f.out != "" {
		if err := writeOutputs(f.out, rep, results); err != nil {
			return 1, err
		}
	}
	if f.plot != "" {
		if err := writePlot(f.plot, results); err != nil {
			return 1, err
		}
	}
	if f.json {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return 1, err
		}
		c.ui.Output(string(b))
		return 0, nil
	}
	c.ui.Output(renderTable(rep))
	return 0, nil
}

func renderTable(rep simReport) string {
	var b strings.Builder
	fmt.Fprintf(&b, "trace %s on %s (%d GPUs)", rep.Trace, rep.Cluster, rep.GPUs)
	if rep.Compat != "" {
		fmt.Fprintf(&b, ", compat %s", rep.Compat)
	}
	b.WriteString("\n\n")
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\tjobs\tavg JCT\tmedian\tp95\tp99\tweighted\tmakespan\tqueueing\tutil\tpreempt\tmigrate\tavg ÷ first\t")
	for _, p := range rep.Policies {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.1f%%\t%d\t%d\t%.3f\t\n", p.Policy, p.Jobs-p.Unfinished,
			dur(p.AvgJCT), dur(p.MedianJCT), dur(p.P95JCT), dur(p.P99JCT), dur(p.WeightedJCT), dur(p.Makespan),
			dur(p.AvgQueueing), 100*p.Utilization, p.Preemptions, p.Migrations, p.AvgJCTRatio)
	}
	tw.Flush()
	fmt.Fprintf(&b, "\nweighted JCT is at least %s under any policy on whole GPUs (Hare's relaxation)", dur(rep.WeightedJCTBound))
	return strings.TrimRight(b.String(), "\n")
}

// dur prints seconds compactly: 812s, 3.4h, 2.1d.
func dur(s float64) string {
	switch {
	case s < 10000:
		return strconv.FormatFloat(s, 'f', 0, 64) + "s"
	case s < 3*86400:
		return strconv.FormatFloat(s/3600, 'f', 1, 64) + "h"
	}
	return strconv.FormatFloat(s/86400, 'f', 1, 64) + "d"
}

func writeOutputs(dir string, rep simReport, results []*sim.Result) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "summary.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	for _, r := range results {
		base := filepath.Join(dir, simout.FileBase(r.Policy))
		if err := writeJobsCSV(base+simout.JobsSuffix, r); err != nil {
			return err
		}
		if err := writeUtilCSV(base+simout.UtilSuffix, r); err != nil {
			return err
		}
	}
	return writePlot(filepath.Join(dir, "plots.svg"), results)
}

func writeJobsCSV(path string, r *sim.Result) error {
	// The jobs' own models (Synergy's) are a last column where there are
	// any, so that a run's speedups can be read by model.
	models := slices.ContainsFunc(r.Jobs, func(j sim.JobResult) bool { return j.Model != "" })
	var b strings.Builder
	b.WriteString(strings.Join(jobsCSVColumns, ","))
	if models {
		b.WriteString(",model")
	}
	b.WriteString("\n")
	for _, j := range r.Jobs {
		fmt.Fprintf(&b, "%s,%d,%g,%g,%g,%g,%g,%g,%g,%d,%d,%s", csvSafe(j.ID), j.GPUs, j.Weight, j.Arrival, j.Start,
			j.Finish, j.JCT, j.Queueing, j.Isolated, j.Preemptions, j.Migrations, csvSafe(j.GPUModel))
		if models {
			b.WriteString("," + csvSafe(j.Model))
		}
		b.WriteString("\n")
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

func csvSafe(s string) string {
	if strings.ContainsAny(s, ",\"\n") {
		return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
	}
	return s
}

// progress draws the run's bar on stderr with cheggaaa/pb: jobs done,
// rate and ETA, redrawn five times a second rather than on every job.
type progress struct {
	bar     *pb.ProgressBar
	started bool
}

// newProgressBar returns a bar on w (nil: os.Stderr), or nil when w is not
// a terminal and the bar is not forced.
func newProgressBar(w io.Writer, forced bool, label string) *progress {
	if w == nil {
		w = os.Stderr
	}
	if f, ok := w.(*os.File); !forced && (!ok || !isatty.IsTerminal(f.Fd())) {
		return nil
	}
	bar := pb.Full.New(0).SetWriter(w).Set("prefix", label+" ").
		Set(pb.ReturnSymbol, "\r").SetMaxWidth(100)
	// pb sizes the bar to the terminal, and draws nothing on one that
	// reports no width (a pty under script or CI): give it one.
	if f, ok := w.(*os.File); !ok || termWidth(f) <= 0 {
		bar.SetWidth(100)
	}
	return &progress{bar: bar}
}

func termWidth(f *os.File) int {
	w, _, err := term.GetSize(int(f.Fd()))
	if err != nil {
		return 0
	}
	return w
}

func (p *progress) update(done, total int) {
	if !p.started {
		p.bar.SetTotal(int64(total)).Start()
		p.started = true
	}
	p.bar.SetCurrent(int64(done))
}

func (p *progress) finish() {
	if p.started {
		p.bar.Finish()
	}
}

var errNoResults = errors.New("nothing to plot")

// seconds says v is a usable duration in seconds: finite and not negative.
func seconds(v float64) bool {
	return v >= 0 && !math.IsInf(v, 0)
}
