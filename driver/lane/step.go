package lane

// This file holds a lane's loop: each step decides how its tasks share it
// and, when they take turns, whose turn it is.

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/caravan-gpu/caravan/driver/switcher"
)

// tick is how often a lane samples memory and checks its quantum.
func (c *Coordinator) tick() time.Duration {
	return min(max(c.opts.Quantum/20, 5*time.Millisecond), 100*time.Millisecond)
}

// boundaryPoll is how often a lane looks for an iteration mark while a
// switch waits for one: short, as the job runs on into its next iteration.
const boundaryPoll = 2 * time.Millisecond

func (c *Coordinator) loop(l *laneState) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-l.done:
			return
		case <-l.wake:
		case <-timer.C:
		}
		next := c.step(l)
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(next)
	}
}

// step brings the lane in line with the safety condition and the quantum,
// and returns how soon to look again.
func (c *Coordinator) step(l *laneState) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if len(l.members) == 0 {
		return time.Hour
	}
	defer c.persist(l)
	if len(l.awaiting) > 0 {
		// Restored after a restart: change nothing until the lane's other
		// members are back, or have had their chance.
		if now.Before(l.awaitUntil) {
			return c.tick()
		}
		l.awaiting = nil
	}
	c.measure(l, now)

	if c.settleMode(l) != "time-sliced" {
		for _, m := range l.members {
			if m.suspended {
				c.resume(l, m, "the lane is safe to share")
			}
		}
		return c.tick()
	}
	return c.takeTurns(l, now)
}

// settleMode decides how the lane's tasks share it: "alone", "concurrent"
// (Salus's safety condition holds, and each task gets its share) or
// "time-sliced" (they take turns). It tells the tasks when that changes.
func (c *Coordinator) settleMode(l *laneState) string {
	profiles := profilesOf(l.members)
	fit, total := Concurrent(profiles, l.memMiB)
	mode := "time-sliced"
	switch {
	case len(l.members) == 1:
		mode = "alone"
	case fit:
		mode = "concurrent"
	}
	if mode == "concurrent" {
		shares := sharesOf(l.members, l.memMiB)
		l.shares.Store(&shares)
	} else {
		l.shares.Store(nil)
	}
	if mode != l.mode {
		l.mode = mode
		msg := fmt.Sprintf("%s: %d task(s) %s; Σ (persistent + ephemeral) %d MiB vs lane %d MiB",
			l.key, len(l.members), map[string]string{"alone": "alone in the lane", "concurrent": "run concurrently", "time-sliced": "take turns"}[mode],
			total, l.memMiB)
		if safe, persistent, ephemeral := Safe(profiles, l.memMiB); mode == "time-sliced" && c.freezesAny(l) && !safe {
			// Frozen tasks keep their GPU memory: the one running has only
			// what the others' persistent memory leaves.
			msg += fmt.Sprintf("; warning: with %s, suspended tasks keep their memory, and Σ persistent %d MiB + max ephemeral %d MiB does not fit, so the task running may run out of GPU memory",
				c.Mechanism(), persistent, ephemeral)
		}
		for _, m := range l.members {
			c.emit(Event{TaskID: m.TaskID, Message: msg, Annotations: map[string]string{"lane": l.key.String(), "mode": mode}})
		}
	}
	return mode
}

// takeTurns runs exactly one of a time-sliced lane's tasks, and hands the
// turn on when it is over. It returns how soon to look again.
func (c *Coordinator) takeTurns(l *laneState, now time.Time) time.Duration {
	if l.running >= len(l.members) {
		l.running = 0
	}
	cur := l.members[l.running]
	// Exactly one runs: stop the others before the current one goes on. A
	// task that cannot be stopped keeps its partner waiting, but only for
	// SuspendAttempts tries: then it is ended, and the partner runs.
	for i, m := range l.members {
		if i != l.running && !m.suspended {
			if !c.suspend(l, m, "another task's turn in the lane") {
				return c.suspendFailed(l, m)
			}
		}
	}
	if cur.evicted {
		// Ending; its partners take their turns once it has left.
		l.running = (l.running + 1) % len(l.members)
		return c.tick()
	}
	if cur.suspended {
		if !c.resume(l, cur, "its turn in the lane") {
			l.running = (l.running + 1) % len(l.members)
			return c.tick()
		}
		cur.sliceStart, cur.ranAtSliceStart, cur.heldLimit = now, cur.hold.ran(now), 0
	}
	wait, reason := c.turnOver(cur, now)
	if reason == "" {
		return wait
	}
	cur.pendingSince = time.Time{}
	if !anotherCanRun(l, cur) {
		// Every partner is ending: a switch would suspend cur, and move
		// its GPU memory out and back, only to resume it. Its turn starts
		// again.
		cur.sliceStart, cur.ranAtSliceStart, cur.heldLimit = now, cur.hold.ran(now), 0
		return c.tick()
	}
	if !c.suspend(l, cur, reason) {
		return c.suspendFailed(l, cur)
	}
	for i := 1; i <= len(l.members); i++ {
		idx := (l.running + i) % len(l.members)
		if c.resume(l, l.members[idx], "its turn in the lane") {
			l.running = idx
			next, now := l.members[idx], time.Now()
			next.sliceStart, next.ranAtSliceStart, next.heldLimit = now, next.hold.ran(now), 0
			break
		}
	}
	return c.tick()
}

