package replay

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"

	"github.com/caravan-gpu/caravan/driver/workload"
	"github.com/caravan-gpu/caravan/planner/cluster"
	"github.com/caravan-gpu/caravan/planner/policy"
	"github.com/caravan-gpu/caravan/planner/trace"
)

// Throughputs of one job type: 2 steps/s on a V100, 1 on a P100 (a T4 is
// read as a P100), none on a K80.
const tputJSON = `{
  "v100": {"('ResNet-18 (batch size 64)', 1)": {"null": 2}, "('ResNet-18 (batch size 64)', 2)": {"null": 3.5}},
  "p100": {"('ResNet-18 (batch size 64)', 1)": {"null": 1}},
  "k80":  {"('LM (batch size 5)', 1)": {"null": 0.5}}
}`

func throughputs(t *testing.T) *trace.Throughputs {
	t.Helper()
	tp, err := trace.ParseThroughputs(strings.NewReader(tputJSON), "tp.json")
	must.NoError(t, err)
	return tp
}

func TestPlanWork(t *testing.T) {
	tp := throughputs(t)
	models := []string{"K80", "P100", "T4", "V100"}
	o := JobOptions{TimeScale: 10}
	cases := []struct {
		name      string
		job       trace.Job
		tputs     *trace.Throughputs
		isolated  float64
		real      time.Duration
		its       int
		itTime    time.Duration
		speed     map[string]float64
		profile   string
		errSubstr string
	}{
		{name: "duration: 100 trace s at scale 10 is 10 real s in 200ms iterations",
			job: trace.Job{ID: "0", GPUs: 2, Duration: 100}, isolated: 100, real: 10 * time.Second, its: 50, itTime: 200 * time.Millisecond},
		{name: "a short job is one iteration of its whole length",
			job: trace.Job{ID: "1", GPUs: 1, Duration: 0.5}, isolated: 0.5, real: 50 * time.Millisecond, its: 1, itTime: 50 * time.Millisecond},
		{name: "iterations divide the duration exactly",
			job: trace.Job{ID: "2", GPUs: 1, Duration: 3}, isolated: 3, real: 300 * time.Millisecond, its: 2, itTime: 150 * time.Millisecond},
		{name: "a zero-length job still runs one short iteration",
			job: trace.Job{ID: "3", GPUs: 1}, isolated: 0, real: 0, its: 1, itTime: time.Millisecond},
		{name: "steps at the fastest model's rate; slower models get their ratio",
			job:   trace.Job{ID: "4", GPUs: 1, Steps: 400, JobType: "ResNet-18 (batch size 64)"},
			tputs: tp, isolated: 200, real: 20 * time.Second, its: 100, itTime: 200 * time.Millisecond,
			speed: map[string]float64{"V100": 1, "P100": 0.5, "T4": 0.5}, profile: "replay-resnet-18-batch-size-64-x1"},
		{name: "the rate of the job's scale",
			job:   trace.Job{ID: "5", GPUs: 2, Steps: 350, JobType: "ResNet-18 (batch size 64)"},
			tputs: tp, isolated: 100, real: 10 * time.Second, its: 50, itTime: 200 * time.Millisecond,
			// P100 has no 2-GPU measurement: linear from 1 GPU, 2 steps/s.
			speed: map[string]float64{"V100": 1, "P100": 2 / 3.5, "T4": 2 / 3.5}, profile: "replay-resnet-18-batch-size-64-x2"},
		{name: "steps without throughputs",
			job: trace.Job{ID: "6", GPUs: 1, Steps: 10, JobType: "LM (batch size 5)"}, errSubstr: "trace job 6 is given in steps of \"LM (batch size 5)\": it needs -throughputs"},
		{name: "a job type measured on no model of the cluster",
			job: trace.Job{ID: "7", GPUs: 1, Steps: 10, JobType: "CycleGAN"}, tputs: tp, errSubstr: "trace job 7: no throughput for \"CycleGAN\" on 1 GPUs"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w, err := PlanWork(tc.job, models, tc.tputs, o)
			if tc.errSubstr != "" {
				must.ErrorContains(t, err, tc.errSubstr)
				return
			}
			must.NoError(t, err)
			must.InDelta(t, tc.isolated, w.Isolated, 1e-9)
			must.Eq(t, tc.real, w.Real)
			must.Eq(t, tc.its, w.Iterations)
			must.Eq(t, tc.itTime, w.IterationTime)
			must.Eq(t, tc.profile, w.Profile)
			must.Eq(t, len(tc.speed), len(w.Speed))
			for m, f := range tc.speed {
				must.InDelta(t, f, w.Speed[m], 1e-9, must.Sprint(m))
			}
		})
	}
	_, err := PlanWork(trace.Job{ID: "x", Duration: 1}, models, nil, JobOptions{})
	must.ErrorContains(t, err, "time scale must be a positive number")
}

