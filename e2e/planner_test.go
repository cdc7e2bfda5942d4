//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/caravan-gpu/caravan/e2e/harness"
	"github.com/caravan-gpu/caravan/planner/consulx"
	"github.com/caravan-gpu/caravan/planner/nomadx"
	"github.com/caravan-gpu/caravan/planner/plannerapi"
	"github.com/caravan-gpu/caravan/planner/rewrite"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// oneT4 is a fleet of a single GPU, so that two jobs contend for it.
const oneT4 = `{
  "driver_version": "550.54.15", "cuda_version": "12.4",
  "gpus": [{"uuid": "GPU-t4", "count": 1, "model": "Tesla T4", "architecture": "turing",
            "compute_capability": "7.5", "memory_mib": 15360, "sm_count": 40}]
}`

type plannerProc struct {
	cmd  *exec.Cmd
	addr string
	api  *plannerapi.Client
	done chan struct{}
	log  string
}

func freeAddr(t testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}

// startPlanner runs bin/caravan planner run against c with the given
// planning block; env, if any, overrides c's (a token of its own, say).
func startPlanner(t testing.TB, c *harness.Cluster, id, planning string, env ...string) *plannerProc {
	t.Helper()
	return startPlannerHCL(t, c, id, fmt.Sprintf("planning {\n%s\n}\n", planning), env...)
}

// startPlannerHCL runs a planner whose planner.hcl holds body beside its
// id, log level and HTTP address. When env gives the planner an API token
// (CARAVAN_PLANNER_TOKEN), its client sends it.
func startPlannerHCL(t testing.TB, c *harness.Cluster, id, body string, env ...string) *plannerProc {
	t.Helper()
	dir := t.TempDir()
	addr := freeAddr(t)
	cfg := fmt.Sprintf("id = %q\nlog_level = \"debug\"\nhttp { address = %q }\n%s", id, addr, body)
	path := filepath.Join(dir, "planner.hcl")
	must.NoError(t, os.WriteFile(path, []byte(cfg), 0o644))
	token := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, plannerapi.TokenEnv+"="); ok {
			token = v
		}
	}
	p := &plannerProc{addr: addr, api: plannerapi.NewClient(addr, token), done: make(chan struct{}), log: filepath.Join(dir, "planner.log")}
	logFile, err := os.Create(p.log)
	must.NoError(t, err)
	p.cmd = exec.Command(filepath.Join(c.BinDir, "caravan"), "planner", "run", "-config", path)
	p.cmd.Env = append(c.Env(), env...) // the last of a name wins
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	must.NoError(t, p.cmd.Start())
	go func() { _ = p.cmd.Wait(); logFile.Close(); close(p.done) }()
	t.Cleanup(func() {
		p.stop(syscall.SIGTERM)
		if t.Failed() {
			data, _ := os.ReadFile(p.log)
			lines := strings.Split(string(data), "\n")
			if len(lines) > 150 {
				lines = lines[len(lines)-150:]
			}
			t.Logf("==== planner %s log ====\n%s", id, strings.Join(lines, "\n"))
		}
	})
	waitFor(t, 30*time.Second, "planner "+id+" serves its API", func() bool {
		_, err := p.api.Status(context.Background())
		return err == nil
	})
	return p
}

// oneLeader waits until exactly one of two replicas leads and returns it
// and the other.
func oneLeader(t testing.TB, a, b *plannerProc) (leader, follower *plannerProc) {
	t.Helper()
	waitFor(t, 30*time.Second, "one replica leads", func() bool {
		sa, sb := a.status(t), b.status(t)
		switch {
		case sa == nil || sb == nil:
			return false
		case sa.Leader && !sb.Leader:
			leader, follower = a, b
		case sb.Leader && !sa.Leader:
			leader, follower = b, a
		default:
			return false
		}
		return true
	})
	return leader, follower
}

