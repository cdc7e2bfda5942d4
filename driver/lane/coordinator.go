package lane

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/caravan-gpu/caravan/driver/switcher"
)

// Member is a task that joins a lane.
type Member struct {
	TaskID string
	Name   string
	// Profile is the declared profile; the zero value asks for measuring.
	Profile Profile
	// Processes freezes and thaws all of the task's processes.
	Processes switcher.Freezer
	// GPUPIDs returns the task's processes that hold GPU memory.
	GPUPIDs func() []int
	// GPUMemoryMiB returns what the task holds on the lane's GPU now.
	GPUMemoryMiB func() uint64
	// Iterations counts the iteration boundaries the task has marked; nil
	// when the task cannot cooperate.
	Iterations *IterationCounter
}

// Event is something a task's owner should hear about.
type Event struct {
	TaskID      string
	Message     string
	Err         error
	Annotations map[string]string
}

// Hooks connect the coordinator to events, metrics and task lifecycle.
type Hooks struct {
	Event func(Event)
	// Switched reports one suspend or resume and its latency.
	Switched func(op, mechanism string, latency time.Duration, err error)
	// ResumeFailed is called when a suspended task could not be resumed:
	// the owner ends it, so Nomad's restart policy takes over.
	ResumeFailed func(taskID string, err error)
	// Members reports a lane's task count whenever a task joins or leaves
	// it; 0 means the lane is gone. Calls come in the order of the changes.
	Members func(key Key, tasks int)
}

// Options tune a coordinator.
type Options struct {
	Mechanism switcher.Mechanism
	Quantum   time.Duration
	// IterationGrace is how long past its quantum a cooperating task may run
	// to reach an iteration boundary.
	IterationGrace time.Duration
	// MeasureIterations is how many iterations (or quanta, for a task that
	// does not mark iterations) a profile is measured over.
	MeasureIterations int
	Hooks             Hooks
	Logger            hclog.Logger
}

// Status is a member's view for stats and inspection.
type Status struct {
	Lane          Key
	Mode          string // "alone", "concurrent", "time-sliced"
	Suspended     bool
	Profile       Profile
	Switches      int
	LastSuspend   time.Duration
	LastResume    time.Duration
	Iterations    int64
	LaneMemoryMiB uint64
}

// Coordinator runs every lane of a node. One lives in the driver process;
// after a restart a new one is rebuilt from the recovered tasks.
type Coordinator struct {
	opts   Options
	ctx    context.Context
	logger hclog.Logger

	mu    sync.Mutex
	lanes map[Key]*laneState
	// members holds each task's lanes: a task on several GPUs is in a lane
	// of each.
	members map[string][]Key
	// holds counts, per task, the lanes that have it suspended: its
	// processes are one, so they run only while no lane holds them.
	holds map[string]*hold
}

// hold is how many lanes have a task suspended; mu serialises the task's
// switches across its lanes.
type hold struct {
	mu    sync.Mutex
	lanes int
}

type laneState struct {
	key    Key
	memMiB uint64

	mu      sync.Mutex
	members []*member
	running int // index of the member that runs while time-sliced
	mode    string
	wake    chan struct{}
	done    chan struct{}
}

type member struct {
	Member
	// hold is shared by the task's members in all its lanes.
	hold         *hold
	suspended    bool
	sliceStart   time.Time
	runTime      time.Duration
	lastTick     time.Time
	measure      measurement
	switches     int
	lastSuspend  time.Duration
	lastResume   time.Duration
	pendingSince time.Time // quantum over, waiting for an iteration boundary
	pendingMark  int64
}

// New returns a coordinator whose lanes stop when ctx ends.
func New(ctx context.Context, opts Options) *Coordinator {
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if opts.MeasureIterations <= 0 {
		opts.MeasureIterations = 3
	}
	return &Coordinator{opts: opts, ctx: ctx, logger: opts.Logger, lanes: map[Key]*laneState{}, members: map[string][]Key{}, holds: map[string]*hold{}}
}

// Mechanism is the switching mechanism in use.
func (c *Coordinator) Mechanism() string { return c.opts.Mechanism.Name() }

