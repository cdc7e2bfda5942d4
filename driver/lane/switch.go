package lane

// This file carries out a lane's switches: suspending and resuming a
// task, checkpointing its GPU memory, and what is kept of it.

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"time"

	"github.com/caravan-gpu/caravan/driver/switcher"
	"github.com/caravan-gpu/caravan/gpu"
)

func (c *Coordinator) suspend(l *laneState, m *member, why string) bool {
	h := m.hold
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lanes.Load() > 0 {
		// Another of the task's lanes has it stopped already.
		h.lanes.Add(1)
		m.suspended = true
		m.switches++
		c.emit(Event{TaskID: m.TaskID, Message: fmt.Sprintf("suspended in %s (%s); it was stopped by another of its lanes already", l.key, why),
			Annotations: map[string]string{"lane": l.key.String()}})
		return true
	}
	listed := m.gpuProcesses()
	gpuPIDs := pidsOf(listed)
	if c.mechanism(m).Via() != "" && len(gpuPIDs) > 0 {
		// Written ahead: after a restart in the middle, the processes may
		// be checkpointed while no state says so.
		m.suspending = gpuPIDs
		c.persist(l)
	}
	var checkpointed []int
	var need needCount
	start := time.Now()
	d, err := switcher.Timed(func() (err error) {
		checkpointed, err = c.mechanism(m).Suspend(c.ctx, m.Processes, gpuPIDs)
		return err
	})
	if err == nil && c.mechanism(m).Via() != "" {
		// What the processes checkpointed held, as the listing that named
		// them measured it: a process listed late is counted by the
		// listing that names it, and so only once.
		need.add(listed, checkpointed)
		checkpointed, err = c.checkpointLateComers(m, checkpointed, &need)
		d = time.Since(start)
	}
	if errors.Is(err, gpu.ErrCheckpointUnsupported) && !errors.Is(err, switcher.ErrRollback) && !m.hold.freezeOnly.Load() {
		// The mechanism undid its checkpoints; freezing is what is left.
		m.hold.freezeOnly.Store(true)
		msg := fmt.Sprintf("its processes cannot be checkpointed (%v); in %s it is frozen from now on, keeping its GPU memory while suspended", err, l.key)
		if safe, persistent, ephemeral := Safe(profilesOf(l.members), l.memMiB); !safe {
			msg += fmt.Sprintf("; warning: Σ persistent %d MiB + max ephemeral %d MiB does not fit in the lane's %d MiB, so the task running may run out of GPU memory", persistent, ephemeral, l.memMiB)
		}
		c.emit(Event{TaskID: m.TaskID, Err: err, Message: msg, Annotations: map[string]string{"lane": l.key.String()}})
		checkpointed = nil
		d, err = switcher.Timed(func() error {
			_, err := switcher.Freeze{}.Suspend(c.ctx, m.Processes, nil)
			return err
		})
	}
	c.switched(m, "suspend", d, err)
	m.suspending = nil
	if err != nil {
		c.persist(l)
		// The mechanism undid what it did, so the task keeps running; better
		// to share badly than to lose it.
		c.emit(Event{TaskID: m.TaskID, Err: err, Message: fmt.Sprintf("suspend in %s failed, task keeps running: %v", l.key, err),
			Annotations: map[string]string{"lane": l.key.String()}})
		return false
	}
	h.lanes.Store(1)
	h.setRunning(false, time.Now())
	h.setCheckpointedNeed(checkpointed, need.total())
	m.suspended = true
	m.suspendFailures = 0
	m.switches++
	m.lastSuspend = d
	// At once, not at the end of the step: a restart between two switches
	// must not forget what this one checkpointed.
	c.persist(l)
	c.emit(Event{TaskID: m.TaskID, Message: fmt.Sprintf("suspended in %s via %s in %s (%s)%s", l.key, c.via(m), round(d), why, checkpointNote(checkpointed)),
		Annotations: c.annotate(l, m, "suspend_latency", d)})
	return true
}

// lateComerRounds bounds how often a suspend goes back for processes that
// the task started while its others were checkpointed.
const lateComerRounds = 3