// anotherCanRun says whether a member of l other than cur may take the
// turn: one that is not being ended.
func anotherCanRun(l *laneState, cur *member) bool {
	for _, m := range l.members {
		if m != cur && !m.evicted {
			return true
		}
	}
	return false
}

// turnOver decides whether cur's turn is over: if not, it returns how soon
// to look again; if so, why, in words for the task's event.
func (c *Coordinator) turnOver(cur *member, now time.Time) (wait time.Duration, reason string) {
	quantum := c.quantumOf(cur)
	if cur.heldLimit == 0 {
		cur.heldLimit = 2*quantum + rand.N(quantum+1)
	}
	ran := cur.hold.ran(now) - cur.ranAtSliceStart
	var marks int64
	if cur.Iterations != nil {
		marks = cur.Iterations.Count()
	}
	v := decideTurn(turnClock{
		ran: ran, held: now.Sub(cur.sliceStart) - ran,
		quantum: quantum, baseQuantum: c.opts.Quantum, heldLimit: cur.heldLimit,
		lastSwitch: cur.lastSuspend + cur.lastResume,
		marks:      marks, pending: !cur.pendingSince.IsZero(), pendingMark: cur.pendingMark,
		pendingFor: now.Sub(cur.pendingSince), grace: c.opts.IterationGrace,
		tick: c.tick(),
	})
	if v.awaitMark {
		cur.pendingSince, cur.pendingMark = now, marks
	}
	return v.wait, v.reason
}

// switchShare is the most of a lane's time that switching may take: a
// checkpoint of tens of GiB takes tens of seconds on the hardware, so a
// task's quantum stretches to nine times what its last suspend and resume
// took.
const switchShare = 10

// quantumOf is m's quantum: Options.Quantum, or longer where m's switches
// move its GPU memory and are slow. A freeze moves nothing, and what it
// takes is the host's noise, not a cost to spread.
func (c *Coordinator) quantumOf(m *member) time.Duration {
	if c.mechanism(m).Via() == "" {
		return c.opts.Quantum
	}
	return max(c.opts.Quantum, (switchShare-1)*(m.lastSuspend+m.lastResume))
}

func (c *Coordinator) measure(l *laneState, now time.Time) {
	for _, m := range l.members {
		if !m.suspended {
			m.runTime += now.Sub(m.lastTick)
		}
		m.lastTick = now
		if m.Profile.Known && !m.suspended && m.GPUMemoryMiB != nil && now.Sub(m.checkedProfile) >= profileCheck {
			m.checkedProfile = now
			c.checkDeclared(l, m)
		}
		if m.Profile.Known || m.suspended || m.GPUMemoryMiB == nil {
			continue
		}
		done := false
		if m.Iterations != nil && m.Iterations.Count() > 0 {
			// The first iteration warms up (allocator, cuDNN autotuning).
			m.measure.add(m.GPUMemoryMiB())
			done = m.Iterations.Count() > int64(c.opts.MeasureIterations)
		} else if m.runTime > c.opts.Quantum/10 {
			m.measure.add(m.GPUMemoryMiB())
			done = m.runTime > time.Duration(c.opts.MeasureIterations)*c.opts.Quantum
		}
		if done && m.measure.samples > 0 {
			m.Profile = m.measure.profile()
			c.emit(Event{TaskID: m.TaskID, Message: fmt.Sprintf("measured memory profile in %s: %s", l.key, m.Profile),
				Annotations: map[string]string{"lane": l.key.String(),
					"persistent_mib": strconv.FormatUint(m.Profile.PersistentMiB, 10),
					"ephemeral_mib":  strconv.FormatUint(m.Profile.EphemeralMiB, 10)}})
		}
	}
}

