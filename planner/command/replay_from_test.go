package command

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/cli"
	"github.com/hashicorp/go-hclog"
	"github.com/shoenig/test/must"

	"github.com/caravan-gpu/caravan/planner/replay"
	"github.com/caravan-gpu/caravan/planner/sim"
)

// savedReplay writes, as a replay with -out -json would, the report of a
// small live run of trace tr on n1g4 under las into a new folder, and
// returns the folder and the report printed.
func savedReplay(t *testing.T, tr string, traceFlags ...string) (string, string) {
	t.Helper()
	var f replayFlags
	fs := newFlags("replay")
	f.traceFlags.register(fs)
	must.NoError(t, parse(fs, append([]string{"-trace", tr, "-cluster", "n1g4", "-policy", "las"}, traceFlags...)))
	in, _, err := f.load()
	must.NoError(t, err)
	pol := in.policies[0]
	ideal, err := sim.Run(in.simConfig(pol), in.jobs)
	must.NoError(t, err)

	jobs := []sim.JobResult{
		{ID: "0", GPUs: 1, Weight: 1, Arrival: 0, Start: 4, Finish: 130, Isolated: 100, GPUModel: "V100", Preemptions: 1, Stops: []float64{40}},
		{ID: "1", GPUs: 2, Weight: 1, Arrival: 10, Start: 19, Finish: 90, Isolated: 50, GPUModel: "V100"},
		{ID: "2", GPUs: 1, Weight: 1, Arrival: 20, Start: math.NaN(), Finish: math.NaN(), JCT: math.NaN(), Isolated: 80},
	}
	for i := range jobs[:2] {
		jobs[i].JCT, jobs[i].Queueing, jobs[i].Nodes = jobs[i].Finish-jobs[i].Arrival, jobs[i].Start-jobs[i].Arrival, 1
	}
	util := []sim.UtilPoint{{T: 0, Busy: 0}, {T: 4, Busy: 1}, {T: 19, Busy: 3}, {T: 90, Busy: 1}, {T: 130, Busy: 0}}
	res := &replay.Result{
		Sim: &sim.Result{Policy: pol.Name, GPUs: 4, Jobs: jobs, Util: util,
			Summary: sim.Summarize(pol.Name, 4, jobs, sim.BusyArea(util, 130))},
		Tasks: [][]replay.TaskRun{
			{{Placed: 1.5, Start: 4, End: 40, Node: "n1"}, {Placed: 45, Start: 50, End: 130, Node: "n1"}},
			{{Placed: 11, Start: 16, End: 90, Node: "n1"}, {Placed: 11, Start: 19, End: 89.75, Node: "n1"}},
			nil,
		},
		Releases: [][]float64{{1, 44}, {10.5}, nil},
		Holds:    [][]float64{{39}, nil, nil},
		Decided:  [][]float64{{0.5, 43}, {10.2}, nil},
		Stops:    []float64{40}, StopDelays: []float64{1}, AbortDelays: []float64{30},
		Wall: 3 * 1e9, MaxLag: 2e6,
	}
	if f.lanes > 1 {
		res.SharedSpeed = sharedSpeed(f.lanes)
		for _, runs := range res.Tasks {
			for k := range runs {
				runs[k].GPU = "GPU-0"
			}
		}
	}
	dir := t.TempDir()
	f.out, f.json, f.timeScale, f.held, f.gangs = dir, true, 10, true, true
	f.startLatency, f.startSpread, f.gangSpread, f.runOverhead, f.stopLatency, f.abortLatency = -1, -1, -1, -1, -1, -1
	f.startModel, f.startJitter = defaultStartModel, defaultStartJitter
	var out, errb bytes.Buffer
	c := &replayCommand{ui: &cli.BasicUi{Writer: &out, ErrorWriter: &errb}}
	// planning.interval 0.02 s at time scale 10: job 0's round, 0.5 after
	// its arrival, came too late to be the arrival's.
	must.NoError(t, c.measureAndReport(&f, in, pol, ideal, res,
		replayInfo{Run: "abc123", PlannerPolicy: "las", PlannerInterval: 0.02, WritesPerJob: 1.5}, hclog.NewNullLogger()))
	return dir, out.String()
}