func (p *plannerProc) stop(sig syscall.Signal) {
	harness.StopProcess(p.cmd, p.done, sig)
}

func (p *plannerProc) status(t testing.TB) *plannerapi.Status {
	s, err := p.api.Status(context.Background())
	if err != nil {
		return nil
	}
	return s
}

func waitFor(t testing.TB, timeout time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if ok() {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("timed out after %s waiting until %s", timeout, what)
}

func caravanCLI(c *harness.Cluster, args ...string) (string, int) {
	return caravanCLIEnv(c, nil, args...)
}

// caravanCLIEnv runs the caravan CLI with env overriding c's.
func caravanCLIEnv(c *harness.Cluster, env []string, args ...string) (string, int) {
	cmd := exec.Command(filepath.Join(c.BinDir, "caravan"), args...)
	cmd.Env = append(c.Env(), env...)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	}
	return string(out), code
}

func trainVars(c *harness.Cluster, name string, iterations int, profile string) map[string]string {
	return map[string]string{"workload": filepath.Join(c.BinDir, "caravan-workload"), "name": name,
		"iterations": strconv.Itoa(iterations), "profile": profile}
}

func jobPriority(t *testing.T, c *harness.Cluster, id string) int {
	job, _, err := c.Nomad.Jobs().Info(id, nil)
	must.NoError(t, err)
	return *job.Priority
}

// A long job passes the first queue cut and is demoted a band; a short job
// that arrives later gets the top band, preempts it and finishes first.
func TestPlannerDemotesAndPreempts(t *testing.T) {
	c := harness.StartT(t, harness.Options{Fleet: oneT4})

	t.Run("bad config is a usage error naming the field", func(t *testing.T) {
		bad := filepath.Join(t.TempDir(), "planner.hcl")
		must.NoError(t, os.WriteFile(bad, []byte("planning {\n  policy = \"las+teleport\"\n}\n"), 0o644))
		out, code := caravanCLI(c, "planner", "run", "-config", bad)
		must.Eq(t, 2, code, must.Sprint(out))
		must.StrContains(t, out, "planning.policy")
		must.StrContains(t, out, "teleport")
	})

	t.Run("setup turns on preemption", func(t *testing.T) {
		out, code := caravanCLI(c, "setup")
		must.Eq(t, 0, code, must.Sprint(out))
		cfg, _, err := c.Nomad.Operator().SchedulerGetConfiguration(nil)
		must.NoError(t, err)
		must.True(t, cfg.SchedulerConfig.PreemptionConfig.BatchSchedulerEnabled)
		must.True(t, cfg.SchedulerConfig.PreemptionConfig.ServiceSchedulerEnabled)
		out, code = caravanCLI(c, "setup")
		must.Eq(t, 0, code)
		must.StrContains(t, out, "already on")
	})

	p := startPlanner(t, c, "p1", `
  policy       = "las"
  queue_cuts   = [4]
  interval     = "1s"
  min_interval = "200ms"`)
	waitFor(t, 20*time.Second, "the planner leads", func() bool { s := p.status(t); return s != nil && s.Leader })
	must.True(t, p.status(t).Preemption.Batch)

	c.RunJobspec(t, c.Jobspec("planner-batch.nomad.hcl"), trainVars(c, "long", 600, ""))
	c.WaitAllocs(t, "long", 1, time.Minute, harness.Running)
	waitFor(t, 30*time.Second, "long is demoted to priority 79", func() bool { return jobPriority(t, c, "long") == 79 })

	c.RunJobspec(t, c.Jobspec("planner-batch.nomad.hcl"), trainVars(c, "short", 10, ""))
	waitFor(t, 20*time.Second, "short gets the top band", func() bool { return jobPriority(t, c, "short") == 80 })
	shortAllocs := c.WaitAllocs(t, "short", 1, 90*time.Second, harness.Complete)

	longAllocs, _, err := c.Nomad.Jobs().Allocations("long", true, nil)
	must.NoError(t, err)
	preempted := false
	longDone := false
	for _, a := range longAllocs {
		// The planner preempts by holding the job, which makes Nomad stop
		// the allocation. Nomad's own preemption never evicts a managed
		// job for another: their priorities lie within 10 of each other.
		preempted = preempted || a.DesiredStatus == "stop"
		must.NotEq(t, "evict", a.DesiredStatus, must.Sprintf("long's allocation %s was evicted by Nomad", a.ID))
		must.Eq(t, "", a.PreemptedByAllocation)
		longDone = longDone || a.ClientStatus == "complete" && a.DesiredStatus == "run"
	}
	must.True(t, preempted, must.Sprintf("long's allocations: %+v", longAllocs))
	must.False(t, longDone, must.Sprint("the short job finished first"))
	must.Eq(t, "complete", shortAllocs[0].ClientStatus)

	out, code := caravanCLI(c, "queue", "-address", p.addr)
	must.Eq(t, 0, code, must.Sprint(out))
	must.StrContains(t, out, "long")
	out, code = caravanCLI(c, "explain", "-address", p.addr, "long")
	must.Eq(t, 0, code, must.Sprint(out))
	must.StrContains(t, out, "priority 80→79")
	t.Logf("caravan explain long:\n%s", out)
}