// checkpointLateComers checkpoints the processes of m that hold GPU memory
// although its suspend is done (done are those it checkpointed): processes
// the task started while the others were checkpointed, listed too late.
// The freeze holds them now, but their memory would stay on the GPU, where
// the partner's restore would not find it free. They are thawed and
// checkpointed too, then frozen again, and what they held on each GPU is
// added to need. Processes that keep coming fail the suspend, undone whole.
func (c *Coordinator) checkpointLateComers(m *member, done []int, need *needCount) ([]int, error) {
	for range lateComerRounds {
		// A checkpointed process is not listed, but a listing from before
		// its checkpoint (the watchdog's, where a fresh one failed) names
		// it still: it is neither checkpointed nor counted again.
		listed := notIn(m.gpuProcesses(), done)
		if len(listed) == 0 {
			return done, nil
		}
		late := pidsOf(listed)
		c.emit(Event{TaskID: m.TaskID, Message: fmt.Sprintf("processes %v started on the GPU during the suspend; checkpointing them too", late)})
		if err := m.Processes.Thaw(c.ctx); err != nil {
			_, rerr := c.mechanism(m).Resume(c.ctx, m.Processes, done)
			return nil, errors.Join(fmt.Errorf("thaw for processes %v that started during the suspend: %w", late, err), rerr)
		}
		more, err := c.mechanism(m).Suspend(c.ctx, m.Processes, late)
		if err != nil {
			_, rerr := c.mechanism(m).Resume(c.ctx, m.Processes, done)
			return nil, errors.Join(fmt.Errorf("checkpoint processes %v that started during the suspend: %w", late, err), rerr)
		}
		need.add(listed, more)
		done = append(done, more...)
	}
	if late := pidsOf(notIn(m.gpuProcesses(), done)); len(late) > 0 {
		_, rerr := c.mechanism(m).Resume(c.ctx, m.Processes, done)
		return nil, errors.Join(fmt.Errorf("processes %v kept starting on the GPU during the suspend", late), rerr)
	}
	return done, nil
}

// suspendFailed counts a failed suspend of m, and returns how long the
// lane waits before it tries again: ResumeBackoff, doubled after each
// failure in a row. After SuspendAttempts failures m is handed to
// Evict, which ends it, so that the partners it keeps waiting are
// not starved; until it leaves, the lane makes no switch.
func (c *Coordinator) suspendFailed(l *laneState, m *member) time.Duration {
	m.suspendFailures++
	if m.suspendFailures >= c.opts.SuspendAttempts && !m.evicted {
		m.evicted = true
		err := fmt.Errorf("suspend in %s failed %d times in a row", l.key, m.suspendFailures)
		c.emit(Event{TaskID: m.TaskID, Err: err, Message: fmt.Sprintf("%v; the task is ended so that its lane partners are not starved (its restart policy takes over)", err),
			Annotations: map[string]string{"lane": l.key.String(), "suspend_attempts": strconv.Itoa(m.suspendFailures)}})
		c.evict(m, err)
	}
	return c.opts.ResumeBackoff << min(m.suspendFailures-1, 6)
}

// evict hands m to the Evict hook, once.
func (c *Coordinator) evict(m *member, err error) {
	m.evicted = true
	if c.opts.Hooks.Evict == nil {
		return
	}
	c.running.Add(1)
	go func() {
		defer c.running.Done()
		c.opts.Hooks.Evict(m.TaskID, err)
	}()
}

// fits reports whether m's restore fits in the GPU memory free now on
// every GPU its processes held memory on, this lane's first; where it does
// not, gpu is the first where it falls short, with what it needs there and
// what is free. A GPU that cannot tell, or a task with nothing
// checkpointed, fits.
func (c *Coordinator) fits(l *laneState, m *member) (gpu string, need, free uint64, ok bool) {
	if c.opts.FreeMiB == nil || len(m.hold.checkpointedPIDs()) == 0 {
		return l.key.GPU, 0, 0, true
	}
	needs := m.hold.needs()
	gpus := slices.Sorted(maps.Keys(needs))
	if i := slices.Index(gpus, l.key.GPU); i > 0 {
		gpus = append(append([]string{l.key.GPU}, gpus[:i]...), gpus[i+1:]...)
	}
	for _, g := range gpus {
		if needs[g] == 0 {
			continue
		}
		if free, known := c.opts.FreeMiB(g); known && free < needs[g] {
			return g, needs[g], free, false
		}
	}
	return l.key.GPU, needs[l.key.GPU], 0, true
}

