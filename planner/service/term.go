package service

// The leadership term: only the replica holding the Consul lock writes,
// and its writes end with its term.

import (
	"context"
)

// beginTerm makes this replica the leader for a term that ends when ctx
// does or endTerm is called.
func (p *Planner) beginTerm(ctx context.Context, value string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.endTerm != nil {
		p.endTerm()
	}
	p.term, p.endTerm = context.WithCancel(ctx)
	p.leader, p.leaderVal = true, value
	p.metrics.leader.Set(1)
}

// stopLeading ends the leadership term: writes in flight are cancelled
// before this returns.
func (p *Planner) stopLeading() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.endTerm != nil {
		p.endTerm()
	}
	p.term, p.endTerm = nil, nil
	p.leader, p.leaderVal = false, ""
	p.metrics.leader.Set(0)
}

// writeContext says whether this replica may write now and gives the
// context its writes must run under: the leadership term's, which a lost
// lock ends (it is a child of the planner's own), or ctx for a planner
// without Consul, which always leads.
func (p *Planner) writeContext(ctx context.Context) (context.Context, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case !p.leader:
		return ctx, false
	case p.term == nil:
		return ctx, true
	}
	return p.term, true
}

// IsLeader reports whether this replica may write.
func (p *Planner) IsLeader() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.leader
}
