package service

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caravan-gpu/caravan/planner/cluster"
	"github.com/caravan-gpu/caravan/planner/consulx"
	"github.com/caravan-gpu/caravan/planner/consulx/consulxtest"
	"github.com/caravan-gpu/caravan/planner/nomadx/nomadxtest"
	"github.com/caravan-gpu/caravan/planner/plannerapi"
	"github.com/caravan-gpu/caravan/planner/profile"
	"github.com/caravan-gpu/caravan/planner/rewrite"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
	"github.com/hashicorp/nomad/helper/pointer"
	"github.com/shoenig/test/must"
	"github.com/shoenig/test/wait"
)

func str(s string) *string { return &s }

// gpuNode is a node with n whole GPUs of model.
func gpuNode(id string, groups map[string]int) *api.NodeListStub {
	res := &api.NodeResources{Cpu: api.NodeCpuResources{CpuShares: 16000, TotalCpuCores: 16}, Memory: api.NodeMemoryResources{MemoryMB: 65536}}
	for model, n := range groups {
		d := &api.NodeDeviceResource{Vendor: "nvidia", Type: "gpu", Name: model, Attributes: map[string]*api.Attribute{
			"model":  {StringVal: str(model)},
			"memory": {IntVal: pointer.Of[int64](40960), Unit: "MiB"},
		}}
		for i := 0; i < n; i++ {
			d.Instances = append(d.Instances, &api.NodeDevice{ID: model + "-" + string(rune('0'+i)), Healthy: true})
		}
		res.Devices = append(res.Devices, d)
	}
	return &api.NodeListStub{ID: id, Name: id, Status: "ready", SchedulingEligibility: "eligible", NodeResources: res}
}

func managedJob(id string, gpus uint64, meta map[string]string) *api.Job {
	job := api.NewBatchJob(id, id, "global", 50)
	job.Meta = map[string]string{cluster.MetaPolicy: "las"}
	for k, v := range meta {
		job.Meta[k] = v
	}
	task := api.NewTask("train", "caravan")
	task.Require(&api.Resources{CPU: pointer.Of(100), MemoryMB: pointer.Of(64),
		Devices: []*api.RequestedDevice{{Name: "nvidia/gpu", Count: pointer.Of(gpus)}}})
	job.AddTaskGroup(api.NewTaskGroup("train", 1).AddTask(task))
	return job
}

func runningAlloc(jobID, device string, started time.Time) *api.AllocationListStub {
	return &api.AllocationListStub{ID: "alloc-" + jobID, JobID: jobID, Namespace: "default", NodeID: "n1",
		ClientStatus: "running", DesiredStatus: "run", CreateTime: started.UnixNano(),
		TaskStates: map[string]*api.TaskState{"train": {State: "running", StartedAt: started}},
		AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{
			"train": {Devices: []*api.AllocatedDeviceResource{{Vendor: "nvidia", Type: "gpu", Name: "T4", DeviceIDs: []string{device}}}}}}}
}

func settings(t *testing.T, src string) *Settings {
	t.Helper()
	s, err := ParseConfig("planner.hcl", []byte(src))
	must.NoError(t, err)
	return s
}

// longRunningOnOneT4 is a cluster of one T4 on which the managed job
// "long" has run for ran.
func longRunningOnOneT4(ran time.Duration) *nomadxtest.Fake {
	fake := nomadxtest.New()
	fake.NodeSet = []*api.NodeListStub{gpuNode("n1", map[string]int{"T4": 1})}
	fake.Submit(managedJob("long", 1, nil))
	fake.Update("default", "long", func(j *api.Job) { j.Status = str("running") })
	fake.Allocs = []*api.AllocationListStub{runningAlloc("long", "T4-0", time.Now().Add(-ran))}
	return fake
}

