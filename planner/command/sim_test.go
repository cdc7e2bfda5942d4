package command

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caravan-gpu/caravan/planner/policy"
	"github.com/caravan-gpu/caravan/planner/simout"
	"github.com/shoenig/test/must"
)

func runSim(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Run(append([]string{"sim"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

func TestSimUsageErrors(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"-policy", "las"}, "flag -cluster is required"},
		{[]string{"-cluster", "n1g4", "-policy", ""}, "flag -policy is required"},
		{[]string{"-cluster", "n1g4", "-policy", "las", "-compat", "yarn"}, "flag -compat"},
		{[]string{"-cluster", "n1g4", "-policy", "las", "-fairness", "2"}, "flag -fairness"},
		{[]string{"-cluster", "n1g4", "-policy", "las", "-start-latency", "-1"}, "flag -start-latency"},
		{[]string{"-cluster", "n1g4", "-policy", "las", "-start-latency", "10", "-start-jitter", "1.5"}, "flag -start-jitter"},
		{[]string{"-cluster", "n1g4", "-policy", "las", "-jitter-seed", "-1"}, "jitter-seed"},
		{[]string{"-cluster", "n1g4", "-policy", "las", "-start-jitter", "0.3"}, "flag -start-jitter spreads -start-latency"},
		{[]string{"-cluster", "n1g4", "-policy", "las", "-run-overhead", "+Inf"}, "flag -run-overhead"},
		{[]string{"-cluster", "n1g4", "-policy", "las", "-start-spread", "-1"}, "flag -start-spread"},
		{[]string{"-cluster", "n1g4", "-policy", "las", "-gang-spread", "Inf"}, "flag -gang-spread"},
		{[]string{"-cluster", "n1g4", "-policy", "las", "-stop-latency", "NaN"}, "flag -stop-latency"},
		{[]string{"-cluster", "n1g4", "-policy", "las", "-round-delay", "Inf"}, "flag -round-delay"},
		{[]string{"-cluster", "n1g4", "-policy", "las", "-completion-lag", "-1"}, "flag -completion-lag"},
		{[]string{"-cluster", "n1g4", "-policy", "las", "-unblock-latency", "-3"}, "flag -unblock-latency"},
		{[]string{"-cluster", "n1g4", "-policy", "las", "-abort-latency", "-1"}, "flag -abort-latency"},
		{[]string{"-cluster", "n1g4", "-policy", "las", "-queue-cuts", "9,3"}, "flag -queue-cuts"},
		{[]string{"-cluster", "n1g4", "-policy", "las", "-format", "csv"}, "flag -format"},
		{[]string{"-cluster", "n1g4", "-policy", "hare", "-weights", "1,0"}, "flag -weights"},
		{[]string{"-cluster", "n1g4", "-policy", "hare", "-weights", "1,heavy"}, "flag -weights"},
		{[]string{"-cluster", "n1g4", "-policy", "teleport"}, "flag -policy"},
		{[]string{"-cluster", "n1g4", "-policy", "las+migrate", "-migration-cost", "-1"}, "flag -migration-cost"},
		{[]string{"-cluster", "n1g4", "-policy", "las+migrate", "-migration-cost", "NaN"}, "flag -migration-cost"},
		{[]string{"-cluster", "n1g4", "-policy", "las+rotate", "-rotation-period", "0"}, "flag -rotation-period"},
		{[]string{"-cluster", "n1g4", "-policy", "las+rotate", "-rotation-period", "Inf"}, "flag -rotation-period"},
		{[]string{"-cluster", "n1g4", "-policy", "synergy", "-synergy-lease", "-300"}, "flag -synergy-lease must be"},
		{[]string{"-cluster", "n1g4", "-policy", "synergy", "-synergy-lease", "0.001"}, "flag -synergy-lease must be 0 (no lease) or at least 1 second"},
		{[]string{"-cluster", "n1g4", "-policy", "las", "-synergy-lease", "300"}, "flag -synergy-lease is Synergy's: it needs -sensitivity"},
		{[]string{"-cluster", "n1g4", "-policy", "las", "-bogus"}, "bogus"},
		{[]string{"-cluster", "n0g4", "-policy", "las"}, "flag -cluster"},
		{[]string{"-cluster", "n1g4", "-policy", "las", "-load", "NaN"}, "flag -load"},
		{[]string{"-cluster", "n1g4", "-policy", "las", "-load", "0"}, "flag -load"},
		{[]string{"-cluster", "n1g4", "-policy", "las", "-load", "much"}, "-load"},
		{[]string{"-cluster", "n1g4", "-policy", "las", "-max-duration", "-5"}, "flag -max-duration"},
		{[]string{"-cluster", "n1g4", "-policy", "las", "-max-gpus", "-1"}, "flag -max-gpus"},
		{[]string{"-cluster", "n1g4", "-policy", "las", "-skip", "-1"}, "flag -skip"},
		{[]string{"-cluster", "n1g4", "-policy", "las", "-take", "-1"}, "flag -take"},
		{[]string{"-cluster", "n1g4", "-policy", "las", "-take", "60"}, "flag -take cuts a sample from a -trace file"},
		{[]string{"-cluster", "n1g4", "-policy", "las", "-sizes", "pareto"}, `flag -sizes: unknown size shape "pareto"`},
		{[]string{"-cluster", "n1g4", "-policy", "las", "-trace", "x.csv", "-sizes", "uniform"}, "flag -sizes shapes a synthetic trace"},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, _, stderr := runSim(t, tc.args...)
			must.Eq(t, 2, code)
			must.StrContains(t, stderr, tc.want)
		})
	}
}