// Join adds a task to lane key of laneMiB. suspended says the task's
// processes are frozen now, as after a driver restart in mid-slice. A task
// on several GPUs joins a lane of each; it runs only while none of them has
// it suspended.
func (c *Coordinator) Join(key Key, laneMiB uint64, m Member, suspended bool) {
	c.mu.Lock()
	l, ok := c.lanes[key]
	if !ok {
		l = &laneState{key: key, memMiB: laneMiB, wake: make(chan struct{}, 1), done: make(chan struct{})}
		c.lanes[key] = l
		go c.loop(l)
	}
	c.members[m.TaskID] = append(c.members[m.TaskID], key)
	h := c.holds[m.TaskID]
	if h == nil {
		h = &hold{}
		c.holds[m.TaskID] = h
	}
	if suspended {
		h.mu.Lock()
		h.lanes++
		h.mu.Unlock()
	}
	l.mu.Lock()
	now := time.Now()
	l.members = append(l.members, &member{Member: m, hold: h, suspended: suspended, sliceStart: now, lastTick: now})
	n := len(l.members)
	l.mu.Unlock()
	c.membersChanged(key, n) // under c.mu, so that counts arrive in order
	c.mu.Unlock()
	c.emit(Event{TaskID: m.TaskID, Message: fmt.Sprintf("joined %s (%d MiB) with memory profile %s", key, laneMiB, m.Profile),
		Annotations: map[string]string{"lane": key.String()}})
	l.poke()
}

// Leave removes a task from all its lanes, resuming it first if it is
// suspended so that it can receive the signals that stop it.
func (c *Coordinator) Leave(taskID string) {
	c.mu.Lock()
	keys := c.members[taskID]
	delete(c.members, taskID)
	delete(c.holds, taskID)
	c.mu.Unlock()
	for _, key := range keys {
		c.leave(key, taskID)
	}
}

func (c *Coordinator) leave(key Key, taskID string) {
	c.mu.Lock()
	l := c.lanes[key]
	c.mu.Unlock()
	if l == nil {
		return
	}
	l.mu.Lock()
	for i, m := range l.members {
		if m.TaskID != taskID {
			continue
		}
		if m.suspended {
			h := m.hold
			h.mu.Lock()
			h.lanes = max(0, h.lanes-1)
			if h.lanes == 0 {
				_ = c.opts.Mechanism.Resume(c.ctx, m.Processes, m.gpuPIDs())
			}
			h.mu.Unlock()
			m.suspended = false
		}
		l.members = append(l.members[:i], l.members[i+1:]...)
		if l.running > i || l.running >= len(l.members) {
			l.running = max(0, l.running-1)
		}
		break
	}
	l.mu.Unlock()
	// Lock order is c.mu then l.mu, as in Join, so no task joins a lane
	// that is being torn down.
	c.mu.Lock()
	l.mu.Lock()
	n := len(l.members)
	empty := n == 0
	if empty && c.lanes[key] == l {
		delete(c.lanes, key)
		close(l.done)
	}
	l.mu.Unlock()
	c.membersChanged(key, n)
	c.mu.Unlock()
	if !empty {
		l.poke()
	}
}

