package lane

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/caravan-gpu/caravan/device/gpu"
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
	// Evict is called when a task must end for its lane partners' sake,
	// err saying why: it could not be suspended SuspendAttempts times in a
	// row, or it grew past its profile so that a partner's restore does
	// not fit on the GPU. The owner ends it; its restart policy takes over.
	Evict func(taskID string, err error)
	// Members reports a lane's task count whenever a task joins or leaves
	// it; 0 means the lane is gone. Calls come in the order of the changes.
	Members func(key Key, tasks int)
	// Persist stores a member's state in one of its lanes whenever it
	// changes, so that a new driver process can rejoin the task as it was
	// (Join's restored).
	Persist func(taskID string, key Key, st MemberState)
}

// MemberState is what a lane keeps of a member across a driver restart.
type MemberState struct {
	// Profile is the declared or measured profile.
	Profile   Profile `json:"profile"`
	Suspended bool    `json:"suspended"`
	// Checkpointed lists the processes whose GPU state is in host memory;
	// a resume restores exactly these.
	Checkpointed []int `json:"checkpointed,omitempty"`
	// Suspending lists the processes a suspend is checkpointing, written
	// before it starts: a driver that stops in the middle leaves some of
	// them checkpointed, and the next one asks the GPU which.
	Suspending []int `json:"suspending,omitempty"`
	// CheckpointedMiB is what the checkpointed processes held on the
	// lane's GPU: what their restore needs free.
	CheckpointedMiB uint64 `json:"checkpointed_mib,omitempty"`
	// Turn is set on the member whose turn it is while time-sliced.
	Turn       bool      `json:"turn"`
	SliceStart time.Time `json:"slice_start"`
	Mode       string    `json:"mode"`
	Switches   int       `json:"switches"`
	// Peers are the lane's other members, awaited after a restart before
	// the lane changes anything.
	Peers []string `json:"peers,omitempty"`
}

// Options tune a coordinator.
type Options struct {
	Mechanism switcher.Mechanism
	// Quantum is each turn's length while time-sliced; a task whose
	// suspend and resume are slow gets nine times their sum instead.
	Quantum time.Duration
	// IterationGrace is how long past its quantum a cooperating task may run
	// to reach an iteration boundary.
	IterationGrace time.Duration
	// MeasureIterations is how many iterations (or quanta, for a task that
	// does not mark iterations) a profile is measured over.
	MeasureIterations int
	// ResumeAttempts is how often a failed resume is tried before the task
	// is handed to ResumeFailed; ResumeBackoff is the wait after the first
	// failure, doubled after each further one.
	ResumeAttempts int
	ResumeBackoff  time.Duration
	// FreeMiB is the GPU memory free on a GPU now; where it is set, a
	// restore waits until what it needs is free.
	FreeMiB func(gpu string) (mib uint64, ok bool)
	// SuspendAttempts is how many suspends of a task may fail in a row,
	// each ResumeBackoff doubled after the one before, before the task is
	// handed to Evict.
	SuspendAttempts int
	// RejoinGrace is how long a lane restored after a restart waits for its
	// other members to rejoin before it schedules without them.
	RejoinGrace time.Duration
	Hooks       Hooks
	Logger      hclog.Logger
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

	// running counts the lane loops and hook calls still going, so that
	// Wait can tell when nothing touches the GPU or the hooks any more.
	running sync.WaitGroup
}

// hold is how many lanes have a task suspended; mu serialises the task's
// switches across its lanes. lanes changes only under mu, and is atomic so
// that a lane can see whether the task runs without waiting for a switch.
type hold struct {
	mu    sync.Mutex
	lanes atomic.Int32
	// checkpointed are the processes the task's suspend checkpointed; the
	// resume restores exactly these, never a fresh list from the GPU, from
	// which checkpointed processes are gone. ckMu guards it alone, so that
	// its lanes' states can be persisted while a switch holds mu.
	ckMu         sync.Mutex
	checkpointed []int

	// The task's run clock: how long it has really run, for turns that
	// count run time. runMu guards it alone, as ckMu does checkpointed.
	runMu    sync.Mutex
	runSince time.Time // zero while suspended
	runTotal time.Duration

	// freezeOnly is set once a checkpoint of the task's processes was
	// refused as unsupported (an MPS client): every lane of the task
	// freezes it from then on.
	freezeOnly atomic.Bool
}

