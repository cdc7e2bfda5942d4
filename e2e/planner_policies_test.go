//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/caravan-gpu/caravan/e2e/harness"
	"github.com/caravan-gpu/caravan/planner/cluster"
	"github.com/caravan-gpu/caravan/planner/consulx"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// twoT4 is a fleet of two whole GPUs of one model.
const twoT4 = `{
  "driver_version": "550.54.15", "cuda_version": "12.4",
  "gpus": [{"uuid": "GPU-t4", "count": 2, "model": "Tesla T4", "architecture": "turing",
            "compute_capability": "7.5", "memory_mib": 15360, "sm_count": 40}]
}`

// h100AndT4 is one whole GPU each of a fast and a slow model.
const h100AndT4 = `{
  "driver_version": "550.54.15", "cuda_version": "12.4",
  "gpus": [
    {"uuid": "GPU-h100", "count": 1, "model": "NVIDIA H100 80GB HBM3", "architecture": "hopper",
     "compute_capability": "9.0", "memory_mib": 81559, "sm_count": 132},
    {"uuid": "GPU-t4", "count": 1, "model": "Tesla T4", "architecture": "turing",
     "compute_capability": "7.5", "memory_mib": 15360, "sm_count": 40}]
}`

const fastRounds = `
  interval     = "1s"
  min_interval = "200ms"`

// submit runs planner-batch.nomad.hcl: iterations of 200 ms on count GPUs,
// held unless vars say otherwise.
func submit(t *testing.T, c *harness.Cluster, name string, iterations, count int, vars map[string]string) {
	t.Helper()
	v := trainVars(c, name, iterations, "")
	v["count"] = strconv.Itoa(count)
	for k, x := range vars {
		v[k] = x
	}
	c.RunJobspec(t, c.Jobspec("planner-batch.nomad.hcl"), v)
}

func allocsOf(t *testing.T, c *harness.Cluster, id string) []*api.AllocationListStub {
	t.Helper()
	allocs, _, err := c.Nomad.Jobs().Allocations(id, true, nil)
	must.NoError(t, err)
	return allocs
}

// firstStart is when the job's first task started; zero if none has.
func firstStart(allocs []*api.AllocationListStub) time.Time {
	var first time.Time
	for _, a := range allocs {
		for _, ts := range a.TaskStates {
			if !ts.StartedAt.IsZero() && (first.IsZero() || ts.StartedAt.Before(first)) {
				first = ts.StartedAt
			}
		}
	}
	return first
}

func held(t *testing.T, c *harness.Cluster, id string) bool {
	job, _, err := c.Nomad.Jobs().Info(id, nil)
	must.NoError(t, err)
	return cluster.Held(job)
}

// Strict FIFO: a 2-GPU job waits behind a running one; a 1-GPU job that
// arrives after it is held although a GPU is free, and starts only after
// the 2-GPU job, whose two allocations start together.
func TestPlannerFIFOHoldsSmallJobBehindBlockedHeadAndStartsGangWhole(t *testing.T) {
	c := harness.StartT(t, harness.Options{Fleet: twoT4})
	p := startPlanner(t, c, "p1", `policy = "fifo"`+fastRounds)
	waitFor(t, 20*time.Second, "the planner leads", func() bool { s := p.status(t); return s != nil && s.Leader })

	submit(t, c, "head", 40, 1, nil)
	c.WaitAllocs(t, "head", 1, time.Minute, harness.Running)
	submit(t, c, "gang", 15, 2, nil)
	submit(t, c, "small", 5, 1, nil)

	// For a few seconds one GPU is free, and small fits; FIFO holds it.
	for end := time.Now().Add(4 * time.Second); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		must.Len(t, 0, allocsOf(t, c, "small"), must.Sprint("small must wait behind gang"))
		must.Len(t, 0, allocsOf(t, c, "gang"), must.Sprint("gang does not fit yet"))
	}
	must.True(t, held(t, c, "small"))
	e, err := p.api.Explain(context.Background(), "small")
	must.NoError(t, err)
	must.StrContains(t, e.Placement, "held")

	gang := c.WaitAllocs(t, "gang", 2, 2*time.Minute, harness.Complete)
	must.Len(t, 2, gang, must.Sprint("placed whole once: no allocation replaced"))
	var starts []time.Time
	for _, a := range gang {
		starts = append(starts, firstStart([]*api.AllocationListStub{a}))
	}
	sort.Slice(starts, func(i, j int) bool { return starts[i].Before(starts[j]) })
	must.Less(t, 3*time.Second, starts[1].Sub(starts[0]), must.Sprint("both allocations start together"))

	small := c.WaitAllocs(t, "small", 1, time.Minute, harness.Complete)
	must.True(t, firstStart(small).After(starts[0]), must.Sprint("small starts after the job ahead of it"))
	t.Logf("gang started %s apart; small started %s after gang",
		starts[1].Sub(starts[0]).Round(time.Millisecond), firstStart(small).Sub(starts[0]).Round(time.Millisecond))
}