// -synergy-lease with no policy whose sizer keeps it is a usage error.
func TestSimSynergyLeaseNeedsASynergySizer(t *testing.T) {
	sens := filepath.Join(t.TempDir(), "s.csv")
	must.NoError(t, os.WriteFile(sens, []byte("model,gpus,cpus_per_gpu,mem_gb_per_gpu,normalized_throughput\nm,1,1,62.5,1\n"), 0o644))
	code, _, stderr := runSim(t, "-cluster", "n1g4", "-policy", "las,fjf+count+synergy-greedy", "-jobs", "20", "-sensitivity", sens, "-synergy-lease", "300")
	must.Eq(t, 0, code, must.Sprint(stderr))
	code, _, stderr = runSim(t, "-cluster", "n1g4", "-policy", "las", "-jobs", "20", "-sensitivity", sens, "-synergy-lease", "300")
	must.Eq(t, 2, code)
	must.StrContains(t, stderr, "flag -synergy-lease: no policy in -policy has a synergy sizer")
}

// steepTrace writes a Gavel trace of one-GPU jobs of the given steps, all
// arriving at 0, of a type ten times faster on a V100 than on a K80, and
// its throughputs.
func steepTrace(t *testing.T, steps ...int) (trace, tputs string) {
	dir := t.TempDir()
	var rows strings.Builder
	for _, n := range steps {
		fmt.Fprintf(&rows, "Steep\tcmd\t--steps\t1\t%d\t0.000000\t1\n", n)
	}
	trace, tputs = filepath.Join(dir, "gavel.trace"), filepath.Join(dir, "tputs.json")
	must.NoError(t, os.WriteFile(trace, []byte(rows.String()), 0o644))
	must.NoError(t, os.WriteFile(tputs, []byte(`{"v100": {"('Steep', 1)": {"null": 10}}, "k80": {"('Steep', 1)": {"null": 1}}}`), 0o644))
	return trace, tputs
}

// -migration-cost reaches both the migrate step and the simulator's
// charge. Two jobs of a type 10× faster on a V100 start at 0, A on the
// V100 (1,000 s), B on the K80; when A ends, B moves with 2,000 steps left
// and ends 200 s plus the migration cost later.
func TestSimMigrationCost(t *testing.T) {
	tr, tp := steepTrace(t, 10000, 3000)
	for _, cost := range []float64{30, 100} {
		code, stdout, stderr := runSim(t, "-trace", tr, "-format", "gavel", "-throughputs", tp, "-cluster", "1xV100,1xK80",
			"-policy", "fjf+migrate", "-migration-cost", fmt.Sprint(cost), "-json")
		must.Eq(t, 0, code, must.Sprint(stderr))
		var rep simReport
		must.NoError(t, json.Unmarshal([]byte(stdout), &rep))
		must.Eq(t, 1, rep.Policies[0].Migrations)
		must.Eq(t, (1000+1000+cost+200)/2, rep.Policies[0].AvgJCT)
	}
}

