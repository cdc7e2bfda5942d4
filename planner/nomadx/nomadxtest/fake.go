// Package nomadxtest is an in-process fake of nomadx.Client for unit tests.
// It keeps jobs with Nomad's index semantics, so that compare-and-set and
// conflicts behave as they do on a real agent.
package nomadxtest

import (
	"context"
	"fmt"
	"sort"
	"sync"

	"github.com/caravan-gpu/caravan/planner/cluster"
	"github.com/caravan-gpu/caravan/planner/nomadx"
	"github.com/hashicorp/nomad/api"
)

// trackedVersions is how many versions of a job the fake keeps, as Nomad's
// default job_tracked_versions does.
const trackedVersions = 6

// Fake is an in-memory Nomad.
type Fake struct {
	mu      sync.Mutex
	index   uint64
	jobs    map[string]*api.Job
	history map[string][]*api.Job // every stored version, oldest first
	NodeSet []*api.NodeListStub
	Allocs  []*api.AllocationListStub
	Sched   api.SchedulerConfiguration
	// BeforeRegister runs before each RegisterJob is decided, outside the
	// lock; tests use it to slip in a concurrent edit.
	BeforeRegister func(job *api.Job)
	// AfterIndexCheck runs after RegisterJob's index check passed and
	// before the job is stored, outside the lock: a real Nomad checks
	// EnforceIndex before it applies the write through Raft, and an
	// unchecked write can land in between. Tests slip one in here.
	AfterIndexCheck func(job *api.Job)
	// Registers counts successful RegisterJob calls; Conflicts the refused;
	// JobReads the reads of one job's spec.
	Registers, Conflicts, JobReads int
	// Stats are the host statistics NodeStats returns, by node ID.
	Stats map[string]*api.HostStats
	// Stopped lists the allocations StopAllocation stopped, in order.
	Stopped []string
	// DeferStops leaves an allocation StopAllocation stopped running
	// until LandStops, as Nomad marks it stopped only once the scheduler
	// has processed the stop's evaluation.
	DeferStops bool
	deferred   []string
	changes    chan struct{}
}

var _ nomadx.Client = (*Fake)(nil)

// New returns an empty fake.
func New() *Fake {
	return &Fake{index: 10, jobs: map[string]*api.Job{}, history: map[string][]*api.Job{}, changes: make(chan struct{}, 1)}
}

func clone(j *api.Job) *api.Job {
	out := nomadx.CopyJob(j)
	if out == nil && j != nil {
		panic("nomadxtest: job does not encode as JSON")
	}
	return out
}

func ns(j *api.Job) string {
	if j.Namespace == nil || *j.Namespace == "" {
		return "default"
	}
	return *j.Namespace
}

// Submit registers a job as a user would, with no index check, and returns
// its new JobModifyIndex.
func (f *Fake) Submit(j *api.Job) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.store(j)
}

func (f *Fake) store(j *api.Job) uint64 {
	f.index++
	j = clone(j)
	n := ns(j)
	j.Namespace = &n
	idx := f.index
	j.JobModifyIndex = &idx
	j.ModifyIndex = &idx
	if old := f.jobs[cluster.Key(n, *j.ID)]; old != nil && old.Version != nil {
		v := *old.Version + 1
		j.Version = &v
	} else {
		v := uint64(0)
		j.Version = &v
		j.SubmitTime = new(int64)
	}
	if j.Status == nil {
		s := "pending"
		j.Status = &s
	}
	if j.Priority == nil {
		p := 50
		j.Priority = &p
	}
	f.jobs[cluster.Key(n, *j.ID)] = j
	h := append(f.history[cluster.Key(n, *j.ID)], clone(j))
	if len(h) > trackedVersions {
		h = h[len(h)-trackedVersions:]
	}
	f.history[cluster.Key(n, *j.ID)] = h
	select {
	case f.changes <- struct{}{}:
	default:
	}
	return idx
}

// Get returns a copy of a stored job, or nil.
func (f *Fake) Get(namespace, id string) *api.Job {
	f.mu.Lock()
	defer f.mu.Unlock()
	j := f.jobs[cluster.Key(namespace, id)]
	if j == nil {
		return nil
	}
	return clone(j)
}

// Update changes a stored job in place without a new index, as Nomad's own
// status changes do.
func (f *Fake) Update(namespace, id string, fn func(*api.Job)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if j := f.jobs[cluster.Key(namespace, id)]; j != nil {
		fn(j)
	}
}

func (f *Fake) Nodes(context.Context) ([]*api.NodeListStub, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.NodeSet, nil
}