// SRTF: a short job preempts a long one within a round, and the long job
// runs again afterwards with its attained service kept.
func TestPlannerSRTFPreemptsLongJobForShortOne(t *testing.T) {
	c := harness.StartT(t, harness.Options{Fleet: oneT4})
	p := startPlanner(t, c, "p1", `policy = "srtf"`+fastRounds)
	waitFor(t, 20*time.Second, "the planner leads", func() bool { s := p.status(t); return s != nil && s.Leader })

	submit(t, c, "long", 100, 1, map[string]string{"duration": "20s"})
	c.WaitAllocs(t, "long", 1, time.Minute, harness.Running)
	time.Sleep(3 * time.Second)
	submitted := time.Now()
	submit(t, c, "short", 10, 1, map[string]string{"duration": "2s"})

	var stopped time.Time
	waitFor(t, 15*time.Second, "long is preempted", func() bool {
		for _, a := range allocsOf(t, c, "long") {
			if a.DesiredStatus == "stop" {
				stopped = time.Now()
				return true
			}
		}
		return false
	})
	t.Logf("long preempted %s after short was submitted", stopped.Sub(submitted).Round(time.Millisecond))
	must.True(t, held(t, c, "long"))
	before, err := p.api.Explain(context.Background(), "long")
	must.NoError(t, err)
	must.Greater(t, 2.0, before.Attained, must.Sprint("long ran for about 3 s"))

	c.WaitAllocs(t, "short", 1, time.Minute, harness.Complete)
	waitFor(t, 30*time.Second, "long runs again", func() bool {
		for _, a := range allocsOf(t, c, "long") {
			if a.DesiredStatus == "run" && a.ClientStatus == "running" {
				return true
			}
		}
		return false
	})
	waitFor(t, 10*time.Second, "the planner sees long run again", func() bool {
		e, err := p.api.Explain(context.Background(), "long")
		return err == nil && e.State == "running"
	})
	after, err := p.api.Explain(context.Background(), "long")
	must.NoError(t, err)
	must.GreaterEq(t, before.Attained, after.Attained, must.Sprint("attained service is kept across the preemption"))
}

// AlloX: of two jobs that both run fastest on the H100, the one that gains
// least from it is matched to the T4, pinned there and runs there.
func TestPlannerAlloXPinsItsMatchedModel(t *testing.T) {
	c := harness.StartT(t, harness.Options{Fleet: h100AndT4})
	profiles := filepath.Join(t.TempDir(), "profiles.json")
	must.NoError(t, os.WriteFile(profiles, []byte(`{"profiles": [
	  {"name": "flat", "throughput": {"NVIDIA H100 80GB HBM3": 10, "Tesla T4": 9}},
	  {"name": "steep", "throughput": {"NVIDIA H100 80GB HBM3": 10, "Tesla T4": 1}}]}`), 0o644))
	out, code := caravanCLI(c, "profile", "import", profiles)
	must.Eq(t, 0, code, must.Sprint(out))

	// Both wait held until the planner plans them in one round.
	submit(t, c, "flat", 10, 1, map[string]string{"profile": "flat"})
	submit(t, c, "steep", 10, 1, map[string]string{"profile": "steep"})
	startPlanner(t, c, "p1", `policy = "allox"`+fastRounds)

	for id, want := range map[string]string{"flat": "Tesla T4", "steep": "NVIDIA H100 80GB HBM3"} {
		allocs := c.WaitAllocs(t, id, 1, time.Minute, harness.Complete)
		must.Len(t, 1, allocs)
		alloc, _, err := c.Nomad.Allocations().Info(allocs[0].ID, nil)
		must.NoError(t, err)
		must.Eq(t, want, alloc.AllocatedResources.Tasks["train"].Devices[0].Name, must.Sprint(id))
		job, _, err := c.Nomad.Jobs().Info(id, nil)
		must.NoError(t, err)
		cons := job.TaskGroups[0].Tasks[0].Resources.Devices[0].Constraints
		must.Len(t, 1, cons, must.Sprint(id))
		must.Eq(t, want, cons[0].RTarget, must.Sprint(id, " is pinned to its matched model"))
	}
}

