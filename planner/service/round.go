package service

// One planning round: read Nomad, plan when the simulator would, note
// arrivals and completions.

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"sort"
	"sync"
	"time"

	"github.com/caravan-gpu/caravan/planner/cluster"
	"github.com/caravan-gpu/caravan/planner/consulx"
	"github.com/caravan-gpu/caravan/planner/plannerapi"
	"github.com/caravan-gpu/caravan/planner/policy"
	"github.com/caravan-gpu/caravan/planner/rewrite"
	"github.com/hashicorp/nomad/api"
)

// Round runs one planning round: read, plan and, on the leader, write.
func (p *Planner) Round(ctx context.Context) (plannerapi.Round, error) {
	start := time.Now()
	round := plannerapi.Round{Started: start}
	err := p.round(ctx, &round)
	round.Duration = time.Since(start)
	if err != nil {
		round.Error = err.Error()
	}
	p.metrics.rounds.Inc()
	p.metrics.roundSeconds.Observe(round.Duration.Seconds())
	p.mu.Lock()
	p.rounds++
	p.lastRound = &round
	p.mu.Unlock()
	return round, err
}

func (p *Planner) round(ctx context.Context, round *plannerapi.Round) error {
	now := time.Now()
	nodes, err := p.nomad.Nodes(ctx)
	if err != nil {
		return fmt.Errorf("list nodes: %w", err)
	}
	stubs, err := p.nomad.Jobs(ctx)
	if err != nil {
		return fmt.Errorf("list jobs: %w", err)
	}
	allocs, err := p.nomad.Allocations(ctx)
	if err != nil {
		return fmt.Errorf("list allocations: %w", err)
	}
	p.noteGPUs(now, cluster.Lanes(nodes, allocs))
	specs, err := p.fetchSpecs(ctx, stubs)
	if err != nil {
		return err
	}
	p.noteOverrides(now, specs)
	p.mu.Lock()
	p.nomadOK = time.Now()
	p.mu.Unlock()
	p.mu.Lock()
	arrivals := p.arrivals
	p.mu.Unlock()
	state := cluster.Build(cluster.Inputs{Now: now, Nodes: nodes, Jobs: stubs, Allocs: allocs, Specs: specs, Arrivals: arrivals}, p.managed)
	leader := p.IsLeader()
	p.noteArrivals(ctx, state, leader)
	p.noteCompletions(ctx, state, stubs, allocs, leader)

	p.mu.Lock()
	snap, index := toSnapshot(snapshotInput{state: state, memory: p.memory, profiles: p.profiles, sizes: p.sizes, finished: p.finished, coreMHz: p.cfg.CoreMHz})
	result, replanned := p.plan(snap)
	restarting := map[string]bool{}
	for key, m := range p.memory {
		if m.restarting {
			restarting[key] = true
		}
	}
	p.mu.Unlock()
	if replanned {
		p.metrics.plans.Inc()
	}
	round.Planned = replanned
	round.Bound = result.Bound

	targets, phases := p.targets(state, index, result, restarting)
	phases.Rest = append(phases.Rest, p.released(stubs)...)
	round.Jobs = len(index)
	p.metrics.managed.WithLabelValues("running").Set(float64(countState(snap, policy.Running)))
	p.metrics.managed.WithLabelValues("pending").Set(float64(countState(snap, policy.Pending)))

	var results map[string]rewrite.Result
	if wctx, leads := p.writeContext(ctx); leads && leader && !p.cfg.DryRun {
		results = p.apply(wctx, phases, specs)
		p.keepWritten(results)
	}
	p.remember(state, snap, index, result, targets, results, round, leader)
	reasons := make(map[string]string, len(targets))
	for _, t := range targets {
		reasons[t.key] = reasonFor(t, p.cfg.Policy)
	}
	p.mu.Lock()
	p.noteWrites(state.Time, phases.All(), results, reasons)
	p.mu.Unlock()
	return nil
}