// With speedup matching, a job whose profile runs 6× faster on an H100
// than on a T4 is pinned to the H100 by a constraint and lands there: of
// the GPUs free when it arrives, an H100 and a T4 (AlloX matches jobs to
// free GPUs), the matching picks the H100.
func TestPlannerPinsFasterModel(t *testing.T) {
	c := harness.StartT(t, harness.Options{})
	profile := filepath.Join(t.TempDir(), "profiles.json")
	must.NoError(t, os.WriteFile(profile, []byte(`{"profiles": [{"name": "resnet", "throughput":
	  {"NVIDIA H100 80GB HBM3": 6, "NVIDIA A100-SXM4-40GB": 3, "Tesla T4": 1}}]}`), 0o644))
	out, code := caravanCLI(c, "profile", "import", profile)
	must.Eq(t, 0, code, must.Sprint(out))
	out, code = caravanCLI(c, "profile", "show")
	must.Eq(t, 0, code, must.Sprint(out))
	must.StrContains(t, out, "resnet")

	startPlanner(t, c, "p1", `
  policy       = "las+match"
  interval     = "1s"
  min_interval = "200ms"`)
	// Fillers take an H100, both A100s and three T4s (their users' own
	// choice of model), leaving an H100 and a T4 free.
	fillers := []string{"NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB", "Tesla T4", "Tesla T4", "Tesla T4"}
	for i, model := range fillers {
		vars := trainVars(c, fmt.Sprintf("filler-%d", i), 50, "")
		vars["model"] = model
		c.RunJobspec(t, c.Jobspec("planner-batch.nomad.hcl"), vars)
	}
	for i := range fillers {
		c.WaitAllocs(t, fmt.Sprintf("filler-%d", i), 1, 60*time.Second, harness.Running)
	}
	c.RunJobspec(t, c.Jobspec("planner-batch.nomad.hcl"), trainVars(c, "resnet-1", 50, "resnet"))
	var cons []*api.Constraint
	waitFor(t, 30*time.Second, "the planner pins resnet-1 to a model", func() bool {
		job, _, err := c.Nomad.Jobs().Info("resnet-1", nil)
		must.NoError(t, err)
		cons = job.TaskGroups[0].Tasks[0].Resources.Devices[0].Constraints
		return len(cons) > 0
	})
	must.Eq(t, "NVIDIA H100 80GB HBM3", cons[0].RTarget)
	allocs := c.WaitAllocs(t, "resnet-1", 1, 120*time.Second, harness.Complete)
	must.Len(t, 1, allocs, must.Sprint("pinned before placement: no allocation was replaced"))

	alloc, _, err := c.Nomad.Allocations().Info(allocs[0].ID, nil)
	must.NoError(t, err)
	var got []string
	for _, task := range alloc.AllocatedResources.Tasks {
		for _, d := range task.Devices {
			got = append(got, d.Name)
		}
	}
	must.Eq(t, []string{"NVIDIA H100 80GB HBM3"}, got)
}