// -rotation-period reaches the blind steps. A (500 steps, 50 s on the
// V100) and B (30,000 steps on the K80) start at 0. Once the V100 frees,
// B is expected to run as long again as it has, at least the period:
// with an hour, it moves at once (50 s, then 30 s lost and 2,995 s on the
// V100); with 360 s, not until a wake at the period's end finds it has run
// 720 s (then 30 s and 2,928 s).
func TestSimRotationPeriod(t *testing.T) {
	tr, tp := steepTrace(t, 500, 30000)
	for _, tc := range []struct{ period, finish float64 }{{3600, 50 + 30 + 2995}, {360, 720 + 30 + 2928}} {
		code, stdout, stderr := runSim(t, "-trace", tr, "-format", "gavel", "-throughputs", tp, "-cluster", "1xV100,1xK80",
			"-policy", "fjf+migrate-blind", "-rotation-period", fmt.Sprint(tc.period), "-json")
		must.Eq(t, 0, code, must.Sprint(stderr))
		var rep simReport
		must.NoError(t, json.Unmarshal([]byte(stdout), &rep))
		must.Eq(t, 1, rep.Policies[0].Migrations)
		must.InDelta(t, (50+tc.finish)/2, rep.Policies[0].AvgJCT, 1e-6)
	}
}

func TestSimRuntimeError(t *testing.T) {
	code, _, stderr := runSim(t, "-cluster", "n1g4", "-policy", "las", "-trace", "/nonexistent/trace.csv", "-format", "philly")
	must.Eq(t, 1, code)
	must.StrContains(t, stderr, "/nonexistent/trace.csv")
}

func TestSimJSONAndOutputs(t *testing.T) {
	dir := t.TempDir()
	trace := filepath.Join(dir, "t.csv")
	must.NoError(t, os.WriteFile(trace, []byte("job_id,num_gpu,submit_time,duration\n0,1,0,100\n1,1,10,50\n2,2,20,30\n"), 0o644))
	out := filepath.Join(dir, "out")
	code, stdout, stderr := runSim(t, "--trace", trace, "--cluster", "n1g2", "--policy", "fifo,las", "--json", "--out", out)
	must.Eq(t, 0, code, must.Sprint(stderr))
	var rep struct {
		Policies []map[string]any `json:"policies"`
	}
	must.NoError(t, json.Unmarshal([]byte(stdout), &rep))
	must.Eq(t, 2, len(rep.Policies))
	for _, p := range rep.Policies {
		for _, k := range []string{"policy", "jobs", "avg_jct", "median_jct", "p95_jct", "p99_jct", "makespan"} {
			_, ok := p[k]
			must.True(t, ok, must.Sprintf("missing %s", k))
		}
	}
	// FIFO on 2 GPUs: job 0 runs 0..100, job 1 10..60, job 2 waits for
	// both GPUs until 100 and ends at 130: JCTs 100, 50, 110.
	must.Eq(t, any(float64(3)), rep.Policies[0]["jobs"])
	must.InDelta(t, 260.0/3, rep.Policies[0]["avg_jct"].(float64), 1e-9)
	for _, f := range []string{"summary.json", "fifo.jobs.csv", "las.jobs.csv", "fifo.util.csv", "las.util.csv", "plots.svg"} {
		_, err := os.Stat(filepath.Join(out, f))
		must.NoError(t, err)
	}
	csv, err := os.ReadFile(filepath.Join(out, "fifo.jobs.csv"))
	must.NoError(t, err)
	must.Eq(t, 4, strings.Count(string(csv), "\n"))
	// The dashboard draws the folder again from its CSVs.
	runs, err := simout.Read(os.DirFS(out), ".")
	must.NoError(t, err)
	must.Len(t, 2, runs)
	must.Eq(t, "fifo", runs[0].Name)
	must.Eq(t, 2, runs[0].GPUs)
	must.Len(t, 3, runs[0].JCT)
	must.SliceNotEmpty(t, runs[0].Util)
}