// A long-running job passes the first queue cut and is demoted a band below
// a new job; the policy gives the new job its GPU, so the long job is held,
// which makes Nomad stop its allocation.
func TestRoundDemotesLongJobBelowNewJob(t *testing.T) {
	fake := longRunningOnOneT4(time.Minute)
	fake.Submit(managedJob("short", 1, nil))
	fake.Submit(api.NewBatchJob("unmanaged", "unmanaged", "global", 50))

	p, err := New(settings(t, `planning {
  policy = "las"
  queue_cuts = [30]
}`), fake, nil, nil)
	must.NoError(t, err)
	round, err := p.Round(context.Background())
	must.NoError(t, err)
	must.Eq(t, 2, round.Jobs)
	must.Eq(t, 2, round.Writes)

	long, short := fake.Get("default", "long"), fake.Get("default", "short")
	must.Eq(t, 79, *long.Priority, must.Sprint("attained 60 GPU-s ≥ cut 30: queue 1"))
	must.Eq(t, 80, *short.Priority, must.Sprint("new job: queue 0"))
	// Ranked by priority, but Nomad's preemption, which needs a lead of
	// 10, never evicts long for short: the planner preempts.
	must.Positive(t, *short.Priority-*long.Priority)
	must.Less(t, 10, *short.Priority-*long.Priority)
	must.Eq(t, 50, *fake.Get("default", "unmanaged").Priority)

	q := p.Queue()
	must.Len(t, 2, q.Jobs)
	must.Eq(t, "short", q.Jobs[0].Job)
	must.Eq(t, "long", q.Jobs[1].Job)
	must.Eq(t, 1, q.Jobs[1].Queue)
	must.Greater(t, 55, q.Jobs[1].Attained)

	e, ok := p.Explain("long")
	must.True(t, ok)
	must.Len(t, 1, e.History)
	must.Eq(t, "written", e.History[0].Outcome)
	must.StrContains(t, e.Placement, "preempted")
	must.True(t, cluster.Held(long), must.Sprint("preempted by the hold"))
	must.False(t, cluster.Held(short))
	must.NotEq(t, "", e.History[0].Reason)

	// A second round with nothing new writes nothing.
	round, err = p.Round(context.Background())
	must.NoError(t, err)
	must.Eq(t, 0, round.Writes)
}

// With matching, a pending job is pinned to the model its profile runs
// fastest on.
func TestRoundPinsPendingJobToFasterModel(t *testing.T) {
	fake := nomadxtest.New()
	fake.NodeSet = []*api.NodeListStub{gpuNode("n1", map[string]int{"Tesla T4": 2, "NVIDIA H100": 1})}
	fake.Submit(managedJob("train", 1, map[string]string{cluster.MetaProfile: "resnet"}))
	consul := consulxtest.NewServer()
	data, _ := json.Marshal(profile.Profile{Name: "resnet", Throughput: map[string]float64{"Tesla T4": 1, "NVIDIA H100": 6}})
	must.NoError(t, consul.Client().Put(context.Background(), consulx.ProfilesPrefix+"resnet", data))

	p, err := New(settings(t, `planning { policy = "las+match" }`), fake, consul.Client(), nil)
	must.NoError(t, err)
	p.beginTerm(context.Background(), "")
	must.NoError(t, p.LoadKV(context.Background()))
	_, err = p.Round(context.Background())
	must.NoError(t, err)

	job := fake.Get("default", "train")
	cons := job.TaskGroups[0].Tasks[0].Resources.Devices[0].Constraints
	must.Len(t, 1, cons)
	must.Eq(t, cluster.AttrModel, cons[0].LTarget)
	must.Eq(t, "NVIDIA H100", cons[0].RTarget)
	must.StrContains(t, job.Meta[cluster.MetaPlacement], "NVIDIA H100")
}

