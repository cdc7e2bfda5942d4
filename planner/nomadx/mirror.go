package nomadx

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
)

// MirrorSource is what a Mirror reads: full lists once, then the event
// stream, and a job when the stream says it was deregistered.
type MirrorSource interface {
	Nodes(ctx context.Context) ([]*api.NodeListStub, error)
	Jobs(ctx context.Context) ([]*api.JobListStub, error)
	Allocations(ctx context.Context) ([]*api.AllocationListStub, error)
	Job(ctx context.Context, namespace, id string) (*api.Job, error)
	// Allocation reads one allocation with its job's version, which the
	// stream's allocation events leave out.
	Allocation(ctx context.Context, namespace, id string) (*api.AllocationListStub, error)
	Events(ctx context.Context) (<-chan *api.Events, error)
}

// DefaultMirrorResync is how often a Mirror lists everything again: the
// stream has no event for a garbage-collected allocation.
const DefaultMirrorResync = 5 * time.Minute

// Mirror is a Client whose node, job and allocation lists are kept current
// by Nomad's event stream, so that a planning round reads nothing from
// Nomad but the specs of jobs that changed: on a cluster of 10,000 jobs a
// round no longer lists 10,000 jobs and their allocations. It lists
// everything when it starts, whenever the stream breaks, and every Resync.
// Each event is applied only when it is newer than what the mirror holds,
// so events that race a full list are harmless.
type Mirror struct {
	Client
	src    MirrorSource
	log    hclog.Logger
	resync time.Duration

	mu       sync.Mutex
	synced   bool
	syncedAt time.Time
	nodes    map[string]*api.NodeListStub
	jobs     map[string]*api.JobListStub
	allocs   map[string]*api.AllocationListStub
	changes  chan struct{}
	follow   context.CancelFunc
	// Reads counts full lists, for tests and the benchmark.
	Reads int
}

// NewMirror mirrors src; writes and other calls go to c.
func NewMirror(c Client, src MirrorSource, log hclog.Logger) *Mirror {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return &Mirror{Client: c, src: src, log: log, resync: DefaultMirrorResync, changes: make(chan struct{}, 1)}
}

// Nodes, Jobs and Allocations serve the mirror, syncing it first when it
// is not current.
func (m *Mirror) Nodes(ctx context.Context) ([]*api.NodeListStub, error) {
	if err := m.ensure(ctx); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return sortedValues(m.nodes, func(n *api.NodeListStub) string { return n.ID }), nil
}

func (m *Mirror) Jobs(ctx context.Context) ([]*api.JobListStub, error) {
	if err := m.ensure(ctx); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return sortedValues(m.jobs, func(j *api.JobListStub) string { return jobKey(j.Namespace, j.ID) }), nil
}

func (m *Mirror) Allocations(ctx context.Context) ([]*api.AllocationListStub, error) {
	if err := m.ensure(ctx); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return sortedValues(m.allocs, func(a *api.AllocationListStub) string { return a.ID }), nil
}

// MirroredJobAllocations lists one job's allocations from the mirror, as
// the event stream keeps them (milliseconds behind Nomad); ok is false
// while the mirror is not synced, and the caller then asks Nomad.
func (m *Mirror) MirroredJobAllocations(namespace, id string) (allocs []*api.AllocationListStub, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.synced {
		return nil, false
	}
	for _, a := range m.allocs {
		if a.JobID == id && a.Namespace == namespace {
			allocs = append(allocs, a)
		}
	}
	return allocs, true
}

// Changes delivers a value after each batch of events the mirror applies.
func (m *Mirror) Changes(ctx context.Context) (<-chan struct{}, error) {
	if err := m.ensure(ctx); err != nil {
		return nil, err
	}
	return m.changes, nil
}

