package command

import (
	"cmp"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/caravan-gpu/caravan/planner/replay"
	"github.com/caravan-gpu/caravan/planner/sim"
)

// splitJobs counts the finished jobs whose run spread over several nodes,
// live and simulated, and the jobs split on one side only among those both
// sides finished and the simulator placed on named nodes.
func splitJobs(live, simulated *sim.Result) (liveSplit, simSplit, oneSide int) {
	simNodes := map[string]int{}
	for _, j := range simulated.Jobs {
		if !math.IsNaN(j.Finish) {
			simNodes[j.ID] = j.Nodes
			if j.Nodes > 1 {
				simSplit++
			}
		}
	}
	for _, j := range live.Jobs {
		if math.IsNaN(j.Finish) {
			continue
		}
		if j.Nodes > 1 {
			liveSplit++
		}
		if n, ok := simNodes[j.ID]; ok && n > 0 && (n > 1) != (j.Nodes > 1) {
			oneSide++
		}
	}
	return liveSplit, simSplit, oneSide
}

// jobGap is one job's live and simulated outcome side by side, in trace
// seconds.
type jobGap struct {
	ID                              string
	GPUs                            int
	Arrival                         float64
	LiveStart, SimStart             float64
	LiveFinish, SimFinish           float64
	LivePreemptions, SimPreemptions int
	// LiveStops are when Nomad stopped the job's tasks for each
	// preemption; SimStops the simulator's rounds that preempted it.
	LiveStops, SimStops []float64
	// LiveRanOn and SimRanOn are the GPU models of each side's runs
	// (sim.JobResult.RanOn); nil on a cluster of one model.
	LiveRanOn, SimRanOn []string
	// LiveJCTMinusSim is NaN where a side did not finish the job.
	LiveJCTMinusSim float64
	// MissingFromSide names the side without the job at all.
	MissingFromSide string
}

// MarshalJSON writes a time a side does not have (a job unfinished) as
// null: JSON has no NaN.
func (g jobGap) MarshalJSON() ([]byte, error) {
	num := func(v float64) *float64 {
		if math.IsNaN(v) {
			return nil
		}
		return &v
	}
	return json.Marshal(struct {
		ID              string    `json:"id"`
		GPUs            int       `json:"gpus"`
		Arrival         *float64  `json:"arrival"`
		LiveStart       *float64  `json:"live_start"`
		SimStart        *float64  `json:"sim_start"`
		LiveFinish      *float64  `json:"live_finish"`
		SimFinish       *float64  `json:"sim_finish"`
		LivePreemptions int       `json:"live_preemptions"`
		SimPreemptions  int       `json:"sim_preemptions"`
		LiveStops       []float64 `json:"live_stops"`
		SimStops        []float64 `json:"sim_stops"`
		LiveRanOn       []string  `json:"live_ran_on,omitempty"`
		SimRanOn        []string  `json:"sim_ran_on,omitempty"`
		LiveJCTMinusSim *float64  `json:"live_jct_minus_sim"`
		MissingFrom     string    `json:"missing_from,omitempty"`
	}{g.ID, g.GPUs, num(g.Arrival), num(g.LiveStart), num(g.SimStart), num(g.LiveFinish), num(g.SimFinish),
		g.LivePreemptions, g.SimPreemptions, orEmpty(g.LiveStops), orEmpty(g.SimStops), g.LiveRanOn, g.SimRanOn,
		num(g.LiveJCTMinusSim), g.MissingFromSide})
}

