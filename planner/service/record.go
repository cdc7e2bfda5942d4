package service

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/caravan-gpu/caravan/planner/cluster"
	"github.com/caravan-gpu/caravan/planner/enact"
	"github.com/caravan-gpu/caravan/planner/plannerapi"
	"github.com/caravan-gpu/caravan/planner/policy"
	"github.com/caravan-gpu/caravan/planner/rewrite"
)

// What the planner remembers of its rounds: the queue, explanations and
// decision records the API and dashboard serve.

// recordsPerJob bounds the decision history kept per job.
const recordsPerJob = 20

// remember stores the round's queue, explanations and decision records.
func (p *Planner) remember(state *cluster.State, snap *policy.Snapshot, index []*cluster.Job, r *policy.Result,
	targets []target, results map[string]rewrite.Result, round *plannerapi.Round, leader bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	queue := plannerapi.Queue{Leader: leader, Time: state.Time}
	explain := map[string]*plannerapi.Explain{}
	remembered := map[string]*memory{}
	for _, t := range targets {
		d := t.decision
		sj := snap.Jobs[d.Job]
		old := p.memory[t.key]
		m := &memory{prevQueue: d.Queue, prevRank: d.Rank}
		if old != nil {
			m.attainedBase, m.executedBase, m.waitFrom, m.renewedAt = old.attainedBase, old.executedBase, old.waitFrom, old.renewedAt
		}
		if d.Renewed {
			m.renewedAt = snap.Now
		}
		// Held to restart, until its allocations have stopped.
		m.restarting = old != nil && old.restarting && t.job.Held && t.job.Running()
		if d.Promoted {
			m.attainedBase, m.executedBase, m.waitFrom = t.job.Attained, t.job.Executed, snap.Now
		}
		remembered[t.key] = m

		priority := t.job.Priority
		if res, ok := results[t.key]; ok {
			rec := record(state.Time, t.wantPriority(), res, d.Reason)
			if res.Err != nil {
				round.Failures++
				p.log.Warn("decision not applied", "job", t.key, "error", res.Err)
			}
			if res.Outcome == rewrite.Written {
				round.Writes++
				m.restarting = m.restarting || t.change.Action == enact.Migrate
				priority = t.wantPriority()
				p.log.Info("decision applied", "job", t.key, "action", t.change.Action, "priority", priority,
					"changes", strings.Join(res.Change, ", "), "reason", d.Reason)
			}
			round.Conflicts += res.Conflicts
			if res.Outcome != rewrite.Unchanged {
				recs := append(p.records[t.key], rec)
				if len(recs) > recordsPerJob {
					recs = recs[len(recs)-recordsPerJob:]
				}
				p.records[t.key] = recs
			}
		}
		entry := plannerapi.QueueEntry{
			Namespace: t.namespace, Job: t.id, Policy: t.job.Policy, State: sj.State.String(),
			Rank: d.Rank, Queue: d.Queue, Band: d.Band, Priority: priority, GPUs: sj.GPUs,
			Attained: t.job.Attained, Executed: t.job.Executed, Waiting: t.job.Waiting,
			Run: d.Run, GPUModel: d.GPUModel, Lane: d.Lane, CPUs: d.CPUs, MemoryGB: d.MemoryGB,
			Reason: reasonFor(t, p.cfg.Policy),
		}
		queue.Jobs = append(queue.Jobs, entry)
		placement := "started by the planner: its GPU model, lane and CPU/memory are set in the write that releases its hold"
		switch {
		case t.job.Running() && d.Run:
			placement = "runs: only its priority changes, since other changes would replace its allocations"
		case t.job.Running():
			placement = "preempted: held, so Nomad stops every allocation; it starts again when the policy runs it"
		case !d.Run:
			placement = "held: Nomad places nothing of it until the policy runs it"
		}
		explain[t.key] = &plannerapi.Explain{QueueEntry: entry, Placement: placement}
	}
	// Records of jobs no longer managed go with them.
	for key := range p.records {
		if explain[key] == nil {
			delete(p.records, key)
		}
	}
	p.memory = remembered
	p.queue = queue
	p.explain = explain
	_ = index
}

func reasonFor(t target, clusterPolicy string) string {
	reason := t.decision.Reason
	if len(t.job.Warnings) > 0 {
		reason += "; ignored " + strings.Join(t.job.Warnings, "; ")
	}
	if t.job.Policy != clusterPolicy && t.job.Policy != "" {
		reason += fmt.Sprintf(" (job asks for policy %q; the cluster runs %q)", t.job.Policy, clusterPolicy)
	}
	return reason
}

// Queue returns the latest queue in rank order.
func (p *Planner) Queue() plannerapi.Queue {
	p.mu.Lock()
	defer p.mu.Unlock()
	q := p.queue
	q.Jobs = append([]plannerapi.QueueEntry(nil), q.Jobs...)
	q.Leader = p.leader
	return q
}

// Explain returns what the planner knows of one job; job is namespace/id
// or an id, looked up in every namespace.
func (p *Planner) Explain(job string) (*plannerapi.Explain, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.explain[job]
	if e == nil && !strings.Contains(job, "/") {
		var keys []string
		for k := range p.explain {
			if strings.HasSuffix(k, "/"+job) {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		if len(keys) > 0 {
			job = keys[0]
			e = p.explain[job]
		}
	}
	if e == nil {
		return nil, false
	}
	out := *e
	out.History = append([]plannerapi.Record(nil), p.records[job]...)
	return &out, true
}

// Status describes this replica.
func (p *Planner) Status() plannerapi.Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := plannerapi.Status{ID: p.cfg.ID, Version: p.version, Leader: p.leader, LeaderAddr: p.leaderVal,
		NomadAddr: p.nomadAddr, Consul: p.consul != nil, Preemption: p.preempt,
		Warnings: append([]string(nil), p.warnings...), Rounds: p.rounds, Policy: p.policy.Name,
		Interval: p.cfg.Interval}
	if p.lastRound != nil {
		r := *p.lastRound
		s.LastRound = &r
	}
	return s
}

// record is what a write did to a job, for its decision history and the
// dashboard's timeline.
func record(at time.Time, priority int, res rewrite.Result, reason string) plannerapi.Record {
	rec := plannerapi.Record{Time: at, Priority: priority, Changes: res.Change, Outcome: string(res.Outcome),
		Conflicts: res.Conflicts, Reason: reason}
	if res.Err != nil {
		rec.Error = res.Err.Error()
	}
	return rec
}