// Migration between GPU models (Gavel's effective throughput): a job that
// runs 10 times faster on the H100 starts on the T4, the only GPU free;
// when the H100 frees, the planner stops it and starts it again there,
// pinned to the H100.
func TestPlannerMigratesJobToFreedFasterModel(t *testing.T) {
	c := harness.StartT(t, harness.Options{Fleet: h100AndT4})
	profiles := filepath.Join(t.TempDir(), "profiles.json")
	must.NoError(t, os.WriteFile(profiles, []byte(`{"profiles": [
	  {"name": "steep", "throughput": {"NVIDIA H100 80GB HBM3": 10, "Tesla T4": 1}}]}`), 0o644))
	out, code := caravanCLI(c, "profile", "import", profiles)
	must.Eq(t, 0, code, must.Sprint(out))
	startPlanner(t, c, "p1", `policy = "fifo+migrate"
  migration_cost = "1s"`+fastRounds)

	// The user's own choice of model keeps blocker on the H100.
	submit(t, c, "blocker", 25, 1, map[string]string{"profile": "steep", "duration": "5s", "model": "NVIDIA H100 80GB HBM3"})
	waitFor(t, time.Minute, "blocker running", func() bool { return !firstStart(allocsOf(t, c, "blocker")).IsZero() })
	submit(t, c, "long", 100, 1, map[string]string{"profile": "steep", "duration": "200s"})
	model := func(a *api.AllocationListStub) string {
		alloc, _, err := c.Nomad.Allocations().Info(a.ID, nil)
		must.NoError(t, err)
		return alloc.AllocatedResources.Tasks["train"].Devices[0].Name
	}
	waitFor(t, time.Minute, "long running on the T4", func() bool {
		allocs := allocsOf(t, c, "long")
		return len(allocs) == 1 && !firstStart(allocs).IsZero() && model(allocs[0]) == "Tesla T4"
	})

	allocs := c.WaitAllocs(t, "long", 2, 2*time.Minute, harness.Terminal)
	sort.Slice(allocs, func(a, b int) bool { return allocs[a].CreateIndex < allocs[b].CreateIndex })
	must.Eq(t, "Tesla T4", model(allocs[0]))
	must.Eq(t, "NVIDIA H100 80GB HBM3", model(allocs[1]), must.Sprint("moved to the H100 once it freed"))
	must.Eq(t, "complete", allocs[1].ClientStatus)
	job, _, err := c.Nomad.Jobs().Info("long", nil)
	must.NoError(t, err)
	cons := job.TaskGroups[0].Tasks[0].Resources.Devices[0].Constraints
	must.Len(t, 1, cons)
	must.Eq(t, "NVIDIA H100 80GB HBM3", cons[0].RTarget)
	blocker := allocsOf(t, c, "blocker")
	must.Len(t, 1, blocker, must.Sprint("the user's own model is never moved"))
	t.Logf("long ran on the T4 from %s, moved to the H100 (started %s)", allocs[0].TaskStates["train"].StartedAt.Format(time.StampMilli),
		allocs[1].TaskStates["train"].StartedAt.Format(time.StampMilli))
}

