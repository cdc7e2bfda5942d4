//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/caravan-gpu/caravan/e2e/harness"
	"github.com/caravan-gpu/caravan/planner/cluster"
	"github.com/caravan-gpu/caravan/planner/nomadx"
	"github.com/caravan-gpu/caravan/planner/service"
	"github.com/hashicorp/go-cleanhttp"
	"github.com/hashicorp/nomad/api"
	"github.com/hashicorp/nomad/helper/pointer"
)

// BenchmarkPlannerFailover times how long a follower takes to lead after
// the leader is SIGKILLed, with the default one-second health check: two
// planner replicas on a real local Consul and Nomad, one failover per
// iteration. TestPlannerFailover checks only that it happens within the
// bound Consul guarantees.
//
//	go test -tags e2e -run '^$' -bench PlannerFailover -benchtime 3x ./e2e/
func BenchmarkPlannerFailover(b *testing.B) {
	c := harness.StartT(b, harness.Options{Fleet: oneT4})
	var total time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		// Fresh replicas each time: the survivor of the last failover
		// would lead from the start.
		x := startPlanner(b, c, fmt.Sprintf("x%d", i), failoverPlanning)
		y := startPlanner(b, c, fmt.Sprintf("y%d", i), failoverPlanning)
		b.StartTimer()
		failover, both := killTheLeader(b, x, y)
		b.StopTimer()
		if both {
			b.Fatal("two replicas led at once")
		}
		total += failover
		x.stop(syscall.SIGTERM)
		y.stop(syscall.SIGTERM)
	}
	b.ReportMetric(total.Seconds()/float64(b.N), "failover_s")
}

// benchJobs is how many managed jobs BenchmarkPlannerRound1000Jobs registers.
const benchJobs = 1000

// BenchmarkPlannerRound1000Jobs times one planning round on a real local
// Nomad in which every one of 1,000 managed jobs needs a new priority. The
// round runs in-process (Planner.Round against the real Nomad API client),
// which times exactly one round, without the daemon's event debounce and
// interval. The jobs ask for more GPUs than the fleet has, so they stay
// pending and the client runs nothing; each priority write still makes
// Nomad evaluate the job, as it would in production.
//
//	go test -tags e2e -run '^$' -bench PlannerRound1000Jobs -benchtime 1x ./e2e/
func BenchmarkPlannerRound1000Jobs(b *testing.B) {
	c := harness.StartT(b, harness.Options{Fleet: oneT4})
	ctx := context.Background()
	start := time.Now()
	setPriorities(b, c, 50)
	b.Logf("registered %d jobs in %s", benchJobs, time.Since(start).Round(time.Millisecond))

	for _, bc := range []struct{ name, planning string }{
		{"defaults", ""},
		{"unlimited", "max_writes_per_second = 0"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			cfg, err := service.ParseConfig("planner.hcl", []byte("consul {\n enabled = false\n}\nplanning {\n"+bc.planning+"\n}\n"))
			if err != nil {
				b.Fatal(err)
			}
			var total time.Duration
			writes := 0
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				setPriorities(b, c, 50)
				// A fresh planner per round: no spec cache, no limiter
				// tokens spent by an earlier round.
				p, err := service.New(cfg, nomadx.Wrap(c.Nomad), nil, nil)
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				round, err := p.Round(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if round.Jobs != benchJobs || round.Writes != benchJobs || round.Failures != 0 {
					b.Fatalf("round planned %d jobs, wrote %d, failed %d; want %d, %d, 0", round.Jobs, round.Writes, round.Failures, benchJobs, benchJobs)
				}
				total += round.Duration
				writes += round.Writes
				b.Logf("round %d: %d writes in %s, %d CAS conflicts", i, round.Writes, round.Duration.Round(time.Millisecond), round.Conflicts)
			}
			b.ReportMetric(float64(writes)/total.Seconds(), "writes/s")
			b.ReportMetric(total.Seconds()/float64(b.N), "s/round")
		})
	}
}

// setPriorities registers the benchmark's jobs, or re-registers them, with
// the given priority, and waits until Nomad has evaluated them so that the
// round is not timed against a backlog.
func setPriorities(b *testing.B, c *harness.Cluster, priority int) {
	b.Helper()
	registerJobs(b, c, benchJobs, priority)
	waitEvalsSettled(b, c)
}

// benchJob is a managed batch job that asks for more GPUs than the fleet
// has, so it waits without running anything.
func benchJob(i, priority int) *api.Job {
	id := fmt.Sprintf("bench-%04d", i)
	job := api.NewBatchJob(id, id, "global", priority)
	job.Meta = map[string]string{cluster.MetaPolicy: "las"}
	task := api.NewTask("train", "caravan")
	task.SetConfig("command", "/bin/true")
	task.Require(&api.Resources{CPU: pointer.Of(100), MemoryMB: pointer.Of(64),
		Devices: []*api.RequestedDevice{{Name: "nvidia/gpu", Count: pointer.Of[uint64](64)}}})
	job.AddTaskGroup(api.NewTaskGroup("train", 1).AddTask(task))
	return job
}