func TestFollowerDoesNotWrite(t *testing.T) {
	fake := nomadxtest.New()
	fake.NodeSet = []*api.NodeListStub{gpuNode("n1", map[string]int{"T4": 1})}
	fake.Submit(managedJob("a", 1, nil))
	p, err := New(settings(t, ``), fake, consulxtest.NewServer().Client(), nil)
	must.NoError(t, err)
	must.False(t, p.IsLeader())
	_, err = p.Round(context.Background())
	must.NoError(t, err)
	must.Eq(t, 0, fake.Registers)
	must.Len(t, 1, p.Queue().Jobs, must.Sprint("a follower still serves the queue"))
}

// The status says how often the planner plans at least: a replay bounds
// the wait for an event's round by it.
func TestStatusSaysThePlanningInterval(t *testing.T) {
	p, err := New(settings(t, "planning {\n  interval = \"3s\"\n}\n"), nomadxtest.New(), nil, nil)
	must.NoError(t, err)
	must.Eq(t, 3*time.Second, p.Status().Interval)
}

func TestPreemptionCheckWarns(t *testing.T) {
	fake := nomadxtest.New()
	p, err := New(settings(t, ``), fake, nil, nil)
	must.NoError(t, err)
	pre, err := p.CheckScheduler(context.Background())
	must.NoError(t, err)
	must.False(t, pre.Batch)
	must.Len(t, 2, p.Status().Warnings)
	must.StrContains(t, p.Status().Warnings[0], "caravan setup")

	fake.Sched.PreemptionConfig.BatchSchedulerEnabled = true
	fake.Sched.PreemptionConfig.ServiceSchedulerEnabled = true
	_, err = p.CheckScheduler(context.Background())
	must.NoError(t, err)
	must.Len(t, 0, p.Status().Warnings)
}

