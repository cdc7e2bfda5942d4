package command

// This file writes a replay's report: as text or JSON, and with -out as files.

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/caravan-gpu/caravan/planner/replay"
	"github.com/caravan-gpu/caravan/planner/sim"
)

// replayReport is the -json output: each side as caravan sim -json prints
// a run, and how the replay went.
type replayReport struct {
	Live   simReport  `json:"live"`
	Sim    simReport  `json:"sim"`
	Replay replayInfo `json:"replay"`
	// Gaps are the jobs whose live JCT differs most from the simulated,
	// with their starts, finishes and preemptions side by side.
	Gaps []jobGap `json:"jobs_that_differ_most"`
}

type replayInfo struct {
	Run       string  `json:"run"`
	TimeScale float64 `json:"time_scale"`
	Held      bool    `json:"held"`
	// Gangs says a job of several GPUs ran as a gang (caravan replay
	// -gangs), not as workers on their own courses.
	Gangs         bool   `json:"gangs"`
	PlannerPolicy string `json:"planner_policy,omitempty"`
	// PlannerInterval is the planner's planning.interval in seconds (0:
	// not known): a start whose round came later than this after its
	// event, in trace seconds, answered something else.
	PlannerInterval float64 `json:"planner_interval_s,omitempty"`
	// WritesPerJob is the mean of each job's last Nomad job version: the
	// writes that changed the job after its submission.
	WritesPerJob float64 `json:"planner_writes_per_job"`
	WallSeconds  float64 `json:"wall_s"`
	MaxLag       float64 `json:"max_submit_lag_s"`
	TimedOut     bool    `json:"timed_out,omitempty"`
	// StartLatency, StartSpread and RunOverhead are the trace seconds the
	// simulator's run charged every start, each further task started at
	// one moment, and every run (caravan sim -start-latency, -start-spread,
	// -run-overhead), measured on that many starts, events and tasks of
	// the live run unless a flag gave them; SimNoDelayAvgJCT is the
	// simulator's average JCT without either.
	StartLatency           float64 `json:"start_latency_s"`
	StartLatencyMeasuredOn int     `json:"start_latency_measured_on,omitempty"`
	// RoundDelay is the trace seconds each round of the simulator's run
	// decided after the event that called for it (caravan sim
	// -round-delay): the planner's part of the live starts, taken out of
	// StartLatency, unless a flag gave it.
	RoundDelay float64 `json:"round_delay_s"`
	// CompletionLag is the trace seconds after a job's work ends that the
	// simulator's cluster learned of it (caravan sim -completion-lag):
	// how much longer the planner took to answer a completion than an
	// arrival, RoundDelay being then its wait for an arrival.
	CompletionLag float64 `json:"completion_lag_s"`
	// UnblockLatency is the trace seconds more a start that waited for a
	// preemption's stop was charged (caravan sim -unblock-latency),
	// measured on that many placements unless a flag gave it.
	UnblockLatency           float64 `json:"unblock_latency_s"`
	UnblockLatencyMeasuredOn int     `json:"unblock_latency_measured_on,omitempty"`
	StartSpread              float64 `json:"start_spread_s"`
	StartSpreadMeasuredOn    int     `json:"start_spread_measured_on,omitempty"`
	// GangSpread is the trace seconds between a gang's tasks' starts the
	// simulator's run charged (caravan sim -gang-spread; 0: StartSpread),
	// measured on that many gangs of the live run unless a flag gave it.
	GangSpread            float64 `json:"gang_spread_s"`
	GangSpreadMeasuredOn  int     `json:"gang_spread_measured_on,omitempty"`
	RunOverhead           float64 `json:"run_overhead_s"`
	RunOverheadMeasuredOn int     `json:"run_overhead_measured_on,omitempty"`
	// StopLatency is the trace seconds from the planner's hold to a
	// preempted job's stop that the simulator's run charged every start
	// of a round that preempted (caravan sim -stop-latency), measured on
	// that many preemptions of the live run unless a flag gave it.
	StopLatency           float64 `json:"stop_latency_s"`
	StopLatencyMeasuredOn int     `json:"stop_latency_measured_on,omitempty"`
	// AbortLatency is the trace seconds from the planner's hold to the
	// GPUs of a start taken back before its tasks ran coming free, that
	// the simulator's run charged (caravan sim -abort-latency), measured
	// on that many such starts of the live run unless a flag gave it.
	AbortLatency           float64 `json:"abort_latency_s"`
	AbortLatencyMeasuredOn int     `json:"abort_latency_measured_on,omitempty"`
	SimNoDelayAvgJCT       float64 `json:"sim_no_delay_avg_jct"`
	// StartLatencyMean is the mean of the start delays whose median is
	// StartLatency, and SimMeanLatencyAvgJCT the simulator's average JCT
	// charging it instead: how much a few slow starts weigh.
	StartLatencyMean     float64 `json:"start_latency_mean_s,omitempty"`
	SimMeanLatencyAvgJCT float64 `json:"sim_mean_start_latency_avg_jct,omitempty"`
	// SimCostBand is the least and the most average JCT the simulator
	// gives with any one charged cost costBandStep lower or higher: how far
	// the simulation moves within its costs' error, where a policy's
	// near ties fall one way or the other. Absent where nothing is charged.
	SimCostBand *[2]float64 `json:"sim_avg_jct_one_cost_5pct_off,omitempty"`
	// SimJitter is the spread of the simulator's average JCT over runs
	// with each start's latency drawn around the charged one (-start-jitter).
	SimJitter *jitterSpread `json:"sim_avg_jct_start_jitter,omitempty"`
	// PreemptionsTakenBack counts the preemptions whose job was started
	// again within two planning rounds of the decision, live and
	// simulated.
	PreemptionsTakenBack *takenBackCounts `json:"preemptions_taken_back,omitempty"`
	// StartParts splits a first start's delay where the live run shows
	// where it went (medians, trace seconds).
	StartParts *replay.StartParts `json:"start_latency_parts,omitempty"`
	// StartCostsFrom says where the start latency and spread came from:
	// "the clients' shared set-up" (or with -start-model queue "the
	// clients' queue") fitted to the placements and starts, the "gaps
	// between starts" where Nomad kept no placement times, or "flags".
	StartCostsFrom string `json:"start_costs_from"`
	// JobsSplit and SimJobsSplit count the jobs that finished on a run
	// spread over several nodes, live and simulated; SplitOnOneSide counts
	// the jobs split on one side but not the other, among those the
	// simulator placed on named nodes.
	JobsSplit      int `json:"jobs_split_over_nodes"`
	SimJobsSplit   int `json:"sim_jobs_split_over_nodes"`
	SplitOnOneSide int `json:"jobs_split_on_one_side_only"`
	// NomadEvictions counts the allocations Nomad's own preemption
	// evicted: each is a stop the planner did not decide, which the
	// simulator never makes.
	NomadEvictions int `json:"nomad_evictions"`
}