// ran is how long the task has really run, up to now.
func (h *hold) ran(now time.Time) time.Duration {
	h.runMu.Lock()
	defer h.runMu.Unlock()
	t := h.runTotal
	if !h.runSince.IsZero() {
		t += now.Sub(h.runSince)
	}
	return t
}

// setRunning starts or stops the run clock; it is called when the task
// really starts or stops, not when one of several lanes releases it.
func (h *hold) setRunning(running bool, now time.Time) {
	h.runMu.Lock()
	defer h.runMu.Unlock()
	switch {
	case running && h.runSince.IsZero():
		h.runSince = now
	case !running && !h.runSince.IsZero():
		h.runTotal += now.Sub(h.runSince)
		h.runSince = time.Time{}
	}
}

func (h *hold) setCheckpointed(pids []int) {
	h.ckMu.Lock()
	defer h.ckMu.Unlock()
	h.checkpointed = pids
}

func (h *hold) checkpointedPIDs() []int {
	h.ckMu.Lock()
	defer h.ckMu.Unlock()
	return append([]int(nil), h.checkpointed...)
}

type laneState struct {
	key    Key
	memMiB uint64

	mu      sync.Mutex
	members []*member
	running int // index of the member that runs while time-sliced
	mode    string
	// awaiting are members that a restored member shared the lane with and
	// that have not rejoined yet; the lane holds still until awaitUntil.
	awaiting   map[string]bool
	awaitUntil time.Time
	wake       chan struct{}
	done       chan struct{}
	// shares are the members' shares of the lane (by task ID) while they
	// run concurrently, nil otherwise; read by Share without the lane's
	// lock, which a switch holds for seconds.
	shares atomic.Pointer[map[string]uint64]
}

type member struct {
	Member
	// hold is shared by the task's members in all its lanes.
	hold       *hold
	suspended  bool
	sliceStart time.Time
	// ranAtSliceStart is the task's run clock when its current turn began:
	// on several lanes it runs only while none of them holds it. heldLimit
	// ends a turn that long without it running.
	ranAtSliceStart, heldLimit time.Duration
	runTime                    time.Duration
	lastTick                   time.Time
	measure                    measurement
	switches                   int
	lastSuspend                time.Duration
	lastResume                 time.Duration
	pendingSince               time.Time // quantum over, waiting for an iteration boundary
	pendingMark                int64
	persisted                  *MemberState
	// suspending are the processes a suspend in flight checkpoints.
	suspending []int
	// suspendFailures counts the task's failed suspends in a row; evicted
	// is set once it was handed to Evict, until it leaves.
	suspendFailures int
	evicted         bool
	// checkpointMiB is what the task held on the lane's GPU when its
	// processes were checkpointed: what their restore needs free.
	checkpointMiB  uint64
	waitingForRoom bool
	// lateMiB is what processes started during a suspend held.
	lateMiB uint64
	// checkedProfile is when its profile was last held against use.
	checkedProfile time.Time
}

// New returns a coordinator whose lanes stop when ctx ends.
func New(ctx context.Context, opts Options) *Coordinator {
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if opts.MeasureIterations <= 0 {
		opts.MeasureIterations = 3
	}
	if opts.ResumeAttempts <= 0 {
		opts.ResumeAttempts = 3
	}
	if opts.SuspendAttempts <= 0 {
		opts.SuspendAttempts = 3
	}
	if opts.ResumeBackoff <= 0 {
		opts.ResumeBackoff = 100 * time.Millisecond
	}
	if opts.RejoinGrace <= 0 {
		opts.RejoinGrace = 30 * time.Second
	}
	return &Coordinator{opts: opts, ctx: ctx, logger: opts.Logger, lanes: map[Key]*laneState{}, members: map[string][]Key{}, holds: map[string]*hold{}}
}

// Wait returns once every lane loop and hook call has ended; call it
// after the context given to New is done.
func (c *Coordinator) Wait() { c.running.Wait() }

// Mechanism is the switching mechanism in use.
func (c *Coordinator) Mechanism() string { return c.opts.Mechanism.Name() }

// CheckpointVia says how GPU state is checkpointed; empty for freeze.
func (c *Coordinator) CheckpointVia() string { return c.opts.Mechanism.Via() }