func (f *Fake) Jobs(context.Context) ([]*api.JobListStub, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*api.JobListStub
	for _, j := range f.jobs {
		stub := &api.JobListStub{ID: *j.ID, Namespace: *j.Namespace, Type: "batch", Priority: *j.Priority,
			Status: *j.Status, JobModifyIndex: *j.JobModifyIndex, ModifyIndex: *j.ModifyIndex, Meta: j.Meta}
		if j.Type != nil {
			stub.Type = *j.Type
		}
		if j.SubmitTime != nil {
			stub.SubmitTime = *j.SubmitTime
		}
		if j.Stop != nil {
			stub.Stop = *j.Stop
		}
		out = append(out, stub)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].ID < out[b].ID })
	return out, nil
}

func (f *Fake) Job(_ context.Context, namespace, id string) (*api.Job, error) {
	f.mu.Lock()
	f.JobReads++
	f.mu.Unlock()
	if j := f.Get(namespace, id); j != nil {
		return j, nil
	}
	return nil, fmt.Errorf("job %q: %w", id, nomadx.ErrNotFound)
}

func (f *Fake) Allocations(context.Context) ([]*api.AllocationListStub, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.Allocs, nil
}

func (f *Fake) JobAllocations(_ context.Context, namespace, id string) ([]*api.AllocationListStub, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*api.AllocationListStub
	for _, a := range f.Allocs {
		if a.JobID == id && (a.Namespace == namespace || a.Namespace == "" && namespace == "default") {
			out = append(out, a)
		}
	}
	return out, nil
}

// StopAllocation marks the allocation stopped and complete, as the client
// reports it once its tasks are killed.
func (f *Fake) StopAllocation(_ context.Context, namespace, allocID string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, a := range f.Allocs {
		if a.ID == allocID {
			f.Stopped = append(f.Stopped, allocID)
			if f.DeferStops {
				f.deferred = append(f.deferred, allocID)
				return nil
			}
			a.DesiredStatus, a.ClientStatus = "stop", "complete"
			return nil
		}
	}
	return fmt.Errorf("allocation %s: %w", allocID, nomadx.ErrNotFound)
}

// LandStops marks the allocations stopped since DeferStops was set as
// Nomad's scheduler would, and returns how many. It replaces their
// entries in Allocs rather than change them, so that lists handed out
// before stay as they were.
func (f *Fake) LandStops() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for i, a := range f.Allocs {
		for _, id := range f.deferred {
			if a.ID == id {
				landed := *a
				landed.DesiredStatus, landed.ClientStatus = "stop", "complete"
				f.Allocs[i] = &landed
				n++
				break
			}
		}
	}
	f.deferred = nil
	return n
}

func (f *Fake) RegisterJob(ctx context.Context, job *api.Job, modifyIndex uint64) (uint64, error) {
	if f.BeforeRegister != nil {
		f.BeforeRegister(job)
	}
	// As the HTTP client does, a cancelled request never reaches Nomad.
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	cur := f.jobs[cluster.Key(ns(job), *job.ID)]
	curIndex := uint64(0)
	if cur != nil {
		curIndex = *cur.JobModifyIndex
	}
	if curIndex != modifyIndex {
		f.Conflicts++
		return 0, fmt.Errorf("%w: Enforcing job modify index %d: job exists with conflicting job modify index: %d",
			nomadx.ErrConflict, modifyIndex, curIndex)
	}
	if f.AfterIndexCheck != nil {
		f.mu.Unlock()
		f.AfterIndexCheck(job)
		f.mu.Lock()
	}
	f.Registers++
	return f.store(job), nil
}

// JobVersions returns every stored version of a job, newest first.
func (f *Fake) JobVersions(_ context.Context, namespace, id string) ([]*api.Job, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	h := f.history[cluster.Key(namespace, id)]
	if len(h) == 0 {
		return nil, fmt.Errorf("job %q in namespace %q: %w", id, namespace, nomadx.ErrNotFound)
	}
	out := make([]*api.Job, 0, len(h))
	for i := len(h) - 1; i >= 0; i-- {
		out = append(out, clone(h[i]))
	}
	return out, nil
}

func (f *Fake) SchedulerConfig(context.Context) (*api.SchedulerConfiguration, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.Sched
	return &c, nil
}

func (f *Fake) SetSchedulerConfig(_ context.Context, cfg *api.SchedulerConfiguration) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if cfg.ModifyIndex != f.Sched.ModifyIndex {
		return false, nil
	}
	f.index++
	f.Sched = *cfg
	f.Sched.ModifyIndex = f.index
	return true, nil
}

func (f *Fake) Changes(ctx context.Context) (<-chan struct{}, error) {
	out := make(chan struct{}, 1)
	go func() {
		defer close(out)
		for {
			select {
			case <-ctx.Done():
				return
			case <-f.changes:
				select {
				case out <- struct{}{}:
				default:
				}
			}
		}
	}()
	return out, nil
}

func (f *Fake) NodeStats(_ context.Context, nodeID string) (*api.HostStats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s, ok := f.Stats[nodeID]; ok {
		return s, nil
	}
	return &api.HostStats{}, nil
}
