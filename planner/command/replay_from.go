package command

// This file reads a replay's live run back from the folder -out wrote
// (caravan replay -from DIR), so that this build measures its costs again
// and runs the simulator beside it, without Nomad: a change to how costs
// are measured is checked on runs already made, each of which took
// minutes of a cluster.

import (
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/caravan-gpu/caravan/planner/replay"
	"github.com/caravan-gpu/caravan/planner/sim"
	"github.com/caravan-gpu/caravan/planner/simout"
)

// readSavedReplay reads the live run that caravan replay -out wrote in
// dir: replay.json for how the replay went, and under live/ the jobs and
// utilisation CSVs and timeline.json. The jobs must be those the trace
// flags give, in order. It returns the run as the replay measured it and
// the replay's facts that its report repeats.
func readSavedReplay(dir string, in *traceInputs) (*replay.Result, replayInfo, error) {
	var saved replayReport
	if err := readJSONFile(filepath.Join(dir, simout.ReplayFile), &saved); err != nil {
		return nil, replayInfo{}, err
	}
	info := saved.Replay
	if !(info.TimeScale > 0) || len(saved.Live.Policies) != 1 {
		return nil, replayInfo{}, fmt.Errorf("%s: not a replay's report (want a time_scale and one live policy)", filepath.Join(dir, simout.ReplayFile))
	}
	policyName := saved.Live.Policies[0].Policy
	base := filepath.Join(dir, "live", simout.FileBase(policyName))
	jobs, err := readJobsCSV(base + simout.JobsSuffix)
	if err != nil {
		return nil, replayInfo{}, err
	}
	var tl liveTimeline
	timelinePath := filepath.Join(dir, "live", "timeline.json")
	if err := readJSONFile(timelinePath, &tl); err != nil {
		return nil, replayInfo{}, err
	}
	if err := sameJobs(in, jobs, tl, base+simout.JobsSuffix, timelinePath); err != nil {
		return nil, replayInfo{}, err
	}
	util, err := readUtilCSV(base + simout.UtilSuffix)
	if err != nil {
		return nil, replayInfo{}, err
	}
	res := &replay.Result{Stops: tl.Stops, StopDelays: tl.StopDelays, AbortDelays: tl.AbortDelays, IndependentWorkers: !info.Gangs,
		MaxLag: secondsDuration(info.MaxLag), Wall: secondsDuration(info.WallSeconds), TimedOut: info.TimedOut,
		Evictions: info.NomadEvictions}
	end := 0.0
	several := len(in.cluster.Models()) > 1
	for i, tj := range tl.Jobs {
		var runs []replay.TaskRun
		for _, t := range tj.Tasks {
			runs = append(runs, replay.TaskRun{Placed: t.Placed, Start: t.Start, End: t.End, Node: t.Node, GPU: t.GPU, Model: t.Model, Speed: t.Speed})
			end = max(end, t.End)
		}
		res.Tasks = append(res.Tasks, runs)
		res.Releases = append(res.Releases, tj.Releases)
		res.Holds = append(res.Holds, tj.Holds)
		if tj.Decided != nil {
			if res.Decided == nil {
				res.Decided = make([][]float64, i, len(tl.Jobs))
			}
			res.Decided = append(res.Decided, tj.Decided)
		} else if res.Decided != nil {
			res.Decided = append(res.Decided, nil)
		}
		if !math.IsNaN(jobs[i].Finish) {
			jobs[i].Nodes = finishingNodes(runs, jobs[i].GPUs)
		}
		if several {
			jobs[i].RanOn = replay.RanOn(runs)
		}
		jobs[i].Stops = tj.Stops
		if tj.Stops == nil {
			jobs[i].Stops = stopsOfTasks(tl.Stops, runs)
		}
	}
	gpus := in.cluster.GPUs()
	res.Sim = &sim.Result{Policy: policyName, GPUs: gpus, Jobs: jobs, Util: util,
		Summary: sim.Summarize(policyName, gpus, jobs, sim.BusyArea(util, end))}
	return res, info, nil
}

// stopsOfTasks picks, for a timeline written before each job's stops were
// kept, the job's own from every stop of the run: each is the earliest end
// among the tasks a preemption stopped.
func stopsOfTasks(stops []float64, runs []replay.TaskRun) []float64 {
	var own []float64
	for _, s := range stops {
		if slices.ContainsFunc(runs, func(r replay.TaskRun) bool { return r.End == s }) {
			own = append(own, s)
		}
	}
	return own
}

