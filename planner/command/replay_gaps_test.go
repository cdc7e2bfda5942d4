package command

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/caravan-gpu/caravan/planner/replay"
	"github.com/caravan-gpu/caravan/planner/sim"
)

// The report says where a replay's gap comes from: every job's live and
// simulated start, finish and preemptions side by side, the jobs that
// differ most first (one unfinished on a side before any).
func TestJobGapsPutTheLargestFirst(t *testing.T) {
	nan := math.NaN()
	live := &sim.Result{Jobs: []sim.JobResult{
		{ID: "a", GPUs: 1, Arrival: 0, Start: 10, Finish: 110, Preemptions: 0},
		{ID: "b", GPUs: 4, Arrival: 5, Start: 400, Finish: 900, Preemptions: 4, Stops: []float64{450, 500, 600.25, 700}},
		{ID: "c", GPUs: 2, Arrival: 7, Start: nan, Finish: nan},
		{ID: "d", GPUs: 1, Arrival: 9, Start: 20, Finish: 60},
	}}
	simulated := &sim.Result{Jobs: []sim.JobResult{
		{ID: "a", GPUs: 1, Arrival: 0, Start: 5, Finish: 100},
		{ID: "b", GPUs: 4, Arrival: 5, Start: 50, Finish: 550, Preemptions: 1, Stops: []float64{120}},
		{ID: "c", GPUs: 2, Arrival: 7, Start: 30, Finish: 90},
		{ID: "d", GPUs: 1, Arrival: 9, Start: 20, Finish: 260},
	}}
	gaps := jobGaps(live, simulated)
	var order []string
	for _, g := range gaps {
		order = append(order, g.ID)
	}
	must.Eq(t, []string{"c", "b", "d", "a"}, order)
	must.Eq(t, 350, gaps[1].LiveJCTMinusSim)
	must.Eq(t, -200, gaps[2].LiveJCTMinusSim)
	must.Eq(t, 4, gaps[1].LivePreemptions)
	must.Eq(t, 1, gaps[1].SimPreemptions)

	text := renderGaps(gaps)
	must.StrContains(t, text, "unfinished")
	lines := strings.Split(strings.TrimSpace(text), "\n")
	must.Len(t, 7, lines) // the title, the header, the four jobs and the note on stops
	must.StrContains(t, lines[3], "b")
	must.StrContains(t, lines[3], "350")
	must.StrContains(t, lines[3], "450 500 600 +1", must.Sprint("the live stops, three and a count"))
	must.StrContains(t, lines[3], "  120  ", must.Sprint("the simulated stop"))

	// JSON has no NaN: what a side lacks is null.
	data, err := json.Marshal(gaps[0])
	must.NoError(t, err)
	must.StrContains(t, string(data), `"live_finish":null`)
	must.StrContains(t, string(data), `"sim_finish":90`)
	must.StrContains(t, string(data), `"live_stops":[]`)
	data, err = json.Marshal(gaps[1])
	must.NoError(t, err)
	must.StrContains(t, string(data), `"live_stops":[450,500,600.25,700],"sim_stops":[120]`)

	path := filepath.Join(t.TempDir(), "jobs.csv")
	must.NoError(t, writeGapsCSV(path, gaps))
	csvData, err := os.ReadFile(path)
	must.NoError(t, err)
	rows := strings.Split(strings.TrimSpace(string(csvData)), "\n")
	must.Len(t, 5, rows)
	must.Eq(t, "c,2,7.000,,30.000,,90.000,0,0,,,,,,", rows[1])
	must.Eq(t, "b,4,5.000,400.000,50.000,900.000,550.000,4,1,450.000;500.000;600.250;700.000,120.000,350.000,,,", rows[2])
	must.StrNotContains(t, text, "ran on", must.Sprint("no models on a cluster of one"))
}