// jitterSpread is the simulator's average JCT over Runs runs with each
// start's latency drawn within ±Jitter of the charged one: the least, the
// quartiles, the median and the most.
type jitterSpread struct {
	Jitter float64 `json:"jitter"`
	Runs   int     `json:"runs"`
	Min    float64 `json:"min"`
	Q1     float64 `json:"lower_quartile"`
	Median float64 `json:"median"`
	Q3     float64 `json:"upper_quartile"`
	Max    float64 `json:"max"`
}

// report completes rep, which holds what run knew of the replay, with the
// live and simulated results side by side, and writes it: to stdout, and
// with -out to files.
func (c *replayCommand) report(f *replayFlags, in *traceInputs, rep replayReport, costs replay.Costs, res *replay.Result, simRes *sim.Result) error {
	live := simReport{Trace: in.traceName, Cluster: in.cluster.Name, GPUs: in.cluster.GPUs()}
	live.add(res.Sim)
	simulated := simReport{Trace: in.traceName, Cluster: in.cluster.Name, GPUs: in.cluster.GPUs()}
	simulated.add(simRes)
	rep.Live, rep.Sim = live, simulated
	info := &rep.Replay
	info.TimeScale, info.Held, info.WallSeconds = f.timeScale, f.held, res.Wall.Seconds()
	info.Gangs = f.gangs
	info.MaxLag, info.TimedOut, info.NomadEvictions = res.MaxLag.Seconds(), res.TimedOut, res.Evictions
	info.StartLatency, info.StartLatencyMeasuredOn = costs.StartLatency, costs.Starts
	info.RoundDelay, info.CompletionLag = costs.RoundDelay, costs.CompletionLag
	info.UnblockLatency, info.UnblockLatencyMeasuredOn = costs.UnblockLatency, costs.Unblocks
	info.StartSpread, info.StartSpreadMeasuredOn = costs.StartSpread, costs.Events
	info.GangSpread, info.GangSpreadMeasuredOn = costs.GangSpread, costs.Gangs
	info.RunOverhead, info.RunOverheadMeasuredOn = costs.RunOverhead, costs.Runs
	info.StopLatency, info.StopLatencyMeasuredOn = costs.StopLatency, costs.Stops
	info.AbortLatency, info.AbortLatencyMeasuredOn = costs.AbortLatency, costs.Aborts
	info.StartParts, info.StartCostsFrom = costs.Parts, costs.From
	rep.Replay.JobsSplit, rep.Replay.SimJobsSplit, rep.Replay.SplitOnOneSide = splitJobs(res.Sim, simRes)
	rep.Replay.PreemptionsTakenBack = takeBacks(res, simRes, f.timeScale)
	gaps := jobGaps(res.Sim, simRes)
	rep.Gaps = gaps[:min(topGaps, len(gaps))]
	if f.out != "" {
		if err := writeReplayOutputs(f.out, rep, res.Sim, simRes); err != nil {
			return err
		}
		if err := writeGapsCSV(filepath.Join(f.out, "jobs.csv"), gaps); err != nil {
			return err
		}
		if err := writeTimeline(filepath.Join(f.out, "live", "timeline.json"), res); err != nil {
			return err
		}
	}
	if f.json {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		c.ui.Output(string(b))
	} else {
		c.ui.Output(renderReplay(rep))
	}
	return nil
}