// Two replicas share one Consul: exactly one leads and writes; when its
// lock goes, the other takes over.
func TestReplicasElectOneLeader(t *testing.T) {
	fake := nomadxtest.New()
	fake.NodeSet = []*api.NodeListStub{gpuNode("n1", map[string]int{"T4": 1})}
	consul := consulxtest.NewServer()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var replicas []*Planner
	for i, id := range []string{"r1", "r2"} {
		s := settings(t, `id = "`+id+`"
planning {
  interval = "50ms"
  min_interval = "10ms"
}`)
		p, err := New(s, fake, consul.Client(), nil)
		must.NoError(t, err)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		must.NoError(t, err)
		go func() { _ = p.Run(ctx, ln) }()
		replicas = append(replicas, p)
		_ = i
	}
	leaders := func() (n int, who *Planner) {
		for _, p := range replicas {
			if p.IsLeader() {
				n++
				who = p
			}
		}
		return n, who
	}
	must.Wait(t, wait.InitialSuccess(wait.BoolFunc(func() bool { n, _ := leaders(); return n == 1 }),
		wait.Timeout(5*time.Second), wait.Gap(10*time.Millisecond)))
	must.Wait(t, wait.InitialSuccess(wait.BoolFunc(func() bool { return len(consul.Services()) == 2 }),
		wait.Timeout(5*time.Second), wait.Gap(10*time.Millisecond)))
	_, first := leaders()

	consul.Fail(consulx.LockKey)
	// The old leader notices the lost lock a moment later, so a single look
	// may still see it; wait for one leader to hold steady, and never two.
	steadySince := time.Time{}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		n, _ := leaders()
		must.LessEq(t, 1, n, must.Sprint("two replicas lead at once"))
		if n != 1 {
			steadySince = time.Time{}
		} else if steadySince.IsZero() {
			steadySince = time.Now()
		} else if time.Since(steadySince) > 300*time.Millisecond {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	must.False(t, steadySince.IsZero(), must.Sprint("no replica leads after the lock was lost"))
	must.Greater(t, 300*time.Millisecond, time.Since(steadySince))
	_ = first
}

func TestHTTPAPI(t *testing.T) {
	fake := nomadxtest.New()
	fake.NodeSet = []*api.NodeListStub{gpuNode("n1", map[string]int{"T4": 1})}
	fake.Submit(managedJob("a", 1, nil))
	p, err := New(settings(t, ``), fake, nil, nil)
	must.NoError(t, err)
	_, err = p.Round(context.Background())
	must.NoError(t, err)
	srv := httptest.NewServer(p.Handler())
	defer srv.Close()
	c := plannerapi.NewClient(srv.URL, "")

	st, err := c.Status(context.Background())
	must.NoError(t, err)
	must.True(t, st.Leader)
	must.Eq(t, int64(1), st.Rounds)

	q, err := c.Queue(context.Background())
	must.NoError(t, err)
	must.Len(t, 1, q.Jobs)

	e, err := c.Explain(context.Background(), "default/a")
	must.NoError(t, err)
	must.Eq(t, "a", e.Job)
	_, err = c.Explain(context.Background(), "nope")
	var nf *plannerapi.NotFoundError
	must.ErrorAs(t, err, &nf)

	resp, err := http.Get(srv.URL + "/v1/metrics")
	must.NoError(t, err)
	defer resp.Body.Close()
	buf := new(strings.Builder)
	_, _ = io.Copy(buf, resp.Body)
	must.StrContains(t, buf.String(), "caravan_planner_rounds_total 1")
	must.StrContains(t, buf.String(), `caravan_planner_job_writes_total{outcome="written"} 1`)
}

func TestConfigErrorsNameTheField(t *testing.T) {
	cases := map[string]string{
		`planning { policy = "bogus" }`:                                              "planning.policy",
		`planning { migration_cost = "0s" }`:                                         "planning.migration_cost",
		`planning { rotation_period = "0s" }`:                                        "planning.rotation_period",
		`planning { rotation_period = "often" }`:                                     "planning.rotation_period",
		`planning { predict_floor = "0s" }`:                                          "planning.predict_floor",
		`planning { predict_floor = "a little" }`:                                    "planning.predict_floor",
		`planning { interval = "soon" }`:                                             "planning.interval",
		`planning { queue_cuts = [10, 5] }`:                                          "planning.queue_cuts",
		`http { address = "nope" }`:                                                  "http.address",
		`log_level = "loud"`:                                                         "log_level",
		`consul { check_interval = "-1s" }`:                                          "consul.check_interval",
		`nomad { unreachable_after = "never" }`:                                      "nomad.unreachable_after",
		`planing { }`:                                                                "Unsupported block type",
		`planning { policy = 3 `:                                                     "planner.hcl:1",
		`planning { max_writes_per_second = -1 }`:                                    "planning.max_writes_per_second",
		`planning { job_sizes = "/nonexistent" }`:                                    "planning.job_sizes",
		`planning { job_sizes_scale = 0.5 }`:                                         "planning.job_sizes_scale",
		`planning { settle = "-1s" }`:                                                "planning.settle",
		`planning { settle = "1m" }`:                                                 "planning.settle",
		`planning { stop_wait = "0s" }`:                                              "planning.stop_wait",
		`planning { stop_wait = "a while" }`:                                         "planning.stop_wait",
		`planning { core_mhz = -1 }`:                                                 "planning.core_mhz",
		`planning { synergy_lease = "5m" }`:                                          "planning.synergy_lease: policy \"predict\" has no synergy sizer",
		"planning {\n policy = \"fjf+count+synergy\"\n synergy_lease = \"500ms\"\n}": "planning.synergy_lease",
		"planning {\n policy = \"fjf+count+synergy\"\n synergy_lease = \"often\"\n}": "planning.synergy_lease",
		`planning { core_mhz = "fast" }`:                                             "planner.hcl:1,24",
	}
	for src, want := range cases {
		_, err := ParseConfig("planner.hcl", []byte(src))
		must.ErrorContains(t, err, want, must.Sprintf("config %s", src))
	}
	s, err := ParseConfig("planner.hcl", []byte("planning {\n policy = \"fjf+count+synergy\"\n synergy_lease = \"5m\"\n}"))
	must.NoError(t, err)
	cfg, err := policyConfig(s, nil)
	must.NoError(t, err)
	must.Eq(t, 300.0, cfg.SynergyLease)
	s, err = ParseConfig("planner.hcl", []byte(``))
	must.NoError(t, err)
	must.Eq(t, time.Duration(0), s.SynergyLease)
	must.Eq(t, "predict", s.Policy)
	must.Eq(t, DefaultHTTPAddr, s.HTTPAddr)
	must.Eq(t, time.Duration(0), s.Settle, must.Sprint("settle is off unless asked for"))
	s, err = ParseConfig("planner.hcl", []byte("planning {\n settle = \"100ms\"\n}"))
	must.NoError(t, err)
	must.Eq(t, 100*time.Millisecond, s.Settle)
}

// A fixed job-size sample, scaled, is 2D-Gittins' distribution, as
// caravan sim -job-sizes gives it.
func TestConfigJobSizes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sizes.csv")
	must.NoError(t, os.WriteFile(path, []byte("duration\n100\n200\n400\n"), 0o644))
	s, err := ParseConfig("planner.hcl", []byte(fmt.Sprintf("planning {\n job_sizes = %q\n job_sizes_scale = 0.5\n}\n", path)))
	must.NoError(t, err)
	must.Eq(t, 3, s.JobSizes.Len())
	// Scaled by 0.5: 50, 100, 200. Past 50 GPU-s, of the two samples left
	// one ends within a 50 GPU-s quantum, and the two use 50 + 50 of it.
	must.Eq(t, 1.0/(50+50), s.JobSizes.Gittins(50, 50))
	_, err = ParseConfig("planner.hcl", []byte(fmt.Sprintf("planning {\n job_sizes = %q\n job_sizes_scale = -1\n}\n", path)))
	must.ErrorContains(t, err, "planning.job_sizes_scale")
}