// Two replicas: one leads. Kill it and the other leads within 15 s; at no
// moment do both lead.
func TestPlannerFailover(t *testing.T) {
	c := harness.StartT(t, harness.Options{Fleet: oneT4})
	a := startPlanner(t, c, "a", failoverPlanning)
	b := startPlanner(t, c, "b", failoverPlanning)
	failover, both := killTheLeader(t, a, b)
	must.False(t, both, must.Sprint("two replicas led at once"))
	// How fast is BenchmarkPlannerFailover's to say: the bound here is the
	// one Consul guarantees, whenever its agent syncs the failed check.
	t.Logf("failover after SIGKILL of the leader: %s (bound %s)", failover.Round(10*time.Millisecond), failoverBound)

	// The new leader writes: a managed job gets its band.
	c.RunJobspec(t, c.Jobspec("planner-batch.nomad.hcl"), trainVars(c, "after-failover", 5, ""))
	waitFor(t, 20*time.Second, "the new leader sets the priority", func() bool { return jobPriority(t, c, "after-failover") == 80 })
}

// failoverPlanning is the planning block of the failover test and benchmark.
const failoverPlanning = `
  interval     = "1s"
  min_interval = "200ms"`

// failoverBound is the longest a follower may take to lead after the
// leader is killed. The lock goes as soon as Consul's servers see the dead
// leader's check fail (the agent syncs that at once, mostly; in a CI run it
// took 15 s), and at the latest when its unrenewed session expires, which
// Consul lets take up to twice the TTL. After that comes the lock delay and
// the lock's retry (5 s in Consul's API), and a margin for a loaded host.
const failoverBound = 2*consulx.SessionTTL + consulx.DefaultLockDelay + 5*time.Second + 10*time.Second

// killTheLeader waits for one of a and b to lead, SIGKILLs it, and says
// how long the other took to lead, failing past failoverBound, and whether
// both ever led at once.
func killTheLeader(t testing.TB, a, b *plannerProc) (failover time.Duration, both bool) {
	t.Helper()
	leader, follower := oneLeader(t, a, b)
	stop := make(chan struct{})
	var sawBoth atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			sa, sb := a.status(t), b.status(t)
			if sa != nil && sb != nil && sa.Leader && sb.Leader {
				sawBoth.Store(true)
			}
		}
	}()
	killed := time.Now()
	leader.stop(syscall.SIGKILL)
	waitFor(t, failoverBound, "the follower takes over", func() bool { s := follower.status(t); return s != nil && s.Leader })
	failover = time.Since(killed)
	close(stop)
	wg.Wait()
	return failover, sawBoth.Load()
}

