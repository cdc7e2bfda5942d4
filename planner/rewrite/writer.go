package rewrite

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/caravan-gpu/caravan/planner/nomadx"
	"github.com/hashicorp/nomad/api"
)

// Outcome is what became of one write.
type Outcome string

const (
	Written   Outcome = "written"
	Unchanged Outcome = "unchanged"
	Skipped   Outcome = "skipped" // the job stopped or vanished
	Failed    Outcome = "failed"
)

// Result reports one Apply.
type Result struct {
	Outcome   Outcome
	Change    Change
	Conflicts int // CAS conflicts retried
	// Restored counts concurrent edits that our write replaced and that
	// were written back with our change on top.
	Restored int
	Live     bool
	// Stopped are the allocations the write stopped: a hold of a running
	// job stops them, and their GPUs are free once Nomad has marked them.
	Stopped []string
	Err     error
	// Job is the job as written, with its new JobModifyIndex, when the
	// write landed whole: the planner keeps it rather than read its own
	// write back.
	Job *api.Job
}

// landed records job, registered at index as version, as what the write
// left. The version matters as much as the index: the planner tells a
// job's current allocations by it, and a kept copy at the version it was
// read at would take an allocation that completed before the write for
// one of the new version, and the job for finished. Without the version
// (Nomad no longer keeps ours) the job is not kept, and the next round
// reads it.
func (r *Result) landed(job *api.Job, index uint64, version *uint64) {
	r.Outcome = Written
	if version == nil {
		return
	}
	job.JobModifyIndex = &index
	v := *version
	job.Version = &v
	r.Job = job
}

// Writer applies targets to jobs on Nomad.
type Writer struct {
	Nomad   nomadx.Client
	Limiter *Limiter
	// MaxAttempts bounds the read-modify-write attempts per job; conflicts
	// beyond it leave the job for the next round.
	MaxAttempts int
	// StopWait bounds the wait, between two phases of ApplyPhases, for
	// the allocations the first stopped; 0 means DefaultStopWait.
	StopWait time.Duration
}

// mirroredAllocations is a Nomad client that keeps every allocation as
// the event stream tells of it (nomadx.Mirror).
type mirroredAllocations interface {
	MirroredJobAllocations(namespace, id string) ([]*api.AllocationListStub, bool)
}

// allocations lists the job's allocations for a write toward t. A hold
// alone takes them from a mirror that the event stream keeps, which saves
// a request per job when a new planner holds thousands: one placed in the
// stream's few milliseconds of lag is stopped in the next round, which
// finds the job held and running. Placement and restores ask Nomad.
func (w *Writer) allocations(ctx context.Context, namespace, id string, t Target) ([]*api.AllocationListStub, error) {
	if m, ok := w.Nomad.(mirroredAllocations); ok && t.Hold && t.Placement == nil && !t.Restore {
		if allocs, ok := m.MirroredJobAllocations(namespace, id); ok {
			return allocs, nil
		}
	}
	return w.Nomad.JobAllocations(ctx, namespace, id)
}

// Apply reads the job fresh, rewrites it toward t and registers it only if
// nobody changed it since the read. On a conflict it starts again from a
// fresh read, so that a concurrent edit by a user is kept, not overwritten.
func (w *Writer) Apply(ctx context.Context, namespace, id string, t Target) Result {
	return w.apply(ctx, namespace, id, t, nil)
}

// ApplyRead is Apply with job as the first read: a copy of the job that the
// caller read recently and hands over. It saves one read per job when the
// planner has just listed every spec; the write is still conditional on
// job's JobModifyIndex, so a stale copy only costs a conflict and a fresh
// read.
func (w *Writer) ApplyRead(ctx context.Context, job *api.Job, t Target) Result {
	return w.apply(ctx, nomadx.Value(job.Namespace), nomadx.Value(job.ID), t, job)
}

