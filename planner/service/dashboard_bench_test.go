package service

import (
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/caravan-gpu/caravan/planner/nomadx/nomadxtest"
)

// BenchmarkDashboardViews1000Jobs times each dashboard view as the page
// loads it, every request over HTTP, from a planner managing 1,000 jobs
// on 32 nodes of 8 GPUs (256 running, the rest queued), with a full
// decision timeline and 1,000 completions in the live results. The target
// is under 200 ms per view (docs/planner.md).
func BenchmarkDashboardViews1000Jobs(b *testing.B) {
	const jobs, nodes, perNode = 1000, 32, 8
	fake := nomadxtest.NewGPUFleet("las", nodes, perNode, jobs, time.Now().Add(-time.Hour), time.Second)
	p, err := New(&Settings{Policy: "las", Interval: time.Second, MaxWrites: 0, WriteBurst: 100, Writers: 16,
		NomadUnreachable: time.Minute}, fake, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for r := 0; r < 3; r++ {
		if _, err := p.Round(ctx); err != nil {
			b.Fatal(err)
		}
	}
	// A full timeline and a long live history.
	rng := rand.New(rand.NewPCG(1, 2))
	p.mu.Lock()
	for i := 0; i < 2*decisionLimit; i++ {
		p.addDecision(p.dash.decisions[i%len(p.dash.decisions)])
	}
	for i := 0; i < jobs; i++ {
		p.noteCompletion(60 + rng.ExpFloat64()*600)
	}
	for i := 0; i < 5000; i++ {
		p.dash.util = append(p.dash.util, utilSample{T: float64(i), Busy: float64(rng.IntN(nodes * perNode)), GPUs: nodes * perNode})
	}
	p.mu.Unlock()
	if n := len(p.Queue().Jobs); n != jobs {
		b.Fatalf("queue holds %d jobs, want %d", n, jobs)
	}

	srv := httptest.NewServer(p.Handler())
	defer srv.Close()
	views := []struct {
		name  string
		paths []string
	}{
		{"page", []string{"/ui/", "/ui/app.js", "/ui/style.css"}},
		{"gpus", []string{"/v1/status", "/v1/gpus"}},
		{"queue", []string{"/v1/status", "/v1/queue?offset=0&limit=100"}},
		{"decisions", []string{"/v1/status", "/v1/decisions?limit=200"}},
		{"results", []string{"/v1/status", "/v1/results", "/ui/plots/jct.svg", "/ui/plots/util.svg"}},
	}
	client := srv.Client()
	for _, v := range views {
		b.Run(v.name, func(b *testing.B) {
			bytes := 0
			for i := 0; i < b.N; i++ {
				bytes = 0
				for _, path := range v.paths {
					resp, err := client.Get(srv.URL + path)
					if err != nil {
						b.Fatal(err)
					}
					n, _ := io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						b.Fatalf("%s: %s", path, resp.Status)
					}
					bytes += int(n)
				}
			}
			b.ReportMetric(float64(bytes)/1024, "KiB/view")
		})
	}
}