func TestJobSpec(t *testing.T) {
	o := JobOptions{Prefix: "replay-ab12-", TimeScale: 10, Workload: "/opt/bin/caravan-workload",
		CheckpointDir: "/shared/ckpt", Held: true}
	j := trace.Job{ID: "17", GPUs: 4, Duration: 100, Group: "vc-7f04ca"}
	w := Work{Isolated: 100, Real: 10 * time.Second, Iterations: 50, IterationTime: 200 * time.Millisecond,
		Speed: map[string]float64{"V100": 1, "K80": 0.25}, Profile: "replay-lm-x4"}
	job := JobSpec(o, "replay-ab12-17", j, w)

	must.Eq(t, "replay-ab12-17", *job.ID)
	must.Eq(t, api.JobTypeBatch, *job.Type)
	must.Eq(t, map[string]string{cluster.MetaPolicy: "default", cluster.MetaProfile: "replay-lm-x4",
		cluster.MetaDuration: "10", MetaTraceID: "17", cluster.MetaGroup: "vc-7f04ca"}, job.Meta)
	must.SliceLen(t, 1, job.Constraints)
	must.True(t, cluster.IsHold(job.Constraints[0]))
	must.True(t, cluster.Held(job))

	must.SliceLen(t, 1, job.TaskGroups)
	tg := job.TaskGroups[0]
	must.Eq(t, 4, *tg.Count, must.Sprint("one allocation per GPU"))
	must.SliceLen(t, 1, tg.Tasks)
	task := tg.Tasks[0]
	must.Eq(t, "caravan", task.Driver)
	must.Eq(t, "/opt/bin/caravan-workload", task.Config["command"])
	must.Eq(t, []string{"-iterations", "50", "-iteration-time", "200ms", "-steps", "1",
		"-persistent-mib", "256", "-ephemeral-mib", "64",
		"-checkpoint", "/shared/ckpt/replay-ab12-17-${NOMAD_ALLOC_INDEX}.json",
		"-gang-checkpoints", "/shared/ckpt/replay-ab12-17-0.json,/shared/ckpt/replay-ab12-17-1.json," +
			"/shared/ckpt/replay-ab12-17-2.json,/shared/ckpt/replay-ab12-17-3.json",
		"-speed", "K80=0.25,V100=1"}, task.Config["args"].([]string), must.Sprint("four workers of one gang"))
	must.SliceLen(t, 1, task.Resources.Devices)
	must.Eq(t, "nvidia/gpu", task.Resources.Devices[0].Name)
	must.Eq(t, uint64(1), *task.Resources.Devices[0].Count)
	must.Eq(t, DefaultCPU, *task.Resources.CPU)
	must.Eq(t, DefaultMemoryMB, *task.Resources.MemoryMB)

	// Unheld, no profile, no speeds: a plain job the planner still manages.
	o.Held = false
	plain := JobSpec(o, "replay-ab12-3", trace.Job{ID: "3", GPUs: 0, Duration: 5},
		Work{Real: 500 * time.Millisecond, Iterations: 2, IterationTime: 250 * time.Millisecond})
	must.SliceEmpty(t, plain.Constraints)
	must.False(t, cluster.Held(plain))
	_, hasProfile := plain.Meta[cluster.MetaProfile]
	must.False(t, hasProfile)
	_, hasGroup := plain.Meta[cluster.MetaGroup]
	must.False(t, hasGroup, must.Sprint("no group in the trace: the planner's default (the namespace)"))
	must.Eq(t, "0.5", plain.Meta[cluster.MetaDuration])
	must.Eq(t, 1, *plain.TaskGroups[0].Count, must.Sprint("a job of 0 GPUs takes one, as in the simulator"))
	must.SliceNotContains(t, plain.TaskGroups[0].Tasks[0].Config["args"].([]string), "-speed")
	must.SliceNotContains(t, plain.TaskGroups[0].Tasks[0].Config["args"].([]string), "-shared-speed")
	must.SliceNotContains(t, plain.TaskGroups[0].Tasks[0].Config["args"].([]string), "-gang-checkpoints",
		must.Sprint("one worker is no gang"))
	o.IndependentWorkers = true
	must.SliceNotContains(t, JobSpec(o, "replay-ab12-17", j, w).TaskGroups[0].Tasks[0].Config["args"].([]string), "-gang-checkpoints",
		must.Sprint("workers on their own courses"))
	o.IndependentWorkers = false

	// On GPUs cut into lanes, the workload slows beside its partners as
	// the simulator's co-location factor says.
	o.SharedSpeed = 0.6
	laned := JobSpec(o, "replay-ab12-4", trace.Job{ID: "4", GPUs: 1, Duration: 5},
		Work{Real: 500 * time.Millisecond, Iterations: 2, IterationTime: 250 * time.Millisecond})
	args := laned.TaskGroups[0].Tasks[0].Config["args"].([]string)
	must.Eq(t, []string{"-shared-speed", "0.6"}, args[len(args)-2:])
}