// Status returns a member's status in its first lane.
func (c *Coordinator) Status(taskID string) (Status, bool) {
	c.mu.Lock()
	keys := c.members[taskID]
	var l *laneState
	var key Key
	if len(keys) > 0 {
		key = keys[0]
		l = c.lanes[key]
	}
	c.mu.Unlock()
	if l == nil {
		return Status{}, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range l.members {
		if m.TaskID == taskID {
			s := Status{Lane: key, Mode: l.mode, Suspended: m.suspended, Profile: m.Profile, Switches: m.switches,
				LastSuspend: m.lastSuspend, LastResume: m.lastResume, LaneMemoryMiB: l.memMiB}
			if m.Iterations != nil {
				s.Iterations = m.Iterations.Count()
			}
			return s, true
		}
	}
	return Status{}, false
}

func (l *laneState) poke() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

func (c *Coordinator) membersChanged(key Key, n int) {
	if c.opts.Hooks.Members != nil {
		c.opts.Hooks.Members(key, n)
	}
}

func (c *Coordinator) emit(e Event) {
	if c.opts.Hooks.Event != nil {
		c.opts.Hooks.Event(e)
	}
}

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
	c.measure(l, now)

	profiles := make([]Profile, len(l.members))
	for i, m := range l.members {
		profiles[i] = m.Profile
	}
	safe, persistent, ephemeral := Safe(profiles, l.memMiB)
	mode := "time-sliced"
	switch {
	case len(l.members) == 1:
		mode = "alone"
	case safe:
		mode = "concurrent"
	}
	if mode != l.mode {
		l.mode = mode
		msg := fmt.Sprintf("%s: %d task(s) %s; Σ persistent %d MiB + max ephemeral %d MiB vs lane %d MiB",
			l.key, len(l.members), map[string]string{"alone": "alone in the lane", "concurrent": "run concurrently", "time-sliced": "take turns"}[mode],
			persistent, ephemeral, l.memMiB)
		for _, m := range l.members {
			c.emit(Event{TaskID: m.TaskID, Message: msg, Annotations: map[string]string{"lane": l.key.String(), "mode": mode}})
		}
	}
	if mode != "time-sliced" {
		for _, m := range l.members {
			if m.suspended {
				c.resume(l, m, "the lane is safe to share")
			}
		}
		return c.tick()
	}

	if l.running >= len(l.members) {
		l.running = 0
	}
	cur := l.members[l.running]
	// Exactly one runs: stop the others before the current one goes on.
	for i, m := range l.members {
		if i != l.running && !m.suspended {
			c.suspend(l, m, "another task's turn in the lane")
		}
	}
	if cur.suspended {
		if !c.resume(l, cur, "its turn in the lane") {
			l.running = (l.running + 1) % len(l.members)
			return c.tick()
		}
		cur.sliceStart = now
	}
	if now.Sub(cur.sliceStart) < c.opts.Quantum {
		return min(c.tick(), c.opts.Quantum-now.Sub(cur.sliceStart))
	}
	// Quantum over: wait for an iteration boundary when the task marks them.
	if cur.Iterations != nil && cur.Iterations.Count() > 0 && c.opts.IterationGrace > 0 {
		if cur.pendingSince.IsZero() {
			cur.pendingSince, cur.pendingMark = now, cur.Iterations.Count()
			return boundaryPoll
		}
		if cur.Iterations.Count() == cur.pendingMark && now.Sub(cur.pendingSince) < c.opts.IterationGrace {
			return boundaryPoll
		}
	}
	reason := "quantum of " + c.opts.Quantum.String() + " used"
	if !cur.pendingSince.IsZero() {
		if cur.Iterations.Count() > cur.pendingMark {
			reason += ", at an iteration boundary"
		} else {
			reason += ", no iteration boundary within " + c.opts.IterationGrace.String()
		}
	}
	cur.pendingSince = time.Time{}
	if !c.suspend(l, cur, reason) {
		return c.tick()
	}
	for i := 1; i <= len(l.members); i++ {
		idx := (l.running + i) % len(l.members)
		if c.resume(l, l.members[idx], "its turn in the lane") {
			l.running = idx
			l.members[idx].sliceStart = time.Now()
			break
		}
	}
	return c.tick()
}