// roomToRestore reports whether the GPU has the memory m's restore needs
// (what its processes held when they were checkpointed): a restore that
// runs out of GPU memory can leave the process stuck for good. Where it
// has not, a running partner that grew past its profile is the one that
// pays: it is evicted, and m waits for the memory.
func (c *Coordinator) roomToRestore(l *laneState, m *member) bool {
	gpu, need, free, fits := c.fits(l, m)
	if fits {
		m.waitingForRoom = false
		return true
	}
	if gpu != l.key.GPU {
		// Short on another of the task's GPUs, whose lane's partners are
		// not this lane's to judge: it waits for the memory there.
		if !m.waitingForRoom {
			m.waitingForRoom = true
			c.emit(Event{TaskID: m.TaskID, Message: fmt.Sprintf("restore in %s waits for %d MiB on %s, another of its GPUs; %d MiB free there", l.key, need, gpu, free),
				Annotations: map[string]string{"lane": l.key.String()}})
		}
		return false
	}
	// Told before any partner is ended for it, so that the task's events
	// read in the order of cause and effect.
	if !m.waitingForRoom {
		m.waitingForRoom = true
		c.emit(Event{TaskID: m.TaskID, Message: fmt.Sprintf("restore in %s waits for %d MiB; %d MiB free on the GPU", l.key, need, free),
			Annotations: map[string]string{"lane": l.key.String()}})
	}
	var grower *member
	var grew, growerUse, growerProfile uint64
	for _, o := range l.members {
		if o == m || o.suspended || o.evicted || !o.Profile.Known || o.GPUMemoryMiB == nil {
			continue
		}
		use, profile := o.GPUMemoryMiB(), o.Profile.PersistentMiB+o.Profile.EphemeralMiB
		if use > profile && use-profile > grew {
			grower, grew, growerUse, growerProfile = o, use-profile, use, profile
		}
	}
	if grower != nil {
		err := fmt.Errorf("grew to %d MiB in %s, past its profile of %d MiB, so that %s's restore of %d MiB does not fit (%d MiB free on the GPU)",
			growerUse, l.key, growerProfile, m.displayName(), need, free)
		c.emit(Event{TaskID: grower.TaskID, Err: err, Message: fmt.Sprintf("%v; the task is ended so that its partner can run", err),
			Annotations: map[string]string{"lane": l.key.String()}})
		c.evict(grower, err)
	} else if frozen, held := c.largestFrozenOnly(l, m); frozen != nil {
		// A task that can only be frozen keeps its memory while its
		// partners take their turns: it is the one that cannot share.
		err := fmt.Errorf("cannot be checkpointed, and the %d MiB it keeps while frozen in %s leave no room for %s's restore of %d MiB (%d MiB free on the GPU)",
			held, l.key, m.displayName(), need, free)
		c.emit(Event{TaskID: frozen.TaskID, Err: err, Message: fmt.Sprintf("%v; the task is ended so that its partner can run", err),
			Annotations: map[string]string{"lane": l.key.String()}})
		c.evict(frozen, err)
	}
	return false
}

// displayName is the member's task name, or its ID where it has none.
func (m *member) displayName() string {
	if m.Name != "" {
		return m.Name
	}
	return m.TaskID
}

func profilesOf(members []*member) []Profile {
	out := make([]Profile, len(members))
	for i, m := range members {
		out[i] = m.Profile
	}
	return out
}

// largestFrozenOnly is the suspended member of l, other than m, that can
// only be frozen and holds the most GPU memory, and what it holds.
func (c *Coordinator) largestFrozenOnly(l *laneState, m *member) (*member, uint64) {
	var out *member
	var most uint64
	for _, o := range l.members {
		if o == m || !o.suspended || o.evicted || !o.hold.freezeOnly.Load() || o.GPUMemoryMiB == nil {
			continue
		}
		if held := o.GPUMemoryMiB(); held > most {
			out, most = o, held
		}
	}
	return out, most
}

func checkpointNote(pids []int) string {
	if len(pids) == 0 {
		return ""
	}
	return fmt.Sprintf("; checkpointed PIDs %v", pids)
}

func (c *Coordinator) annotate(l *laneState, m *member, latencyKey string, d time.Duration) map[string]string {
	a := map[string]string{"lane": l.key.String(), "mechanism": c.mechanism(m).Name(), "process_control": m.Processes.Method(),
		latencyKey: d.String()}
	if via := c.mechanism(m).Via(); via != "" {
		a["checkpoint_via"] = via
	}
	if pids := m.hold.checkpointedPIDs(); len(pids) > 0 {
		a["checkpointed_pids"] = fmt.Sprint(pids)
	}
	return a
}