// profileCheck is how often a declared profile is held against what the
// task holds on the GPU: each check asks the GPU.
const profileCheck = 500 * time.Millisecond

// checkDeclared holds m's profile, declared or measured, against what it
// holds on the GPU now. A task that holds more is re-profiled (its
// ephemeral memory grows to cover what it holds) and told so; the lane's
// next step then checks again whether its tasks fit at once, and makes
// them take turns where they no longer do. Sharing follows what a task
// does, not what it said.
func (c *Coordinator) checkDeclared(l *laneState, m *member) {
	use, p := m.GPUMemoryMiB(), m.Profile
	if use <= p.PersistentMiB+p.EphemeralMiB {
		return
	}
	grown := Profile{PersistentMiB: p.PersistentMiB, EphemeralMiB: use - p.PersistentMiB, Known: true, Measured: true}
	c.emit(Event{TaskID: m.TaskID, Message: fmt.Sprintf("holds %d MiB in %s, past its memory profile (%s); re-profiled as %s",
		use, l.key, p, grown),
		Annotations: map[string]string{"lane": l.key.String(), "declared_mib": strconv.FormatUint(p.PersistentMiB+p.EphemeralMiB, 10),
			"held_mib": strconv.FormatUint(use, 10)}})
	m.Profile = grown
}

// gpuProcesses returns the member's processes that hold GPU memory.
func (m *member) gpuProcesses() []GPUProcess {
	if m.GPUProcesses == nil {
		return nil
	}
	return m.GPUProcesses()
}

// pidsOf is the PIDs of procs.
func pidsOf(procs []GPUProcess) []int {
	var out []int
	for _, p := range procs {
		out = append(out, p.PID)
	}
	return out
}

// notIn is procs but those of pids.
func notIn(procs []GPUProcess, pids []int) []GPUProcess {
	var out []GPUProcess
	for _, p := range procs {
		if !slices.Contains(pids, p.PID) {
			out = append(out, p)
		}
	}
	return out
}

// needCount adds up what a suspend's checkpointed processes held on each
// GPU, as the listing that named each one told it: on each GPU the sum of
// what was told, or, where a process's memory was not, at least the least
// it is taken to hold there (once, not once per process).
type needCount struct {
	told, least map[string]uint64
}

// add counts the processes of pids as procs listed them.
func (n *needCount) add(procs []GPUProcess, pids []int) {
	for _, p := range procs {
		if !slices.Contains(pids, p.PID) {
			continue
		}
		for gpu, mib := range p.MiB {
			if n.told == nil {
				n.told = map[string]uint64{}
			}
			n.told[gpu] += mib
		}
		for gpu, mib := range p.Untold {
			if n.least == nil {
				n.least = map[string]uint64{}
			}
			n.least[gpu] = max(n.least[gpu], mib)
		}
	}
}

// total is the need on each GPU; nil where nothing was counted.
func (n *needCount) total() map[string]uint64 {
	if n.told == nil && n.least == nil {
		return nil
	}
	out := maps.Clone(n.told)
	if out == nil {
		out = map[string]uint64{}
	}
	for gpu, mib := range n.least {
		out[gpu] = max(out[gpu], mib)
	}
	return out
}

// mechanism is how m is switched: the coordinator's, or freezing alone for
// a member whose processes cannot be checkpointed (MPS clients).
func (c *Coordinator) mechanism(m *member) switcher.Mechanism {
	if m.hold.freezeOnly.Load() {
		return switcher.Freeze{}
	}
	return c.opts.Mechanism
}

// freezesAny reports whether a member of l is switched by freezing alone,
// keeping its GPU memory while suspended.
func (c *Coordinator) freezesAny(l *laneState) bool {
	for _, m := range l.members {
		if c.mechanism(m).Via() == "" {
			return true
		}
	}
	return false
}

// via says how a member is switched: the mechanism, how the GPU state
// moves and how its processes are frozen, "freeze (cgroup-v2)",
// "cuda-checkpoint (cuda-driver-api, cgroup-v2)".
func (c *Coordinator) via(m *member) string {
	if v := c.mechanism(m).Via(); v != "" {
		return c.mechanism(m).Name() + " (" + v + ", " + m.Processes.Method() + ")"
	}
	return c.mechanism(m).Name() + " (" + m.Processes.Method() + ")"
}