func (w *Writer) apply(ctx context.Context, namespace, id string, t Target, read *api.Job) Result {
	attempts := w.MaxAttempts
	if attempts <= 0 {
		attempts = 10
	}
	var res Result
	// restore is a version of the job that our own write overwrote, with
	// restoreOver the index of that write; the next attempt rewrites it
	// instead of a fresh read.
	var restore *api.Job
	var restoreOver uint64
	live := false
	for attempt := 0; attempt < attempts; attempt++ {
		if restore != nil {
			job := restore
			restore = nil
			Rewrite(job, t, live)
			written, registered, lost, err := w.registerChecked(ctx, namespace, id, job, restoreOver)
			if registered {
				res.Restored++
			}
			next, done := res.settle(job, written, registered, lost, err)
			if done {
				return res
			}
			if next != nil {
				restore, restoreOver = next, written
				continue
			}
			// Someone wrote after ours; that write was made on top of
			// ours or after it, so a fresh read carries the lost edit's
			// successor. Fall through to a fresh read.
		}
		job, running, skip, err := w.read(ctx, namespace, id, t, read)
		read = nil
		if skip {
			res.Outcome = Skipped
			return res
		}
		if err != nil {
			res.Outcome, res.Err = Failed, err
			return res
		}
		live = len(running) > 0
		res.Live = live
		change := Rewrite(job, t, live)
		if len(change) == 0 && t.Hold && live {
			// Held already, yet running: a preemption whose stop did not
			// finish. Stop what runs.
			stopped, err := w.stop(ctx, namespace, running)
			res.Stopped = running[:stopped]
			res.Change = Change{fmt.Sprintf("stopped %d allocation(s)", stopped)}
			res.Outcome, res.Err = Written, err
			if err != nil {
				res.Outcome = Failed
			}
			return res
		}
		if len(change) == 0 {
			res.Outcome = Unchanged
			return res
		}
		if err := w.Limiter.Wait(ctx); err != nil {
			res.Outcome, res.Err = Failed, err
			return res
		}
		index := nomadx.Value(job.JobModifyIndex)
		written, registered, lost, err := w.registerChecked(ctx, namespace, id, job, index)
		if registered {
			res.Change = change
			if t.Hold && live {
				// Nomad backs out a destructive update whose replacement
				// cannot be placed, so the hold alone leaves the job
				// running; stopping its allocations makes it stop, and the
				// hold keeps their replacements from being placed.
				stopped, stopErr := w.stop(ctx, namespace, running)
				res.Stopped = running[:stopped]
				res.Change = append(res.Change, fmt.Sprintf("stopped %d allocation(s)", stopped))
				if err == nil && stopErr != nil {
					res.Outcome, res.Err = Failed, stopErr
					return res
				}
			}
		}
		next, done := res.settle(job, written, registered, lost, err)
		if done {
			return res
		}
		if next != nil {
			restore, restoreOver = next, written
			continue
		}
		select {
		case <-ctx.Done():
			res.Outcome, res.Err = Failed, ctx.Err()
			return res
		case <-time.After(backoff(attempt)):
		}
	}
	res.Outcome = Failed
	res.Err = fmt.Errorf("job %s/%s changed %d times while being rewritten; left for the next round", namespace, id, res.Conflicts)
	return res
}

// read reads the job fresh, or takes read, a copy the caller read
// recently, and, where t may place, restore or hold it, lists what of it
// runs now. Placement may only change while nothing of the job is placed,
// and a hold preempts what is: ask Nomad (or, for a hold, the event
// stream's mirror) now rather than trust the round's snapshot. skip says
// the job stopped or is gone.
func (w *Writer) read(ctx context.Context, namespace, id string, t Target, read *api.Job) (job *api.Job, running []string, skip bool, err error) {
	job = read
	if job == nil {
		job, err = w.Nomad.Job(ctx, namespace, id)
	}
	if errors.Is(err, nomadx.ErrNotFound) {
		return nil, nil, true, nil
	}
	if err != nil {
		return nil, nil, false, err
	}
	if job.Stop != nil && *job.Stop || job.Status != nil && *job.Status == "dead" {
		return nil, nil, true, nil
	}
	if t.Placement == nil && !t.Restore && !t.Hold {
		return job, nil, false, nil
	}
	allocs, err := w.allocations(ctx, namespace, id, t)
	if err != nil {
		return nil, nil, false, err
	}
	for _, a := range allocs {
		if wantedRunning(a) {
			running = append(running, a.ID)
		}
	}
	return job, running, false, nil
}

// settle records what one conditional write of job left: done when it
// landed whole or failed for good; otherwise next is a version the write
// replaced, to write back over it, or nil after a conflict, counted, to
// retry from a fresh read.
func (r *Result) settle(job *api.Job, written uint64, registered bool, lost overwrite, err error) (next *api.Job, done bool) {
	switch {
	case registered && err == nil && lost.job == nil:
		r.landed(job, written, lost.ours)
		return nil, true
	case registered && err == nil:
		return lost.job, false
	case registered || !nomadx.IsConflict(err):
		r.Outcome, r.Err = Failed, err
		return nil, true
	}
	r.Conflicts++
	return nil, false
}