// A saved run read back reports what the replay did, to the bit: the same
// costs measured, the same simulation beside it, the same jobs.
func TestReplayFromReportsASavedRunAgain(t *testing.T) {
	tr := writeTrace(t, "job_id,num_gpu,submit_time,duration\n0,1,0,100\n1,2,10,50\n2,1,20,80\n")
	dir, want := savedReplay(t, tr)
	code, got, stderr := runReplay(t, "-from", dir, "-trace", tr, "-cluster", "n1g4", "-policy", "las", "-json")
	must.Eq(t, exitOK, code, must.Sprint(stderr))
	must.Eq(t, want, got)
	must.StrContains(t, got, `"start_costs_from"`)
	must.StrContains(t, got, `"abort_latency_s": 30,`)
	must.StrContains(t, got, `"abort_latency_measured_on": 1,`)
	must.StrContains(t, got, `"live_stops": [`+"\n"+`        40`+"\n")
	must.StrContains(t, got, `"round_measured_on": 2,`, must.Sprint("the rounds that released jobs 0 and 1"))
	must.StrContains(t, got, `"planner_interval_s": 0.02,`)
	must.StrContains(t, got, `"late_rounds": 1`, must.Sprint("the interval read back bounds the rounds' waits"))

	// A timeline written before each job's stops were kept gives them
	// from the run's stops and the job's tasks.
	timeline := filepath.Join(dir, "live", "timeline.json")
	data, err := os.ReadFile(timeline)
	must.NoError(t, err)
	old := regexp.MustCompile(`("holds":\[[^\]]*\]),"stops":\[[^\]]*\]`).ReplaceAllString(string(data), "$1")
	must.NotEq(t, string(data), old)
	must.StrNotContains(t, old, `"stops":[]`)
	must.NoError(t, os.WriteFile(timeline, []byte(old), 0o644))
	code, got, stderr = runReplay(t, "-from", dir, "-trace", tr, "-cluster", "n1g4", "-policy", "las", "-json")
	must.Eq(t, exitOK, code, must.Sprint(stderr))
	must.Eq(t, want, got)

	// A cost given by flag replaces the measured one, as in a replay.
	code, got, stderr = runReplay(t, "-from", dir, "-trace", tr, "-cluster", "n1g4", "-policy", "las", "-json", "-start-latency", "7", "-start-spread", "0")
	must.Eq(t, exitOK, code, must.Sprint(stderr))
	must.StrContains(t, got, `"start_latency_s": 7,`)
	must.StrContains(t, got, `"start_costs_from": "flags"`)
	must.StrContains(t, got, `"sim_avg_jct_start_jitter": {`)
	must.StrContains(t, got, `"jitter": 0.3,`)

	// The text report says how far the jittered runs spread; -start-jitter
	// 0 leaves them out.
	code, got, stderr = runReplay(t, "-from", dir, "-trace", tr, "-cluster", "n1g4", "-policy", "las", "-start-latency", "7", "-start-spread", "0")
	must.Eq(t, exitOK, code, must.Sprint(stderr))
	must.StrContains(t, got, "the simulation with each start's latency within ±30% of it, 15 draws: median ")
	must.StrContains(t, got, "starts released by a round more than the planner's interval (0.02 s) after their latest event, so for a reason the replay does not see (a policy's wake), and counted in no round's delay: 1\n")
	code, got, stderr = runReplay(t, "-from", dir, "-trace", tr, "-cluster", "n1g4", "-policy", "las", "-json", "-start-latency", "7", "-start-jitter", "0")
	must.Eq(t, exitOK, code, must.Sprint(stderr))
	must.StrNotContains(t, got, "sim_avg_jct_start_jitter")

	// A run on lanes is measured against its live partners, at the speed
	// -lanes gives, as the replay measured it.
	dir, want = savedReplay(t, tr, "-lanes", "2")
	code, got, stderr = runReplay(t, "-from", dir, "-trace", tr, "-cluster", "n1g4", "-policy", "las", "-lanes", "2", "-json")
	must.Eq(t, exitOK, code, must.Sprint(stderr))
	must.Eq(t, want, got)
	must.StrContains(t, got, `"run_overhead_s": 0,`, must.Sprint("beside its partners at 0.6 of its pace, the tasks ran no longer than their work took"))
}

