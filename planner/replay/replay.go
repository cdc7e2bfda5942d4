package replay

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/caravan-gpu/caravan/planner/cluster"
	"github.com/caravan-gpu/caravan/planner/consulx"
	"github.com/caravan-gpu/caravan/planner/plannerapi"
	"github.com/caravan-gpu/caravan/planner/policy"
	"github.com/caravan-gpu/caravan/planner/sim"
	"github.com/caravan-gpu/caravan/planner/trace"
)

// KV is where the replay writes profiles and the job-size sample: Consul
// KV, where the planner reads them.
type KV interface {
	Put(ctx context.Context, key string, value []byte) error
}

// Config describes one replay.
type Config struct {
	Jobs        []trace.Job
	Cluster     trace.Cluster
	Throughputs *trace.Throughputs
	// Sensitivity, when set, is Synergy's table: each job of a model in
	// it runs as fast as its task's CPU and memory allow, CoreMHz a core
	// (SensitiveWork).
	Sensitivity *policy.Sensitivity
	CoreMHz     float64
	// Align, when set, puts trace second 0 on a multiple of it on the
	// Unix clock: the planner's Synergy leases end at multiples of the
	// lease there, and so line up with the simulator's, which end at
	// multiples of it from trace second 0.
	Align time.Duration
	// Policy names the live run in its results.
	Policy string
	Job    JobOptions
	// Poll is how often Nomad is read while jobs run (default 500ms).
	Poll time.Duration
	// Timeout bounds the run from trace second 0; jobs not finished by then
	// are reported unfinished. 0: no bound.
	Timeout time.Duration
	// Stall is how long after the first submission with no job started
	// the replay warns (default 30s).
	Stall time.Duration
	Log   hclog.Logger
	// Progress is called with the number of finished jobs.
	Progress func(done, total int)
	// Decisions, when set, reads the planner's recent writes (GET
	// /v1/decisions). The replay reads them every DecisionsEvery while
	// jobs run, so that each start's release can be told from the round
	// that decided it (Result.Decided).
	Decisions func(context.Context) ([]plannerapi.Decision, error)
}

// Plan is a replay ready to run: each trace job's ID and work.
type Plan struct {
	cfg   Config
	IDs   []string
	Works []Work
	log   hclog.Logger
	// models maps device instance IDs to GPU models, from Check.
	models map[string]string
}

// Decisions sets Config.Decisions once the planner is known to answer.
func (p *Plan) Decisions(read func(context.Context) ([]plannerapi.Decision, error)) {
	p.cfg.Decisions = read
}

// Prepare works out every job's ID and work and checks that each fits the
// cluster. Errors name the trace job.
func Prepare(cfg Config) (*Plan, error) {
	if len(cfg.Jobs) == 0 {
		return nil, ErrNoJobs
	}
	if cfg.Log == nil {
		cfg.Log = hclog.NewNullLogger()
	}
	models := slices.Sorted(slices.Values(cfg.Cluster.Models()))
	p := &Plan{cfg: cfg, IDs: JobIDs(cfg.Job.Prefix, cfg.Jobs), log: cfg.Log}
	var share [2]float64
	if cfg.Sensitivity != nil {
		var err error
		if share, err = ProportionalShare(cfg.Cluster); err != nil {
			return nil, err
		}
		if !(cfg.CoreMHz > 0) {
			return nil, fmt.Errorf("a replay with a sensitivity table needs the MHz of a core (got %g)", cfg.CoreMHz)
		}
		// A job the policy does not size runs at the proportional share,
		// as the simulator runs it, and its workload at speed 1 there.
		if p.cfg.Job.CPU == 0 {
			p.cfg.Job.CPU = int(math.Round(share[0] * cfg.CoreMHz))
		}
		if p.cfg.Job.MemoryMB == 0 {
			p.cfg.Job.MemoryMB = int(math.Round(share[1] * 1024))
		}
	}
	for _, j := range cfg.Jobs {
		w, err := PlanWork(j, models, cfg.Throughputs, cfg.Job)
		if err != nil {
			return nil, err
		}
		if err := SensitiveWork(&w, j, models, cfg.Sensitivity, share, cfg.CoreMHz); err != nil {
			return nil, err
		}
		p.Works = append(p.Works, w)
	}
	if err := Fit(cfg.Jobs, p.Works, cfg.Cluster); err != nil {
		return nil, err
	}
	return p, nil
}

