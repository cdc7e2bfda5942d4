package replay

// This file submits the trace's jobs at their scaled arrivals.

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// submissions records when each job was submitted, from the submitting
// goroutine to the watching one.
type submissions struct {
	mu     sync.Mutex
	at     []time.Time
	maxLag time.Duration
	cut    bool // a register was cut short by the end of the run
}

func (s *submissions) record(i int, at time.Time, lag time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.at[i] = at
	s.maxLag = max(s.maxLag, lag)
}

func (s *submissions) times() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.at...)
}

func (s *submissions) lag() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.maxLag
}

func (s *submissions) wasCut() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cut
}

// submitAll registers each job at its scaled arrival, in trace order.
func (p *Plan) submitAll(ctx context.Context, n Nomad, opts JobOptions, clock Clock, subs *submissions) error {
	for i, j := range p.cfg.Jobs {
		at := clock.At(j.Arrival)
		if d := time.Until(at); d > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(d):
			}
		}
		now := time.Now()
		if err := n.Register(ctx, JobSpec(opts, p.IDs[i], j, p.Works[i])); err != nil {
			if ctx.Err() != nil {
				subs.mu.Lock()
				subs.cut = true
				subs.mu.Unlock()
				return nil
			}
			return fmt.Errorf("submit trace job %s as %s to Nomad at %s: %w", j.ID, p.IDs[i], n.Address(), err)
		}
		p.log.Debug("submitted", "job", p.IDs[i], "trace_s", j.Arrival, "gpus", max(j.GPUs, 1),
			"iterations", p.Works[i].Iterations, "iteration_time", p.Works[i].IterationTime)
		subs.record(i, now, now.Sub(at))
	}
	return nil
}
