package replay

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/caravan-gpu/caravan/planner/cluster"
	"github.com/caravan-gpu/caravan/planner/nomadx"
)

// Nomad is every call a replay makes. The real one wraps nomad/api; the
// jobs live in the client's namespace (NOMAD_NAMESPACE).
type Nomad interface {
	// Address is the agent's HTTP address, for errors.
	Address() string
	// Nodes lists client nodes with their devices.
	Nodes(ctx context.Context) ([]*api.NodeListStub, error)
	// Register submits a new job; it fails when the ID is taken.
	Register(ctx context.Context, job *api.Job) error
	// Jobs lists the jobs whose ID starts with prefix.
	Jobs(ctx context.Context, prefix string) ([]*api.JobListStub, error)
	// Allocations lists every allocation of a job, stopped ones included,
	// with their devices.
	Allocations(ctx context.Context, jobID string) ([]*api.AllocationListStub, error)
	// History is the job's current version and when the planner's hold
	// was put on it, from the versions Nomad keeps.
	History(ctx context.Context, jobID string) (JobHistory, error)
	// Purge deregisters a job and purges it from Nomad's state.
	Purge(ctx context.Context, jobID string) error
	// BatchPreemption reports whether Nomad preempts batch allocations.
	BatchPreemption(ctx context.Context) (bool, error)
}

// API is Nomad on a real agent.
type API struct{ c *api.Client }

// NewAPI returns a Nomad for the agent the NOMAD_* environment points at,
// with address and token overriding it when set.
func NewAPI(address, token string) (*API, error) {
	c, err := nomadx.NewClient(address, token)
	if err != nil {
		return nil, err
	}
	return &API{c: c}, nil
}

// WrapAPI returns a Nomad around an existing client.
func WrapAPI(c *api.Client) *API { return &API{c: c} }

func (a *API) Address() string { return a.c.Address() }

func q(ctx context.Context) *api.QueryOptions { return (&api.QueryOptions{}).WithContext(ctx) }
func w(ctx context.Context) *api.WriteOptions { return (&api.WriteOptions{}).WithContext(ctx) }
func qp(ctx context.Context, params map[string]string) *api.QueryOptions {
	return (&api.QueryOptions{Params: params}).WithContext(ctx)
}

func (a *API) Nodes(ctx context.Context) ([]*api.NodeListStub, error) {
	nodes, _, err := a.c.Nodes().List(qp(ctx, map[string]string{"resources": "true"}))
	return nodes, err
}

func (a *API) Register(ctx context.Context, job *api.Job) error {
	// EnforceIndex with index 0: register only if no job has the ID.
	_, _, err := a.c.Jobs().RegisterOpts(job, &api.RegisterOptions{EnforceIndex: true, ModifyIndex: 0}, w(ctx))
	return err
}

func (a *API) Jobs(ctx context.Context, prefix string) ([]*api.JobListStub, error) {
	o := q(ctx)
	o.Prefix = prefix
	jobs, _, err := a.c.Jobs().List(o)
	return jobs, err
}

func (a *API) Allocations(ctx context.Context, jobID string) ([]*api.AllocationListStub, error) {
	o := qp(ctx, map[string]string{"resources": "true"})
	o.Filter = "JobID == " + strconv.Quote(jobID)
	allocs, _, err := a.c.Allocations().List(o)
	return allocs, err
}

func (a *API) History(ctx context.Context, jobID string) (JobHistory, error) {
	versions, _, _, err := a.c.Jobs().Versions(jobID, false, q(ctx))
	if err != nil {
		return JobHistory{}, err
	}
	return historyOf(versions), nil
}

// JobHistory is what a job's versions tell of the planner's writes.
type JobHistory struct {
	// Version is the job's current version: 0 as submitted, one more for
	// each write that changed it.
	Version uint64
	// Holds are when a version put the planner's hold on the job while
	// the version before had none, oldest first: a preemption's decision,
	// for a job that was running. A server keeps a job's last
	// job_tracked_versions versions only (6 by default; the e2e harness
	// sets 1000), so the oldest holds of a job written more often are
	// missing.
	Holds []time.Time
	// Releases are when a version took the planner's hold off the job
	// while the version before had it, oldest first: a start's decision.
	// The oldest are missing in the same way.
	Releases []time.Time
}

// historyOf reads a job's history from its versions, newest first as
// Nomad lists them.
func historyOf(versions []*api.Job) JobHistory {
	var h JobHistory
	if len(versions) == 0 {
		return h
	}
	h.Version = nomadx.Value(versions[0].Version)
	for i := len(versions) - 2; i >= 0; i-- {
		if versions[i].SubmitTime == nil {
			continue
		}
		at := time.Unix(0, *versions[i].SubmitTime)
		switch held, before := cluster.Held(versions[i]), cluster.Held(versions[i+1]); {
		case held && !before:
			h.Holds = append(h.Holds, at)
		case !held && before:
			h.Releases = append(h.Releases, at)
		}
	}
	return h
}

func (a *API) Purge(ctx context.Context, jobID string) error {
	_, _, err := a.c.Jobs().Deregister(jobID, true, w(ctx))
	return err
}

func (a *API) BatchPreemption(ctx context.Context) (bool, error) {
	resp, _, err := a.c.Operator().SchedulerGetConfiguration(q(ctx))
	if err != nil {
		return false, err
	}
	if resp.SchedulerConfig == nil {
		return false, fmt.Errorf("nomad returned no scheduler configuration")
	}
	return resp.SchedulerConfig.PreemptionConfig.BatchSchedulerEnabled, nil
}