// planning.stop_wait reaches the writer that waits for a round's stops.
func TestConfigStopWait(t *testing.T) {
	for src, want := range map[string]time.Duration{``: rewrite.DefaultStopWait, `planning { stop_wait = "12s" }`: 12 * time.Second} {
		p, err := New(settings(t, src), nomadxtest.New(), nil, nil)
		must.NoError(t, err)
		must.Eq(t, want, p.writer.StopWait, must.Sprint(src))
	}
}

// A job whose allocation completed while Nomad still lists it as running is
// neither planned nor written: a new version would make Nomad run it again.
func TestRoundLeavesCompletedJobAlone(t *testing.T) {
	fake := nomadxtest.New()
	fake.NodeSet = []*api.NodeListStub{gpuNode("n1", map[string]int{"T4": 1})}
	fake.Submit(managedJob("done", 1, nil))
	fake.Update("default", "done", func(j *api.Job) { j.Status = str("running") })
	a := runningAlloc("done", "T4-0", time.Now().Add(-time.Minute))
	a.ClientStatus, a.JobVersion = "complete", *fake.Get("default", "done").Version
	a.TaskStates["train"].FinishedAt = time.Now()
	fake.Allocs = []*api.AllocationListStub{a}
	fake.Submit(managedJob("next", 1, nil))

	p, err := New(settings(t, `planning { policy = "fifo" }`), fake, nil, nil)
	must.NoError(t, err)
	regs := fake.Registers
	round, err := p.Round(context.Background())
	must.NoError(t, err)
	must.Eq(t, 1, round.Jobs, must.Sprint("only next is planned"))
	must.Eq(t, regs+1, fake.Registers, must.Sprint("next gets its priority; done is not written"))
	must.Eq(t, 50, *fake.Get("default", "done").Priority)
}

