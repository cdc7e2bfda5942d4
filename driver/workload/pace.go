package workload

import (
	"context"
	"time"
)

// pacer times a run's steps to deadlines that add up the steps' lengths,
// so that what the process spends between them (waking from each sleep,
// writing its memory record, its checkpoint and progress, counting its
// GPU's partners) does not pile up over the run: on a GPU an iteration
// takes its own time, not its time plus the host's latency, and a run
// that drifted by a few percent would read as run overhead proportional to
// its length, which no constant cost in the simulator can match. A step
// that finds itself behind by more than its own length (the process was
// frozen, as a lane's turn does, or the host stalled) starts a new
// deadline from now: a frozen job makes no progress, so it does not catch
// up either.
type pacer struct {
	next  time.Time
	now   func() time.Time
	sleep func(context.Context, time.Duration) error
}

func newPacer() *pacer {
	p := &pacer{now: time.Now, sleep: sleep}
	p.next = p.now()
	return p
}

// step waits out one step of length d.
func (p *pacer) step(ctx context.Context, d time.Duration) error {
	now := p.now()
	if now.Sub(p.next) > d {
		p.next = now
	}
	p.next = p.next.Add(d)
	return p.sleep(ctx, p.next.Sub(now))
}
