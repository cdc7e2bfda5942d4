package service

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/caravan-gpu/caravan/planner/consulx"
	"github.com/hashicorp/go-hclog"
)

// Run serves the HTTP API on ln, registers the replica in Consul, campaigns
// for leadership and plans rounds until ctx ends. Every replica plans, so
// that followers serve a current queue; only the leader writes.
func (p *Planner) Run(ctx context.Context, ln net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	srv := &http.Server{Handler: p.Handler(), ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: p.log.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true})}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	defer func() {
		shutdown, done := context.WithTimeout(context.Background(), 5*time.Second)
		defer done()
		_ = srv.Shutdown(shutdown)
	}()
	p.log.Info("planner listening", "address", ln.Addr().String(), "id", p.cfg.ID, "policy", p.cfg.Policy,
		"api_token", p.cfg.APIToken != "")

	if _, err := p.CheckScheduler(ctx); err != nil {
		p.log.Warn("cannot check Nomad's scheduler configuration", "error", err)
	}

	var wg sync.WaitGroup
	if p.consul != nil {
		reg, err := p.registration(ln)
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Until Consul answers the replica plans as a follower: it
			// serves its queue and writes nothing.
			if !p.register(ctx, reg) {
				return
			}
			defer func() {
				dctx, done := context.WithTimeout(context.Background(), 5*time.Second)
				defer done()
				_ = p.consul.Deregister(dctx, reg.ID)
			}()
			if err := p.LoadKV(ctx); err != nil {
				p.log.Warn("cannot read profiles and history from Consul KV", "error", err)
			}
			p.campaign(ctx, reg)
		}()
	}
	err := p.loop(ctx, serveErr)
	cancel()
	wg.Wait()
	return err
}

// Backoff between attempts to reach Consul (variables for tests).
var (
	consulRetryFirst = time.Second
	consulRetryMax   = 30 * time.Second
)

// register registers the replica in Consul, retrying with backoff while
// Consul cannot be reached, and says so in the log. It returns false when
// ctx ends first.
func (p *Planner) register(ctx context.Context, reg consulx.Registration) bool {
	wait := consulRetryFirst
	for {
		err := p.consul.Register(ctx, reg)
		if err == nil {
			p.log.Info("registered in Consul", "service", consulx.ServiceName, "id", reg.ID)
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		p.log.Warn("cannot register in Consul; planning as a follower and retrying", "service", consulx.ServiceName,
			"retry_in", wait, "error", err)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(wait):
		}
		wait = min(2*wait, consulRetryMax)
	}
}