// jobGaps joins the live and simulated jobs by ID, the jobs whose JCTs
// differ most first: a job unfinished on one side, then by |live − sim|.
// A replay's average JCT gap is the sum of these, so the first rows say
// where it comes from.
func jobGaps(live, simulated *sim.Result) []jobGap {
	simByID := make(map[string]sim.JobResult, len(simulated.Jobs))
	for _, j := range simulated.Jobs {
		simByID[j.ID] = j
	}
	seen := map[string]bool{}
	var out []jobGap
	for _, l := range live.Jobs {
		g := jobGap{ID: l.ID, GPUs: l.GPUs, Arrival: l.Arrival, LiveStart: l.Start, LiveFinish: l.Finish,
			LivePreemptions: l.Preemptions, LiveStops: l.Stops, LiveRanOn: l.RanOn, SimStart: math.NaN(), SimFinish: math.NaN()}
		s, ok := simByID[l.ID]
		if ok {
			seen[l.ID] = true
			g.SimStart, g.SimFinish, g.SimPreemptions, g.SimStops, g.SimRanOn = s.Start, s.Finish, s.Preemptions, s.Stops, s.RanOn
		} else {
			g.MissingFromSide = "sim"
		}
		g.LiveJCTMinusSim = (g.LiveFinish - g.Arrival) - (g.SimFinish - g.Arrival)
		out = append(out, g)
	}
	for _, s := range simulated.Jobs {
		if !seen[s.ID] {
			out = append(out, jobGap{ID: s.ID, GPUs: s.GPUs, Arrival: s.Arrival, LiveStart: math.NaN(), LiveFinish: math.NaN(),
				SimStart: s.Start, SimFinish: s.Finish, SimPreemptions: s.Preemptions, SimStops: s.Stops, SimRanOn: s.RanOn,
				LiveJCTMinusSim: math.NaN(), MissingFromSide: "live"})
		}
	}
	slices.SortStableFunc(out, func(a, b jobGap) int {
		an, bn := math.IsNaN(a.LiveJCTMinusSim), math.IsNaN(b.LiveJCTMinusSim)
		switch {
		case an && !bn:
			return -1
		case bn && !an:
			return 1
		case an && bn:
			return cmp.Compare(a.ID, b.ID)
		}
		return cmp.Compare(math.Abs(b.LiveJCTMinusSim), math.Abs(a.LiveJCTMinusSim))
	})
	return out
}

// topGaps is how many jobs the replay's report lists.
const topGaps = 10

// renderGaps is the table of the jobs that differ most.
func renderGaps(gaps []jobGap) string {
	var b strings.Builder
	b.WriteString("jobs whose live JCT differs most from the simulated (trace seconds; every job in jobs.csv with -out):\n")
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', tabwriter.AlignRight)
	shown := gaps[:min(topGaps, len(gaps))]
	models := slices.ContainsFunc(shown, func(g jobGap) bool { return g.LiveRanOn != nil || g.SimRanOn != nil })
	head := "job\tGPUs\tarrival\tstart live\tstart sim\tfinish live\tfinish sim\tpreempted live\tpreempted sim\t"
	if models {
		head += "ran on live\tran on sim\t"
	}
	fmt.Fprintln(tw, head+"live − sim JCT\t")
	for _, g := range shown {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t", g.ID, g.GPUs, secs(g.Arrival), secs(g.LiveStart), secs(g.SimStart),
			secs(g.LiveFinish), secs(g.SimFinish), stopsAt(g.LiveStops), stopsAt(g.SimStops))
		if models {
			fmt.Fprintf(tw, "%s\t%s\t", ranOnText(g.LiveRanOn), ranOnText(g.SimRanOn))
		}
		fmt.Fprintf(tw, "%s\t\n", signedSecs(g.LiveJCTMinusSim))
	}
	tw.Flush()
	b.WriteString("(preempted: at which trace seconds; live when Nomad stopped the tasks, simulated the round that preempted)\n")
	if models {
		b.WriteString("(ran on: the GPU models of its runs in order, a model once for runs on it in a row)\n")
	}
	return b.String()
}

// stopsAt lists a job's preemption times for the report's table: the
// first three, and how many more.
func stopsAt(ts []float64) string {
	const shown = 3
	if len(ts) == 0 {
		return "0"
	}
	s := joinTimes(ts[:min(shown, len(ts))], 0, " ")
	if len(ts) > shown {
		s += fmt.Sprintf(" +%d", len(ts)-shown)
	}
	return s
}

// joinTimes writes times with prec decimals, sep between them.
func joinTimes(ts []float64, prec int, sep string) string {
	parts := make([]string, len(ts))
	for i, t := range ts {
		parts[i] = strconv.FormatFloat(t, 'f', prec, 64)
	}
	return strings.Join(parts, sep)
}

// orEmpty writes no stops as [] rather than null.
func orEmpty(ts []float64) []float64 {
	if ts == nil {
		return []float64{}
	}
	return ts
}

func secs(v float64) string {
	if math.IsNaN(v) {
		return "—"
	}
	return strconv.FormatFloat(v, 'f', 0, 64)
}

func signedSecs(v float64) string {
	if math.IsNaN(v) {
		return "unfinished"
	}
	return strconv.FormatFloat(v, 'f', 0, 64)
}

// ranOnText writes a job's models for the report's table: "—" for none.
func ranOnText(models []string) string {
	if len(models) == 0 {
		return "—"
	}
	return strings.Join(models, " ")
}