// With Synergy's sensitivities each job's model is a last column of the
// jobs CSV, so that speedups can be read by model; the -from reader takes
// the file as before.
func TestSimOutNamesEachJobsModel(t *testing.T) {
	dir := t.TempDir()
	trace := filepath.Join(dir, "t.csv")
	must.NoError(t, os.WriteFile(trace, []byte("job_id,num_gpu,submit_time,duration\n0,1,0,100\n1,1,10,50\n"), 0o644))
	sens := filepath.Join(dir, "s.csv")
	must.NoError(t, os.WriteFile(sens, []byte("model,gpus,cpus_per_gpu,mem_gb_per_gpu,normalized_throughput\n"+
		"hungry,1,1,62.5,0.5\nhungry,1,3,62.5,1\nhungry,1,6,62.5,2\n"), 0o644))
	out := filepath.Join(dir, "out")
	code, _, stderr := runSim(t, "-trace", trace, "-cluster", "n1g2", "-sensitivity", sens, "-policy", "fifo,fjf+count+synergy-greedy", "-out", out)
	must.Eq(t, 0, code, must.Sprint(stderr))
	csv, err := os.ReadFile(filepath.Join(out, "fifo.jobs.csv"))
	must.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(csv)), "\n")
	must.Eq(t, strings.Join(jobsCSVColumns, ",")+",model", lines[0])
	must.StrHasSuffix(t, ",hungry", lines[1])
	jobs, err := readJobsCSV(filepath.Join(out, "fifo.jobs.csv"))
	must.NoError(t, err)
	must.Len(t, 2, jobs)
}

func TestSimSyntheticTable(t *testing.T) {
	code, stdout, _ := runSim(t, "-cluster", "n4g8", "-policy", "fifo,las", "-jobs", "200", "-load", "30")
	must.Eq(t, 0, code)
	must.StrContains(t, stdout, "avg ÷ first")
	must.StrContains(t, stdout, "synthetic(jobs=200")
}

func TestSimRunsTheDefaultPolicy(t *testing.T) {
	code, stdout, stderr := runSim(t, "-cluster", "n4g8", "-jobs", "200", "-load", "30", "-json")
	must.Eq(t, 0, code, must.Sprint(stderr))
	must.StrContains(t, stdout, `"policy": "`+policy.Default+`"`)
}

func TestSimProgressBar(t *testing.T) {
	code, _, stderr := runSim(t, "-cluster", "n4g8", "-policy", "las", "-jobs", "300", "-load", "30", "-progress")
	must.Eq(t, 0, code, must.Sprint(stderr))
	must.StrContains(t, stderr, "las ")
	must.StrContains(t, stderr, "300 / 300")
	must.StrContains(t, stderr, "100.00%")
}

