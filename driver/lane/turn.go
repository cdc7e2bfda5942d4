package lane

import (
	"fmt"
	"time"
)

// turnClock is what decides whether a time-sliced task's turn is over.
type turnClock struct {
	// ran and held are how long the task ran in this turn and how long
	// another of its lanes held it. A task on several lanes runs only
	// while none of them holds it; a turn counts the time it really ran.
	ran, held time.Duration
	// quantum is the task's (stretched where its switches are slow, see
	// quantumOf), baseQuantum Options.Quantum; heldLimit is how long the
	// turn may be held before it ends all the same.
	quantum, baseQuantum, heldLimit time.Duration
	lastSwitch                      time.Duration // its last suspend and resume, for the words
	// marks counts the iteration boundaries the task has marked, 0 for a
	// task that marks none; pending says the quantum was used and a
	// boundary is awaited since pendingFor ago, when marks was pendingMark.
	marks, pendingMark int64
	pending            bool
	pendingFor, grace  time.Duration
	tick               time.Duration // the lane's polling period
}

// turnVerdict is what becomes of the turn.
type turnVerdict struct {
	wait      time.Duration // while it goes on: look again after this
	awaitMark bool          // begin waiting for an iteration boundary now
	reason    string        // the turn is over, and why; "" while it goes on
}

// decideTurn decides whether a turn is over. A turn held (not run) for
// heldLimit, two to three quanta drawn per turn, ends all the same: two
// tasks that each wait for the other's lane cannot stall both, and the
// draw keeps the two lanes from giving up at the same moment and crossing
// again. A task that marks iterations gets up to grace past its quantum to
// reach a boundary.
func decideTurn(t turnClock) turnVerdict {
	if t.ran < t.quantum && t.held < t.heldLimit {
		return turnVerdict{wait: min(t.tick, t.quantum-t.ran, t.heldLimit-t.held)}
	}
	if t.marks > 0 && t.grace > 0 {
		if !t.pending {
			return turnVerdict{wait: boundaryPoll, awaitMark: true}
		}
		if t.marks == t.pendingMark && t.pendingFor < t.grace {
			return turnVerdict{wait: boundaryPoll}
		}
	}
	reason := "quantum of " + t.baseQuantum.String() + " used"
	if t.quantum > t.baseQuantum {
		reason = fmt.Sprintf("quantum of %s used (stretched from %s, as its last suspend and resume took %s)",
			round(t.quantum), t.baseQuantum, round(t.lastSwitch))
	}
	if t.ran < t.quantum {
		reason = "turn held by another of its lanes for " + t.heldLimit.Round(time.Millisecond).String()
	}
	if t.pending {
		if t.marks > t.pendingMark {
			reason += ", at an iteration boundary"
		} else {
			reason += ", no iteration boundary within " + t.grace.String()
		}
	}
	return turnVerdict{reason: reason}
}
