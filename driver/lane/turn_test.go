package lane

import (
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

func TestDecideTurn(t *testing.T) {
	const q, tick = 100 * time.Millisecond, 5 * time.Millisecond
	base := turnClock{quantum: q, baseQuantum: q, heldLimit: 250 * time.Millisecond, tick: tick, grace: 50 * time.Millisecond}
	with := func(f func(*turnClock)) turnClock { c := base; f(&c); return c }
	for _, tc := range []struct {
		name  string
		clock turnClock
		want  turnVerdict
	}{
		{"early in the turn: look again after a tick", with(func(c *turnClock) { c.ran = 10 * time.Millisecond }),
			turnVerdict{wait: tick}},
		{"near its end: look again when the quantum is used", with(func(c *turnClock) { c.ran = 98 * time.Millisecond }),
			turnVerdict{wait: 2 * time.Millisecond}},
		{"near the held limit: look again when it is reached", with(func(c *turnClock) { c.held = 248 * time.Millisecond }),
			turnVerdict{wait: 2 * time.Millisecond}},
		{"quantum used, no marks", with(func(c *turnClock) { c.ran = q }),
			turnVerdict{reason: "quantum of 100ms used"}},
		{"quantum used, no grace: marks do not hold it", with(func(c *turnClock) { c.ran, c.marks, c.grace = q, 3, 0 }),
			turnVerdict{reason: "quantum of 100ms used"}},
		{"held by another lane too long", with(func(c *turnClock) { c.ran, c.held = 40*time.Millisecond, 250*time.Millisecond }),
			turnVerdict{reason: "turn held by another of its lanes for 250ms"}},
		{"stretched quantum", with(func(c *turnClock) {
			c.ran, c.quantum, c.lastSwitch = 900*time.Millisecond, 900*time.Millisecond, 100*time.Millisecond
		}),
			turnVerdict{reason: "quantum of 900ms used (stretched from 100ms, as its last suspend and resume took 100ms)"}},
		{"quantum used by a task that marks iterations: wait for a boundary", with(func(c *turnClock) { c.ran, c.marks = q, 7 }),
			turnVerdict{wait: boundaryPoll, awaitMark: true}},
		{"still no boundary, within grace", with(func(c *turnClock) {
			c.ran, c.marks, c.pending, c.pendingMark, c.pendingFor = q+10*time.Millisecond, 7, true, 7, 10*time.Millisecond
		}), turnVerdict{wait: boundaryPoll}},
		{"a boundary came", with(func(c *turnClock) {
			c.ran, c.marks, c.pending, c.pendingMark, c.pendingFor = q+10*time.Millisecond, 8, true, 7, 10*time.Millisecond
		}), turnVerdict{reason: "quantum of 100ms used, at an iteration boundary"}},
		{"no boundary within grace", with(func(c *turnClock) {
			c.ran, c.marks, c.pending, c.pendingMark, c.pendingFor = q+50*time.Millisecond, 7, true, 7, 50*time.Millisecond
		}), turnVerdict{reason: "quantum of 100ms used, no iteration boundary within 50ms"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			must.Eq(t, tc.want, decideTurn(tc.clock))
		})
	}
}
