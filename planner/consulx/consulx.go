// Package consulx is the planner's narrow view of Consul: its service
// registration, finding Nomad, the leader lock and a few KV paths. The real
// implementation wraps github.com/hashicorp/consul/api; tests use Fake.
package consulx

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/hashicorp/consul/api"
)

// The planner's names in Consul.
const (
	ServiceName = "caravan-planner"
	// LockKey is the leader lock; its value is the leader's HTTP address.
	LockKey = "caravan/planner/leader"
	// ProfilesPrefix holds one throughput and sensitivity profile per key.
	ProfilesPrefix = "caravan/profiles/"
	// HistoryKey holds the GPU-seconds of completed jobs, for 2D-Gittins.
	HistoryKey = "caravan/history/completed"
	// ArrivalsKey holds each managed job's first-seen time, since Nomad's
	// SubmitTime moves with every job version.
	ArrivalsKey = "caravan/planner/arrivals"
)

// Registration is the planner's service instance.
type Registration struct {
	ID      string
	Address string
	Port    int
	// HealthPath is polled over HTTP by the Consul agent.
	HealthPath string
	// CheckInterval is how often; failover time depends on it.
	CheckInterval time.Duration
}

// CheckID is the ID of the registration's health check.
func (r Registration) CheckID() string { return "service:" + r.ID }

// Client is every Consul call the planner makes.
type Client interface {
	Register(ctx context.Context, r Registration) error
	Deregister(ctx context.Context, id string) error
	// ServiceAddress returns host:port of a passing instance of service.
	ServiceAddress(ctx context.Context, service, tag string) (string, error)
	Get(ctx context.Context, key string) ([]byte, bool, error)
	Put(ctx context.Context, key string, value []byte) error
	List(ctx context.Context, prefix string) (map[string][]byte, error)
	// Lead blocks until this replica holds the lock at key, or ctx ends
	// (then it returns a nil channel and no error). The returned channel
	// closes when leadership is lost; release gives the lock up. The lock
	// is tied to checkID: when that check fails, the lock is released.
	Lead(ctx context.Context, key string, value []byte, checkID string) (lost <-chan struct{}, release func(), err error)
	// Leader returns the value the current lock holder stored, empty when
	// nobody leads.
	Leader(ctx context.Context, key string) (string, error)
}

// DefaultLockDelay is how long Consul keeps the leader lock from being
// taken again after the holder's session was invalidated, so that a leader
// that lost the lock notices before another starts writing; short, because
// the planner's writes are CAS-protected anyway.
const DefaultLockDelay = time.Second

// SessionTTL is the leader session's TTL. The lock goes when the leader's
// check fails, once the Consul agent syncs that to the servers; a leader
// that dies with the sync late loses it at the latest when its session,
// no longer renewed, expires: Consul allows itself up to twice the TTL.
const SessionTTL = 15 * time.Second

// API is Client on a real Consul agent.
type API struct {
	c *api.Client
	// LockDelay is how long Consul keeps a lost lock from being taken
	// again (DefaultLockDelay).
	LockDelay time.Duration
}

// New returns a Client configured from the standard CONSUL_* environment,
// with address overriding CONSUL_HTTP_ADDR when set.
func New(address string) (*API, error) {
	cfg := api.DefaultConfig()
	if address != "" {
		cfg.Address = address
	}
	c, err := api.NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("consul client: %w", err)
	}
	return &API{c: c, LockDelay: DefaultLockDelay}, nil
}

func q(ctx context.Context) *api.QueryOptions { return (&api.QueryOptions{}).WithContext(ctx) }
func w(ctx context.Context) *api.WriteOptions { return (&api.WriteOptions{}).WithContext(ctx) }

func (a *API) Register(ctx context.Context, r Registration) error {
	interval := r.CheckInterval
	if interval <= 0 {
		interval = time.Second
	}
	return denied(a.c.Agent().ServiceRegisterOpts(&api.AgentServiceRegistration{
		ID: r.ID, Name: ServiceName, Address: r.Address, Port: r.Port,
		Check: &api.AgentServiceCheck{
			CheckID:  r.CheckID(),
			Name:     "caravan planner HTTP",
			HTTP:     fmt.Sprintf("http://%s%s", net.JoinHostPort(r.Address, strconv.Itoa(r.Port)), r.HealthPath),
			Interval: interval.String(),
			Timeout:  interval.String(),
			// Passing from the start, so that a lock session can be tied to it.
			Status:                         api.HealthPassing,
			DeregisterCriticalServiceAfter: "1m",
		},
	}, api.ServiceRegisterOpts{}.WithContext(ctx)), `service "`+ServiceName+`" { policy = "write" }`)
}