// writeGapsCSV writes every job's gap, as the report's table orders them.
func writeGapsCSV(path string, gaps []jobGap) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write([]string{"id", "gpus", "arrival", "live_start", "sim_start", "live_finish", "sim_finish",
		"live_preemptions", "sim_preemptions", "live_stops", "sim_stops", "live_jct_minus_sim", "missing_from", "live_ran_on", "sim_ran_on"})
	num := func(v float64) string {
		if math.IsNaN(v) {
			return ""
		}
		return strconv.FormatFloat(v, 'f', 3, 64)
	}
	for _, g := range gaps {
		_ = w.Write([]string{g.ID, strconv.Itoa(g.GPUs), num(g.Arrival), num(g.LiveStart), num(g.SimStart), num(g.LiveFinish),
			num(g.SimFinish), strconv.Itoa(g.LivePreemptions), strconv.Itoa(g.SimPreemptions), joinTimes(g.LiveStops, 3, ";"),
			joinTimes(g.SimStops, 3, ";"), num(g.LiveJCTMinusSim), g.MissingFromSide, strings.Join(g.LiveRanOn, ";"), strings.Join(g.SimRanOn, ";")})
	}
	w.Flush()
	return errors.Join(w.Error(), f.Close())
}

// liveTimeline is what the live cluster did, in trace seconds, for a
// reader who would measure its costs another way than the replay does:
// every task's runs, the planner's releases and the preemptions' stops.
type liveTimeline struct {
	Jobs       []timelineJob `json:"jobs"`
	Stops      []float64     `json:"stops"`
	StopDelays []float64     `json:"stop_delays"`
	// AbortDelays are absent in a timeline written before they were kept.
	AbortDelays []float64 `json:"abort_delays"`
}

type timelineTask struct {
	Placed float64 `json:"placed"` // when Nomad placed its allocation
	Start  float64 `json:"start"`
	End    float64 `json:"end"`
	Node   string  `json:"node"`
	GPU    string  `json:"gpu,omitempty"` // the lane's physical GPU; absent for a whole GPU
	// Model is the GPU model it ran on; absent where unknown, and in a
	// timeline written before models were kept.
	Model string `json:"model,omitempty"`
	// Speed is how fast its CPU and memory let it train over the share,
	// for a job sized by Synergy's table; absent otherwise.
	Speed float64 `json:"speed,omitempty"`
}

type timelineJob struct {
	ID       string         `json:"id"`
	GPUs     int            `json:"gpus"`
	Arrival  float64        `json:"arrival"`
	Finish   *float64       `json:"finish"`   // null: unfinished
	Tasks    []timelineTask `json:"tasks"`    // in order of start
	Releases []float64      `json:"releases"` // the planner's releases, oldest first
	Holds    []float64      `json:"holds"`    // the planner's holds, oldest first
	// Stops are when Nomad stopped its tasks for each preemption, oldest
	// first; null in a timeline written before they were kept.
	Stops []float64 `json:"stops"`
	// Decided are the planner's rounds that wrote the job, oldest first;
	// absent where the planner's decisions were not read.
	Decided []float64 `json:"decided,omitempty"`
}

// writeTimeline writes res's live timeline as JSON.
func writeTimeline(path string, res *replay.Result) error {
	tl := liveTimeline{Jobs: make([]timelineJob, 0, len(res.Sim.Jobs)),
		Stops: append([]float64{}, res.Stops...), StopDelays: append([]float64{}, res.StopDelays...),
		AbortDelays: append([]float64{}, res.AbortDelays...)}
	for i, j := range res.Sim.Jobs {
		tj := timelineJob{ID: j.ID, GPUs: j.GPUs, Arrival: j.Arrival, Tasks: []timelineTask{}, Releases: []float64{}, Holds: []float64{},
			Stops: append([]float64{}, j.Stops...)}
		if !math.IsNaN(j.Finish) {
			tj.Finish = &j.Finish
		}
		if i < len(res.Tasks) {
			for _, t := range res.Tasks[i] {
				tj.Tasks = append(tj.Tasks, timelineTask{Placed: t.Placed, Start: t.Start, End: t.End, Node: t.Node, GPU: t.GPU, Model: t.Model, Speed: t.Speed})
			}
		}
		if i < len(res.Releases) {
			tj.Releases = append(tj.Releases, res.Releases[i]...)
		}
		if i < len(res.Holds) {
			tj.Holds = append(tj.Holds, res.Holds[i]...)
		}
		if i < len(res.Decided) {
			tj.Decided = append([]float64{}, res.Decided[i]...)
		}
		tl.Jobs = append(tl.Jobs, tj)
	}
	b, err := json.Marshal(tl)
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