// The policy runs when the simulator would run it: when a job arrives or
// completes, or when the last plan asked to plan again. Rounds in between
// carry out the last plan, whatever attained service did meanwhile.
func TestRoundPlansOnArrivalsCompletionsAndWake(t *testing.T) {
	fake := longRunningOnOneT4(10 * time.Second)

	// Queue cut at 40 GPU-s: long, at 10 s, crosses it in 30 s.
	p, err := New(settings(t, `planning {
  policy = "las"
  queue_cuts = [40]
}`), fake, nil, nil)
	must.NoError(t, err)
	round, err := p.Round(context.Background())
	must.NoError(t, err)
	must.True(t, round.Planned)
	round, err = p.Round(context.Background())
	must.NoError(t, err)
	must.False(t, round.Planned, must.Sprint("nothing arrived, nothing completed, no cut crossed"))

	fake.Submit(managedJob("new", 1, nil))
	round, err = p.Round(context.Background())
	must.NoError(t, err)
	must.True(t, round.Planned, must.Sprint("an arrival"))
	round, err = p.Round(context.Background())
	must.NoError(t, err)
	must.False(t, round.Planned)

	// The plan wakes when long crosses the cut, 30 s from now; move its
	// start back past that.
	p.mu.Lock()
	wake := p.plannedUntil - float64(time.Now().UnixNano())/1e9
	p.mu.Unlock()
	must.Between(t, 25, wake, 31)
	fake.Allocs[0].TaskStates["train"].StartedAt = time.Now().Add(-time.Minute)
	p.mu.Lock()
	p.plannedUntil -= 31
	p.mu.Unlock()
	round, err = p.Round(context.Background())
	must.NoError(t, err)
	must.True(t, round.Planned)
	must.Eq(t, 79, *fake.Get("default", "long").Priority, must.Sprint("demoted at the wake-up"))
}

// The loop plans when the last plan's policy asked to, not an interval
// later: long crosses the queue cut half a second in, and with an hour's
// interval and no events only the policy's wake can demote it.
func TestTheLoopPlansAtThePolicysWake(t *testing.T) {
	fake := longRunningOnOneT4(10 * time.Second)
	p, err := New(settings(t, `planning {
  policy       = "las"
  queue_cuts   = [10.5]
  interval     = "1h"
  min_interval = "10ms"
}`), fake, nil, nil)
	must.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx, ln) }()
	defer func() {
		cancel()
		must.NoError(t, <-done)
	}()
	must.Wait(t, wait.InitialSuccess(wait.BoolFunc(func() bool { return *fake.Get("default", "long").Priority == 79 }),
		wait.Timeout(5*time.Second), wait.Gap(20*time.Millisecond)), must.Sprint("demoted at the policy's wake"))
}

// The loop's timer for a policy's wake: a wake already due plans again
// soon, not at the next interval; a wake past the interval, none, or a
// huge one leaves the tick to it.
func TestPolicyWakeIn(t *testing.T) {
	for _, tc := range []struct {
		seconds float64
		want    time.Duration
		ok      bool
	}{
		{0.5, 500 * time.Millisecond, true},
		{0, minPolicyWake, true},
		{-3, minPolicyWake, true},
		{math.Inf(-1), minPolicyWake, true},
		{0.001, minPolicyWake, true},
		{10, 0, false},
		{1e300, 0, false},
		{math.Inf(1), 0, false},
		{math.NaN(), 0, false},
	} {
		got, ok := policyWakeIn(tc.seconds, 10*time.Second)
		must.Eq(t, tc.ok, ok, must.Sprintf("%g s", tc.seconds))
		must.Eq(t, tc.want, got, must.Sprintf("%g s", tc.seconds))
	}
}

