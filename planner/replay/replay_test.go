package replay

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/hashicorp/nomad/helper/pointer"
	"github.com/shoenig/test/must"

	"github.com/caravan-gpu/caravan/planner/cluster"
	"github.com/caravan-gpu/caravan/planner/consulx"
	"github.com/caravan-gpu/caravan/planner/plannerapi"
	"github.com/caravan-gpu/caravan/planner/trace"
)

// fakeNomad runs every registered job at once for its caravan.duration, on
// as many GPUs as it asks, with no contention: enough to check what the
// replay submits, when, what it reads back and that it purges.
type fakeNomad struct {
	mu      sync.Mutex
	gpus    int
	lanes   int // each GPU cut into that many lanes, when more than 1
	jobs    map[string]*fakeJob
	purged  []string
	fail    string // a job whose task fails to start
	nodeErr error
}

type fakeJob struct {
	spec *api.Job
	at   time.Time
	dur  time.Duration
}

func newFakeNomad(gpus int) *fakeNomad { return &fakeNomad{gpus: gpus, jobs: map[string]*fakeJob{}} }

func (f *fakeNomad) Address() string { return "http://fake:4646" }

func (f *fakeNomad) Nodes(context.Context) ([]*api.NodeListStub, error) {
	if f.nodeErr != nil {
		return nil, f.nodeErr
	}
	var insts []*api.NodeDevice
	for i := 0; i < f.gpus; i++ {
		for l := 0; l < max(f.lanes, 1); l++ {
			id := fmt.Sprintf("GPU-%d", i)
			if f.lanes > 1 {
				id += fmt.Sprintf(":lane%d", l)
			}
			insts = append(insts, &api.NodeDevice{ID: id, Healthy: true})
		}
	}
	model := "V100"
	attrs := map[string]*api.Attribute{"model": {StringVal: &model}}
	if f.lanes > 1 {
		attrs["lanes_per_gpu"] = &api.Attribute{IntVal: pointer.Of(int64(f.lanes))}
	}
	return []*api.NodeListStub{{ID: "n1", Name: "n1", Status: "ready", SchedulingEligibility: "eligible",
		NodeResources: &api.NodeResources{Devices: []*api.NodeDeviceResource{{Vendor: "nvidia", Type: "gpu", Name: "V100",
			Attributes: attrs, Instances: insts}}}}}, nil
}

func (f *fakeNomad) Register(_ context.Context, job *api.Job) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.jobs[*job.ID]; ok {
		return errors.New("job exists")
	}
	secs, _ := strconv.ParseFloat(job.Meta[cluster.MetaDuration], 64)
	f.jobs[*job.ID] = &fakeJob{spec: job, at: time.Now(), dur: time.Duration(secs * float64(time.Second))}
	return nil
}

func (f *fakeNomad) Jobs(_ context.Context, prefix string) ([]*api.JobListStub, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*api.JobListStub
	for id, j := range f.jobs {
		if !strings.HasPrefix(id, prefix) {
			continue
		}
		s := &api.JobListStub{ID: id, Status: "running", JobSummary: &api.JobSummary{Summary: map[string]api.TaskGroupSummary{}}}
		tg := api.TaskGroupSummary{Running: *j.spec.TaskGroups[0].Count}
		switch {
		case id == f.fail:
			tg = api.TaskGroupSummary{Failed: 1}
		case time.Since(j.at) > j.dur+10*time.Millisecond:
			s.Status = "dead"
			tg = api.TaskGroupSummary{Complete: tg.Running}
		}
		s.JobSummary.Summary[GroupName] = tg
		out = append(out, s)
	}
	return out, nil
}