// On a cluster of several models the report tells which models each job
// ran on, on each side: a job put on a K80 live and a V100 simulated is
// read at a glance.
func TestJobGapsTellTheModelsOnSeveral(t *testing.T) {
	live := &sim.Result{Jobs: []sim.JobResult{
		{ID: "a", GPUs: 1, Arrival: 0, Start: 10, Finish: 1000, Preemptions: 1, Stops: []float64{100}, RanOn: []string{"V100", "K80"}},
		{ID: "b", GPUs: 1, Arrival: 0, Start: 10, Finish: 100, RanOn: []string{"P100"}},
	}}
	simulated := &sim.Result{Jobs: []sim.JobResult{
		{ID: "a", GPUs: 1, Arrival: 0, Start: 0, Finish: 200, Preemptions: 1, Stops: []float64{100}, RanOn: []string{"V100"}},
		{ID: "b", GPUs: 1, Arrival: 0, Start: 0, Finish: 90, RanOn: []string{"P100"}},
	}}
	gaps := jobGaps(live, simulated)
	must.Eq(t, []string{"V100", "K80"}, gaps[0].LiveRanOn)
	must.Eq(t, []string{"V100"}, gaps[0].SimRanOn)
	text := renderGaps(gaps)
	lines := strings.Split(strings.TrimSpace(text), "\n")
	must.StrContains(t, lines[1], "ran on live")
	must.StrContains(t, lines[2], "V100 K80")
	must.StrContains(t, text, "(ran on:")
	data, err := json.Marshal(gaps[0])
	must.NoError(t, err)
	must.StrContains(t, string(data), `"live_ran_on":["V100","K80"],"sim_ran_on":["V100"]`)
	path := filepath.Join(t.TempDir(), "jobs.csv")
	must.NoError(t, writeGapsCSV(path, gaps))
	csvData, err := os.ReadFile(path)
	must.NoError(t, err)
	rows := strings.Split(strings.TrimSpace(string(csvData)), "\n")
	must.StrHasSuffix(t, ",live_ran_on,sim_ran_on", rows[0])
	must.StrHasSuffix(t, ",V100;K80,V100", rows[1])
}

func TestSplitJobs(t *testing.T) {
	nan := math.NaN()
	live := &sim.Result{Jobs: []sim.JobResult{
		{ID: "a", Finish: 10, Nodes: 2}, {ID: "b", Finish: 10, Nodes: 1}, {ID: "c", Finish: 10, Nodes: 2},
		{ID: "d", Finish: nan}, {ID: "e", Finish: 10, Nodes: 2},
	}}
	simulated := &sim.Result{Jobs: []sim.JobResult{
		{ID: "a", Finish: 9, Nodes: 2}, {ID: "b", Finish: 9, Nodes: 2}, {ID: "c", Finish: 9, Nodes: 1},
		{ID: "d", Finish: 9, Nodes: 3}, {ID: "e", Finish: 9, Nodes: 0},
	}}
	l, s, one := splitJobs(live, simulated)
	must.Eq(t, 3, l)
	must.Eq(t, 3, s)
	must.Eq(t, 2, one, must.Sprint("b and c; e's simulated placer named no nodes"))
}

// The timeline keeps what the live run did, an unfinished job included,
// so that its costs can be measured again another way.
func TestWriteTimeline(t *testing.T) {
	res := &replay.Result{
		Sim: &sim.Result{Jobs: []sim.JobResult{
			{ID: "a", GPUs: 2, Arrival: 0, Finish: 90, Preemptions: 1, Stops: []float64{40}},
			{ID: "b", GPUs: 1, Arrival: 5, Finish: math.NaN()},
		}},
		Tasks:       [][]replay.TaskRun{{{Placed: 4, Start: 10, End: 90, Node: "n1", Model: "V100"}, {Placed: 4, Start: 12, End: 88, Node: "n2", GPU: "GPU-1"}}, nil},
		Releases:    [][]float64{{3}, nil},
		Holds:       [][]float64{{40}, nil},
		Stops:       []float64{40},
		StopDelays:  []float64{6},
		AbortDelays: []float64{240},
	}
	path := filepath.Join(t.TempDir(), "timeline.json")
	must.NoError(t, writeTimeline(path, res))
	data, err := os.ReadFile(path)
	must.NoError(t, err)
	var got liveTimeline
	must.NoError(t, json.Unmarshal(data, &got))
	must.Len(t, 2, got.Jobs)
	must.Eq(t, []timelineTask{{Placed: 4, Start: 10, End: 90, Node: "n1", Model: "V100"}, {Placed: 4, Start: 12, End: 88, Node: "n2", GPU: "GPU-1"}}, got.Jobs[0].Tasks)
	must.StrNotContains(t, string(data), `"model":""`, must.Sprint("a task of no known model has none"))
	must.Eq(t, []float64{3}, got.Jobs[0].Releases)
	must.Eq(t, []float64{40}, got.Jobs[0].Holds)
	must.Eq(t, []float64{}, got.Jobs[1].Holds)
	must.Eq(t, 90, *got.Jobs[0].Finish)
	must.Nil(t, got.Jobs[1].Finish)
	must.Eq(t, []timelineTask{}, got.Jobs[1].Tasks)
	must.Eq(t, []float64{40}, got.Stops)
	must.Eq(t, []float64{240}, got.AbortDelays)
	must.Eq(t, []float64{40}, got.Jobs[0].Stops)
	must.Eq(t, []float64{}, got.Jobs[1].Stops)

	// A run without preemptions has none, not null.
	res.Stops, res.StopDelays = nil, nil
	must.NoError(t, writeTimeline(path, res))
	data, err = os.ReadFile(path)
	must.NoError(t, err)
	must.StrContains(t, string(data), `"stops":[]`)
}