// A user edits a job while the planner rewrites it, many times over, on a
// real Nomad: the user's change always survives and the planner's priority
// lands too. CARAVAN_RACES sets the count (default 1000, about 18 s on two
// cores).
func TestPlannerUserEditSurvivesRaces(t *testing.T) {
	c := harness.StartT(t, harness.Options{Fleet: oneT4})
	races := 1000
	if v, err := strconv.Atoi(os.Getenv("CARAVAN_RACES")); err == nil && v > 0 {
		races = v
	}
	// A parameterized job: registering it creates no allocations, so the
	// race is only between the two writers.
	job := api.NewBatchJob("race", "race", "global", 50)
	job.ParameterizedJob = &api.ParameterizedJobConfig{}
	task := api.NewTask("t", "raw_exec")
	task.SetConfig("command", "/bin/true")
	job.AddTaskGroup(api.NewTaskGroup("g", 1).AddTask(task))
	_, _, err := c.Nomad.Jobs().Register(job, nil)
	must.NoError(t, err)

	writer := &rewrite.Writer{Nomad: nomadx.Wrap(c.Nomad), MaxAttempts: 100}
	conflicts, restored := 0, 0
	start := time.Now()
	for i := 0; i < races; i++ {
		priority := 60 + 10*(i%3)
		var wg sync.WaitGroup
		var res rewrite.Result
		wg.Add(2)
		go func() {
			defer wg.Done()
			res = writer.Apply(context.Background(), "default", "race", rewrite.Target{Priority: priority})
		}()
		go func() {
			defer wg.Done()
			// The user's edit, as `nomad job run` sends it: no index check.
			user, _, err := c.Nomad.Jobs().Info("race", nil)
			if err != nil {
				t.Errorf("user read: %v", err)
				return
			}
			user.Meta = map[string]string{"edit": strconv.Itoa(i)}
			user.Priority = nil
			if _, _, err := c.Nomad.Jobs().Register(user, nil); err != nil {
				t.Errorf("user register: %v", err)
			}
		}()
		wg.Wait()
		must.NoError(t, res.Err)
		conflicts += res.Conflicts
		restored += res.Restored
		got, _, err := c.Nomad.Jobs().Info("race", nil)
		must.NoError(t, err)
		must.Eq(t, strconv.Itoa(i), got.Meta["edit"], must.Sprintf("race %d: the user's edit was lost", i))
		if res.Outcome == rewrite.Written && *got.Priority != priority {
			// The user's write came last and carried the priority it read;
			// the planner's next round sets it again.
			res = writer.Apply(context.Background(), "default", "race", rewrite.Target{Priority: priority})
			must.NoError(t, res.Err)
			got, _, _ = c.Nomad.Jobs().Info("race", nil)
			must.Eq(t, strconv.Itoa(i), got.Meta["edit"])
		}
		must.Eq(t, priority, *got.Priority, must.Sprintf("race %d", i))
	}
	t.Logf("%d races in %s: every user edit kept, %d CAS conflicts retried, %d edits that landed inside Nomad's index check written back",
		races, time.Since(start).Round(time.Millisecond), conflicts, restored)
	data, _ := json.Marshal(map[string]int{"races": races, "conflicts": conflicts, "restored": restored})
	t.Logf("%s", data)
}

// jobspecs/caravan-planner.nomad.hcl runs the planner as a Nomad job: it
// registers in Consul with a passing health check and takes the lead.
func TestPlannerRunsAsNomadJob(t *testing.T) {
	c := harness.StartT(t, harness.Options{Fleet: oneT4})
	c.RunJobspec(t, c.Jobspec("caravan-planner.nomad.hcl"), map[string]string{
		"caravan": filepath.Join(c.BinDir, "caravan"), "replicas": "1",
		"nomad_addr": c.NomadAddr, "consul_addr": c.ConsulAddr,
	})
	c.WaitAllocs(t, "caravan-planner", 1, 60*time.Second, harness.Running)
	var checks []struct {
		Status, ServiceName, Output string
	}
	waitFor(t, 30*time.Second, "caravan-planner is registered in Consul with a passing check", func() bool {
		resp, err := http.Get("http://" + strings.TrimPrefix(c.ConsulAddr, "http://") + "/v1/health/checks/caravan-planner")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		checks = nil
		if json.NewDecoder(resp.Body).Decode(&checks) != nil || len(checks) == 0 {
			return false
		}
		return checks[0].Status == "passing"
	})
	// The planner writes: a managed job gets its band.
	c.RunJobspec(t, c.Jobspec("planner-batch.nomad.hcl"), trainVars(c, "under-nomad", 5, ""))
	waitFor(t, 30*time.Second, "the planner job sets the priority", func() bool { return jobPriority(t, c, "under-nomad") == 80 })
}