func renderReplay(rep replayReport) string {
	var b strings.Builder
	fmt.Fprintf(&b, "replay of %s on %s (%d GPUs), time scale %g, run %s, %s\n\n", rep.Live.Trace, rep.Live.Cluster,
		rep.Live.GPUs, rep.Replay.TimeScale, rep.Replay.Run, time.Duration(rep.Replay.WallSeconds*float64(time.Second)).Round(time.Second))
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\tlive avg JCT\tsim avg JCT\tlive ÷ sim\tlive done\tplanner writes/job\tstart latency\tstart spread\tgang spread\trun overhead\tstop latency\tabort latency\tsim without them\t")
	if len(rep.Live.Policies) > 0 && len(rep.Sim.Policies) > 0 {
		l, s := rep.Live.Policies[0], rep.Sim.Policies[0]
		ratio := math.NaN()
		if s.AvgJCT > 0 {
			ratio = l.AvgJCT / s.AvgJCT
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.3f\t%d/%d\t%.1f\t%.1fs\t%.2fs\t%.2fs\t%.1fs\t%.1fs\t%.1fs\t%s\t\n", l.Policy, dur(l.AvgJCT), dur(s.AvgJCT), ratio,
			l.Jobs-l.Unfinished, l.Jobs, rep.Replay.WritesPerJob, rep.Replay.StartLatency, rep.Replay.StartSpread, rep.Replay.GangSpread,
			rep.Replay.RunOverhead, rep.Replay.StopLatency, rep.Replay.AbortLatency, dur(rep.Replay.SimNoDelayAvgJCT))
	}
	tw.Flush()
	if p := rep.Replay.StartParts; p != nil {
		fmt.Fprintf(&b, "\na first start's delay, where it went (medians of %d starts, trace seconds): planner %.1f, Nomad %.1f, client %.1f\n",
			p.MeasuredOn, p.Planner, p.Nomad, p.Client)
		if p.RoundMeasuredOn > 0 {
			fmt.Fprintf(&b, "the planner's part, where its rounds were read (means of %d starts): %.1f s waiting for the round that decided, %.1f s from its reading Nomad to the release\n",
				p.RoundMeasuredOn, p.Round, p.Write)
		}
		if p.LateRounds > 0 {
			fmt.Fprintf(&b, "starts released by a round more than the planner's interval (%g s) after their latest event, so for a reason the replay does not see (a policy's wake), and counted in no round's delay: %d\n",
				rep.Replay.PlannerInterval, p.LateRounds)
		}
		fmt.Fprintf(&b, "tasks waited on the clients to start %.0f%% of the run, which started one every %.1f trace seconds meanwhile\n",
			100*p.ClientsBusy, p.ClientsPerStart)
		fmt.Fprintf(&b, "the clients' queue, fitted on %d tasks: each starts %.1f s after its placement, %.1f s after the task before it at the soonest\n",
			p.ClientTasks, p.ClientDelay, p.ClientService)
		fmt.Fprintf(&b, "their shared set-up, fitted on the same: each joins it %.1f s after its placement and needs %.2f s of it, shared with the tasks beside it\n",
			p.SharedDelay, p.SharedService)
		fmt.Fprintf(&b, "error of each fit on the starts jobs waited for (root mean square): queue %.1f s, shared %.1f s\n", p.ClientRMS, p.SharedRMS)
	}
	fmt.Fprintf(&b, "start latency and spread from %s\n", rep.Replay.StartCostsFrom)
	if d, c := rep.Replay.RoundDelay, rep.Replay.CompletionLag; c > 0 {
		fmt.Fprintf(&b, "each simulated round decides %.2f s after the event that called for it, as the planner did, and its starts take the start latency after it; a job's end is seen %.2f s after its work, as the clients reported it\n", d, c)
	} else if d > 0 {
		fmt.Fprintf(&b, "each simulated round decides %.2f s after the event that called for it, as the planner did, and its starts take the start latency after it\n", d)
	}
	if u := rep.Replay.UnblockLatency; u > 0 {
		fmt.Fprintf(&b, "a start that waited for a preemption's stop was placed %.2f s later than a start with free GPUs, over %d placements\n", u, rep.Replay.UnblockLatencyMeasuredOn)
	}
	if band := rep.Replay.SimCostBand; band != nil && band[0] > 0 && len(rep.Live.Policies) > 0 {
		live := rep.Live.Policies[0].AvgJCT
		fmt.Fprintf(&b, "the simulation with any one cost %.0f%% off: %s to %s (live ÷ sim %.3f to %.3f)\n",
			100*costBandStep, dur(band[0]), dur(band[1]), live/band[1], live/band[0])
	}
	if j := rep.Replay.SimJitter; j != nil && j.Min > 0 && len(rep.Live.Policies) > 0 {
		live := rep.Live.Policies[0].AvgJCT
		fmt.Fprintf(&b, "the simulation with each start's latency within ±%.0f%% of it, %d draws: median %s, quartiles %s to %s (live ÷ sim %.3f, quartiles %.3f to %.3f, all %.3f to %.3f)\n",
			100*j.Jitter, j.Runs, dur(j.Median), dur(j.Q1), dur(j.Q3), live/j.Median, live/j.Q3, live/j.Q1, live/j.Max, live/j.Min)
	}
	if c := rep.Replay.PreemptionsTakenBack; c != nil {
		fmt.Fprintf(&b, "preemptions whose job started again within %.0f trace s of the decision (two planning rounds): live %d of %d, simulated %d of %d\n",
			c.Window, c.Live, c.LivePreemptions, c.Sim, c.SimPreemptions)
	}
	if n := rep.Replay.NomadEvictions; n > 0 {
		fmt.Fprintf(&b, "allocations evicted by Nomad's own preemption, not a planner's hold: %d\n", n)
	}
	if r := rep.Replay; r.JobsSplit+r.SimJobsSplit > 0 {
		fmt.Fprintf(&b, "\njobs run over several nodes: %d live, %d simulated, %d on one side only\n", r.JobsSplit, r.SimJobsSplit, r.SplitOnOneSide)
	}
	if len(rep.Gaps) > 0 {
		b.WriteString("\n")
		b.WriteString(renderGaps(rep.Gaps))
	}
	b.WriteString("\nlive:\n")
	b.WriteString(renderTable(rep.Live))
	b.WriteString("\n\nsimulated:\n")
	b.WriteString(renderTable(rep.Sim))
	return b.String()
}

// writeReplayOutputs writes live/ and sim/ as caravan sim -out does, and
// replay.json.
func writeReplayOutputs(dir string, rep replayReport, live, simulated *sim.Result) error {
	if err := writeOutputs(filepath.Join(dir, "live"), rep.Live, []*sim.Result{live}); err != nil {
		return err
	}
	if err := writeOutputs(filepath.Join(dir, "sim"), rep.Sim, []*sim.Result{simulated}); err != nil {
		return err
	}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "replay.json"), append(b, '\n'), 0o644)
}