func (p *Planner) registration(ln net.Listener) (consulx.Registration, error) {
	addr := p.cfg.Advertise
	if addr == "" {
		addr = ln.Addr().String()
	}
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return consulx.Registration{}, fmt.Errorf("http.advertise %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	port, _ := strconv.Atoi(portStr)
	return consulx.Registration{ID: p.cfg.ID, Address: host, Port: port, HealthPath: "/v1/health",
		CheckInterval: p.cfg.CheckInterval}, nil
}

// campaign holds the leader lock whenever it can. Leadership is lost when
// Consul invalidates the session (this replica's check failed) or the lock
// monitor loses sight of the key; the replica then stops writing at once
// and campaigns again.
func (p *Planner) campaign(ctx context.Context, reg consulx.Registration) {
	value := []byte(fmt.Sprintf("%s:%d", reg.Address, reg.Port))
	for ctx.Err() == nil {
		lost, release, err := p.consul.Lead(ctx, consulx.LockKey, value, reg.CheckID())
		if err != nil {
			p.log.Warn("leader election", "error", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			continue
		}
		if lost == nil {
			return
		}
		p.log.Info("acquired leadership; this replica now writes", "lock", consulx.LockKey)
		if err := p.LoadKV(ctx); err != nil {
			p.log.Warn("cannot read profiles and history from Consul KV", "error", err)
		}
		p.beginTerm(ctx, string(value))
		p.kick()
		select {
		case <-lost:
			// End the term first: its writes in flight are cancelled
			// before the lock is let go (and Consul's lock delay keeps
			// another replica from taking it at once).
			p.stopLeading()
			p.log.Warn("lost leadership; writes stop")
			release()
		case <-ctx.Done():
			p.stopLeading()
			release()
			return
		}
	}
}

// kick asks the round loop for a round now.
func (p *Planner) kick() {
	p.mu.Lock()
	ch := p.wake
	p.mu.Unlock()
	if ch == nil {
		return
	}
	select {
	case ch <- struct{}{}:
	default:
	}
}

// loop plans a round on every change Nomad reports, once Nomad has been
// quiet for Settle, at most every MinInterval, and at least every Interval.
func (p *Planner) loop(ctx context.Context, serveErr <-chan error) error {
	wake := make(chan struct{}, 1)
	p.mu.Lock()
	p.wake = wake
	p.mu.Unlock()
	changes, err := p.nomad.Changes(ctx)
	if err != nil {
		p.log.Warn("cannot follow Nomad's event stream; planning on the interval only", "error", err)
		changes = nil
	}
	ticker := time.NewTicker(p.cfg.Interval)
	defer ticker.Stop()
	// The policy's own wake (a job crossing a queue cut, a starving job):
	// planning only on the interval would carry out such a change up to an
	// interval late, which the simulator never does.
	policyWake := time.NewTimer(time.Hour)
	policyWake.Stop()
	defer policyWake.Stop()
	last := time.Time{}
	for {
		if wait := p.cfg.MinInterval - time.Since(last); wait > 0 {
			select {
			case <-ctx.Done():
				return nil
			case err := <-serveErr:
				return fmt.Errorf("http: %w", err)
			case <-time.After(wait):
			}
		}
		last = time.Now()
		round, err := p.Round(ctx)
		if err != nil && ctx.Err() == nil {
			p.log.Warn("planning round failed", "error", err)
		} else if err == nil {
			p.log.Debug("planning round", "jobs", round.Jobs, "writes", round.Writes, "conflicts", round.Conflicts,
				"duration", round.Duration, "leader", p.IsLeader())
		}
		policyWake.Stop()
		if d, ok := policyWakeIn(p.untilPolicyWake(time.Now()), p.cfg.Interval); ok {
			policyWake.Reset(d)
		}
		select {
		case <-ctx.Done():
			return nil
		case err := <-serveErr:
			if errors.Is(err, http.ErrServerClosed) {
				return nil
			}
			return fmt.Errorf("http: %w", err)
		case <-ticker.C:
		case <-policyWake.C:
		case <-wake:
		case _, ok := <-changes:
			if !ok {
				changes = nil
				continue
			}
			// A burst may hold the round back by min_interval at most.
			if changes, err = settle(ctx, changes, p.cfg.Settle, max(p.cfg.MinInterval, p.cfg.Settle)); err != nil {
				return nil
			}
		}
	}
}

// untilPolicyWake is how many seconds from now until the last plan's
// policy asked to plan again: negative when that moment has passed, +Inf
// when it asked for nothing.
func (p *Planner) untilPolicyWake(now time.Time) float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.planned == nil {
		return math.Inf(1)
	}
	return p.plannedUntil - float64(now.UnixNano())/1e9
}

// minPolicyWake is the soonest the loop plans for a policy's wake: a wake
// already due (it passed while the round ran, or a round that reused the
// plan took the timer's fire) plans again at once rather than at the next
// interval, and a policy that keeps asking for 0 s cannot spin the loop
// (min_interval may be 0).
const minPolicyWake = 10 * time.Millisecond

// policyWakeIn is when the loop's timer should fire for a wake in seconds
// from now; false when the interval's tick comes first or there is no
// wake. The seconds are compared before they become a Duration, which a
// huge wake would overflow.
func policyWakeIn(seconds float64, interval time.Duration) (time.Duration, bool) {
	if math.IsNaN(seconds) || seconds >= interval.Seconds() {
		return 0, false
	}
	return max(time.Duration(max(seconds, 0)*float64(time.Second)), minPolicyWake), true
}

// settle waits until changes has been quiet for quiet, or until limit has
// passed, so that a round reads a burst of changes (a script submitting
// twenty jobs) whole rather than planning its first job alone. It returns
// changes, or nil once the channel is closed, and ctx's error when ctx ends
// first.
func settle(ctx context.Context, changes <-chan struct{}, quiet, limit time.Duration) (<-chan struct{}, error) {
	if quiet <= 0 {
		return changes, nil
	}
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	calm := time.NewTimer(quiet)
	defer calm.Stop()
	for {
		select {
		case <-ctx.Done():
			return changes, ctx.Err()
		case <-deadline.C:
			return changes, nil
		case <-calm.C:
			return changes, nil
		case _, ok := <-changes:
			if !ok {
				return nil, nil
			}
			calm.Reset(quiet)
		}
	}
}