// stop stops the allocations and counts those it stopped.
func (w *Writer) stop(ctx context.Context, namespace string, allocs []string) (int, error) {
	n := 0
	for _, id := range allocs {
		if err := w.Nomad.StopAllocation(ctx, namespace, id); err != nil && !errors.Is(err, nomadx.ErrNotFound) {
			return n, fmt.Errorf("stop allocation %s: %w", id, err)
		}
		n++
	}
	return n, nil
}

// registerChecked writes job if its modify index is still index, then
// looks for a concurrent edit the write replaced (see overwritten).
// registered says the write went through; lost tells what it replaced and
// which version it became.
func (w *Writer) registerChecked(ctx context.Context, namespace, id string, job *api.Job, index uint64) (written uint64, registered bool, lost overwrite, err error) {
	written, err = w.Nomad.RegisterJob(ctx, job, index)
	if err != nil {
		return 0, false, overwrite{}, err
	}
	lost, err = w.overwritten(ctx, namespace, id, index, written)
	return written, true, lost, err
}

// overwrite is what a write found in the job's versions after it landed.
type overwrite struct {
	// job is a version that the write replaced, to write back; nil if
	// the write replaced the version it read.
	job *api.Job
	// ours is the version Nomad gave the write; nil if Nomad no longer
	// keeps it.
	ours *uint64
}

// overwritten finds the version that our write at index written replaced
// if it is not the one we read at index read. Nomad checks EnforceIndex
// before it applies a write through Raft, so a write without an index
// check (a user's `nomad job run`) can land between the check and our
// write, and ours would silently replace it.
func (w *Writer) overwritten(ctx context.Context, namespace, id string, read, written uint64) (overwrite, error) {
	versions, err := w.Nomad.JobVersions(ctx, namespace, id)
	if err != nil {
		return overwrite{}, fmt.Errorf("check job %s/%s for a concurrent edit: %w", namespace, id, err)
	}
	for i, v := range versions {
		if v.JobModifyIndex == nil || *v.JobModifyIndex != written {
			continue
		}
		found := overwrite{ours: v.Version}
		if i+1 < len(versions) {
			prev := versions[i+1]
			if prev.JobModifyIndex != nil && *prev.JobModifyIndex > read {
				found.job = prev
			}
		}
		return found, nil
	}
	// Our version is no longer kept: many writes came after it, and the
	// newest of them stands.
	return overwrite{}, nil
}

// backoff spreads retries so that two writers on one job stop colliding.
func backoff(attempt int) time.Duration {
	d := time.Duration(attempt+1) * 2 * time.Millisecond
	if d > 20*time.Millisecond {
		d = 20 * time.Millisecond
	}
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}

// Limiter is a token bucket: at most Rate writes a second on average, with
// bursts of up to Burst.
type Limiter struct {
	mu     sync.Mutex
	rate   float64
	burst  float64
	tokens float64
	last   time.Time
	now    func() time.Time
}

// NewLimiter allows rate writes a second with bursts of burst. A rate of 0
// or less means no limit.
func NewLimiter(rate float64, burst int) *Limiter {
	if burst < 1 {
		burst = 1
	}
	return &Limiter{rate: rate, burst: float64(burst), tokens: float64(burst), now: time.Now}
}