func TestJobIDs(t *testing.T) {
	jobs := []trace.Job{{ID: "0"}, {ID: "job 7/a"}, {ID: "0"}, {ID: ""}, {ID: "ok.x_y-z"}}
	must.Eq(t, []string{"replay-r1-0", "replay-r1-job-7-a", "replay-r1-0-2", "replay-r1-job", "replay-r1-ok.x_y-z"},
		JobIDs("replay-r1-", jobs))
}

func TestProfiles(t *testing.T) {
	must.Eq(t, "replay-resnet-50-batch-size-64-x2", ProfileName("ResNet-50 (batch size 64)", 2))
	works := []Work{
		{Profile: "replay-b-x1", Rates: map[string]float64{"V100": 2}},
		{},
		{Profile: "replay-a-x1", Rates: map[string]float64{"V100": 1, "P100": 0.5}},
		{Profile: "replay-b-x1", Rates: map[string]float64{"V100": 2}},
	}
	ps, err := Profiles(works)
	must.NoError(t, err)
	must.SliceLen(t, 2, ps)
	must.Eq(t, "replay-a-x1", ps[0].Name)
	must.Eq(t, map[string]float64{"V100": 1, "P100": 0.5}, ps[0].Throughput)
	must.Eq(t, "replay-b-x1", ps[1].Name)
}

func TestFit(t *testing.T) {
	mix, err := trace.ParseShorthand("4xV100,2xK80")
	must.NoError(t, err)
	n4g4, err := trace.ParseShorthand("n4g4")
	must.NoError(t, err)
	cases := []struct {
		name    string
		c       trace.Cluster
		jobs    []trace.Job
		works   []Work
		wantErr string
	}{
		{"16 GPUs over 4 nodes hold a 16-GPU job", n4g4, []trace.Job{{ID: "a", GPUs: 16}}, nil, ""},
		{"a 17-GPU job does not fit n4g4", n4g4, []trace.Job{{ID: "a", GPUs: 4}, {ID: "big", GPUs: 17}}, nil,
			"trace job big asks for 17 GPUs, but cluster n4g4 has at most 16 of one model (V100)"},
		{"a job runs on one model", mix, []trace.Job{{ID: "a", GPUs: 5}}, nil,
			"trace job a asks for 5 GPUs, but cluster 4xV100,2xK80 has at most 4 of one model (V100)"},
		{"only models the job has a rate on", mix, []trace.Job{{ID: "a", GPUs: 3}},
			[]Work{{Rates: map[string]float64{"K80": 1}}},
			"has at most 2 of one model (K80)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := Fit(tc.jobs, tc.works, tc.c)
			if tc.wantErr == "" {
				must.NoError(t, err)
				return
			}
			must.ErrorContains(t, err, tc.wantErr)
		})
	}
}

