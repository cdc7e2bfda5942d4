//go:build e2e

package e2e

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/hashicorp/nomad/helper/pointer"
	"github.com/shoenig/test/must"

	"github.com/caravan-gpu/caravan/e2e/harness"
	"github.com/caravan-gpu/caravan/planner/cluster"
	"github.com/caravan-gpu/caravan/planner/replay"
)

// A start the planner holds while Nomad's client is still setting it up
// (here, fetching an artifact from a server that answers only after 3 s,
// and then with a 404) has no task to stop: the replay reads it as an
// abort, not a preemption, placed before the hold and given up after it,
// when the client reported the task dead, which is when Nomad frees its
// GPU (the simulator's abort latency).
func TestAStartHeldInItsSetUpIsReadAsAnAbort(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(3 * time.Second):
		case <-r.Context().Done():
		}
		http.NotFound(w, r)
	}))
	defer srv.Close()

	c := harness.StartT(t, harness.Options{})
	job, err := c.ParseJobspec(c.Jobspec("hello.nomad.hcl"), nil)
	must.NoError(t, err)
	job.ID, job.Name = pointer.Of("set-up-held"), pointer.Of("set-up-held")
	task := job.TaskGroups[0].Tasks[0]
	task.Artifacts = []*api.TaskArtifact{{GetterSource: pointer.Of(srv.URL + "/never.tar.gz"), RelativeDest: pointer.Of("local/")}}
	_, _, err = c.Nomad.Jobs().Register(job, nil)
	must.NoError(t, err)

	inSetUp := func(a *api.AllocationListStub) bool {
		ts := a.TaskStates[task.Name]
		return ts != nil && slices.ContainsFunc(ts.Events, func(e *api.TaskEvent) bool { return e.Type == api.TaskDownloadingArtifacts })
	}
	setUp := c.WaitAllocs(t, *job.ID, 1, time.Minute, inSetUp)

	// Held as the planner holds a job: the hold, then its allocation
	// stopped (planner/rewrite).
	job.Constraints = append(job.Constraints, cluster.HoldConstraint())
	_, _, err = c.Nomad.Jobs().Register(job, nil)
	must.NoError(t, err)
	_, err = c.Nomad.Allocations().Stop(&api.Allocation{ID: setUp[0].ID, Namespace: setUp[0].Namespace}, nil)
	must.NoError(t, err)
	c.WaitAllocs(t, *job.ID, 1, time.Minute, harness.Terminal)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nomad := replay.WrapAPI(c.Nomad)
	allocs, err := nomad.Allocations(ctx, *job.ID)
	must.NoError(t, err)
	history, err := nomad.History(ctx, *job.ID)
	must.NoError(t, err)
	must.Len(t, 1, history.Holds)

	o := replay.ReadOutcome(allocs, 1, nil, time.Now())
	must.Zero(t, o.Preemptions, must.Sprint("no task ran: no preemption"))
	must.Len(t, 1, o.Aborts)
	hold, abort := history.Holds[0], o.Aborts[0]
	must.True(t, abort.Placed.Before(hold), must.Sprintf("placed %v, held %v", abort.Placed, hold))
	must.True(t, abort.Freed.After(hold), must.Sprintf("freed %v, held %v", abort.Freed, hold))
	t.Logf("the client gave up the allocation %v after the hold", abort.Freed.Sub(hold).Round(time.Millisecond))
}