// plan runs the policy when the simulator would: when a job arrived or
// completed, when GPUs came or went, or when the last plan's policy asked to
// plan again (a job crossing a queue cut, a starving job). Between those
// moments it carries out the last plan's decisions again, so that a policy
// whose order drifts with attained service (2D-Gittins) does not flip
// between jobs at every Nomad event the way it never does in the
// simulator. Called with p.mu held.
func (p *Planner) plan(snap *policy.Snapshot) (*policy.Result, bool) {
	key := planKey(snap)
	if p.planned != nil && key == p.plannedKey && snap.Now < p.plannedUntil {
		if r, ok := p.lastPlan(snap); ok {
			return r, false
		}
	}
	p.result = p.policy.Plan(snap, p.result)
	r := p.result
	p.plannedKey, p.plannedUntil = key, snap.Now+r.Wake
	p.planned = make(map[string]policy.Decision, len(r.Decisions))
	p.plannedOrder = p.plannedOrder[:0]
	for _, i := range r.Order {
		id := snap.Jobs[i].ID
		p.planned[id] = r.Decisions[i]
		p.plannedOrder = append(p.plannedOrder, id)
	}
	return r, true
}

// lastPlan returns the last plan's decisions for the jobs of snap, which are
// the same jobs.
func (p *Planner) lastPlan(snap *policy.Snapshot) (*policy.Result, bool) {
	at := make(map[string]int, len(snap.Jobs))
	for i := range snap.Jobs {
		at[snap.Jobs[i].ID] = i
	}
	r := &policy.Result{Decisions: make([]policy.Decision, len(snap.Jobs)), Order: make([]int, 0, len(snap.Jobs)), Wake: p.plannedUntil - snap.Now}
	for _, id := range p.plannedOrder {
		i, ok := at[id]
		if !ok {
			return nil, false
		}
		d := p.planned[id]
		// Carried out already: a promotion resets the job's service once,
		// and a renewal is when the job took its GPUs again, once.
		d.Job, d.Promoted, d.Renewed = i, false, false
		r.Decisions[i] = d
		r.Order = append(r.Order, i)
	}
	return r, len(r.Order) == len(snap.Jobs)
}

// planKey identifies the jobs and the GPUs a plan is for.
func planKey(snap *policy.Snapshot) uint64 {
	h := fnv.New64a()
	ids := make([]string, 0, len(snap.Jobs))
	for i := range snap.Jobs {
		ids = append(ids, snap.Jobs[i].ID)
	}
	sort.Strings(ids)
	for _, id := range ids {
		h.Write([]byte(id))
		h.Write([]byte{0})
	}
	for _, n := range snap.Nodes {
		fmt.Fprintf(h, "%s|%t|", n.ID, n.Healthy)
		for _, g := range n.GPUs {
			fmt.Fprintf(h, "%s:%d:%t,", g.Model, g.LaneCount(), g.Healthy)
		}
	}
	return h.Sum64()
}

// fetchSpecs reads the full spec of every managed job whose spec changed
// since the last round; unchanged specs come from the cache.
func (p *Planner) fetchSpecs(ctx context.Context, stubs []*api.JobListStub) (map[string]*api.Job, error) {
	p.mu.Lock()
	cached := p.specs
	p.mu.Unlock()
	specs := map[string]*api.Job{}
	type read struct{ key, ns, id string }
	var reads []read
	for _, s := range stubs {
		ns := s.Namespace
		if ns == "" {
			ns = "default"
		}
		if _, ok := p.managed(ns, s.Meta); !ok || s.Stop || s.Status == "dead" {
			continue
		}
		key := cluster.Key(ns, s.ID)
		if c := cached[key]; c != nil && c.JobModifyIndex != nil && *c.JobModifyIndex == s.JobModifyIndex {
			specs[key] = c
			continue
		}
		reads = append(reads, read{key, ns, s.ID})
	}
	// Reads are served from the Nomad server's memory, not Raft; a few in
	// parallel take a round after many changes from seconds to a fraction.
	var mu sync.Mutex
	var firstErr error
	work := make(chan read)
	var wg sync.WaitGroup
	for w := 0; w < min(specReaders, len(reads)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range work {
				job, err := p.nomad.Job(ctx, r.ns, r.id)
				mu.Lock()
				switch {
				case err == nil:
					specs[r.key] = job
				case !isNotFound(err) && firstErr == nil:
					firstErr = fmt.Errorf("read job %s: %w", r.key, err)
				}
				mu.Unlock()
			}
		}()
	}
	for _, r := range reads {
		work <- r
	}
	close(work)
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	p.mu.Lock()
	p.specs = specs
	p.mu.Unlock()
	return specs, nil
}