// A Synergy job's replay: a profile named after its model with every
// profiled point of it, throughput 1 on each model of the cluster, and a
// workload told the grid its sizer reads and the cluster's share, which
// it passes as -host-speed. A job without a model, or of one the table
// lacks, is left alone (sized at the share, it runs as fast); one with
// throughputs too is an error.
func TestSensitiveWork(t *testing.T) {
	sens, err := policy.NewSensitivity([]policy.SensitivityRow{
		{Model: "res18", GPUs: 1, CPUsPerGPU: 1, MemGBPerGPU: 62.5, Throughput: 0.5},
		{Model: "res18", GPUs: 1, CPUsPerGPU: 6, MemGBPerGPU: 62.5, Throughput: 2},
		{Model: "res18", GPUs: 2, CPUsPerGPU: 3, MemGBPerGPU: 62.5, Throughput: 1},
		{Model: "bert", GPUs: 1, CPUsPerGPU: 3, MemGBPerGPU: 62.5, Throughput: 0},
	})
	must.NoError(t, err)
	n4g4, err := trace.ParseShorthand("n4g4")
	must.NoError(t, err)
	share, err := ProportionalShare(n4g4)
	must.NoError(t, err)
	must.Eq(t, [2]float64{10, 64}, share)

	var w Work
	must.NoError(t, SensitiveWork(&w, trace.Job{ID: "a", GPUs: 1, Model: "res18"}, []string{"V100"}, sens, share, 1000))
	must.Eq(t, "res18", w.Profile)
	must.Eq(t, map[string]float64{"V100": 1}, w.Rates)
	must.SliceLen(t, 3, w.Sensitivity)
	must.Eq(t, &workload.HostSpeed{CoreMHz: 1000, Share: share, Points: [][3]float64{{1, 62.5, 0.5}, {6, 62.5, 2}}}, w.Host)
	ps, err := Profiles([]Work{w})
	must.NoError(t, err)
	must.Eq(t, 3, len(ps[0].Sensitivity))
	args := JobSpec(JobOptions{TimeScale: 1}, "replay-x-a", trace.Job{ID: "a", GPUs: 1}, w).TaskGroups[0].Tasks[0].Config["args"].([]string)
	must.Eq(t, "-host-speed", args[len(args)-2])
	h, err := workload.ParseHostSpeed(args[len(args)-1])
	must.NoError(t, err)
	must.Eq(t, w.Host, h)

	var plain Work
	must.NoError(t, SensitiveWork(&plain, trace.Job{ID: "b", GPUs: 1}, []string{"V100"}, sens, share, 1000))
	must.Eq(t, Work{}, plain)
	must.NoError(t, SensitiveWork(&plain, trace.Job{ID: "c", GPUs: 1, Model: "vgg19"}, []string{"V100"}, sens, share, 1000))
	must.Eq(t, Work{}, plain)
	must.ErrorContains(t, SensitiveWork(&Work{Rates: map[string]float64{"V100": 2}}, trace.Job{ID: "d", Model: "bert"}, []string{"V100"}, sens, share, 1000), "two profiles")

	mixed := trace.Cluster{Name: "mixed", Groups: []trace.NodeGroup{{Count: 1, GPUModel: "V100", GPUs: 4, CPUs: 40, MemoryGB: 256}, {Count: 1, GPUModel: "K80", GPUs: 4, CPUs: 16, MemoryGB: 256}}}
	_, err = ProportionalShare(mixed)
	must.ErrorContains(t, err, "needs one share")
}

// With a sensitivity table, a task asks for its proportional share unless
// told otherwise, so that a job the policy does not size runs at speed 1
// there, as the simulator runs it: n4g4's 10 cores and 64 GB per GPU at
// 1,000 MHz a core.
func TestSizedReplayTasksAskForTheShare(t *testing.T) {
	sens, err := policy.NewSensitivity([]policy.SensitivityRow{{Model: "res18", GPUs: 1, CPUsPerGPU: 3, MemGBPerGPU: 62.5, Throughput: 1}})
	must.NoError(t, err)
	n4g4, err := trace.ParseShorthand("n4g4")
	must.NoError(t, err)
	jobs := []trace.Job{{ID: "a", GPUs: 1, Duration: 10, Model: "res18"}}
	for _, tc := range []struct {
		cpu, mem         int
		wantCPU, wantMem int
	}{{0, 0, 10000, 65536}, {500, 0, 500, 65536}} {
		p, err := Prepare(Config{Jobs: jobs, Cluster: n4g4, Sensitivity: sens, CoreMHz: 1000, Job: JobOptions{TimeScale: 1, CPU: tc.cpu, MemoryMB: tc.mem}})
		must.NoError(t, err)
		res := JobSpec(p.cfg.Job, "replay-x-a", jobs[0], p.Works[0]).TaskGroups[0].Tasks[0].Resources
		must.Eq(t, [2]int{tc.wantCPU, tc.wantMem}, [2]int{*res.CPU, *res.MemoryMB})
	}
	_, err = Prepare(Config{Jobs: jobs, Cluster: n4g4, Sensitivity: sens, Job: JobOptions{TimeScale: 1}})
	must.ErrorContains(t, err, "MHz of a core")
}