func (f *fakeNomad) Allocations(_ context.Context, id string) ([]*api.AllocationListStub, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	j := f.jobs[id]
	if j == nil {
		return nil, errors.New("no such job")
	}
	var out []*api.AllocationListStub
	for i := 0; i < *j.spec.TaskGroups[0].Count; i++ {
		ts := &api.TaskState{StartedAt: j.at.Add(5 * time.Millisecond)}
		a := &api.AllocationListStub{ID: fmt.Sprintf("%s-%d-0000", id, i), Name: fmt.Sprintf("%s.train[%d]", id, i),
			DesiredStatus: "run", ClientStatus: "running", TaskStates: map[string]*api.TaskState{"train": ts}}
		if id == f.fail {
			ts.StartedAt, ts.Failed = time.Time{}, true
			ts.Events = []*api.TaskEvent{{Type: api.TaskDriverFailure, DisplayMessage: "failed to launch command with executor: no such file or directory"},
				{Type: api.TaskNotRestarting, DisplayMessage: "Policy allows no restarts"}}
			a.ClientStatus = "failed"
		} else if end := j.at.Add(j.dur + 5*time.Millisecond); time.Now().After(end) {
			ts.FinishedAt, a.ClientStatus = end, "complete"
		}
		out = append(out, a)
	}
	return out, nil
}

func (f *fakeNomad) History(context.Context, string) (JobHistory, error) {
	return JobHistory{Version: 2}, nil
}

func (f *fakeNomad) Purge(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.jobs, id)
	f.purged = append(f.purged, id)
	return nil
}

func (f *fakeNomad) BatchPreemption(context.Context) (bool, error) { return true, nil }

type memKV struct {
	mu sync.Mutex
	kv map[string][]byte
}

func (m *memKV) Put(_ context.Context, k string, v []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.kv == nil {
		m.kv = map[string][]byte{}
	}
	m.kv[k] = v
	return nil
}

func replayConfig(t *testing.T, jobs []trace.Job, spec string) Config {
	c, err := trace.ParseShorthand(spec)
	must.NoError(t, err)
	return Config{Jobs: jobs, Cluster: c, Policy: "las", Poll: 20 * time.Millisecond,
		Job: JobOptions{Prefix: "replay-t1-", TimeScale: 100, Workload: "/bin/caravan-workload",
			CheckpointDir: filepath.Join(t.TempDir(), "ckpt"), Held: true}}
}

// Jobs are submitted at their scaled arrivals, read back in trace seconds,
// and purged when the replay ends.
func TestRunSubmitsReadsAndPurges(t *testing.T) {
	jobs := []trace.Job{
		{ID: "0", GPUs: 1, Arrival: 0, Duration: 20},
		{ID: "1", GPUs: 2, Arrival: 10, Duration: 30},
		{ID: "2", GPUs: 1, Arrival: 30, Duration: 10},
	}
	cfg := replayConfig(t, jobs, "n1g4")
	var progress []int
	cfg.Progress = func(done, total int) { progress = append(progress, done) }
	p, err := Prepare(cfg)
	must.NoError(t, err)
	n := newFakeNomad(4)
	must.NoError(t, p.Check(context.Background(), n))
	res, err := p.Run(context.Background(), n)
	must.NoError(t, err)

	must.SliceLen(t, 3, res.Sim.Jobs)
	must.Eq(t, 0, res.Sim.Summary.Unfinished)
	for i, jr := range res.Sim.Jobs {
		j := jobs[i]
		must.Eq(t, j.ID, jr.ID)
		// Submitted at the scaled arrival, give or take scheduling: 5 ms
		// real is 0.5 trace s.
		must.InDelta(t, j.Arrival, jr.Arrival, 3, must.Sprintf("job %s arrival", j.ID))
		must.InDelta(t, j.Duration, jr.JCT, 4, must.Sprintf("job %s JCT", j.ID))
		must.Eq(t, j.Duration, jr.Isolated)
	}
	must.Eq(t, []uint64{2, 2, 2}, res.Writes)
	must.Eq(t, 2.0, res.AvgWrites())
	must.Eq(t, 3, progress[len(progress)-1])
	must.Eq(t, "las", res.Sim.Summary.Policy)
	must.Greater(t, 0, res.Sim.Summary.Utilization)
	must.SliceContainsAll(t, []string{"replay-t1-0", "replay-t1-1", "replay-t1-2"}, n.purged)
	must.MapEmpty(t, n.jobs)

	// What was submitted: held, managed, on the checkpoint directory, which
	// the replay made writable for the tasks' users, not sticky: a job
	// resumed as another UID replaces its earlier run's checkpoint.
	st, err := os.Stat(cfg.Job.CheckpointDir)
	must.NoError(t, err)
	must.Eq(t, os.FileMode(0o777), st.Mode()&(os.ModeSticky|os.ModePerm))
}

