// Package lane co-locates tasks that share one lane of a GPU, after Salus:
// tasks run concurrently while the sum of their persistent GPU memory plus
// the largest ephemeral memory fits in the lane, and take turns otherwise,
// switching on a quantum and, when a task cooperates, at its iteration
// boundaries.
package lane

import "fmt"

// Key names one lane of one GPU.
type Key struct {
	GPU  string
	Lane int
}

func (k Key) String() string { return fmt.Sprintf("%s/lane%d", k.GPU, k.Lane) }

// Profile is a task's GPU memory profile: memory it holds for its whole run
// (weights, optimizer state) and memory that comes and goes within each
// iteration (activations, workspaces).
type Profile struct {
	PersistentMiB uint64
	EphemeralMiB  uint64
	// Known is false until the task declares or the driver measures it.
	Known bool
	// Measured is true when the driver measured rather than was told.
	Measured bool
}

func (p Profile) String() string {
	if !p.Known {
		return "unknown"
	}
	how := "declared"
	if p.Measured {
		how = "measured"
	}
	return fmt.Sprintf("persistent %d MiB + ephemeral %d MiB (%s)", p.PersistentMiB, p.EphemeralMiB, how)
}

// Concurrent reports whether tasks of these profiles may run at once in
// laneMiB. Their iterations run unsynchronised, so their ephemeral peaks
// may coincide: each task's whole profile counts, Σ (persistent +
// ephemeral) ≤ lane memory. Salus's condition (Safe), which shares one
// ephemeral among all, holds only where one iteration runs at a time. A
// profile not yet known next to another task cannot be proven to fit.
func Concurrent(profiles []Profile, laneMiB uint64) (ok bool, total uint64) {
	for _, p := range profiles {
		if !p.Known {
			if len(profiles) > 1 {
				return false, laneMiB + 1
			}
			continue
		}
		total += p.PersistentMiB + p.EphemeralMiB
	}
	return total <= laneMiB, total
}

// Safe reports Salus's safety condition for profiles whose iterations run
// one at a time in laneMiB: Σ persistent + max ephemeral ≤ lane memory. A profile not yet
// known counts as possibly using the whole lane.
func Safe(profiles []Profile, laneMiB uint64) (ok bool, persistent, maxEphemeral uint64) {
	for _, p := range profiles {
		if !p.Known {
			p = Profile{EphemeralMiB: laneMiB, Known: true}
			if len(profiles) > 1 {
				// Anything unknown next to another task cannot be proven safe.
				p.EphemeralMiB = laneMiB + 1
			}
		}
		persistent += p.PersistentMiB
		maxEphemeral = max(maxEphemeral, p.EphemeralMiB)
	}
	return persistent+maxEphemeral <= laneMiB, persistent, maxEphemeral
}

// measurement builds a profile from GPU memory samples: the floor after the
// first iteration is persistent, the peak above it is ephemeral.
type measurement struct {
	samples  int
	min, max uint64
}

func (m *measurement) add(mib uint64) {
	if mib == 0 {
		return // not allocated yet, or between runs
	}
	if m.samples == 0 || mib < m.min {
		m.min = mib
	}
	if mib > m.max {
		m.max = mib
	}
	m.samples++
}

func (m measurement) profile() Profile {
	return Profile{PersistentMiB: m.min, EphemeralMiB: m.max - m.min, Known: true, Measured: true}
}