// A folder that does not hold the trace's jobs, or holds them badly, is
// refused with the file, and the line where there is one.
func TestReplayFromRefusesAnotherTracesRun(t *testing.T) {
	tr := writeTrace(t, "job_id,num_gpu,submit_time,duration\n0,1,0,100\n1,2,10,50\n2,1,20,80\n")
	dir, _ := savedReplay(t, tr)
	args := func(trace string) []string {
		return []string{"-from", dir, "-trace", trace, "-cluster", "n1g4", "-policy", "las"}
	}
	jobsCSV := filepath.Join(dir, "live", "las.jobs.csv")

	other := writeTrace(t, "job_id,num_gpu,submit_time,duration\n0,1,0,100\n7,2,10,50\n2,1,20,80\n")
	code, _, stderr := runReplay(t, args(other)...)
	must.Eq(t, exitError, code)
	must.StrContains(t, stderr, jobsCSV+` line 3: job "1" where the trace flags give "7"`)

	fewer := writeTrace(t, "job_id,num_gpu,submit_time,duration\n0,1,0,100\n")
	code, _, stderr = runReplay(t, args(fewer)...)
	must.Eq(t, exitError, code)
	must.StrContains(t, stderr, jobsCSV+" holds 3 jobs where the trace flags give 1")

	data, err := os.ReadFile(jobsCSV)
	must.NoError(t, err)
	must.NoError(t, os.WriteFile(jobsCSV, []byte(strings.Replace(string(data), "\n1,2,", "\n1,two,", 1)), 0o644))
	code, _, stderr = runReplay(t, args(tr)...)
	must.Eq(t, exitError, code)
	must.StrContains(t, stderr, jobsCSV+`: line 3: gpus: want a count, got "two"`)

	code, _, stderr = runReplay(t, "-from", t.TempDir(), "-trace", tr, "-cluster", "n1g4", "-policy", "las")
	must.Eq(t, exitError, code)
	must.StrContains(t, stderr, "replay.json")

	code, _, stderr = runReplay(t, append(args(tr), "-time-scale", "10")...)
	must.Eq(t, exitUsage, code)
	must.StrContains(t, stderr, "flag -from reads a run made before")
}

// The jobs CSV is outside input: whatever it holds, the reader returns
// jobs or an error, and never panics.
func FuzzParseJobsCSV(f *testing.F) {
	f.Add("job_id,gpus,weight,arrival,start,finish,jct,queueing,isolated,preemptions,migrations,gpu_model\n0,1,1,0,4,110,110,4,100,0,0,V100\n")
	f.Add("job_id,gpus,weight,arrival,start,finish,jct,queueing,isolated,preemptions,migrations,gpu_model\n\"a,b\",2,1,NaN,NaN,NaN,NaN,NaN,1,0,0,\n")
	f.Add("gpu_model,job_id\nx\n")
	f.Add("")
	f.Fuzz(func(t *testing.T, body string) {
		jobs, err := parseJobsCSV(strings.NewReader(body))
		if err != nil {
			must.Nil(t, jobs)
			return
		}
		for _, j := range jobs {
			must.NonNegative(t, j.GPUs)
			must.NonNegative(t, j.Preemptions)
		}
	})
}