// Losing the lock ends the leadership term, and the term's writes stop at
// once: none lands after the loss, though the round has hundreds to go.
func TestLostLeadershipCancelsTheRoundsWrites(t *testing.T) {
	fake := nomadxtest.New()
	fake.NodeSet = []*api.NodeListStub{gpuNode("n1", map[string]int{"T4": 1})}
	for i := 0; i < 300; i++ {
		fake.Submit(managedJob(fmt.Sprintf("j%03d", i), 1, nil))
	}
	// One writer, so that "after the loss" is well defined.
	p, err := New(settings(t, `planning { write_workers = 1 }`), fake, nil, nil)
	must.NoError(t, err)
	p.beginTerm(context.Background(), "")

	var mu sync.Mutex
	calls, afterLoss := 0, 0
	lost := false
	fake.BeforeRegister = func(*api.Job) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls == 20 {
			p.stopLeading()
			lost = true
		}
	}
	fake.AfterIndexCheck = func(*api.Job) {
		mu.Lock()
		defer mu.Unlock()
		if lost {
			afterLoss++
		}
	}
	_, err = p.Round(context.Background())
	must.NoError(t, err)
	must.Eq(t, 0, afterLoss, must.Sprint("a write landed after the lock was lost"))
	must.Eq(t, 19, fake.Registers, must.Sprint("the writes before the loss land"))
	must.False(t, p.IsLeader())
}

// The health check behind the Consul registration fails once Nomad has not
// answered for nomad.unreachable_after, and passes again when it answers.
func TestHealthFailsWhenNomadIsUnreachable(t *testing.T) {
	fake := nomadxtest.New()
	// Wide enough that the health read just after a round is never late.
	p, err := New(settings(t, `nomad { unreachable_after = "500ms" }`), fake, nil, nil)
	must.NoError(t, err)
	health := func() (int, string) {
		rec := httptest.NewRecorder()
		p.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/v1/health", nil))
		return rec.Code, rec.Body.String()
	}
	_, err = p.Round(context.Background())
	must.NoError(t, err)
	code, _ := health()
	must.Eq(t, http.StatusOK, code)
	time.Sleep(600 * time.Millisecond)
	code, body := health()
	must.Eq(t, http.StatusServiceUnavailable, code)
	must.StrContains(t, body, "Nomad has not answered for")
	_, err = p.Round(context.Background())
	must.NoError(t, err)
	code, _ = health()
	must.Eq(t, http.StatusOK, code)
}

// A Consul that is down when the planner starts is retried with backoff;
// meanwhile the replica plans as a follower, and it leads once Consul is up.
func TestPlannerWaitsForConsul(t *testing.T) {
	first := consulRetryFirst
	consulRetryFirst = 10 * time.Millisecond
	t.Cleanup(func() { consulRetryFirst = first })
	fake := nomadxtest.New()
	fake.NodeSet = []*api.NodeListStub{gpuNode("n1", map[string]int{"T4": 1})}
	consul := consulxtest.NewServer()
	consul.Down = 3
	var logs strings.Builder
	var logMu sync.Mutex
	log := hclog.New(&hclog.LoggerOptions{Output: &lockedWriter{w: &logs, mu: &logMu}})
	p, err := New(settings(t, `planning {
  interval     = "50ms"
  min_interval = "10ms"
}`), fake, consul.Client(), log)
	must.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx, ln) }()
	must.Wait(t, wait.InitialSuccess(wait.BoolFunc(p.IsLeader), wait.Timeout(5*time.Second), wait.Gap(10*time.Millisecond)))
	must.MapLen(t, 1, consul.Services())
	cancel()
	must.NoError(t, <-done)
	logMu.Lock()
	defer logMu.Unlock()
	must.Eq(t, 3, strings.Count(logs.String(), "cannot register in Consul; planning as a follower and retrying"))
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// The planner keeps the specs it wrote: the round after one that held 50
// jobs reads none of them back.
func TestRoundDoesNotReadItsOwnWritesBack(t *testing.T) {
	fake := nomadxtest.New()
	fake.NodeSet = []*api.NodeListStub{gpuNode("n1", map[string]int{"T4": 1})}
	for i := 0; i < 50; i++ {
		fake.Submit(managedJob(fmt.Sprintf("j%02d", i), 1, nil))
	}
	p, err := New(settings(t, ``), fake, nil, nil)
	must.NoError(t, err)
	r, err := p.Round(context.Background())
	must.NoError(t, err)
	must.Eq(t, 50, r.Writes, must.Sprint("one started, the rest held"))
	reads := fake.JobReads
	r, err = p.Round(context.Background())
	must.NoError(t, err)
	must.Eq(t, 0, r.Writes)
	must.Eq(t, reads, fake.JobReads, must.Sprint("no spec read back"))
}

