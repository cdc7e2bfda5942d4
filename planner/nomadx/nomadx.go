// Package nomadx is the planner's narrow view of Nomad: only the calls the
// planner and the operator CLI make. The real implementation wraps
// github.com/hashicorp/nomad/api; tests use an in-process fake of Client.
package nomadx

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/hashicorp/go-cleanhttp"
	"github.com/hashicorp/nomad/api"
)

// ErrConflict is returned by RegisterJob when the job changed since the
// planner read it: someone else registered a newer version first.
var ErrConflict = errors.New("job modify index conflict")

// ErrNotFound is returned by JobInfo for a job that does not exist.
var ErrNotFound = errors.New("not found")

// Client is every Nomad call the planner makes.
type Client interface {
	// Nodes lists client nodes with their device resources.
	Nodes(ctx context.Context) ([]*api.NodeListStub, error)
	// Jobs lists jobs in every namespace the token can read, with their meta.
	Jobs(ctx context.Context) ([]*api.JobListStub, error)
	// Job reads one job's full spec.
	Job(ctx context.Context, namespace, id string) (*api.Job, error)
	// Allocations lists allocations in every namespace with their allocated
	// resources.
	Allocations(ctx context.Context) ([]*api.AllocationListStub, error)
	// JobAllocations lists one job's allocations.
	JobAllocations(ctx context.Context, namespace, id string) ([]*api.AllocationListStub, error)
	// RegisterJob writes job only if its JobModifyIndex is still
	// modifyIndex, and returns ErrConflict otherwise. It returns the job's
	// new JobModifyIndex.
	RegisterJob(ctx context.Context, job *api.Job, modifyIndex uint64) (uint64, error)
	// StopAllocation stops one allocation, as `nomad alloc stop` does.
	// Nomad stops it whether or not a replacement can be placed.
	StopAllocation(ctx context.Context, namespace, allocID string) error
	// JobVersions lists the versions Nomad keeps of a job, newest first.
	JobVersions(ctx context.Context, namespace, id string) ([]*api.Job, error)
	// SchedulerConfig reads the scheduler configuration.
	SchedulerConfig(ctx context.Context) (*api.SchedulerConfiguration, error)
	// SetSchedulerConfig writes cfg if its ModifyIndex is still current and
	// reports whether it did.
	SetSchedulerConfig(ctx context.Context, cfg *api.SchedulerConfiguration) (bool, error)
	// NodeStats reads a client node's host statistics, with the device
	// plugins' per-instance statistics (GPU memory in use).
	NodeStats(ctx context.Context, nodeID string) (*api.HostStats, error)
	// Changes delivers a value whenever a job, allocation or node changes,
	// until ctx ends. Bursts may be merged.
	Changes(ctx context.Context) (<-chan struct{}, error)
}

// API is Client on a real Nomad agent.
type API struct {
	c *api.Client
}

// New returns a Client for the agent that the standard NOMAD_* environment
// (address, token, TLS) points at, with address and token overriding it when
// set.
func New(address, token string) (*API, error) {
	c, err := NewClient(address, token)
	if err != nil {
		return nil, err
	}
	return &API{c: c}, nil
}

// NewClient returns a nomad/api client for the agent that the standard
// NOMAD_* environment points at, with address and token overriding it when
// set.
func NewClient(address, token string) (*api.Client, error) {
	cfg := api.DefaultConfig()
	if address != "" {
		cfg.Address = address
	}
	if strings.HasPrefix(cfg.Address, "unix://") {
		// The api package makes its own client for a socket.
		return newAPIClient(cfg, token)
	}
	// A round reads and writes with dozens of requests in flight; the
	// pooled default keeps GOMAXPROCS+1 idle connections per host, so most
	// of them would open a new connection.
	transport := cleanhttp.DefaultPooledTransport()
	transport.MaxIdleConnsPerHost = MaxConnsInFlight
	// As the api package sets up a client of its own making.
	transport.TLSHandshakeTimeout = 10 * time.Second
	transport.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	transport.ForceAttemptHTTP2 = false
	cfg.HttpClient = &http.Client{Transport: transport}
	// api.NewClient sets up TLS (NOMAD_CACERT and the rest) only on a
	// client of its own making.
	if err := api.ConfigureTLS(cfg.HttpClient, cfg.TLSConfig); err != nil {
		return nil, fmt.Errorf("nomad client: %w", err)
	}
	return newAPIClient(cfg, token)
}