// The planner's writes are read while the jobs run and at the end: each
// job keeps the rounds that wrote it, and nothing else.
func TestRunReadsTheRoundsThatWroteEachJob(t *testing.T) {
	jobs := []trace.Job{{ID: "0", GPUs: 1, Arrival: 0, Duration: 20}, {ID: "1", GPUs: 1, Arrival: 5, Duration: 20}}
	cfg := replayConfig(t, jobs, "n1g4")
	var mu sync.Mutex
	reads := 0
	first := time.Now()
	cfg.Decisions = func(context.Context) ([]plannerapi.Decision, error) {
		mu.Lock()
		defer mu.Unlock()
		reads++
		rec := func(at time.Time, outcome string) plannerapi.Record {
			return plannerapi.Record{Time: at, Outcome: outcome}
		}
		return []plannerapi.Decision{
			{Record: rec(first, "written"), Namespace: "default", Job: "replay-t1-0"},
			{Record: rec(first.Add(time.Second), "written"), Namespace: "default", Job: "replay-t1-0"},
			{Record: rec(first, "failed"), Namespace: "default", Job: "replay-t1-1"},
			{Record: rec(first, "written"), Namespace: "default", Job: "someone-else"},
		}, nil
	}
	p, err := Prepare(cfg)
	must.NoError(t, err)
	n := newFakeNomad(4)
	res, err := p.Run(context.Background(), n)
	must.NoError(t, err)
	must.SliceLen(t, 2, res.Decided)
	must.SliceLen(t, 2, res.Decided[0], must.Sprint("each round once, however often read"))
	must.InDelta(t, 100.0, res.Decided[0][1]-res.Decided[0][0], 1e-6, must.Sprint("one real second at time scale 100"))
	must.SliceEmpty(t, res.Decided[1], must.Sprint("a failed write is not a decision Nomad took"))
	must.Positive(t, reads)

	cfg.Decisions = nil
	p, err = Prepare(cfg)
	must.NoError(t, err)
	res, err = p.Run(context.Background(), newFakeNomad(4))
	must.NoError(t, err)
	must.Nil(t, res.Decided, must.Sprint("not read: unknown, not empty"))
}