// A hold that lands as one of the job's allocations completes on its own
// makes a new version of the job, and the completed allocation belongs to
// the old one: the job has not finished. The planner must start it again
// once GPUs are free, not leave it held for good.
func TestPreemptedJobWithACompletedAllocationIsStartedAgain(t *testing.T) {
	fake := nomadxtest.New()
	fake.NodeSet = []*api.NodeListStub{gpuNode("n1", map[string]int{"T4": 2})}
	gang := managedJob("gang", 1, nil)
	gang.TaskGroups[0].Count = pointer.Of(2)
	fake.Submit(gang)
	fake.Update("default", "gang", func(j *api.Job) { j.Status = str("running") })
	version := *fake.Get("default", "gang").Version
	started := time.Now().Add(-time.Minute)
	a0, a1 := runningAlloc("gang", "T4-0", started), runningAlloc("gang", "T4-1", started)
	a0.ID, a1.ID = "gang-0", "gang-1"
	a0.JobVersion, a1.JobVersion = version, version
	fake.Allocs = []*api.AllocationListStub{a0, a1}
	fake.Submit(managedJob("short", 2, nil))

	finishedOnItsOwn := false
	fake.BeforeRegister = func(j *api.Job) {
		if *j.ID == "gang" && cluster.Held(j) && !finishedOnItsOwn {
			finishedOnItsOwn = true
			a1.ClientStatus = "complete"
			a1.TaskStates["train"].FinishedAt = time.Now()
		}
	}
	p, err := New(settings(t, `planning {
  policy = "las"
  queue_cuts = [30]
}`), fake, nil, nil)
	must.NoError(t, err)
	_, err = p.Round(context.Background())
	must.NoError(t, err)
	must.True(t, finishedOnItsOwn)
	must.True(t, cluster.Held(fake.Get("default", "gang")), must.Sprint("preempted for the new job"))
	// Nomad leaves a terminal allocation's desired status as it was.
	a1.DesiredStatus = "run"

	// The new job runs, then completes.
	s := runningAlloc("short", "T4-0", time.Now())
	s.JobVersion = *fake.Get("default", "short").Version
	fake.Allocs = append(fake.Allocs, s)
	_, err = p.Round(context.Background())
	must.NoError(t, err)
	must.True(t, cluster.Held(fake.Get("default", "gang")), must.Sprint("still waiting for the GPUs"))
	s.ClientStatus = "complete"
	s.TaskStates["train"].FinishedAt = time.Now()
	fake.Update("default", "short", func(j *api.Job) { j.Status = str("dead") })

	_, err = p.Round(context.Background())
	must.NoError(t, err)
	must.False(t, cluster.Held(fake.Get("default", "gang")), must.Sprint("the GPUs are free: the preempted job starts again"))
}

// Nomad is placing a job the planner has just released, or one just
// submitted without the hold: a placement written then would replace the
// allocations it is making (a gang pinned to the nodes its first half took
// never placed its second half).
func TestSettledWaitsForNomadToPlace(t *testing.T) {
	now := time.Now()
	long := now.Add(-time.Hour)
	for _, tc := range []struct {
		name                string
		submitted, modified time.Time
		waiting             float64
		want                bool
	}{
		{"waited long, untouched since", long, long, 3000, true},
		{"just submitted", now.Add(-time.Second), now.Add(-time.Second), 1, false},
		{"just released after a long wait", long, now.Add(-100 * time.Millisecond), 3000, false},
		{"released a grace ago", long, now.Add(-placementGrace), 3000, true},
		{"ran until a moment ago", long, long, 0.5, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := &cluster.Job{Submitted: tc.submitted, Modified: tc.modified, Waiting: tc.waiting}
			must.Eq(t, tc.want, settled(now, j))
		})
	}
}
