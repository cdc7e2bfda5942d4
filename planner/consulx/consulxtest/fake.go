// Package consulxtest is an in-process fake of consulx.Client. Several
// clients made from one Server share its KV, services and locks, as replicas
// sharing a Consul cluster do.
package consulxtest

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/caravan-gpu/caravan/planner/consulx"
)

// Server is the shared state.
type Server struct {
	mu       sync.Mutex
	kv       map[string][]byte
	services map[string]consulx.Registration
	// Other services by name, as host:port, for ServiceAddress.
	Catalog map[string]string
	holder  map[string]*holder
	changed chan struct{}
	// LockDelay keeps a lock taken away by Fail from being taken again for
	// a while, as Consul's lock-delay does after a session is invalidated
	// (consulx.DefaultLockDelay unless changed).
	LockDelay time.Duration
	heldOff   map[string]time.Time // key -> free again at
	// Down refuses that many registrations, as a Consul that is not up
	// yet does.
	Down int
}

type holder struct {
	value []byte
	lost  chan struct{}
}

// NewServer returns an empty server.
func NewServer() *Server {
	return &Server{kv: map[string][]byte{}, services: map[string]consulx.Registration{},
		Catalog: map[string]string{}, holder: map[string]*holder{}, changed: make(chan struct{}),
		LockDelay: consulx.DefaultLockDelay, heldOff: map[string]time.Time{}}
}

// Client returns a new client of s.
func (s *Server) Client() *Client { return &Client{s: s} }

// Services returns the registered planner instances by ID.
func (s *Server) Services() map[string]consulx.Registration {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]consulx.Registration{}
	for k, v := range s.services {
		out[k] = v
	}
	return out
}

// Fail takes the lock at key away from its holder, as Consul does when the
// holder's health check fails.
func (s *Server) Fail(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.holder[key] != nil {
		s.heldOff[key] = time.Now().Add(s.LockDelay)
	}
	s.dropLocked(key)
}

func (s *Server) dropLocked(key string) {
	if h := s.holder[key]; h != nil {
		close(h.lost)
		delete(s.holder, key)
		close(s.changed)
		s.changed = make(chan struct{})
	}
}

// Client is one replica's view of Server.
type Client struct{ s *Server }

var _ consulx.Client = (*Client)(nil)

func (c *Client) Register(_ context.Context, r consulx.Registration) error {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if c.s.Down > 0 {
		c.s.Down--
		return fmt.Errorf("Put \"http://127.0.0.1:8500/v1/agent/service/register\": dial tcp 127.0.0.1:8500: connect: connection refused")
	}
	c.s.services[r.ID] = r
	return nil
}

func (c *Client) Deregister(_ context.Context, id string) error {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	delete(c.s.services, id)
	return nil
}

func (c *Client) ServiceAddress(_ context.Context, service, _ string) (string, error) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if addr, ok := c.s.Catalog[service]; ok {
		return addr, nil
	}
	for _, r := range c.s.services {
		if service == consulx.ServiceName {
			return net.JoinHostPort(r.Address, strconv.Itoa(r.Port)), nil
		}
	}
	return "", fmt.Errorf("no passing instance of service %q in Consul", service)
}

func (c *Client) Get(_ context.Context, key string) ([]byte, bool, error) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	v, ok := c.s.kv[key]
	return v, ok, nil
}

func (c *Client) Put(_ context.Context, key string, value []byte) error {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	c.s.kv[key] = append([]byte(nil), value...)
	return nil
}

func (c *Client) List(_ context.Context, prefix string) (map[string][]byte, error) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	out := map[string][]byte{}
	for k, v := range c.s.kv {
		if strings.HasPrefix(k, prefix) {
			out[k] = v
		}
	}
	return out, nil
}

func (c *Client) Lead(ctx context.Context, key string, value []byte, _ string) (<-chan struct{}, func(), error) {
	for {
		c.s.mu.Lock()
		if wait := time.Until(c.s.heldOff[key]); wait > 0 {
			c.s.mu.Unlock()
			select {
			case <-ctx.Done():
				return nil, nil, nil
			case <-time.After(wait):
			}
			continue
		}
		if c.s.holder[key] == nil {
			h := &holder{value: value, lost: make(chan struct{})}
			c.s.holder[key] = h
			c.s.mu.Unlock()
			release := func() {
				c.s.mu.Lock()
				defer c.s.mu.Unlock()
				if c.s.holder[key] == h {
					c.s.dropLocked(key)
				}
			}
			return h.lost, release, nil
		}
		changed := c.s.changed
		c.s.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, nil, nil
		case <-changed:
		}
	}
}

func (c *Client) Leader(_ context.Context, key string) (string, error) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if h := c.s.holder[key]; h != nil {
		return string(h.value), nil
	}
	return "", nil
}