// ProportionalShare is the cores and GB per GPU of the cluster's nodes, the
// share at which a sensitivity table's throughput is 1: every node must
// have the same, since a workload knows one share.
func ProportionalShare(c trace.Cluster) ([2]float64, error) {
	var share [2]float64
	for i, g := range c.Groups {
		if g.GPUs <= 0 {
			continue
		}
		s := [2]float64{g.CPUs / float64(g.GPUs), g.MemoryGB / float64(g.GPUs)}
		if !(s[0] > 0 && s[1] > 0) {
			return share, fmt.Errorf("cluster %s: node group %d has no CPUs or memory to size jobs with", c.Name, i+1)
		}
		if share != ([2]float64{}) && s != share {
			return share, fmt.Errorf("cluster %s: node groups hold %g cores and %g GB per GPU and %g and %g: a replay with a sensitivity table needs one share",
				c.Name, share[0], share[1], s[0], s[1])
		}
		share = s
	}
	if share == ([2]float64{}) {
		return share, fmt.Errorf("cluster %s has no GPU nodes", c.Name)
	}
	return share, nil
}

// WriteProfiles writes the throughput profiles the jobs name into Consul
// KV, as `caravan profile import` does. It returns how many it wrote.
func (p *Plan) WriteProfiles(ctx context.Context, kv KV) (int, error) {
	profiles, err := Profiles(p.Works)
	if err != nil {
		return 0, err
	}
	for _, pr := range profiles {
		value, _ := json.Marshal(pr)
		if err := kv.Put(ctx, consulx.ProfilesPrefix+pr.Name, value); err != nil {
			return 0, fmt.Errorf("write profile %s to Consul KV: %w", pr.Name, err)
		}
	}
	return len(profiles), nil
}

// SeedHistory replaces the completed-job sizes that 2D-Gittins learns from
// with sizes (GPU-seconds in trace time) scaled to real time.
func SeedHistory(ctx context.Context, kv KV, sizes []float64, scale float64) error {
	real := make([]float64, len(sizes))
	for i, s := range sizes {
		real[i] = s / scale
	}
	value, _ := json.Marshal(real)
	if err := kv.Put(ctx, consulx.HistoryKey, value); err != nil {
		return fmt.Errorf("write the job-size sample to Consul KV %s: %w", consulx.HistoryKey, err)
	}
	return nil
}

// Check reads Nomad's nodes: Nomad must answer, and every job must fit the
// GPUs its nodes offer. Differences from the cluster spec are warnings.
func (p *Plan) Check(ctx context.Context, n Nomad) error {
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	stubs, err := n.Nodes(cctx)
	if err != nil {
		return fmt.Errorf("cannot reach Nomad at %s (set -address or NOMAD_ADDR): %w", n.Address(), err)
	}
	p.models = map[string]string{}
	live := map[string]int{}
	for _, stub := range stubs {
		node := cluster.NodeFrom(stub)
		for _, g := range node.GPUs {
			healthy := 0
			for _, in := range g.Instances {
				p.models[in.ID] = g.Model
				if node.Ready && in.Healthy {
					healthy++
				}
			}
			// A GPU cut into lanes (and time slices) offers an instance
			// for each: the spec counts GPUs.
			if per := g.PerGPU(); healthy > 0 {
				live[g.Model] += (healthy + per - 1) / per
			}
		}
	}
	if len(live) == 0 {
		return fmt.Errorf("Nomad at %s has no ready node with healthy nvidia/gpu devices (is caravan-device installed?)", n.Address())
	}
	spec := map[string]int{}
	for _, g := range p.cfg.Cluster.Groups {
		spec[g.GPUModel] += g.Count * g.GPUs
	}
	if !sameCounts(spec, live) {
		p.log.Warn("Nomad's GPUs differ from the cluster spec; the simulator runs on the spec",
			"nomad", formatCounts(live), "spec", formatCounts(spec))
	}
	for i, j := range p.cfg.Jobs {
		best, where := 0, ""
		for m, k := range live {
			if r := p.Works[i].Rates; r != nil && r[m] == 0 {
				continue
			}
			if k > best || k == best && m < where {
				best, where = k, m
			}
		}
		if gpus := max(j.GPUs, 1); gpus > best {
			if where == "" {
				return fmt.Errorf("trace job %s: Nomad at %s has no GPU model it has a throughput on (it has %s)",
					j.ID, n.Address(), formatCounts(live))
			}
			return fmt.Errorf("trace job %s asks for %d GPUs, but Nomad at %s offers at most %d of one model (%s)",
				j.ID, gpus, n.Address(), best, where)
		}
	}
	if on, err := n.BatchPreemption(cctx); err == nil && !on {
		p.log.Warn("Nomad does not preempt batch allocations; run `caravan setup` so that the planner's priorities can take GPUs back")
	}
	return nil
}