// Wait blocks until a write may go, or ctx ends.
func (l *Limiter) Wait(ctx context.Context) error {
	if l == nil || l.rate <= 0 {
		return ctx.Err()
	}
	for {
		l.mu.Lock()
		now := l.now()
		if !l.last.IsZero() {
			l.tokens += now.Sub(l.last).Seconds() * l.rate
			if l.tokens > l.burst {
				l.tokens = l.burst
			}
		}
		l.last = now
		if l.tokens >= 1 {
			l.tokens--
			l.mu.Unlock()
			return nil
		}
		wait := time.Duration((1 - l.tokens) / l.rate * float64(time.Second))
		l.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}

// Write is one job's write in a round: the job's key (namespace/id), the
// spec the round read of it (nil: read it afresh; the writer works on a
// copy, so it may be shared) and its target.
type Write struct {
	Key    string
	Spec   *api.Job
	Target Target
}

// DefaultStopWait bounds how long ApplyPhases waits for a phase's stops to
// land before it writes the next phase.
const DefaultStopWait = 5 * time.Second

// How often the wait for stops looks again: the mirror is memory, a list
// is a request per job.
const (
	stopPollMirror = 10 * time.Millisecond
	stopPollAPI    = 100 * time.Millisecond
)

// PhaseStats says how ApplyPhases went between its phases.
type PhaseStats struct {
	// StopWait is the time spent waiting for stops to land.
	StopWait time.Duration
	// StopsPending counts the jobs whose stopped allocations Nomad had not
	// yet marked stopped when the wait gave up.
	StopsPending int
}

// ApplyPhases writes the phases one after the other, each with up to
// workers writes at a time, and calls done with each write's result as it
// lands (done may be called from several goroutines at once). The writer's
// limiter paces all of them.
//
// A phase starts only once every write of the one before has landed and
// the allocations it stopped are stopped in Nomad's state (or StopWait has
// passed): a round's stops free the GPUs its starts need. A write landing
// is not enough. Nomad schedules each write's evaluation later, the
// higher-priority ones first, so a start written right after a hold is
// often scheduled before the hold's stop and finds no free GPU: it waits
// blocked, or places a gang's tasks in pieces (and with bands 10
// priorities apart, Nomad's own preemption evicted tasks of its choosing).
func (w *Writer) ApplyPhases(ctx context.Context, phases [][]Write, workers int, done func(Write, Result)) PhaseStats {
	var stats PhaseStats
	for k, phase := range phases {
		var mu sync.Mutex
		stopped := map[string][]string{}
		w.applyPhase(ctx, phase, workers, func(c Write, res Result) {
			if len(res.Stopped) > 0 {
				mu.Lock()
				stopped[c.Key] = append(stopped[c.Key], res.Stopped...)
				mu.Unlock()
			}
			done(c, res)
		})
		if len(stopped) == 0 || !laterWrites(phases[k+1:]) {
			continue
		}
		begin := time.Now()
		stats.StopsPending += w.awaitStops(ctx, stopped)
		stats.StopWait += time.Since(begin)
	}
	return stats
}

func laterWrites(phases [][]Write) bool {
	for _, p := range phases {
		if len(p) > 0 {
			return true
		}
	}
	return false
}

func (w *Writer) applyPhase(ctx context.Context, phase []Write, workers int, done func(Write, Result)) {
	work := make(chan Write)
	var wg sync.WaitGroup
	for range min(max(workers, 1), len(phase)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range work {
				var res Result
				if spec := nomadx.CopyJob(c.Spec); spec != nil {
					res = w.ApplyRead(ctx, spec, c.Target)
				} else {
					// A key is namespace/id; an ID may hold "/", a
					// namespace may not.
					ns, id, _ := strings.Cut(c.Key, "/")
					res = w.Apply(ctx, ns, id, c.Target)
				}
				done(c, res)
			}
		}()
	}
feed:
	for _, c := range phase {
		select {
		case work <- c:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
}

// awaitStops waits until Nomad's state has every allocation in stopped
// (allocation IDs by job key) no longer wanted running, reading the event
// stream's mirror where the client keeps one and the job's allocations
// otherwise, for at most StopWait. It returns how many jobs still had one
// wanted running when it gave up.
func (w *Writer) awaitStops(ctx context.Context, stopped map[string][]string) int {
	wait := w.StopWait
	if wait <= 0 {
		wait = DefaultStopWait
	}
	deadline := time.Now().Add(wait)
	mirror, mirrored := w.Nomad.(mirroredAllocations)
	for {
		polled := false
		for key, ids := range stopped {
			ns, id, _ := strings.Cut(key, "/")
			var allocs []*api.AllocationListStub
			ok := false
			if mirrored {
				allocs, ok = mirror.MirroredJobAllocations(ns, id)
			}
			if !ok {
				var err error
				if allocs, err = w.Nomad.JobAllocations(ctx, ns, id); err != nil {
					continue
				}
				polled = true
			}
			if !slices.ContainsFunc(allocs, func(a *api.AllocationListStub) bool { return wantedRunning(a) && slices.Contains(ids, a.ID) }) {
				delete(stopped, key)
			}
		}
		if len(stopped) == 0 || !time.Now().Before(deadline) {
			return len(stopped)
		}
		poll := stopPollMirror
		if polled {
			poll = stopPollAPI
		}
		select {
		case <-ctx.Done():
			return len(stopped)
		case <-time.After(min(poll, time.Until(deadline))):
		}
	}
}

// wantedRunning says whether Nomad still wants the allocation to run: the
// scheduler counts its GPUs as taken until its desired status leaves "run"
// or the client reports it ended.
func wantedRunning(a *api.AllocationListStub) bool {
	return a.DesiredStatus == api.AllocDesiredStatusRun &&
		(a.ClientStatus == api.AllocClientStatusRunning || a.ClientStatus == api.AllocClientStatusPending)
}