func (a *API) Deregister(ctx context.Context, id string) error {
	return a.c.Agent().ServiceDeregisterOpts(id, q(ctx))
}

func (a *API) ServiceAddress(ctx context.Context, service, tag string) (string, error) {
	entries, _, err := a.c.Health().Service(service, tag, true, q(ctx))
	if err != nil {
		return "", denied(err, `service "`+service+`" { policy = "read" } and node_prefix "" { policy = "read" }`)
	}
	for _, e := range entries {
		host := e.Service.Address
		if host == "" {
			host = e.Node.Address
		}
		return net.JoinHostPort(host, strconv.Itoa(e.Service.Port)), nil
	}
	return "", fmt.Errorf("no passing instance of service %q (tag %q) in Consul", service, tag)
}

func (a *API) Get(ctx context.Context, key string) ([]byte, bool, error) {
	pair, _, err := a.c.KV().Get(key, q(ctx))
	if err != nil || pair == nil {
		return nil, false, denied(err, `key_prefix "caravan/" { policy = "read" }`)
	}
	return pair.Value, true, nil
}

func (a *API) Put(ctx context.Context, key string, value []byte) error {
	_, err := a.c.KV().Put(&api.KVPair{Key: key, Value: value}, w(ctx))
	return denied(err, `key_prefix "caravan/" { policy = "write" }`)
}

func (a *API) List(ctx context.Context, prefix string) (map[string][]byte, error) {
	pairs, _, err := a.c.KV().List(prefix, q(ctx))
	if err != nil {
		return nil, denied(err, `key_prefix "caravan/" { policy = "read" }`)
	}
	out := map[string][]byte{}
	for _, p := range pairs {
		out[p.Key] = p.Value
	}
	return out, nil
}

func (a *API) Lead(ctx context.Context, key string, value []byte, checkID string) (<-chan struct{}, func(), error) {
	session, _, err := a.c.Session().Create(&api.SessionEntry{
		Name:      ServiceName + " leader",
		TTL:       SessionTTL.String(),
		LockDelay: a.LockDelay,
		Behavior:  api.SessionBehaviorRelease,
		// The node's health and the planner's own check: when the process
		// dies its check fails and the lock goes at once, not after the TTL.
		NodeChecks:    []string{"serfHealth"},
		ServiceChecks: []api.ServiceCheck{{ID: checkID}},
	}, w(ctx))
	if err != nil {
		return nil, nil, fmt.Errorf("consul session: %w", denied(err, `session_prefix "" { policy = "write" }`))
	}
	renewDone := make(chan struct{})
	go func() { _ = a.c.Session().RenewPeriodic(SessionTTL.String(), session, nil, renewDone) }()
	lock, err := a.c.LockOpts(&api.LockOptions{
		Key: key, Value: value, Session: session,
		LockWaitTime: 5 * time.Second, MonitorRetries: 3, MonitorRetryTime: time.Second,
	})
	if err != nil {
		close(renewDone)
		return nil, nil, err
	}
	stop := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			close(stop)
		case <-renewDone:
		}
	}()
	lost, err := lock.Lock(stop)
	if err != nil || lost == nil {
		close(renewDone)
		_, _ = a.c.Session().Destroy(session, nil)
		if err == nil && ctx.Err() == nil {
			err = errors.New("consul lock: stopped without leadership")
		}
		return nil, nil, err
	}
	release := func() {
		_ = lock.Unlock()
		close(renewDone)
		_, _ = a.c.Session().Destroy(session, nil)
	}
	return lost, release, nil
}

func (a *API) Leader(ctx context.Context, key string) (string, error) {
	pair, _, err := a.c.KV().Get(key, q(ctx))
	if err != nil || pair == nil || pair.Session == "" {
		return "", err
	}
	return string(pair.Value), nil
}

// ErrPermission marks a call Consul refused for the token's ACL policy.
var ErrPermission = errors.New("permission denied")

// denied points a refused call at the ACL rule it needs; Consul's own 403
// names the permission, which is kept.
func denied(err error, rule string) error {
	var se api.StatusError
	if err == nil || !errors.As(err, &se) || se.Code != 403 {
		return err
	}
	return fmt.Errorf("%w: the Consul token's policy needs %s (see docs/planner.md): %v", ErrPermission, rule, err)
}

// Ping checks that the agent answers and the cluster has a leader.
func (a *API) Ping(ctx context.Context) error {
	leader, err := a.c.Status().LeaderWithQueryOptions(q(ctx))
	if err != nil {
		return err
	}
	if leader == "" {
		return errors.New("consul has no leader")
	}
	return nil
}