func (c *Coordinator) measure(l *laneState, now time.Time) {
	for _, m := range l.members {
		if !m.suspended {
			m.runTime += now.Sub(m.lastTick)
		}
		m.lastTick = now
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

// gpuPIDs returns the member's processes that hold GPU memory.
func (m *member) gpuPIDs() []int {
	if m.GPUPIDs == nil {
		return nil
	}
	return m.GPUPIDs()
}

// via says how a member is switched: the mechanism and how its processes
// are frozen, "freeze (cgroup-v2)".
func (c *Coordinator) via(m *member) string {
	return c.Mechanism() + " (" + m.Processes.Method() + ")"
}

func (c *Coordinator) suspend(l *laneState, m *member, why string) bool {
	h := m.hold
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lanes > 0 {
		// Another of the task's lanes has it stopped already.
		h.lanes++
		m.suspended = true
		m.switches++
		c.emit(Event{TaskID: m.TaskID, Message: fmt.Sprintf("suspended in %s (%s); it was stopped by another of its lanes already", l.key, why),
			Annotations: map[string]string{"lane": l.key.String()}})
		return true
	}
	gpuPIDs := m.gpuPIDs()
	d, err := switcher.Timed(func() error { return c.opts.Mechanism.Suspend(c.ctx, m.Processes, gpuPIDs) })
	c.switched("suspend", d, err)
	if err != nil {
		// The task keeps running; better to share badly than to lose it.
		_ = c.opts.Mechanism.Resume(c.ctx, m.Processes, gpuPIDs)
		c.emit(Event{TaskID: m.TaskID, Err: err, Message: fmt.Sprintf("suspend in %s failed, task keeps running: %v", l.key, err),
			Annotations: map[string]string{"lane": l.key.String()}})
		return false
	}
	h.lanes = 1
	m.suspended = true
	m.switches++
	m.lastSuspend = d
	c.emit(Event{TaskID: m.TaskID, Message: fmt.Sprintf("suspended in %s via %s in %s (%s)", l.key, c.via(m), round(d), why),
		Annotations: map[string]string{"lane": l.key.String(), "mechanism": c.Mechanism(), "process_control": m.Processes.Method(),
			"suspend_latency": d.String()}})
	return true
}

func (c *Coordinator) resume(l *laneState, m *member, why string) bool {
	h := m.hold
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lanes > 1 {
		// Its turn here; it runs when its other lanes give it theirs.
		h.lanes--
		m.suspended = false
		c.emit(Event{TaskID: m.TaskID, Message: fmt.Sprintf("released in %s (%s); it stays stopped until its other lanes give it a turn", l.key, why),
			Annotations: map[string]string{"lane": l.key.String()}})
		return true
	}
	d, err := switcher.Timed(func() error { return c.opts.Mechanism.Resume(c.ctx, m.Processes, m.gpuPIDs()) })
	c.switched("resume", d, err)
	if err != nil {
		c.emit(Event{TaskID: m.TaskID, Err: err, Message: fmt.Sprintf("resume in %s failed; the task is ended so that its restart policy takes over: %v", l.key, err),
			Annotations: map[string]string{"lane": l.key.String()}})
		if c.opts.Hooks.ResumeFailed != nil {
			go c.opts.Hooks.ResumeFailed(m.TaskID, err)
		}
		return false
	}
	h.lanes = 0
	m.suspended = false
	m.lastResume = d
	c.emit(Event{TaskID: m.TaskID, Message: fmt.Sprintf("resumed in %s via %s in %s (%s)", l.key, c.via(m), round(d), why),
		Annotations: map[string]string{"lane": l.key.String(), "mechanism": c.Mechanism(), "process_control": m.Processes.Method(),
			"resume_latency": d.String()}})
	return true
}

func (c *Coordinator) switched(op string, d time.Duration, err error) {
	if c.opts.Hooks.Switched != nil {
		c.opts.Hooks.Switched(op, c.Mechanism(), d, err)
	}
}

func round(d time.Duration) time.Duration {
	if d > time.Millisecond {
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}

// Lanes lists the lanes with members, for metrics.
func (c *Coordinator) Lanes() map[Key]int {
	c.mu.Lock()
	ls := make([]*laneState, 0, len(c.lanes))
	for _, l := range c.lanes {
		ls = append(ls, l)
	}
	c.mu.Unlock()
	out := map[Key]int{}
	for _, l := range ls {
		l.mu.Lock()
		out[l.key] = len(l.members)
		l.mu.Unlock()
	}
	return out
}

// Members lists the task IDs in key, in join order.
func (c *Coordinator) Members(key Key) []string {
	c.mu.Lock()
	l := c.lanes[key]
	c.mu.Unlock()
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, m := range l.members {
		out = append(out, m.TaskID)
	}
	sort.Strings(out)
	return out
}