// Join adds a task to lane key of laneMiB. restored is the member's state
// in this lane as last persisted, the zero value for a new task; after a
// driver restart it carries the measured profile, whether the lane has the
// task suspended and what is checkpointed, and whose turn it is. A task on
// several GPUs joins a lane of each; it runs only while none of them has it
// suspended.
func (c *Coordinator) Join(key Key, laneMiB uint64, m Member, restored MemberState) {
	c.mu.Lock()
	l, ok := c.lanes[key]
	if !ok {
		l = &laneState{key: key, memMiB: laneMiB, wake: make(chan struct{}, 1), done: make(chan struct{})}
		c.lanes[key] = l
		c.running.Add(1)
		go func() {
			defer c.running.Done()
			c.loop(l)
		}()
	}
	c.members[m.TaskID] = append(c.members[m.TaskID], key)
	h := c.holds[m.TaskID]
	if h == nil {
		h = &hold{}
		h.setRunning(true, time.Now())
		c.holds[m.TaskID] = h
	}
	if restored.Suspended {
		h.mu.Lock()
		h.lanes.Add(1)
		h.setRunning(false, time.Now())
		h.mu.Unlock()
	}
	if len(restored.Checkpointed) > 0 && len(h.checkpointedPIDs()) == 0 {
		h.setCheckpointed(restored.Checkpointed)
	}
	l.mu.Lock()
	now := time.Now()
	if !m.Profile.Known && restored.Profile.Known {
		m.Profile = restored.Profile
	}
	mem := &member{Member: m, hold: h, suspended: restored.Suspended, switches: restored.Switches, sliceStart: now, lastTick: now,
		ranAtSliceStart: h.ran(now), checkpointMiB: restored.CheckpointedMiB}
	if !restored.SliceStart.IsZero() {
		// The turn goes on from where it was: count it as run since then.
		mem.sliceStart = restored.SliceStart
		mem.ranAtSliceStart -= now.Sub(restored.SliceStart)
	}
	delete(l.awaiting, m.TaskID)
	for _, peer := range restored.Peers {
		if !l.has(peer) {
			if l.awaiting == nil {
				l.awaiting = map[string]bool{}
			}
			l.awaiting[peer] = true
			l.awaitUntil = now.Add(c.opts.RejoinGrace)
		}
	}
	l.members = append(l.members, mem)
	if restored.Turn {
		l.running = len(l.members) - 1
	}
	if l.mode == "" {
		l.mode = restored.Mode
	}
	n := len(l.members)
	l.mu.Unlock()
	c.membersChanged(key, n) // under c.mu, so that counts arrive in order
	c.mu.Unlock()
	c.emit(Event{TaskID: m.TaskID, Message: fmt.Sprintf("joined %s (%d MiB) with memory profile %s", key, laneMiB, m.Profile),
		Annotations: map[string]string{"lane": key.String()}})
	l.poke()
}

// Leave removes a task from all its lanes, resuming it first if it is
// suspended so that it can receive the signals that stop it. A resume that
// fails is returned, and told in an event: the task may still be frozen or
// checkpointed, and its owner must end it by force.
func (c *Coordinator) Leave(taskID string) error {
	c.mu.Lock()
	keys := c.members[taskID]
	delete(c.members, taskID)
	delete(c.holds, taskID)
	c.mu.Unlock()
	var errs []error
	for _, key := range keys {
		errs = append(errs, c.leave(key, taskID))
	}
	return errors.Join(errs...)
}