// A sample cut from a trace file: the jobs of one group, of at most a
// duration, the first skipped, the next taken, at an offered load.
func TestSimSample(t *testing.T) {
	dir := t.TempDir()
	trace := filepath.Join(dir, "p.csv")
	must.NoError(t, os.WriteFile(trace, []byte(`timestamp,duration,num_gpus,gpu_time,cluster
2017-10-09 07:00:00,100.0,1,100.0,aa
2017-10-09 07:00:10,50.0,2,100.0,bb
2017-10-09 07:00:20,9000.0,1,9000.0,aa
2017-10-09 07:00:30,40.0,4,160.0,aa
2017-10-09 07:00:50,60.0,1,60.0,aa
2017-10-09 07:01:00,10.0,1,10.0,aa
`), 0o644))
	code, stdout, stderr := runSim(t, "-trace", trace, "-format", "philly", "-cluster", "n1g4", "-policy", "fifo", "-json",
		"-vc", "aa", "-max-duration", "3600", "-skip", "1", "-take", "2")
	must.Eq(t, 0, code, must.Sprint(stderr))
	var rep struct {
		Trace    string           `json:"trace"`
		Policies []map[string]any `json:"policies"`
	}
	must.NoError(t, json.Unmarshal([]byte(stdout), &rep))
	must.Eq(t, any(float64(2)), rep.Policies[0]["jobs"])
	must.StrContains(t, rep.Trace, "vc=aa,max-duration=3600,skip=1,take=2")
	// The 4-GPU job at 0 (40 s) holds every GPU when the 1-GPU one (60 s)
	// arrives at 20 s: JCTs 40 and 80. At load 0.5 their 220 GPU-s of
	// work spread the second arrival to 440 s, and nothing waits.
	must.InDelta(t, 60.0, rep.Policies[0]["avg_jct"].(float64), 1e-9)
	must.InDelta(t, 100.0, rep.Policies[0]["makespan"].(float64), 1e-9)
	code, stdout, stderr = runSim(t, "-trace", trace, "-format", "philly", "-cluster", "n1g4", "-policy", "fifo", "-json",
		"-vc", "aa", "-max-duration", "3600", "-skip", "1", "-take", "2", "-load", "0.5")
	must.Eq(t, 0, code, must.Sprint(stderr))
	must.NoError(t, json.Unmarshal([]byte(stdout), &rep))
	must.InDelta(t, 500.0, rep.Policies[0]["makespan"].(float64), 1e-9)

	// At most one GPU: the 4-GPU job goes, and the two 1-GPU jobs after
	// the skipped one are taken (60 s and 10 s, nothing waits).
	code, stdout, stderr = runSim(t, "-trace", trace, "-format", "philly", "-cluster", "n1g4", "-policy", "fifo", "-json",
		"-vc", "aa", "-max-duration", "3600", "-max-gpus", "1", "-skip", "1", "-take", "2")
	must.Eq(t, 0, code, must.Sprint(stderr))
	must.NoError(t, json.Unmarshal([]byte(stdout), &rep))
	must.StrContains(t, rep.Trace, "vc=aa,max-duration=3600,max-gpus=1,skip=1,take=2")
	must.InDelta(t, 35.0, rep.Policies[0]["avg_jct"].(float64), 1e-9)

	code, _, stderr = runSim(t, "-trace", trace, "-format", "philly", "-cluster", "n1g4", "-policy", "fifo", "-vc", "zz")
	must.Eq(t, 2, code)
	must.StrContains(t, stderr, `group "zz" holds 0 jobs`)
}

// -load on a trace of jobs given in steps counts each at its fastest
// model's time (through -throughputs): A (1,000 s on a V100) at 0 and B
// (300 s) at 100 offer 13 busy GPUs; at -load 1.3 B arrives at 1,000 and
// ends at 1,300. Without throughputs there is no time to offer, and the
// error says so.
func TestSimLoadOfJobsInSteps(t *testing.T) {
	dir := t.TempDir()
	tr := filepath.Join(dir, "gavel.trace")
	must.NoError(t, os.WriteFile(tr, []byte("Steep\tcmd\t--steps\t1\t10000\t0.000000\t1\nSteep\tcmd\t--steps\t1\t3000\t100.000000\t1\n"), 0o644))
	tp := filepath.Join(dir, "tputs.json")
	must.NoError(t, os.WriteFile(tp, []byte(`{"v100": {"('Steep', 1)": {"null": 10}}, "k80": {"('Steep', 1)": {"null": 1}}}`), 0o644))
	for load, makespan := range map[string]float64{"": 1000, "1.3": 1300} {
		args := []string{"-trace", tr, "-format", "gavel", "-throughputs", tp, "-cluster", "2xV100", "-policy", "fjf", "-json"}
		if load != "" {
			args = append(args, "-load", load)
		}
		code, stdout, stderr := runSim(t, args...)
		must.Eq(t, 0, code, must.Sprint(stderr))
		var rep simReport
		must.NoError(t, json.Unmarshal([]byte(stdout), &rep))
		must.Eq(t, makespan, rep.Policies[0].Makespan, must.Sprintf("load %q", load))
	}
	code, _, stderr := runSim(t, "-trace", tr, "-format", "gavel", "-cluster", "2xV100", "-policy", "fjf", "-load", "1.3")
	must.Eq(t, 2, code)
	must.StrContains(t, stderr, "need throughputs")
}