func sortedValues[T any](m map[string]*T, key func(*T) string) []*T {
	out := make([]*T, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	sort.Slice(out, func(a, b int) bool { return key(out[a]) < key(out[b]) })
	return out
}

// ensure syncs the mirror when it has never synced, the stream broke, or
// Resync has passed. The stream is opened before the lists are read, so
// that nothing that changes meanwhile is missed.
func (m *Mirror) ensure(ctx context.Context) error {
	m.mu.Lock()
	fresh := m.synced && time.Since(m.syncedAt) < m.resync
	m.mu.Unlock()
	if fresh {
		return nil
	}
	fctx, cancel := context.WithCancel(context.Background())
	events, err := m.src.Events(fctx)
	if err != nil {
		cancel()
		return err
	}
	nodes, err := m.src.Nodes(ctx)
	if err != nil {
		cancel()
		return err
	}
	jobs, err := m.src.Jobs(ctx)
	if err != nil {
		cancel()
		return err
	}
	allocs, err := m.src.Allocations(ctx)
	if err != nil {
		cancel()
		return err
	}
	m.mu.Lock()
	if m.follow != nil {
		m.follow()
	}
	m.follow = cancel
	m.nodes, m.jobs, m.allocs = map[string]*api.NodeListStub{}, map[string]*api.JobListStub{}, map[string]*api.AllocationListStub{}
	for _, n := range nodes {
		m.nodes[n.ID] = n
	}
	for _, j := range jobs {
		m.jobs[jobKey(j.Namespace, j.ID)] = j
	}
	for _, a := range allocs {
		m.allocs[a.ID] = a
	}
	m.synced, m.syncedAt = true, time.Now()
	m.Reads++
	m.mu.Unlock()
	go m.followEvents(fctx, events)
	return nil
}

// followEvents applies the stream until it breaks, then marks the mirror
// stale so that the next read syncs it again.
func (m *Mirror) followEvents(ctx context.Context, events <-chan *api.Events) {
	defer func() {
		m.mu.Lock()
		if ctx.Err() == nil {
			m.synced = false
			m.notify()
		}
		m.mu.Unlock()
	}()
	for batch := range events {
		if batch.Err != nil {
			if ctx.Err() == nil {
				m.log.Warn("Nomad's event stream broke; listing everything again", "error", batch.Err)
			}
			return
		}
		if batch.IsHeartbeat() {
			continue
		}
		for i := range batch.Events {
			m.apply(ctx, &batch.Events[i])
		}
		m.mu.Lock()
		m.notify()
		m.mu.Unlock()
	}
}

// notify wakes a reader of Changes; called with m.mu held.
func (m *Mirror) notify() {
	select {
	case m.changes <- struct{}{}:
	default:
	}
}

func (m *Mirror) apply(ctx context.Context, e *api.Event) {
	switch e.Topic {
	case api.TopicJob:
		j, err := payload[api.Job](e, "Job")
		if err != nil || j == nil || j.ID == nil {
			return
		}
		stub := jobStub(j)
		if e.Type == "JobDeregistered" || e.Type == "JobBatchDeregistered" {
			// A purge and a stop look alike in the event: ask.
			cur, err := m.src.Job(ctx, Value(j.Namespace), *j.ID)
			switch {
			case errors.Is(err, ErrNotFound):
				m.mu.Lock()
				delete(m.jobs, jobKey(stub.Namespace, stub.ID))
				m.mu.Unlock()
				return
			case err == nil && cur != nil:
				stub = jobStub(cur)
			}
		}
		m.mu.Lock()
		key := jobKey(stub.Namespace, stub.ID)
		if old := m.jobs[key]; old == nil || stub.ModifyIndex >= old.ModifyIndex {
			m.jobs[key] = stub
		}
		m.mu.Unlock()
	case api.TopicAllocation:
		a, err := payload[api.Allocation](e, "Allocation")
		if err != nil || a == nil {
			return
		}
		stub := allocStub(a)
		m.mu.Lock()
		old := m.allocs[stub.ID]
		m.mu.Unlock()
		switch {
		case old != nil && stub.ModifyIndex < old.ModifyIndex:
			return
		case old != nil && e.Type == "AllocationUpdated":
			// A client's update never changes the job version it runs.
			stub.JobVersion = old.JobVersion
		default:
			// A placement or an in-place update by the scheduler sets a
			// job version the event does not carry: read it.
			if read, err := m.src.Allocation(ctx, stub.Namespace, stub.ID); err == nil && read != nil {
				stub = read
			} else if old != nil {
				stub.JobVersion = old.JobVersion
			}
		}
		m.mu.Lock()
		if cur := m.allocs[stub.ID]; cur == nil || stub.ModifyIndex >= cur.ModifyIndex {
			m.allocs[stub.ID] = stub
		}
		m.mu.Unlock()
	case api.TopicNode:
		n, err := payload[api.Node](e, "Node")
		if err != nil || n == nil {
			return
		}
		m.mu.Lock()
		if e.Type == "NodeDeregistration" {
			delete(m.nodes, n.ID)
		} else if old := m.nodes[n.ID]; old == nil || n.ModifyIndex >= old.ModifyIndex {
			m.nodes[n.ID] = nodeStub(n)
		}
		m.mu.Unlock()
	}
}

// payload decodes an event's object as the HTTP API's JSON does. The api
// package's own Event.Node and the like decode field by field and lose the
// values of typed attributes (a device's model), which JSON tags carry.
func payload[T any](e *api.Event, key string) (*T, error) {
	v, ok := e.Payload[key]
	if !ok || v == nil {
		return nil, nil
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	out := new(T)
	if err := json.Unmarshal(raw, out); err != nil {
		return nil, err
	}
	return out, nil
}

// jobStub is what Nomad's job list says of j.
func jobStub(j *api.Job) *api.JobListStub {
	ns := Value(j.Namespace)
	if ns == "" {
		ns = "default"
	}
	return &api.JobListStub{
		ID: Value(j.ID), ParentID: Value(j.ParentID), Name: Value(j.Name), Namespace: ns, Datacenters: j.Datacenters,
		Type: Value(j.Type), Priority: Value(j.Priority), Periodic: j.Periodic != nil, ParameterizedJob: j.ParameterizedJob != nil,
		Stop: Value(j.Stop), Status: Value(j.Status), StatusDescription: Value(j.StatusDescription),
		CreateIndex: Value(j.CreateIndex), ModifyIndex: Value(j.ModifyIndex), JobModifyIndex: Value(j.JobModifyIndex),
		SubmitTime: Value(j.SubmitTime), Meta: j.Meta,
	}
}

// allocStub is what Nomad's allocation list (with resources) says of a.
func allocStub(a *api.Allocation) *api.AllocationListStub {
	return &api.AllocationListStub{
		ID: a.ID, EvalID: a.EvalID, Name: a.Name, Namespace: a.Namespace, NodeID: a.NodeID, NodeName: a.NodeName,
		JobID: a.JobID, JobVersion: jobVersion(a), TaskGroup: a.TaskGroup, AllocatedResources: a.AllocatedResources,
		DesiredStatus: a.DesiredStatus, DesiredDescription: a.DesiredDescription,
		ClientStatus: a.ClientStatus, ClientDescription: a.ClientDescription, TaskStates: a.TaskStates,
		DeploymentStatus: a.DeploymentStatus, FollowupEvalID: a.FollowupEvalID, RescheduleTracker: a.RescheduleTracker,
		PreemptedAllocations: a.PreemptedAllocations, PreemptedByAllocation: a.PreemptedByAllocation,
		CreateIndex: a.CreateIndex, ModifyIndex: a.ModifyIndex, CreateTime: a.CreateTime, ModifyTime: a.ModifyTime,
	}
}

// nodeStub is what Nomad's node list (with resources) says of n.
func nodeStub(n *api.Node) *api.NodeListStub {
	return &api.NodeListStub{
		Address: n.HTTPAddr, ID: n.ID, Attributes: n.Attributes, Datacenter: n.Datacenter, Name: n.Name,
		NodeClass: n.NodeClass, NodePool: n.NodePool, Version: n.Attributes["nomad.version"], Drain: n.Drain,
		SchedulingEligibility: n.SchedulingEligibility, Status: n.Status, StatusDescription: n.StatusDescription,
		Drivers: n.Drivers, NodeResources: n.NodeResources, ReservedResources: n.ReservedResources,
		LastDrain: n.LastDrain, CreateIndex: n.CreateIndex, ModifyIndex: n.ModifyIndex,
	}
}

// Allocation reads one allocation as the allocation list (with resources)
// shows it.
func (a *API) Allocation(ctx context.Context, namespace, id string) (*api.AllocationListStub, error) {
	alloc, _, err := a.c.Allocations().Info(id, (&api.QueryOptions{Namespace: namespace}).WithContext(ctx))
	if err != nil {
		if is404(err) {
			return nil, fmt.Errorf("allocation %s: %w", id, ErrNotFound)
		}
		return nil, denied(err, `namespace capability "read-job"`, "read allocation "+id)
	}
	stub := alloc.Stub()
	stub.AllocatedResources = alloc.AllocatedResources
	return stub, nil
}

// Events follows Nomad's event stream for jobs, allocations and nodes from
// now on.
func (a *API) Events(ctx context.Context) (<-chan *api.Events, error) {
	topics := map[api.Topic][]string{api.TopicJob: {"*"}, api.TopicAllocation: {"*"}, api.TopicNode: {"*"}}
	ch, err := a.c.EventStream().Stream(ctx, topics, 0, &api.QueryOptions{Namespace: api.AllNamespacesNamespace})
	if err != nil {
		return nil, denied(err, `namespace capability "read-job" and node { policy = "read" }`, "follow the event stream")
	}
	return ch, nil
}

// jobVersion is the version of the job an allocation runs: events carry
// the allocation without its job, but with the version.
func jobVersion(a *api.Allocation) uint64 {
	if a.Job != nil {
		return Value(a.Job.Version)
	}
	return 0
}

func jobKey(namespace, id string) string {
	if namespace == "" {
		namespace = "default"
	}
	return namespace + "/" + id
}
