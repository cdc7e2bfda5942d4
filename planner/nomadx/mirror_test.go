package nomadx

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
	"github.com/shoenig/test/wait"
)

// mirrorSource is a Nomad whose lists and stream the test controls.
type mirrorSource struct {
	mu     sync.Mutex
	nodes  []*api.NodeListStub
	jobs   []*api.JobListStub
	allocs []*api.AllocationListStub
	live   map[string]*api.Job                // jobs Job answers
	byID   map[string]*api.AllocationListStub // allocations Allocation answers
	lists  int
	reads  int
	stream chan *api.Events
}

func (s *mirrorSource) Nodes(context.Context) ([]*api.NodeListStub, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lists++
	return s.nodes, nil
}
func (s *mirrorSource) Jobs(context.Context) ([]*api.JobListStub, error) { return s.jobs, nil }
func (s *mirrorSource) Allocations(context.Context) ([]*api.AllocationListStub, error) {
	return s.allocs, nil
}
func (s *mirrorSource) Job(_ context.Context, ns, id string) (*api.Job, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if j := s.live[id]; j != nil {
		return j, nil
	}
	return nil, fmt.Errorf("job %s: %w", id, ErrNotFound)
}
func (s *mirrorSource) Allocation(_ context.Context, ns, id string) (*api.AllocationListStub, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads++
	if a := s.byID[id]; a != nil {
		return a, nil
	}
	return nil, fmt.Errorf("allocation %s: %w", id, ErrNotFound)
}
func (s *mirrorSource) Events(ctx context.Context) (<-chan *api.Events, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stream = make(chan *api.Events, 16)
	return s.stream, nil
}

func (s *mirrorSource) send(t *testing.T, m *Mirror, topic api.Topic, typ string, key string, payload any) {
	t.Helper()
	raw, err := json.Marshal(payload)
	must.NoError(t, err)
	var p map[string]any
	must.NoError(t, json.Unmarshal(raw, &p))
	s.mu.Lock()
	ch := s.stream
	s.mu.Unlock()
	ch <- &api.Events{Events: []api.Event{{Topic: topic, Type: typ, Key: key, Payload: p}}}
	select { // applied once the mirror says it changed
	case <-m.changes:
	case <-time.After(5 * time.Second):
		t.Fatal("the mirror did not apply the event")
	}
}

func str(s string) *string { return &s }
func u64(v uint64) *uint64 { return &v }

func TestMirrorFollowsTheEventStream(t *testing.T) {
	src := &mirrorSource{
		nodes:  []*api.NodeListStub{{ID: "n1", Status: "ready", ModifyIndex: 5}},
		jobs:   []*api.JobListStub{{ID: "a", Namespace: "default", Status: "pending", ModifyIndex: 10}},
		allocs: []*api.AllocationListStub{},
		live:   map[string]*api.Job{},
		byID:   map[string]*api.AllocationListStub{},
	}
	m := NewMirror(nil, src, nil)
	ctx := context.Background()
	jobs, err := m.Jobs(ctx)
	must.NoError(t, err)
	must.Len(t, 1, jobs)
	_, err = m.Allocations(ctx)
	must.NoError(t, err)
	must.Eq(t, 1, src.lists, must.Sprint("listed once"))

	// A job's status change arrives as an event; an older one is ignored.
	src.send(t, m, api.TopicJob, "AllocationUpdated", "a",
		map[string]any{"Job": api.Job{ID: str("a"), Namespace: str("default"), Status: str("running"), ModifyIndex: u64(12)}})
	src.send(t, m, api.TopicJob, "PlanResult", "a",
		map[string]any{"Job": api.Job{ID: str("a"), Namespace: str("default"), Status: str("pending"), ModifyIndex: u64(11)}})
	jobs, _ = m.Jobs(ctx)
	must.Eq(t, "running", jobs[0].Status)

	// A placement: the event lacks the job version, so the allocation is
	// read; a client update keeps the version without a read.
	src.byID["x"] = &api.AllocationListStub{ID: "x", JobID: "a", Namespace: "default", ClientStatus: "pending", JobVersion: 3, ModifyIndex: 13}
	src.send(t, m, api.TopicAllocation, "PlanResult", "x",
		map[string]any{"Allocation": api.Allocation{ID: "x", JobID: "a", Namespace: "default", ClientStatus: "pending", ModifyIndex: 13}})
	src.send(t, m, api.TopicAllocation, "AllocationUpdated", "x",
		map[string]any{"Allocation": api.Allocation{ID: "x", JobID: "a", Namespace: "default", ClientStatus: "running", ModifyIndex: 14}})
	allocs, _ := m.Allocations(ctx)
	must.Len(t, 1, allocs)
	must.Eq(t, "running", allocs[0].ClientStatus)
	must.Eq(t, uint64(3), allocs[0].JobVersion)
	must.Eq(t, 1, src.reads, must.Sprint("one read, for the placement"))
	mine, ok := m.MirroredJobAllocations("default", "a")
	must.True(t, ok)
	must.Len(t, 1, mine)
	others, ok := m.MirroredJobAllocations("other", "a")
	must.True(t, ok)
	must.SliceEmpty(t, others)
	_, ok = NewMirror(nil, src, nil).MirroredJobAllocations("default", "a")
	must.False(t, ok, must.Sprint("a mirror that never synced knows nothing"))

	// A deregistered job that Nomad no longer has was purged.
	src.send(t, m, api.TopicJob, "JobDeregistered", "a",
		map[string]any{"Job": api.Job{ID: str("a"), Namespace: str("default"), Status: str("dead"), ModifyIndex: u64(15)}})
	jobs, _ = m.Jobs(ctx)
	must.SliceEmpty(t, jobs)

	// A node's device attributes (its GPU model) survive the event: the
	// api package's own decoding drops typed attribute values.
	model := "Tesla T4"
	src.send(t, m, api.TopicNode, "NodeEvent", "n1", map[string]any{"Node": api.Node{ID: "n1", Status: "ready", ModifyIndex: 16,
		NodeResources: &api.NodeResources{Devices: []*api.NodeDeviceResource{{Vendor: "nvidia", Type: "gpu", Name: model,
			Attributes: map[string]*api.Attribute{"model": {StringVal: &model}}}}}}})
	nodes, _ := m.Nodes(ctx)
	must.Len(t, 1, nodes)
	must.Eq(t, model, *nodes[0].NodeResources.Devices[0].Attributes["model"].StringVal)

	// Nodes come and go.
	src.send(t, m, api.TopicNode, "NodeDeregistration", "n1", map[string]any{"Node": api.Node{ID: "n1", ModifyIndex: 17}})
	nodes, _ = m.Nodes(ctx)
	must.SliceEmpty(t, nodes)
	must.Eq(t, 1, src.lists, must.Sprint("no list while the stream holds"))

	// A broken stream makes the next read list everything again.
	src.mu.Lock()
	src.stream <- &api.Events{Err: fmt.Errorf("stream reset")}
	src.mu.Unlock()
	must.Wait(t, wait.InitialSuccess(wait.BoolFunc(func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return !m.synced
	}), wait.Timeout(5*time.Second), wait.Gap(5*time.Millisecond)))
	nodes, err = m.Nodes(ctx)
	must.NoError(t, err)
	must.Len(t, 1, nodes, must.Sprint("listed again"))
	must.Eq(t, 2, src.lists)
}