// waitEvalsSettled waits until Nomad has scheduled every pending
// evaluation.
func waitEvalsSettled(b *testing.B, c *harness.Cluster) {
	b.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		evals, _, err := c.Nomad.Evaluations().List(&api.QueryOptions{Filter: `Status == "pending"`})
		if err != nil {
			b.Fatalf("list evaluations: %v", err)
		}
		if len(evals) == 0 {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	b.Fatal("Nomad did not schedule the pending evaluations within 5 minutes")
}

// mirrorJobs is how many managed jobs BenchmarkPlannerRoundMirror10000Jobs
// registers; CARAVAN_BENCH_JOBS changes it.
func mirrorJobs() int {
	if v, err := strconv.Atoi(os.Getenv("CARAVAN_BENCH_JOBS")); err == nil && v > 0 {
		return v
	}
	return 10000
}

// countingTransport counts the requests a Nomad client sends.
type countingTransport struct {
	next http.RoundTripper
	n    atomic.Int64
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.next.RoundTrip(r)
}

// BenchmarkPlannerRoundMirror10000Jobs times planning rounds over 10,000
// managed jobs on a real local Nomad, with the planner reading the mirror
// that Nomad's event stream keeps current (as caravan planner run does),
// and counts the requests each round sends to Nomad: once nothing changed,
// and after 100 jobs changed priority. The jobs never fit, so the client
// runs nothing; every job is held in the first round.
//
//	go test -tags e2e -run '^$' -bench PlannerRoundMirror -benchtime 1x -timeout 30m ./e2e/
func BenchmarkPlannerRoundMirror10000Jobs(b *testing.B) {
	c := harness.StartT(b, harness.Options{Fleet: oneT4})
	n := mirrorJobs()
	start := time.Now()
	registerJobs(b, c, n, 50)
	waitEvalsSettled(b, c)
	b.Logf("registered %d jobs in %s", n, time.Since(start).Round(time.Millisecond))

	// As nomadx.NewClient keeps its connections.
	pooled := cleanhttp.DefaultPooledTransport()
	pooled.MaxIdleConnsPerHost = nomadx.MaxConnsInFlight
	counter := &countingTransport{next: pooled}
	newPlanner := func() *service.Planner {
		cfg := api.DefaultConfig()
		cfg.Address = c.NomadAddr
		cfg.HttpClient = &http.Client{Transport: counter}
		client, err := api.NewClient(cfg)
		if err != nil {
			b.Fatal(err)
		}
		nomad := nomadx.Wrap(client)
		mirror := nomadx.NewMirror(nomad, nomad, nil)
		settings, err := service.ParseConfig("planner.hcl", []byte("consul {\n enabled = false\n}\nplanning {\n max_writes_per_second = 0\n}\n"))
		if err != nil {
			b.Fatal(err)
		}
		p, err := service.New(settings, mirror, nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		return p
	}
	p := newPlanner()
	ctx := context.Background()
	round := func(p *service.Planner, what string) {
		before := counter.n.Load()
		r, err := p.Round(ctx)
		if err != nil {
			b.Fatal(err)
		}
		requests := counter.n.Load() - before
		b.Logf("%s: %d jobs, %d writes, %s, %d requests to Nomad (%.2f per job)", what, r.Jobs, r.Writes, r.Duration.Round(time.Millisecond),
			requests, float64(requests)/float64(max(r.Jobs, 1)))
	}
	round(p, "first round (lists everything, holds every job)")
	waitEvalsSettled(b, c)
	time.Sleep(2 * time.Second) // the stream catches up with the round's writes
	// A new leader (after a failover or an upgrade) adopts the jobs the
	// last one held, with nothing of them in its caches.
	round(newPlanner(), "a new leader's first round (adopts every job, held already)")
	b.ResetTimer()
	var total time.Duration
	var requests int64
	for i := 0; i < b.N; i++ {
		before := counter.n.Load()
		r, err := p.Round(ctx)
		if err != nil {
			b.Fatal(err)
		}
		total += r.Duration
		requests += counter.n.Load() - before
	}
	b.StopTimer()
	b.ReportMetric(total.Seconds()/float64(b.N), "s/round")
	b.ReportMetric(float64(requests)/float64(b.N), "requests/round")

	for i := 0; i < 100; i++ { // a user changes 100 jobs
		job, _, err := c.Nomad.Jobs().Info(fmt.Sprintf("bench-%04d", i), nil)
		if err != nil {
			b.Fatal(err)
		}
		job.Meta["user.note"] = "edited"
		if _, _, err := c.Nomad.Jobs().Register(job, nil); err != nil {
			b.Fatal(err)
		}
	}
	time.Sleep(2 * time.Second)
	round(p, "a round after 100 jobs changed")
}

// registerJobs registers (or re-registers) n managed jobs that can never
// fit, with the given priority, a few at a time.
func registerJobs(tb testing.TB, c *harness.Cluster, n, priority int) {
	tb.Helper()
	work := make(chan int)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				if _, _, err := c.Nomad.Jobs().Register(benchJob(i, priority), nil); err != nil {
					errs <- err
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		tb.Fatalf("register: %v", err)
	}
}