func sameCounts(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func formatCounts(m map[string]int) string {
	var parts []string
	for k, v := range m {
		parts = append(parts, fmt.Sprintf("%dx%s", v, k))
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// deadGrace is how long a dead job that has not finished may stay so
// before it counts as unfinished.
const deadGrace = 10 * time.Second

// jobDead is the status of a job with nothing left to run.
const jobDead = "dead"

// Result is a live run in the simulator's terms.
type Result struct {
	// Sim holds the jobs, utilisation and summary in trace seconds.
	Sim *sim.Result
	// Writes is each job's number of planner writes (its last Nomad job
	// version: 0 as submitted).
	Writes []uint64
	// T0 is the real instant of trace second 0.
	T0 time.Time
	// MaxLag is the latest a job was submitted after its scaled arrival.
	MaxLag time.Duration
	// Wall is the run's real duration.
	Wall time.Duration
	// TimedOut says the timeout ended the run with jobs unfinished.
	TimedOut bool
	// Stops are the trace times at which preemptions stopped jobs, in
	// order: the moments a preempting start's GPUs came free.
	Stops []float64
	// Evictions counts the allocations Nomad's own preemption evicted,
	// over every job (Outcome.Evictions).
	Evictions int
	// StopDelays are, in trace seconds, how long each preemption whose
	// decision is known took from the planner's hold to the job's stop:
	// the time a preempted job keeps its GPUs.
	StopDelays []float64
	// AbortDelays are, in trace seconds, how long each allocation a hold
	// stopped before its task ran took from the hold to giving up its
	// GPUs (abortDelays).
	AbortDelays []float64
	// Tasks are, for each job in Config.Jobs order, its tasks' runs in
	// trace seconds, in order of start: one per allocation run, since
	// each allocation runs one task on one GPU. A task still running
	// ends at the run's end.
	Tasks [][]TaskRun
	// Releases are, for each job in Config.Jobs order, the trace times
	// the planner took its hold off, oldest first, as far as Nomad kept
	// the job's versions (JobHistory.Releases).
	Releases [][]float64
	// Holds are, for each job in Config.Jobs order, the trace times the
	// planner put its hold on, oldest first, as far as Nomad kept the
	// job's versions (JobHistory.Holds): the rounds that preempted it.
	Holds [][]float64
	// Decided are, for each job in Config.Jobs order, the trace times of
	// the planner's rounds whose writes to it Nomad took, oldest first:
	// when each round read Nomad, before its policy ran and its writes
	// went out. Nil where the planner's decisions were not read.
	Decided [][]float64
	// SharedSpeed is the workload's speed beside each partner on its GPU
	// (JobOptions.SharedSpeed); 0 when it ignored them.
	SharedSpeed float64
	// IndependentWorkers is JobOptions.IndependentWorkers: a gang's tasks
	// ran each its own course.
	IndependentWorkers bool
	// RoundEvery is the planner's planning.interval in trace seconds: it
	// plans at least this often, so a round that came later than this
	// after an event was not that event's. 0 where it is not known.
	RoundEvery float64
}

// TaskRun is when one task ran, in trace seconds, when Nomad placed its
// allocation, on which node, and on which physical GPU when it ran on a
// lane ("" for a whole GPU).
type TaskRun struct {
	Start, End, Placed float64
	Node, GPU          string
	Model              string // the GPU model it ran on; "" when unknown
	// Speed is how many times faster than at the share its CPU and memory
	// let it train (Work.Host); 0 for a job not sized so.
	Speed float64
}

// RanOn are the GPU models of runs, in order of start, a model given once
// for runs on it in a row (a gang's tasks, a restart on the same model):
// the live side of sim.JobResult.RanOn. Runs of no known model are passed
// over.
func RanOn(runs []TaskRun) []string {
	byStart := slices.Clone(runs)
	slices.SortStableFunc(byStart, func(a, b TaskRun) int { return cmp.Compare(a.Start, b.Start) })
	var out []string
	for _, r := range byStart {
		if r.Model != "" && (len(out) == 0 || out[len(out)-1] != r.Model) {
			out = append(out, r.Model)
		}
	}
	return out
}

// abortDelays is, for each allocation a hold stopped before its task
// ran, the trace seconds from the hold to the allocation giving up its
// GPUs. An abort belongs to the first hold after Nomad placed it, if that
// came before it was given up (a later hold followed a release, and
// stopped a newer start); one with no such hold (a change of the job's
// model or lane, which Nomad carries out by stopping it) is left out.
// Each allocation holds one GPU (or lane), so their mean is what a start
// taken back holds each of its GPUs for. holds are oldest first.
func abortDelays(c Clock, holds []time.Time, aborts []Abort) []float64 {
	var out []float64
	for _, a := range aborts {
		for _, h := range holds {
			if h.Before(a.Placed) {
				continue
			}
			if !h.After(a.Freed) {
				out = append(out, c.Span(a.Freed.Sub(h)))
			}
			break
		}
	}
	return out
}

// stopDelays pairs each of a job's preemption stops with the hold that
// made it, the latest hold at or before the stop and after the stop
// before it, and returns the time between them in trace seconds. A stop
// without such a hold (Nomad's own preemption, or a hold Nomad no longer
// keeps a version of) is left out.
func stopDelays(c Clock, holds, stops []time.Time) []float64 {
	var out []float64
	var prev time.Time
	for _, stop := range stops {
		var hold time.Time
		for _, h := range holds {
			if !h.After(stop) && h.After(prev) {
				hold = h
			}
		}
		if !hold.IsZero() {
			out = append(out, c.Span(stop.Sub(hold)))
		}
		prev = stop
	}
	return out
}

// traceTimes is ts in trace seconds; nil for none.
func traceTimes(c Clock, ts []time.Time) []float64 {
	var out []float64
	for _, t := range ts {
		out = append(out, c.Trace(t))
	}
	return out
}

// AvgWrites is the mean number of planner writes per job.
func (r *Result) AvgWrites() float64 {
	if len(r.Writes) == 0 {
		return 0
	}
	total := 0.0
	for _, w := range r.Writes {
		total += float64(w)
	}
	return total / float64(len(r.Writes))
}

// Run submits every job at its scaled arrival, waits until all are done
// (or the timeout), reads their course back from Nomad and purges them. The
// jobs are purged on every return, a cancelled ctx (Ctrl-C) included. Call
// Check first.
func (p *Plan) Run(ctx context.Context, n Nomad) (*Result, error) {
	cfg := p.cfg
	if cfg.Poll <= 0 {
		cfg.Poll = 500 * time.Millisecond
	}
	if cfg.Stall <= 0 {
		cfg.Stall = 30 * time.Second
	}
	opts := cfg.Job
	if opts.CheckpointDir == "" {
		dir, err := os.MkdirTemp("", "caravan-replay-")
		if err != nil {
			return nil, fmt.Errorf("checkpoint directory: %w", err)
		}
		defer os.RemoveAll(dir)
		opts.CheckpointDir = dir
	}
	if err := openCheckpointDir(opts.CheckpointDir, cfg.Job.CheckpointDir == ""); err != nil {
		return nil, err
	}
	total := len(cfg.Jobs)
	index := make(map[string]int, total)
	for i, id := range p.IDs {
		index[id] = i
	}
	begin := time.Now()
	clock := Clock{T0: StartAt(begin.Add(500*time.Millisecond), cfg.Align), Scale: opts.TimeScale}
	subs := &submissions{at: make([]time.Time, total)}
	runCtx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	subDone := make(chan struct{})
	go func() {
		defer close(subDone)
		if err := p.submitAll(runCtx, n, opts, clock, subs); err != nil {
			errc <- err
		}
	}()
	defer func() {
		cancel()
		<-subDone
		if subs.wasCut() {
			// A register the cancel cut short may still land in Nomad.
			time.Sleep(time.Second)
		}
		p.purge(n)
	}()

	tr := &tracker{outcomes: make([]Outcome, total), history: make([]JobHistory, total), recorded: make([]bool, total),
		deadSince: map[int]time.Time{}, index: index}
	warned, timedOut := false, false
	var decided *decisionLog
	if cfg.Decisions != nil {
		decided = newDecisionLog(cfg.Decisions, index)
	}
	tick := time.NewTicker(cfg.Poll)
	defer tick.Stop()
	report := func() {
		if cfg.Progress != nil {
			cfg.Progress(tr.done, total)
		}
	}
	report()
	for tr.done < total {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case err := <-errc:
			return nil, err
		case <-tick.C:
		}
		if cfg.Timeout > 0 && time.Since(clock.T0) > cfg.Timeout {
			timedOut = true
			p.log.Warn("timeout: jobs left unfinished", "timeout", cfg.Timeout, "unfinished", total-tr.done)
			break
		}
		at := subs.times()
		before := tr.done
		if err := p.poll(runCtx, n, tr, at, clock); err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, err
		}
		decided.poll(runCtx, p, false)
		if tr.done > before {
			report()
		}
		if !tr.started && !warned && !at[0].IsZero() && time.Since(at[0]) > cfg.Stall {
			warned = true
			p.warnStalled(opts.Held, time.Since(at[0]))
		}
	}
	decided.poll(ctx, p, true)
	cancel()
	res := p.result(n, tr, clock, subs, begin, timedOut)
	res.Decided = decided.traceTimes(clock)
	return res, nil
}

// result reads back the course of the jobs left unfinished, and puts the
// run in the simulator's terms, in trace seconds.
func (p *Plan) result(n Nomad, tr *tracker, clock Clock, subs *submissions, begin time.Time, timedOut bool) *Result {
	cfg := p.cfg
	now := time.Now()
	at := subs.times()
	for i := range tr.outcomes {
		if tr.recorded[i] || at[i].IsZero() {
			continue
		}
		// Unfinished: what ran still counts towards the utilisation.
		rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
		if allocs, err := n.Allocations(rctx, p.IDs[i]); err == nil {
			tr.outcomes[i] = ReadOutcome(allocs, max(cfg.Jobs[i].GPUs, 1), p.models, now)
			tr.outcomes[i].Finished, tr.outcomes[i].Finish = false, time.Time{}
		}
		if h, err := n.History(rctx, p.IDs[i]); err == nil {
			tr.history[i] = h
		}
		rcancel()
	}
	res := &Result{Writes: make([]uint64, len(tr.outcomes)), T0: clock.T0, MaxLag: subs.lag(), Wall: now.Sub(begin), TimedOut: timedOut,
		SharedSpeed: cfg.Job.SharedSpeed, IndependentWorkers: cfg.Job.IndependentWorkers}
	res.Sim = p.simResult(clock, at, tr.outcomes, now)
	res.Tasks = make([][]TaskRun, len(tr.outcomes))
	res.Releases = make([][]float64, len(tr.outcomes))
	res.Holds = make([][]float64, len(tr.outcomes))
	severalModels := len(cfg.Cluster.Models()) > 1
	for i, o := range tr.outcomes {
		res.Writes[i] = tr.history[i].Version
		res.Evictions += o.Evictions
		for _, t := range o.Stops {
			res.Stops = append(res.Stops, clock.Trace(t))
		}
		res.StopDelays = append(res.StopDelays, stopDelays(clock, tr.history[i].Holds, o.Stops)...)
		res.AbortDelays = append(res.AbortDelays, abortDelays(clock, tr.history[i].Holds, o.Aborts)...)
		for _, r := range o.Runs {
			t := TaskRun{Start: clock.Trace(r.Start), End: clock.Trace(r.End), Placed: clock.Trace(r.Placed), Node: r.Node, GPU: r.GPU, Model: r.Model}
			if h := p.Works[i].Host; h != nil && r.CPUMHz > 0 {
				t.Speed, _ = h.Factor(r.CPUMHz, r.MemoryMB)
			}
			res.Tasks[i] = append(res.Tasks[i], t)
		}
		if severalModels {
			res.Sim.Jobs[i].RanOn = RanOn(res.Tasks[i])
		}
		res.Releases[i] = traceTimes(clock, tr.history[i].Releases)
		res.Holds[i] = traceTimes(clock, tr.history[i].Holds)
	}
	sort.Float64s(res.Stops)
	return res
}

// tracker is what the watching loop knows of the jobs.
type tracker struct {
	index     map[string]int
	outcomes  []Outcome
	history   []JobHistory // as far as read: at the job's end, or the run's
	recorded  []bool
	deadSince map[int]time.Time
	done      int
	started   bool // some job has run
}

// poll reads the replay's jobs once and records those that are done. A
// failed task is an error.
func (p *Plan) poll(ctx context.Context, n Nomad, tr *tracker, at []time.Time, clock Clock) error {
	stubs, err := n.Jobs(ctx, p.cfg.Job.Prefix)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		p.log.Warn("cannot list the replay's jobs", "nomad", n.Address(), "error", err)
		return nil
	}
	for _, stub := range stubs {
		i, ok := tr.index[stub.ID]
		if !ok || tr.recorded[i] || at[i].IsZero() {
			continue
		}
		s := groupSummary(stub)
		tr.started = tr.started || s.Running+s.Complete > 0
		if s.Failed > 0 {
			if err := p.failure(ctx, n, stub.ID, p.cfg.Job.Workload); err != nil {
				return err
			}
		}
		// Dead, or every index complete (a job the planner changed after
		// it completed may wait on a placement that will never be needed).
		count := max(p.cfg.Jobs[i].GPUs, 1)
		dead := stub.Status == jobDead
		if !dead && (s.Complete < count || s.Running+s.Starting > 0) {
			delete(tr.deadSince, i)
			continue
		}
		allocs, err := n.Allocations(ctx, stub.ID)
		if err != nil {
			p.log.Warn("cannot read a finished job's allocations", "job", stub.ID, "error", err)
			continue
		}
		o := ReadOutcome(allocs, count, p.models, time.Now())
		if !o.Finished {
			if !dead {
				continue
			}
			// Dead without every index complete: stopped by someone, or
			// between a stop and its replacement. Give it a while before
			// calling it unfinished.
			if _, ok := tr.deadSince[i]; !ok {
				tr.deadSince[i] = time.Now()
			}
			if time.Since(tr.deadSince[i]) < deadGrace {
				continue
			}
			p.log.Warn("job stopped without finishing", "job", stub.ID)
		}
		if h, err := n.History(ctx, stub.ID); err == nil {
			tr.history[i] = h
		}
		p.log.Debug("finished", "job", stub.ID, "jct_s", clock.Trace(o.Finish)-clock.Trace(at[i]),
			"preemptions", o.Preemptions, "writes", tr.history[i].Version)
		tr.outcomes[i], tr.recorded[i] = o, true
		tr.done++
	}
	return nil
}