// keepWritten caches the specs this round wrote, at their new
// JobModifyIndex, so that the next round does not read its own writes back.
func (p *Planner) keepWritten(results map[string]rewrite.Result) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for key, r := range results {
		if r.Job != nil && p.specs != nil {
			p.specs[key] = r.Job
		}
	}
}

// noteArrivals keeps each managed job's earliest known submission time, and
// on the leader stores them in Consul so that a new leader orders jobs the
// same way.
func (p *Planner) noteArrivals(ctx context.Context, state *cluster.State, leader bool) {
	next := make(map[string]time.Time, len(state.Jobs))
	for _, j := range state.Jobs {
		next[j.Key()] = j.Submitted
	}
	p.mu.Lock()
	changed := len(next) != p.arrivalsStored
	for k, t := range next {
		if old, ok := p.arrivals[k]; !ok || !old.Equal(t) {
			changed = true
		}
	}
	p.arrivals = next
	if changed && leader {
		p.arrivalsStored = len(next)
	}
	p.mu.Unlock()
	if !changed || !leader || p.consul == nil {
		return
	}
	data, _ := json.Marshal(next)
	if err := p.consul.Put(ctx, consulx.ArrivalsKey, data); err != nil {
		p.log.Warn("store job arrivals in Consul", "error", err)
	}
}

// noteCompletions adds the jobs that completed since the last round, with
// their attained GPU-seconds, group and GPU count, to the history that
// 2D-Gittins and predict learn from.
func (p *Planner) noteCompletions(ctx context.Context, state *cluster.State, stubs []*api.JobListStub, allocs []*api.AllocationListStub, leader bool) {
	status := map[string]string{}
	for _, s := range stubs {
		ns := s.Namespace
		if ns == "" {
			ns = "default"
		}
		status[cluster.Key(ns, s.ID)] = s.Status
	}
	current := map[string]finishedJob{}
	submitted := map[string]time.Time{}
	for _, j := range state.Jobs {
		current[j.Key()] = finishedJob{GPUSeconds: j.Attained, Group: j.Group, GPUs: j.GPUs}
		submitted[j.Key()] = j.Submitted
	}
	p.mu.Lock()
	var done []finishedJob
	for key, seen := range p.live {
		if _, still := current[key]; still {
			continue
		}
		// Gone from the managed set: count it only if it finished
		// successfully, not if it was stopped or purged.
		if status[key] == "dead" && completedOK(key, allocs) {
			done = append(done, seen)
			if sub := p.dash.submitted[key]; !sub.IsZero() {
				finish := finishedAt(key, allocs)
				if finish.IsZero() {
					finish = state.Time
				}
				p.noteCompletion(finish.Sub(sub).Seconds())
			}
		}
	}
	p.live = current
	p.dash.submitted = submitted
	if len(done) > 0 {
		p.completions += len(done)
		history := append(p.history, done...)
		if len(history) > historyLimit {
			history = history[len(history)-historyLimit:]
		}
		p.setHistory(history)
	}
	history := append([]finishedJob(nil), p.history...)
	p.mu.Unlock()
	if len(done) == 0 || !leader || p.consul == nil {
		return
	}
	data, _ := json.Marshal(history)
	if err := p.consul.Put(ctx, consulx.HistoryKey, data); err != nil {
		p.log.Warn("store completed-job history in Consul", "error", err)
	}
}

// setHistory replaces the history and what the policies read of it; the
// caller holds p.mu. The history is replaced, never changed in place, so a
// snapshot keeps the one it was built with.
func (p *Planner) setHistory(history []finishedJob) {
	p.history = history
	p.completions = max(p.completions, len(history))
	if policy.Relearn(p.sizesLearned, p.completions) {
		p.sizes = policy.NewSizeDistribution(sizesOf(history))
		p.sizesLearned = p.completions
	}
	p.finished = historyOf(history)
}

func completedOK(key string, allocs []*api.AllocationListStub) bool {
	for _, a := range allocs {
		if cluster.Key(orDefault(a.Namespace), a.JobID) == key && a.ClientStatus == "complete" {
			return true
		}
	}
	return false
}
