package workload

import (
	"context"
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

// fakeHost is a clock whose every sleep wakes late by lag, as a loaded
// host's timers do, and that can stall between steps.
type fakeHost struct {
	t   time.Time
	lag time.Duration
}

func (h *fakeHost) now() time.Time { return h.t }

func (h *fakeHost) sleep(_ context.Context, d time.Duration) error {
	h.t = h.t.Add(max(d, 0) + h.lag)
	return nil
}

func pacedOn(h *fakeHost) *pacer {
	p := &pacer{now: h.now, sleep: h.sleep}
	p.next = h.now()
	return p
}

// A hundred 25 ms steps, each sleep waking 2 ms late: paced, the run takes
// its 2.5 s and one wake-up's lag; slept step by step, it would take 8%
// longer.
func TestPacedStepsDoNotPileUpTheHostsLag(t *testing.T) {
	h := &fakeHost{t: time.Unix(1000, 0), lag: 2 * time.Millisecond}
	start := h.t
	p := pacedOn(h)
	for range 100 {
		must.NoError(t, p.step(context.Background(), 25*time.Millisecond))
	}
	must.Eq(t, 2500*time.Millisecond+2*time.Millisecond, h.t.Sub(start))
}

// A process frozen for a second (a lane's turn) makes no progress: the
// steps after it take their own length again rather than catching up.
func TestAPacedRunDoesNotCatchUpAfterAFreeze(t *testing.T) {
	h := &fakeHost{t: time.Unix(1000, 0)}
	p := pacedOn(h)
	for range 10 {
		must.NoError(t, p.step(context.Background(), 25*time.Millisecond))
	}
	h.t = h.t.Add(time.Second) // frozen
	before := h.t
	for range 10 {
		must.NoError(t, p.step(context.Background(), 25*time.Millisecond))
	}
	must.Eq(t, 250*time.Millisecond, h.t.Sub(before))
}