// resume restores what the task's suspend checkpointed and thaws it,
// retrying a failure a few times before the task is handed to ResumeFailed,
// which ends it rather than leaving it frozen. A restore that ran out of
// memory is handed over at once, as no retry can bring the process back.
func (c *Coordinator) resume(l *laneState, m *member, why string) bool {
	if m.evicted {
		// Ending: its turns pass it by until it leaves, rather than try
		// and end it again at every one.
		return false
	}
	h := m.hold
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lanes.Load() > 1 {
		// Its turn here; it runs when its other lanes give it theirs.
		h.lanes.Add(-1)
		m.suspended = false
		m.waitingForRoom = false // the lane that restores it tells of a wait
		c.emit(Event{TaskID: m.TaskID, Message: fmt.Sprintf("released in %s (%s); it stays stopped until its other lanes give it a turn", l.key, why),
			Annotations: map[string]string{"lane": l.key.String()}})
		return true
	}
	restoring := h.checkpointedPIDs()
	if !c.roomToRestore(l, m) {
		return false
	}
	var err error
	var d time.Duration
	backoff := c.opts.ResumeBackoff
	attempt := 1
	for ; ; attempt++ {
		d, err = switcher.Timed(func() error {
			// The node's mechanism, even for a member that is only frozen:
			// another of the task's lanes may have checkpointed it, and a
			// resume with nothing checkpointed only thaws.
			left, err := c.opts.Mechanism.Resume(c.ctx, m.Processes, h.checkpointedPIDs())
			h.setCheckpointed(left)
			return err
		})
		c.switched(m, "resume", d, err)
		// A restore that ran out of memory cannot be retried: the process
		// stays checkpointed for good.
		if err == nil || attempt >= c.opts.ResumeAttempts || c.ctx.Err() != nil || errors.Is(err, gpu.ErrRestoreLost) {
			break
		}
		c.emit(Event{TaskID: m.TaskID, Err: err, Message: fmt.Sprintf("resume in %s failed (attempt %d of %d), retrying in %s: %v",
			l.key, attempt, c.opts.ResumeAttempts, backoff, err), Annotations: map[string]string{"lane": l.key.String()}})
		select {
		case <-time.After(backoff):
		case <-c.ctx.Done():
		}
		backoff *= 2
	}
	if err != nil {
		what := fmt.Sprintf("failed after %d attempt(s)", attempt)
		if errors.Is(err, gpu.ErrRestoreLost) {
			what = "failed: its GPU state cannot be restored"
		}
		c.emit(Event{TaskID: m.TaskID, Err: err, Message: fmt.Sprintf("resume in %s %s; the task is ended so that its restart policy takes over: %v", l.key, what, err),
			Annotations: map[string]string{"lane": l.key.String(), "resume_attempts": strconv.Itoa(attempt)}})
		if c.opts.Hooks.ResumeFailed != nil {
			c.running.Add(1)
			go func() {
				defer c.running.Done()
				c.opts.Hooks.ResumeFailed(m.TaskID, err)
			}()
		}
		m.evicted = true
		return false
	}
	h.lanes.Store(0)
	h.setRunning(true, time.Now())
	m.suspended = false
	m.lastResume = d
	c.persist(l)
	msg := fmt.Sprintf("resumed in %s via %s in %s (%s)", l.key, c.via(m), round(d), why)
	if len(restoring) > 0 {
		msg += fmt.Sprintf("; restored PIDs %v", restoring)
	}
	c.emit(Event{TaskID: m.TaskID, Message: msg, Annotations: c.annotate(l, m, "resume_latency", d)})
	return true
}

// persist hands every member's state that changed to the Persist hook.
func (c *Coordinator) persist(l *laneState) {
	if c.opts.Hooks.Persist == nil {
		return
	}
	for i, m := range l.members {
		st := MemberState{Profile: m.Profile, Suspended: m.suspended, Checkpointed: m.hold.checkpointedPIDs(),
			Suspending: m.suspending, Turn: l.mode == "time-sliced" && i == l.running, Mode: l.mode, Switches: m.switches}
		if len(st.Checkpointed) == 0 {
			st.Checkpointed = nil
		} else {
			st.NeedMiB = m.hold.needs()
			st.CheckpointedMiB = st.NeedMiB[l.key.GPU]
		}
		if st.Turn {
			st.SliceStart = m.sliceStart
		}
		for _, o := range l.members {
			if o != m {
				st.Peers = append(st.Peers, o.TaskID)
			}
		}
		if m.persisted != nil && reflect.DeepEqual(*m.persisted, st) {
			continue
		}
		m.persisted = &st
		c.opts.Hooks.Persist(m.TaskID, l.key, st)
	}
}

func (c *Coordinator) switched(m *member, op string, d time.Duration, err error) {
	if c.opts.Hooks.Switched != nil {
		c.opts.Hooks.Switched(op, c.mechanism(m).Name(), d, err)
	}
}

func round(d time.Duration) time.Duration {
	if d > time.Millisecond {
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}