func newAPIClient(cfg *api.Config, token string) (*api.Client, error) {
	if token != "" {
		cfg.SecretID = token
	}
	c, err := api.NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("nomad client: %w", err)
	}
	return c, nil
}

// MaxConnsInFlight is how many connections to the agent a client keeps
// open between requests: more than a round's spec readers and writers.
const MaxConnsInFlight = 128

// Wrap returns a Client around an existing api.Client.
func Wrap(c *api.Client) *API { return &API{c: c} }

// Address is the agent's HTTP address.
func (a *API) Address() string { return a.c.Address() }

func query(ctx context.Context, params map[string]string) *api.QueryOptions {
	q := &api.QueryOptions{Namespace: api.AllNamespacesNamespace, Params: params}
	return q.WithContext(ctx)
}

func (a *API) Nodes(ctx context.Context) ([]*api.NodeListStub, error) {
	nodes, _, err := a.c.Nodes().List(query(ctx, map[string]string{"resources": "true"}))
	return nodes, denied(err, `node { policy = "read" }`, "list nodes")
}

func (a *API) Jobs(ctx context.Context) ([]*api.JobListStub, error) {
	jobs, _, err := a.c.Jobs().ListOptions(&api.JobListOptions{Fields: &api.JobListFields{Meta: true}}, query(ctx, nil))
	return jobs, denied(err, `namespace capability "list-jobs"`, "list jobs")
}

func (a *API) Job(ctx context.Context, namespace, id string) (*api.Job, error) {
	q := (&api.QueryOptions{Namespace: namespace}).WithContext(ctx)
	job, _, err := a.c.Jobs().Info(id, q)
	if err != nil && is404(err) {
		return nil, fmt.Errorf("job %q in namespace %q: %w", id, namespace, ErrNotFound)
	}
	return job, denied(err, `namespace capability "read-job"`, "read job "+id)
}

func (a *API) Allocations(ctx context.Context) ([]*api.AllocationListStub, error) {
	allocs, _, err := a.c.Allocations().List(query(ctx, map[string]string{"resources": "true"}))
	return allocs, denied(err, `namespace capability "read-job"`, "list allocations")
}

func (a *API) JobAllocations(ctx context.Context, namespace, id string) ([]*api.AllocationListStub, error) {
	q := (&api.QueryOptions{Namespace: namespace}).WithContext(ctx)
	allocs, _, err := a.c.Jobs().Allocations(id, false, q)
	return allocs, denied(err, `namespace capability "read-job"`, "list the allocations of job "+id)
}

func (a *API) StopAllocation(ctx context.Context, namespace, allocID string) error {
	q := (&api.QueryOptions{Namespace: namespace}).WithContext(ctx)
	_, err := a.c.Allocations().Stop(&api.Allocation{ID: allocID, Namespace: namespace}, q)
	if err != nil && is404(err) {
		return fmt.Errorf("allocation %s: %w", allocID, ErrNotFound)
	}
	return denied(err, `namespace capability "alloc-lifecycle"`, "stop allocation "+allocID+" to preempt its job")
}

func (a *API) RegisterJob(ctx context.Context, job *api.Job, modifyIndex uint64) (uint64, error) {
	w := (&api.WriteOptions{Namespace: Value(job.Namespace)}).WithContext(ctx)
	resp, _, err := a.c.Jobs().RegisterOpts(job, &api.RegisterOptions{EnforceIndex: true, ModifyIndex: modifyIndex}, w)
	if err != nil {
		if IsConflict(err) {
			return 0, fmt.Errorf("%w: %v", ErrConflict, err)
		}
		return 0, denied(err, `namespace capability "submit-job"`, "rewrite job "+Value(job.ID))
	}
	return resp.JobModifyIndex, nil
}

func (a *API) JobVersions(ctx context.Context, namespace, id string) ([]*api.Job, error) {
	q := (&api.QueryOptions{Namespace: namespace}).WithContext(ctx)
	versions, _, _, err := a.c.Jobs().Versions(id, false, q)
	if err != nil && is404(err) {
		return nil, fmt.Errorf("job %q in namespace %q: %w", id, namespace, ErrNotFound)
	}
	return versions, denied(err, `namespace capability "read-job"`, "read the versions of job "+id)
}

