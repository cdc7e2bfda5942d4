package lane

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
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
	// GPUProcesses returns the task's processes that hold memory on any of
	// its lanes' GPUs, each with what it holds on this lane's GPU, from one
	// sample: a suspend counts the memory of the very processes it
	// checkpoints, so that their restore waits for that much, once.
	GPUProcesses func() []GPUProcess
	// GPUMemoryMiB returns what the task holds on the lane's GPU now.
	GPUMemoryMiB func() uint64
	// Iterations counts the iteration boundaries the task has marked; nil
	// when the task cannot cooperate.
	Iterations *IterationCounter
}

// GPUProcess is one of a task's processes that holds GPU memory, and what
// it holds on each of the task's GPUs, by UUID.
type GPUProcess struct {
	PID int
	MiB map[string]uint64
	// Untold are the GPUs that do not tell its memory, each with the least
	// it is taken to hold there together with the task's other processes:
	// the task's lanes on that GPU.
	Untold map[string]uint64
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
	// Either way the lane resumes the task no more: one that is not ended
	// stays stopped until it leaves.
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
	// NeedMiB is what they held on each of the task's GPUs, by UUID: every
	// lane of the task keeps all of it, so that after a restart one lane's
	// state is enough to check every GPU before the restore.
	NeedMiB map[string]uint64 `json:"need_mib,omitempty"`
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
	// need is what the checkpointed processes held on each of the task's
	// GPUs when they were checkpointed: what their restore needs free
	// there, on every GPU, whichever lane restores them.
	need map[string]uint64

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
	if len(pids) == 0 {
		h.need = nil
	}
}

// setCheckpointedNeed records the processes a suspend checkpointed and
// what they held on each GPU, together, so that no lane persists one
// without the other.
func (h *hold) setCheckpointedNeed(pids []int, need map[string]uint64) {
	h.ckMu.Lock()
	defer h.ckMu.Unlock()
	h.checkpointed, h.need = pids, need
	if len(pids) == 0 {
		h.need = nil
	}
}

// mergeNeed takes in what a lane persisted of the need before a restart:
// all of it (need), and its own GPU's share (mib, all that older states
// kept). Each GPU keeps the most any lane recorded.
func (h *hold) mergeNeed(gpu string, mib uint64, need map[string]uint64) {
	h.ckMu.Lock()
	defer h.ckMu.Unlock()
	if h.need == nil {
		h.need = map[string]uint64{}
	}
	h.need[gpu] = max(h.need[gpu], mib)
	for g, v := range need {
		h.need[g] = max(h.need[g], v)
	}
}

// needs is a copy of need.
func (h *hold) needs() map[string]uint64 {
	h.ckMu.Lock()
	defer h.ckMu.Unlock()
	return maps.Clone(h.need)
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
	waitingForRoom  bool
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
	if len(restored.Checkpointed) > 0 {
		if len(h.checkpointedPIDs()) == 0 {
			h.setCheckpointed(restored.Checkpointed)
		}
		h.mergeNeed(key.GPU, restored.CheckpointedMiB, restored.NeedMiB)
	}
	l.mu.Lock()
	now := time.Now()
	if !m.Profile.Known && restored.Profile.Known {
		m.Profile = restored.Profile
	}
	mem := &member{Member: m, hold: h, suspended: restored.Suspended, switches: restored.Switches, sliceStart: now, lastTick: now,
		ranAtSliceStart: h.ran(now)}
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
				if gpu, need, free, fits := c.fits(l, m); !fits {
					// A leaving task needs to run to take its stop signal,
					// not its GPU state back: a restore that does not fit
					// could leave it stuck for good.
					c.emit(Event{TaskID: taskID, Message: fmt.Sprintf("leaves %s thawed but checkpointed: its restore needs %d MiB on %s, %d MiB free there", key, need, gpu, free),
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
