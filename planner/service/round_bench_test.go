package service

import (
	"context"
	"fmt"
	"testing"

	"github.com/caravan-gpu/caravan/planner/nomadx/nomadxtest"
	"github.com/hashicorp/nomad/api"
)

// BenchmarkRoundApplies1000PriorityChanges times one planning round in which
// every one of 1,000 managed jobs needs a new priority, against the
// in-process Nomad fake. "unlimited" measures the planner's own cost;
// "default-rate-limit" adds the default write limit (250/s, burst 100).
// e2e's BenchmarkPlannerRound1000Jobs times the same on a real Nomad.
func BenchmarkRoundApplies1000PriorityChanges(b *testing.B) {
	const jobs = 1000
	for _, bc := range []struct {
		name   string
		limits string
	}{
		{"unlimited", "max_writes_per_second = 0"},
		{"default-rate-limit", ""},
	} {
		b.Run(bc.name, func(b *testing.B) {
			cfg, err := ParseConfig("planner.hcl", []byte("planning {\n"+bc.limits+"\n}\n"))
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			for b.Loop() {
				// A planner and a cluster of its own each time: a planner
				// that has written a job keeps what it wrote, and a second
				// round would find nothing to do.
				b.StopTimer()
				fake := nomadxtest.New()
				fake.NodeSet = []*api.NodeListStub{gpuNode("n1", map[string]int{"T4": 8})}
				for i := 0; i < jobs; i++ {
					fake.Submit(managedJob(fmt.Sprintf("job-%04d", i), 1, nil))
				}
				p, err := New(cfg, fake, nil, nil)
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				round, err := p.Round(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if round.Jobs != jobs || round.Writes != jobs {
					b.Fatalf("round planned %d jobs and wrote %d, want %d and %d", round.Jobs, round.Writes, jobs, jobs)
				}
			}
		})
	}
}