// The replay's simulated side lists the models as a Nomad client lists
// its GPUs to the planner, by name: with as many K80s free as V100s the
// agnostic placer gives the first job a K80 live, and so must the
// simulator, whatever order -cluster names them in.
func TestReplaySimulatesTheModelsAsAClientListsThem(t *testing.T) {
	tr := writeTrace(t, "job_id,num_gpu,submit_time,duration\n0,1,0,100\n1,2,10,50\n2,1,20,80\n")
	dir, _ := savedReplay(t, tr, "-cluster", "4xV100,4xK80")
	out := t.TempDir()
	code, _, stderr := runReplay(t, "-from", dir, "-trace", tr, "-cluster", "4xV100,4xK80", "-policy", "las", "-json", "-out", out)
	must.Eq(t, exitOK, code, must.Sprint(stderr))
	jobs, err := readJobsCSV(filepath.Join(out, "sim", "las.jobs.csv"))
	must.NoError(t, err)
	must.Eq(t, "K80", jobs[0].GPUModel)
}

// lasOnOneNode is the inputs of a replay of trace tr under 2D-LAS on one
// node of four GPUs.
func lasOnOneNode(t *testing.T, tr string) *traceInputs {
	t.Helper()
	var f replayFlags
	fs := newFlags("replay")
	f.traceFlags.register(fs)
	must.NoError(t, parse(fs, []string{"-trace", tr, "-cluster", "n1g4", "-policy", "las"}))
	in, _, err := f.load()
	must.NoError(t, err)
	return in
}

// The cost band runs the simulator with each charged cost 5% off: one
// 100 s job that waits a 10 s start latency, and nothing else charged,
// ends 0.5 s sooner or later.
func TestCostBandMovesEachChargedCost(t *testing.T) {
	in := lasOnOneNode(t, writeTrace(t, "job_id,num_gpu,submit_time,duration\n0,1,0,100\n"))
	band, err := costBand(in, in.policies[0], replay.Costs{StartLatency: 10}, 110)
	must.NoError(t, err)
	must.Eq(t, [2]float64{109.5, 110.5}, band)

	// The cost that moves it most sets it: 5% of a 20 s run overhead.
	band, err = costBand(in, in.policies[0], replay.Costs{StartLatency: 10, RunOverhead: 20}, 130)
	must.NoError(t, err)
	must.Eq(t, [2]float64{129, 131}, band)
}

// The jittered runs draw each start's latency around the charged one:
// twenty one-GPU jobs, one after another, each 100 s behind a 10 s start,
// average between 101 s and 119 s, spread out; none runs without a
// start latency charged, nor with -start-jitter 0.
func TestJitterRunsSpreadTheStartLatency(t *testing.T) {
	var csv strings.Builder
	csv.WriteString("job_id,num_gpu,submit_time,duration\n")
	for k := range 20 {
		fmt.Fprintf(&csv, "%d,1,%d,100\n", k, k*200)
	}
	in := lasOnOneNode(t, writeTrace(t, csv.String()))
	j, err := jitterRuns(in, in.policies[0], replay.Costs{StartLatency: 10}, 0.9)
	must.NoError(t, err)
	must.NotNil(t, j)
	must.Eq(t, jitterDraws, j.Runs)
	must.Eq(t, 0.9, j.Jitter)
	must.Between(t, 101.0, j.Min, 119.0)
	must.Between(t, 101.0, j.Max, 119.0)
	must.Less(t, j.Max, j.Min)
	must.True(t, j.Min <= j.Q1 && j.Q1 <= j.Median && j.Median <= j.Q3 && j.Q3 <= j.Max, must.Sprint(j))

	for _, c := range []struct {
		latency, jitter float64
	}{{0, 0.3}, {10, 0}} {
		j, err := jitterRuns(in, in.policies[0], replay.Costs{StartLatency: c.latency}, c.jitter)
		must.NoError(t, err)
		must.Nil(t, j)
	}
}