// Ctrl-C (a cancelled context) still purges what was submitted.
func TestRunPurgesOnCancel(t *testing.T) {
	jobs := []trace.Job{{ID: "0", GPUs: 1, Arrival: 0, Duration: 1000}, {ID: "1", GPUs: 1, Arrival: 5000, Duration: 10}}
	cfg := replayConfig(t, jobs, "n1g4")
	p, err := Prepare(cfg)
	must.NoError(t, err)
	n := newFakeNomad(4)
	must.NoError(t, p.Check(context.Background(), n))
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for {
			if js, _ := n.Jobs(ctx, "replay-t1-"); len(js) > 0 {
				cancel()
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	_, err = p.Run(ctx, n)
	must.ErrorIs(t, err, context.Canceled)
	must.Eq(t, []string{"replay-t1-0"}, n.purged)
	must.MapEmpty(t, n.jobs)
}

// A task the driver cannot start stops the replay with an error naming the
// job and the -workload path; the jobs are purged.
func TestRunStopsOnMissingWorkload(t *testing.T) {
	cfg := replayConfig(t, []trace.Job{{ID: "0", GPUs: 1, Duration: 1000}}, "n1g4")
	p, err := Prepare(cfg)
	must.NoError(t, err)
	n := newFakeNomad(4)
	n.fail = "replay-t1-0"
	must.NoError(t, p.Check(context.Background(), n))
	_, err = p.Run(context.Background(), n)
	must.ErrorContains(t, err, "job replay-t1-0: the caravan driver could not start task train")
	must.ErrorContains(t, err, "-workload /bin/caravan-workload")
	must.ErrorContains(t, err, "no such file or directory")
	must.Eq(t, []string{"replay-t1-0"}, n.purged)
}

// The timeout ends a run that does not finish; its jobs are unfinished.
func TestRunTimeout(t *testing.T) {
	// Job 0 runs 0.1 real s; the timeout leaves it room on a loaded
	// machine, and job 1 (1,000 real s) none.
	cfg := replayConfig(t, []trace.Job{{ID: "0", GPUs: 1, Duration: 10}, {ID: "1", GPUs: 1, Duration: 100000}}, "n1g4")
	cfg.Timeout = 2 * time.Second
	p, err := Prepare(cfg)
	must.NoError(t, err)
	n := newFakeNomad(4)
	must.NoError(t, p.Check(context.Background(), n))
	res, err := p.Run(context.Background(), n)
	must.NoError(t, err)
	must.True(t, res.TimedOut)
	must.Eq(t, 1, res.Sim.Summary.Unfinished)
	must.False(t, math.IsNaN(res.Sim.Jobs[0].JCT))
	must.True(t, math.IsNaN(res.Sim.Jobs[1].JCT))
	must.MapEmpty(t, n.jobs)
}

func TestCheckNamesNomadAndJob(t *testing.T) {
	cfg := replayConfig(t, []trace.Job{{ID: "7", GPUs: 4, Duration: 10}}, "n1g4")
	p, err := Prepare(cfg)
	must.NoError(t, err)

	down := newFakeNomad(4)
	down.nodeErr = errors.New("connection refused")
	err = p.Check(context.Background(), down)
	must.ErrorContains(t, err, "cannot reach Nomad at http://fake:4646 (set -address or NOMAD_ADDR): connection refused")

	small := newFakeNomad(2)
	err = p.Check(context.Background(), small)
	must.ErrorContains(t, err, "trace job 7 asks for 4 GPUs, but Nomad at http://fake:4646 offers at most 2 of one model (V100)")

	// Two GPUs cut into two lanes each are four instances, but two GPUs.
	laned := newFakeNomad(2)
	laned.lanes = 2
	err = p.Check(context.Background(), laned)
	must.ErrorContains(t, err, "trace job 7 asks for 4 GPUs, but Nomad at http://fake:4646 offers at most 2 of one model (V100)")

	none := newFakeNomad(0)
	must.ErrorContains(t, p.Check(context.Background(), none), "no ready node with healthy nvidia/gpu devices")

	_, err = Prepare(replayConfig(t, []trace.Job{{ID: "big", GPUs: 5}}, "n1g4"))
	must.ErrorContains(t, err, "trace job big asks for 5 GPUs, but cluster n1g4 has at most 4")
	_, err = Prepare(replayConfig(t, nil, "n1g4"))
	must.ErrorIs(t, err, ErrNoJobs)
}

func TestWriteProfilesAndSeedHistory(t *testing.T) {
	tp := throughputs(t)
	cfg := replayConfig(t, []trace.Job{
		{ID: "0", GPUs: 1, Steps: 100, JobType: "ResNet-18 (batch size 64)"},
		{ID: "1", GPUs: 1, Steps: 50, JobType: "ResNet-18 (batch size 64)"},
	}, "2xV100,2xP100")
	cfg.Throughputs = tp
	p, err := Prepare(cfg)
	must.NoError(t, err)
	kv := &memKV{}
	n, err := p.WriteProfiles(context.Background(), kv)
	must.NoError(t, err)
	must.Eq(t, 1, n)
	must.Eq(t, `{"name":"replay-resnet-18-batch-size-64-x1","throughput":{"P100":1,"V100":2}}`,
		string(kv.kv[consulx.ProfilesPrefix+"replay-resnet-18-batch-size-64-x1"]))

	must.NoError(t, SeedHistory(context.Background(), kv, []float64{100, 250}, 50))
	must.Eq(t, `[2,5]`, string(kv.kv[consulx.HistoryKey]))
}

// Trace second 0 goes on the next multiple of the lease on the Unix clock,
// where the planner's leases end; with no lease, at once.
func TestStartAtLinesUpWithTheLease(t *testing.T) {
	at := time.Unix(1000, 250_000_000)
	must.Eq(t, time.Unix(1010, 0), StartAt(at, 10*time.Second))
	must.Eq(t, time.Unix(1000, 0), StartAt(time.Unix(1000, 0), 10*time.Second))
	must.Eq(t, at, StartAt(at, 0))
}