func (p *Plan) warnStalled(held bool, since time.Duration) {
	if held {
		p.log.Warn("no replay job has started yet; held jobs wait for the planner to release them: does a caravan planner run against this Nomad? (-held=false submits without the hold)",
			"since_first_submission", since.Round(time.Second))
		return
	}
	p.log.Warn("no replay job has started yet: do the client nodes offer free nvidia/gpu devices and the caravan driver?",
		"since_first_submission", since.Round(time.Second))
}

// simResult is the live run as the simulator reports a run.
func (p *Plan) simResult(clock Clock, submitted []time.Time, outcomes []Outcome, now time.Time) *sim.Result {
	cfg := p.cfg
	r := &sim.Result{Policy: cfg.Policy, GPUs: cfg.Cluster.GPUs()}
	end := 0.0
	for i, j := range cfg.Jobs {
		var jr sim.JobResult
		if submitted[i].IsZero() {
			jr = sim.JobResult{ID: j.ID, GPUs: max(j.GPUs, 1), Weight: j.Weight, Arrival: j.Arrival,
				Start: math.NaN(), Finish: math.NaN(), JCT: math.NaN(), Isolated: p.Works[i].Isolated}
		} else {
			jr = JobResult(clock, j.ID, j.GPUs, j.Weight, p.Works[i], submitted[i], outcomes[i])
		}
		if !math.IsNaN(jr.Finish) {
			end = max(end, jr.Finish)
		}
		r.Jobs = append(r.Jobs, jr)
	}
	r.Util = Utilization(clock, outcomes)
	if r.Jobs != nil && hasUnfinished(r.Jobs) {
		end = max(end, clock.Trace(now))
	}
	r.Summary = sim.Summarize(cfg.Policy, r.GPUs, r.Jobs, sim.BusyArea(r.Util, end))
	return r
}

func hasUnfinished(jobs []sim.JobResult) bool {
	for _, j := range jobs {
		if math.IsNaN(j.JCT) {
			return true
		}
	}
	return false
}

func groupSummary(stub *api.JobListStub) api.TaskGroupSummary {
	if stub.JobSummary == nil {
		return api.TaskGroupSummary{}
	}
	return stub.JobSummary.Summary[GroupName]
}

// StartAt is the first instant from t on that is a multiple of align on
// the Unix clock; t itself when align is 0.
func StartAt(t time.Time, align time.Duration) time.Time {
	if align <= 0 {
		return t
	}
	if rem := time.Duration(t.UnixNano() % int64(align)); rem > 0 {
		return t.Add(align - rem)
	}
	return t
}