func secondsDuration(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// finishingNodes is how many nodes a finished job's last run spanned: the
// nodes of its last tasks, one per GPU.
func finishingNodes(runs []replay.TaskRun, gpus int) int {
	nodes := map[string]bool{}
	for _, t := range runs[max(len(runs)-max(gpus, 1), 0):] {
		nodes[t.Node] = true
	}
	return len(nodes)
}

// sameJobs checks that the saved jobs are the trace's, in its order.
func sameJobs(in *traceInputs, jobs []sim.JobResult, tl liveTimeline, jobsPath, timelinePath string) error {
	if len(jobs) != len(in.jobs) {
		return fmt.Errorf("%s holds %d jobs where the trace flags give %d: give the trace flags the replay ran with", jobsPath, len(jobs), len(in.jobs))
	}
	if len(tl.Jobs) != len(jobs) {
		return fmt.Errorf("%s holds %d jobs where %s holds %d", timelinePath, len(tl.Jobs), jobsPath, len(jobs))
	}
	for i, j := range in.jobs {
		if jobs[i].ID != j.ID {
			return fmt.Errorf("%s line %d: job %q where the trace flags give %q: give the trace flags the replay ran with", jobsPath, i+2, jobs[i].ID, j.ID)
		}
		if tl.Jobs[i].ID != j.ID {
			return fmt.Errorf("%s: job %d is %q where the trace flags give %q", timelinePath, i+1, tl.Jobs[i].ID, j.ID)
		}
	}
	return nil
}

func readJSONFile(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// jobsCSVColumns are the columns of a jobs CSV, in the order writeJobsCSV
// writes them and readJobsCSV reads them back.
var jobsCSVColumns = []string{"job_id", "gpus", "weight", "arrival", "start", "finish", "jct", "queueing", "isolated",
	"preemptions", "migrations", "gpu_model"}

// readJobsCSV reads the jobs CSV that caravan sim -out and caravan
// replay -out write, one job per line.
func readJobsCSV(path string) ([]sim.JobResult, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	jobs, err := parseJobsCSV(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return jobs, nil
}

func parseJobsCSV(r io.Reader) ([]sim.JobResult, error) {
	cr := csv.NewReader(r)
	header, err := cr.Read()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("empty file: want a header")
		}
		return nil, err
	}
	at := map[string]int{}
	for i, h := range header {
		at[strings.TrimSpace(h)] = i
	}
	for _, c := range jobsCSVColumns {
		if _, ok := at[c]; !ok {
			return nil, fmt.Errorf("no %q column in the header %q", c, strings.Join(header, ","))
		}
	}
	var jobs []sim.JobResult
	for line := 2; ; line++ {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return jobs, nil
		}
		if err != nil {
			return nil, err
		}
		var bad error
		num := func(col string) float64 {
			v, err := strconv.ParseFloat(strings.TrimSpace(rec[at[col]]), 64)
			if err != nil && bad == nil {
				bad = fmt.Errorf("line %d: %s: %w", line, col, err)
			}
			return v
		}
		count := func(col string) int {
			v, err := strconv.Atoi(strings.TrimSpace(rec[at[col]]))
			if (err != nil || v < 0) && bad == nil {
				bad = fmt.Errorf("line %d: %s: want a count, got %q", line, col, rec[at[col]])
			}
			return v
		}
		j := sim.JobResult{ID: rec[at["job_id"]], GPUs: count("gpus"), Weight: num("weight"), Arrival: num("arrival"),
			Start: num("start"), Finish: num("finish"), JCT: num("jct"), Queueing: num("queueing"), Isolated: num("isolated"),
			Preemptions: count("preemptions"), Migrations: count("migrations"), GPUModel: rec[at["gpu_model"]]}
		if bad != nil {
			return nil, bad
		}
		jobs = append(jobs, j)
	}
}

// readUtilCSV reads a utilisation CSV (t, busy_gpus).
func readUtilCSV(path string) ([]sim.UtilPoint, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	pts, err := simout.ParseUtil(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	out := make([]sim.UtilPoint, len(pts))
	for i, p := range pts {
		out[i] = sim.UtilPoint{T: p.T, Busy: p.Busy}
	}
	return out, nil
}