func (a *API) SchedulerConfig(ctx context.Context) (*api.SchedulerConfiguration, error) {
	resp, _, err := a.c.Operator().SchedulerGetConfiguration((&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return nil, denied(err, `operator { policy = "read" }`, "read the scheduler configuration")
	}
	if resp.SchedulerConfig == nil {
		return nil, errors.New("nomad returned no scheduler configuration")
	}
	return resp.SchedulerConfig, nil
}

func (a *API) NodeStats(ctx context.Context, nodeID string) (*api.HostStats, error) {
	stats, err := a.c.Nodes().Stats(nodeID, (&api.QueryOptions{}).WithContext(ctx))
	return stats, denied(err, `node { policy = "read" }`, "read the statistics of node "+nodeID)
}

func (a *API) SetSchedulerConfig(ctx context.Context, cfg *api.SchedulerConfiguration) (bool, error) {
	resp, _, err := a.c.Operator().SchedulerCASConfiguration(cfg, (&api.WriteOptions{}).WithContext(ctx))
	if err != nil {
		return false, denied(err, `operator { policy = "write" }`, "change the scheduler configuration")
	}
	return resp.Updated, nil
}

// Changes follows Nomad's event stream. When the stream breaks it reconnects
// after a pause and sends one change, since events may have been missed.
func (a *API) Changes(ctx context.Context) (<-chan struct{}, error) {
	topics := map[api.Topic][]string{api.TopicJob: {"*"}, api.TopicAllocation: {"*"}, api.TopicNode: {"*"}}
	out := make(chan struct{}, 1)
	notify := func() {
		select {
		case out <- struct{}{}:
		default:
		}
	}
	stream := func() (<-chan *api.Events, error) {
		return a.c.EventStream().Stream(ctx, topics, 0, &api.QueryOptions{Namespace: api.AllNamespacesNamespace})
	}
	events, err := stream()
	if err != nil {
		return nil, fmt.Errorf("nomad event stream: %w", denied(err, `namespace capability "read-job" and node { policy = "read" }`, "follow the event stream"))
	}
	go func() {
		defer close(out)
		for {
			for ev := range events {
				if ev.Err != nil {
					break
				}
				if !ev.IsHeartbeat() {
					notify()
				}
			}
			for {
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Second):
				}
				if events, err = stream(); err == nil {
					notify()
					break
				}
			}
		}
	}()
	return out, nil
}

// IsConflict reports whether err is Nomad's answer to a register whose
// enforced modify index is out of date.
func IsConflict(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrConflict) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "conflicting job modify index") || strings.Contains(msg, "Enforcing job modify index")
}

// ErrPermission marks a call Nomad refused for the token's ACL policy.
var ErrPermission = errors.New("permission denied")

// denied names the ACL rule a refused call needs: Nomad's own 403 says only
// "Permission denied".
func denied(err error, rule, what string) error {
	if err == nil || !isStatus(err, 403) {
		return err
	}
	return fmt.Errorf("%w: the Nomad token cannot %s: its ACL policy needs %s (see the least-privilege policy in docs/planner.md): %v",
		ErrPermission, what, rule, err)
}

func isStatus(err error, code int) bool {
	var ue api.UnexpectedResponseError
	return errors.As(err, &ue) && ue.StatusCode() == code
}

func is404(err error) bool {
	var ue api.UnexpectedResponseError
	if errors.As(err, &ue) {
		return ue.StatusCode() == 404
	}
	return strings.Contains(err.Error(), "404")
}

// Value is what an API pointer field holds, or the zero value for nil.
func Value[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// CopyJob deep-copies a job through its JSON form, which covers every
// field the API carries (the api package has no Copy); nil for nil or a
// job that does not encode.
func CopyJob(j *api.Job) *api.Job {
	if j == nil {
		return nil
	}
	data, err := json.Marshal(j)
	if err != nil {
		return nil
	}
	var out api.Job
	if json.Unmarshal(data, &out) != nil {
		return nil
	}
	return &out
}