func (c *Coordinator) leave(key Key, taskID string) (err error) {
	c.mu.Lock()
	l := c.lanes[key]
	c.mu.Unlock()
	if l == nil {
		return nil
	}
	l.mu.Lock()
	for i, m := range l.members {
		if m.TaskID != taskID {
			continue
		}
		if m.suspended {
			h := m.hold
			h.mu.Lock()
			h.lanes.Store(max(0, h.lanes.Load()-1))
			if h.lanes.Load() == 0 {
				restore := h.checkpointedPIDs()
				if need, free, fits := c.fits(l, m); !fits {
					// A leaving task needs to run to take its stop signal,
					// not its GPU state back: a restore that does not fit
					// could leave it stuck for good.
					c.emit(Event{TaskID: taskID, Message: fmt.Sprintf("leaves %s thawed but checkpointed: its restore needs %d MiB, %d MiB free on the GPU", key, need, free),
						Annotations: map[string]string{"lane": key.String()}})
					restore = nil
				}
				var left []int
				left, err = c.opts.Mechanism.Resume(c.ctx, m.Processes, restore)
				h.setCheckpointed(left)
				h.setRunning(err == nil, time.Now())
				if err != nil {
					err = fmt.Errorf("resume in %s as the task leaves it: %w", key, err)
					c.emit(Event{TaskID: taskID, Err: err, Message: fmt.Sprintf("%v; the task may still be stopped, and is ended by force", err),
						Annotations: map[string]string{"lane": key.String()}})
				}
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
	return err
}

// Status returns a member's status in its first lane.
func (c *Coordinator) Status(taskID string) (Status, bool) {
	all := c.Statuses(taskID)
	if len(all) == 0 {
		return Status{}, false
	}
	return all[0], true
}

// Statuses is the task's view in each of its lanes, in the order it joined
// them.
func (c *Coordinator) Statuses(taskID string) []Status {
	c.mu.Lock()
	keys := append([]Key(nil), c.members[taskID]...)
	lanes := make([]*laneState, len(keys))
	for i, key := range keys {
		lanes[i] = c.lanes[key]
	}
	c.mu.Unlock()
	var out []Status
	for i, l := range lanes {
		if l == nil {
			continue
		}
		if s, ok := l.status(keys[i], taskID); ok {
			out = append(out, s)
		}
	}
	return out
}

func (l *laneState) status(key Key, taskID string) (Status, bool) {
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

func (l *laneState) has(taskID string) bool {
	for _, m := range l.members {
		if m.TaskID == taskID {
			return true
		}
	}
	return false
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
	// A turn counts the time the task really ran. A task on several lanes
	// runs only while none of them holds it, and lanes whose turns fall
	// out of step would otherwise each spend its turn while another holds
	// it, for good. A turn held (not run) for two to three quanta, drawn
	// per turn, ends all the same: two tasks that each wait for the other's lane
	// cannot stall both, and the draw keeps the two lanes from giving up
	// at the same moment and crossing again.
	quantum := c.quantumOf(cur)
	if cur.heldLimit == 0 {
		cur.heldLimit = 2*quantum + rand.N(quantum+1)
	}
	ran := cur.hold.ran(now) - cur.ranAtSliceStart
	held := now.Sub(cur.sliceStart) - ran
	if ran < quantum && held < cur.heldLimit {
		return min(c.tick(), quantum-ran, cur.heldLimit-held)
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
	if quantum > c.opts.Quantum {
		reason = fmt.Sprintf("quantum of %s used (stretched from %s, as its last suspend and resume took %s)",
			round(quantum), c.opts.Quantum, round(cur.lastSuspend+cur.lastResume))
	}
	if ran < quantum {
		reason = "turn held by another of its lanes for " + cur.heldLimit.Round(time.Millisecond).String()
	}
	if !cur.pendingSince.IsZero() {
		if cur.Iterations.Count() > cur.pendingMark {
			reason += ", at an iteration boundary"
		} else {
			reason += ", no iteration boundary within " + c.opts.IterationGrace.String()
		}
	}
	cur.pendingSince = time.Time{}
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

// gpuPIDs returns the member's processes that hold GPU memory.
func (m *member) gpuPIDs() []int {
	if m.GPUPIDs == nil {
		return nil
	}
	return m.GPUPIDs()
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
	gpuPIDs := m.gpuPIDs()
	var heldMiB uint64
	if c.mechanism(m).Via() != "" && m.GPUMemoryMiB != nil {
		heldMiB = m.GPUMemoryMiB()
	}
	if c.mechanism(m).Via() != "" && len(gpuPIDs) > 0 {
		// Written ahead: after a restart in the middle, the processes may
		// be checkpointed while no state says so.
		m.suspending = gpuPIDs
		c.persist(l)
	}
	var checkpointed []int
	start := time.Now()
	d, err := switcher.Timed(func() (err error) {
		checkpointed, err = c.mechanism(m).Suspend(c.ctx, m.Processes, gpuPIDs)
		return err
	})
	if err == nil && c.mechanism(m).Via() != "" {
		checkpointed, err = c.checkpointLateComers(m, checkpointed)
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
	h.setCheckpointed(checkpointed)
	m.checkpointMiB = 0
	if len(checkpointed) > 0 {
		m.checkpointMiB = heldMiB + m.lateMiB
	}
	m.lateMiB = 0
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
// checkpointed too, then frozen again. Processes that keep coming fail the
// suspend, undone whole.
func (c *Coordinator) checkpointLateComers(m *member, done []int) ([]int, error) {
	for range lateComerRounds {
		late := m.gpuPIDs() // a checkpointed process is not listed
		if len(late) == 0 {
			return done, nil
		}
		c.emit(Event{TaskID: m.TaskID, Message: fmt.Sprintf("processes %v started on the GPU during the suspend; checkpointing them too", late)})
		if m.GPUMemoryMiB != nil {
			m.lateMiB += m.GPUMemoryMiB()
		}
		if err := m.Processes.Thaw(c.ctx); err != nil {
			_, rerr := c.mechanism(m).Resume(c.ctx, m.Processes, done)
			return nil, errors.Join(fmt.Errorf("thaw for processes %v that started during the suspend: %w", late, err), rerr)
		}
		more, err := c.mechanism(m).Suspend(c.ctx, m.Processes, late)
		if err != nil {
			_, rerr := c.mechanism(m).Resume(c.ctx, m.Processes, done)
			return nil, errors.Join(fmt.Errorf("checkpoint processes %v that started during the suspend: %w", late, err), rerr)
		}
		done = append(done, more...)
	}
	if late := m.gpuPIDs(); len(late) > 0 {
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

// fits reports whether m's restore fits in the GPU memory free now, with
// what it needs and what is free; a GPU that cannot tell, or a task with
// nothing checkpointed, fits.
func (c *Coordinator) fits(l *laneState, m *member) (need, free uint64, ok bool) {
	need = m.checkpointMiB
	if need == 0 || c.opts.FreeMiB == nil || len(m.hold.checkpointedPIDs()) == 0 {
		return need, 0, true
	}
	free, known := c.opts.FreeMiB(l.key.GPU)
	return need, free, !known || free >= need
}

// roomToRestore reports whether the GPU has the memory m's restore needs
// (what its processes held when they were checkpointed): a restore that
// runs out of GPU memory can leave the process stuck for good. Where it
// has not, a running partner that grew past its profile is the one that
// pays: it is evicted, and m waits for the memory.
func (c *Coordinator) roomToRestore(l *laneState, m *member) bool {
	need, free, fits := c.fits(l, m)
	if fits {
		m.waitingForRoom = false
		return true
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
	if !m.waitingForRoom {
		m.waitingForRoom = true
		c.emit(Event{TaskID: m.TaskID, Message: fmt.Sprintf("restore in %s waits for %d MiB; %d MiB free on the GPU", l.key, need, free),
			Annotations: map[string]string{"lane": l.key.String()}})
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
	h := m.hold
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lanes.Load() > 1 {
		// Its turn here; it runs when its other lanes give it theirs.
		h.lanes.Add(-1)
		m.suspended = false
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
		// Ending: its turns pass it by until it leaves, rather than try
		// and end it again at every one.
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
			st.CheckpointedMiB = m.checkpointMiB
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

// Share is a task's budget in lane key while the lane runs its members
// concurrently: the lane divided in proportion to their profiles'
// persistent + ephemeral memory, which gives each at least its own and
// adds up to the lane, so that none can take a neighbour's memory. ok is
// false while the task is alone in the lane or takes turns: while it runs
// then, the lane is its own.
func (c *Coordinator) Share(taskID string, key Key) (mib uint64, ok bool) {
	c.mu.Lock()
	l := c.lanes[key]
	c.mu.Unlock()
	if l == nil {
		return 0, false
	}
	shares := l.shares.Load()
	if shares == nil {
		return 0, false
	}
	mib, ok = (*shares)[taskID]
	return mib, ok
}

// sharesOf divides laneMiB among members in proportion to what their
// profiles need (equally where none needs anything).
func sharesOf(members []*member, laneMiB uint64) map[string]uint64 {
	var total uint64
	for _, m := range members {
		total += m.Profile.PersistentMiB + m.Profile.EphemeralMiB
	}
	out := make(map[string]uint64, len(members))
	for _, m := range members {
		if total == 0 {
			out[m.TaskID] = laneMiB / uint64(len(members))
			continue
		}
		out[m.TaskID] = laneMiB * (m.Profile.PersistentMiB + m.Profile.EphemeralMiB) / total
	}
	return out
}

// Members lists the task IDs in key, sorted.
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