// A periodic parent is never managed; the children it launches are.
func TestPlannerLeavesPeriodicParentAlone(t *testing.T) {
	c := harness.StartT(t, harness.Options{Fleet: oneT4})
	src := fmt.Sprintf(`
job "nightly" {
  type = "batch"
  meta = { "caravan.policy" = "default" }
  periodic {
    crons            = ["0 0 1 1 *"]
    prohibit_overlap = true
  }
  group "train" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    task "train" {
      driver = "caravan"
      config {
        command = %q
        args    = ["-iterations", "5", "-iteration-time", "200ms", "-persistent-mib", "64", "-ephemeral-mib", "16"]
      }
      resources {
        cpu    = 100
        memory = 64
        device "nvidia/gpu" { count = 1 }
      }
    }
  }
}`, filepath.Join(c.BinDir, "caravan-workload"))
	job, err := c.Nomad.Jobs().ParseHCLOpts(&api.JobsParseRequest{JobHCL: src, Canonicalize: true})
	must.NoError(t, err)
	_, _, err = c.Nomad.Jobs().Register(job, nil)
	must.NoError(t, err)
	parent, _, err := c.Nomad.Jobs().Info("nightly", nil)
	must.NoError(t, err)

	p := startPlanner(t, c, "p1", `policy = "las"`+fastRounds)
	waitFor(t, 20*time.Second, "the planner leads", func() bool { s := p.status(t); return s != nil && s.Leader })
	child, _, err := c.Nomad.Jobs().PeriodicForce("nightly", nil)
	must.NoError(t, err)
	must.NotEq(t, "", child)

	var childID string
	waitFor(t, 20*time.Second, "the child is in the planner's queue", func() bool {
		q, err := p.api.Queue(context.Background())
		if err != nil {
			return false
		}
		for _, e := range q.Jobs {
			must.NotEq(t, "nightly", e.Job, must.Sprint("the parent is never queued"))
			if e.Job != "nightly" {
				childID = e.Job
			}
		}
		return childID != ""
	})
	c.WaitAllocs(t, childID, 1, time.Minute, harness.Complete)

	after, _, err := c.Nomad.Jobs().Info("nightly", nil)
	must.NoError(t, err)
	must.Eq(t, *parent.JobModifyIndex, *after.JobModifyIndex, must.Sprint("the planner never wrote to the parent"))
	must.Eq(t, *parent.Priority, *after.Priority)
	must.False(t, cluster.Held(after))
}

// predict: with a history of quick "vision" jobs and long "speech" jobs in
// Consul KV, a new vision job preempts a running speech job although no
// job states its duration; once it finishes, the planner adds it to the
// history with its group and GPU count.
func TestPlannerPredictLearnsFromFinishedJobsOfTheGroup(t *testing.T) {
	c := harness.StartT(t, harness.Options{Fleet: oneT4})
	kv, err := consulx.New(c.ConsulAddr)
	must.NoError(t, err)
	var seed []map[string]any
	for k := 0; k < 30; k++ {
		seed = append(seed,
			map[string]any{"gpu_seconds": 2, "group": "vision", "gpus": 1},
			map[string]any{"gpu_seconds": 3600, "group": "speech", "gpus": 1})
	}
	data, err := json.Marshal(seed)
	must.NoError(t, err)
	must.NoError(t, kv.Put(context.Background(), consulx.HistoryKey, data))

	p := startPlanner(t, c, "p1", `policy = "predict"`+fastRounds)
	waitFor(t, 20*time.Second, "the planner leads", func() bool { s := p.status(t); return s != nil && s.Leader })

	submit(t, c, "long", 100, 1, map[string]string{"group": "speech"})
	c.WaitAllocs(t, "long", 1, time.Minute, harness.Running)
	time.Sleep(3 * time.Second)
	submit(t, c, "short", 10, 1, map[string]string{"group": "vision"})

	waitFor(t, 15*time.Second, "long is preempted", func() bool {
		for _, a := range allocsOf(t, c, "long") {
			if a.DesiredStatus == "stop" {
				return true
			}
		}
		return false
	})
	// The hold on long is written during the round that starts short;
	// the planner's explanations are those of its last finished round.
	var reason string
	waitFor(t, 10*time.Second, "the round that preempted long is explained", func() bool {
		e, err := p.api.Explain(context.Background(), "short")
		if err == nil {
			reason = e.Reason
		}
		return err == nil
	})
	must.StrContains(t, reason, "predicted")

	c.WaitAllocs(t, "short", 1, time.Minute, harness.Complete)
	waitFor(t, 20*time.Second, "short joins the history", func() bool {
		data, ok, err := kv.Get(context.Background(), consulx.HistoryKey)
		if err != nil || !ok {
			return false
		}
		var got []map[string]any
		if json.Unmarshal(data, &got) != nil || len(got) != len(seed)+1 {
			return false
		}
		last := got[len(got)-1]
		return last["group"] == "vision" && last["gpus"] == 1.0 && last["gpu_seconds"].(float64) > 0
	})
}
