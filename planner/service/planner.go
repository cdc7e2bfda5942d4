// Package service is the live planner: each round it reads Nomad into a
// policy snapshot, runs the shared policies, and turns their decisions into
// job priorities and placement constraints that Nomad's own scheduler and
// preemption carry out. Only the replica holding the Consul lock writes.
package service

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/caravan-gpu/caravan/planner/cluster"
	"github.com/caravan-gpu/caravan/planner/consulx"
	"github.com/caravan-gpu/caravan/planner/enact"
	"github.com/caravan-gpu/caravan/planner/nomadx"
	"github.com/caravan-gpu/caravan/planner/plannerapi"
	"github.com/caravan-gpu/caravan/planner/policy"
	"github.com/caravan-gpu/caravan/planner/profile"
	"github.com/caravan-gpu/caravan/planner/rewrite"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
)

// historyLimit bounds the completed jobs kept for 2D-Gittins and predict.
const historyLimit = 10000

// placementGrace is how long a job must have waited before the planner
// changes its placement.
const placementGrace = 3 * time.Second

// specReaders is how many job specs a round reads at once: a new leader
// reads every managed job's once, from the Nomad server's memory.
const specReaders = 32

// recordsPerJob bounds the decision history kept per job.
const recordsPerJob = 20

// Planner plans rounds. It is safe for concurrent use by the round loop and
// the HTTP handlers.
type Planner struct {
	cfg     *Settings
	nomad   nomadx.Client
	consul  consulx.Client // nil without Consul
	log     hclog.Logger
	policy  *policy.Policy
	writer  *rewrite.Writer
	metrics *metrics
	version string

	mu        sync.Mutex
	leader    bool
	leaderVal string
	// term is the context of this replica's leadership term: cancelled the
	// moment the lock is lost, so that the term's writes stop before
	// another replica can lead.
	term           context.Context
	endTerm        context.CancelFunc
	nomadOK        time.Time // the last time Nomad answered a round's reads
	startedAt      time.Time
	rounds         int64
	lastRound      *plannerapi.Round
	queue          plannerapi.Queue
	explain        map[string]*plannerapi.Explain
	records        map[string][]plannerapi.Record
	memory         map[string]*memory
	specs          map[string]*api.Job
	live           map[string]finishedJob // managed jobs seen last round, with their attained GPU-s so far
	arrivals       map[string]time.Time
	arrivalsStored int
	history        []finishedJob
	sizes          *policy.SizeDistribution // of history, for 2D-Gittins
	finished       *policy.History          // history indexed for predict
	profiles       map[string]profile.Profile
	preempt        plannerapi.Preemption
	warnings       []string
	result         *policy.Result
	plannedKey     uint64                     // the jobs and GPUs the last plan was made for
	plannedUntil   float64                    // when that plan's policy wants to plan again
	planned        map[string]policy.Decision // the last plan's decisions by job key
	plannedOrder   []string                   // and its rank order
	nomadAddr      string
	wake           chan struct{}
	dash           dashboard
}

// New returns a planner. consul may be nil.
func New(cfg *Settings, nomad nomadx.Client, consul consulx.Client, log hclog.Logger) (*Planner, error) {
	pol, _, err := newPolicy(cfg, nil)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = hclog.NewNullLogger()
	}
	p := &Planner{
		cfg: cfg, nomad: nomad, consul: consul, log: log, policy: pol,
		writer:    &rewrite.Writer{Nomad: nomad, Limiter: rewrite.NewLimiter(cfg.MaxWrites, cfg.WriteBurst)},
		metrics:   newMetrics(),
		explain:   map[string]*plannerapi.Explain{},
		records:   map[string][]plannerapi.Record{},
		memory:    map[string]*memory{},
		specs:     map[string]*api.Job{},
		arrivals:  map[string]time.Time{},
		profiles:  map[string]profile.Profile{},
		version:   "dev",
		startedAt: time.Now(),
	}
	if consul == nil {
		p.leader = true
	}
	p.metrics.leader.Set(boolFloat(p.leader))
	return p, nil
}

// SetNomadAddr records Nomad's address for the status API.
func (p *Planner) SetNomadAddr(addr string) {
	p.mu.Lock()
	p.nomadAddr = addr
	p.mu.Unlock()
}

// SetVersion records caravan's version for the status API.
func (p *Planner) SetVersion(v string) { p.version = v }

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

// nomadReachable says whether Nomad answered within NomadUnreachable, and
// for how long it has not.
func (p *Planner) nomadReachable(now time.Time) (bool, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	last := p.nomadOK
	if last.IsZero() {
		last = p.startedAt
	}
	silent := now.Sub(last)
	return silent <= p.cfg.NomadUnreachable, silent
}

// IsLeader reports whether this replica may write.
func (p *Planner) IsLeader() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.leader
}

// managed says whether a job is managed: it carries caravan.policy, or it is
// in one of the configured namespaces.
func (p *Planner) managed(namespace string, meta map[string]string) (string, bool) {
	if v, ok := meta[cluster.MetaPolicy]; ok {
		if v == "" || v == "true" || v == "default" {
			v = p.cfg.Policy
		}
		return v, true
	}
	for _, ns := range p.cfg.Namespaces {
		if ns == namespace || ns == "*" {
			return p.cfg.Policy, true
		}
	}
	return "", false
}

// CheckScheduler reads Nomad's scheduler configuration and records whether
// preemption can enforce the planner's priority bands.
func (p *Planner) CheckScheduler(ctx context.Context) (plannerapi.Preemption, error) {
	cfg, err := p.nomad.SchedulerConfig(ctx)
	if err != nil {
		return plannerapi.Preemption{}, fmt.Errorf("read Nomad's scheduler configuration: %w", err)
	}
	pre := plannerapi.Preemption{Checked: true, Batch: cfg.PreemptionConfig.BatchSchedulerEnabled,
		Service: cfg.PreemptionConfig.ServiceSchedulerEnabled, System: cfg.PreemptionConfig.SystemSchedulerEnabled}
	var warnings []string
	if !pre.Batch {
		warnings = append(warnings, "Nomad's preemption for batch jobs is off: the planner's priorities order the queue but cannot take GPUs from running batch jobs; run `caravan setup` to turn it on")
	}
	if !pre.Service {
		warnings = append(warnings, "Nomad's preemption for service jobs is off: the planner's priorities order the queue but cannot take GPUs from running service jobs; run `caravan setup` to turn it on")
	}
	p.mu.Lock()
	p.preempt, p.warnings = pre, warnings
	p.mu.Unlock()
	p.metrics.preemption.WithLabelValues("batch").Set(boolFloat(pre.Batch))
	p.metrics.preemption.WithLabelValues("service").Set(boolFloat(pre.Service))
	for _, w := range warnings {
		p.log.Warn(w)
	}
	return pre, nil
}

// LoadKV reads the throughput profiles and the completed-job history from
// Consul KV.
func (p *Planner) LoadKV(ctx context.Context) error {
	if p.consul == nil {
		return nil
	}
	profiles, err := LoadProfiles(ctx, p.consul)
	if err != nil {
		return err
	}
	var history []finishedJob
	if data, ok, err := p.consul.Get(ctx, consulx.HistoryKey); err != nil {
		return fmt.Errorf("consul KV %s: %w", consulx.HistoryKey, err)
	} else if ok {
		if err := json.Unmarshal(data, &history); err != nil {
			return fmt.Errorf("consul KV %s: %w", consulx.HistoryKey, err)
		}
	}
	pol, sizingWaits, err := newPolicy(p.cfg, profiles)
	if err != nil {
		return err
	}
	if sizingWaits {
		p.log.Warn("policy sizes CPU and memory with Synergy but no sensitivity profile is imported yet; sizing is off until `caravan profile import` adds one", "policy", p.cfg.Policy)
	}
	arrivals := map[string]time.Time{}
	if data, ok, err := p.consul.Get(ctx, consulx.ArrivalsKey); err != nil {
		return fmt.Errorf("consul KV %s: %w", consulx.ArrivalsKey, err)
	} else if ok {
		if err := json.Unmarshal(data, &arrivals); err != nil {
			return fmt.Errorf("consul KV %s: %w", consulx.ArrivalsKey, err)
		}
	}
	p.mu.Lock()
	for k, t := range arrivals {
		if old, ok := p.arrivals[k]; !ok || t.Before(old) {
			p.arrivals[k] = t
		}
	}
	p.policy = pol
	p.result, p.planned = nil, nil
	p.profiles = profiles
	// Keep sizes seen in this process that the leader has not stored yet.
	if len(history) >= len(p.history) {
		p.setHistory(history)
	}
	p.mu.Unlock()
	return nil
}

// LoadProfiles reads every profile under consulx.ProfilesPrefix.
func LoadProfiles(ctx context.Context, c consulx.Client) (map[string]profile.Profile, error) {
	kv, err := c.List(ctx, consulx.ProfilesPrefix)
	if err != nil {
		return nil, fmt.Errorf("consul KV %s: %w", consulx.ProfilesPrefix, err)
	}
	out := map[string]profile.Profile{}
	for key, data := range kv {
		var pr profile.Profile
		if err := json.Unmarshal(data, &pr); err != nil {
			return nil, fmt.Errorf("consul KV %s: %w", key, err)
		}
		out[pr.Name] = pr
	}
	return out, nil
}

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
	snap, index := toSnapshot(snapshotInput{state: state, memory: p.memory, profiles: p.profiles, sizes: p.sizes, finished: p.finished})
	result, replanned := p.plan(snap)
	p.mu.Unlock()
	if replanned {
		p.metrics.plans.Inc()
	}
	round.Planned = replanned
	round.Bound = result.Bound

	targets, phases := p.targets(state, index, result)
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
		// Carried out already: a promotion resets the job's service once.
		d.Job, d.Promoted = i, false
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
	p.sizes = policy.NewSizeDistribution(sizesOf(history))
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

// target is one job's planned state: its decision, and the write that
// carries it out when one is needed.
type target struct {
	key, namespace, id string
	decision           policy.Decision
	job                *cluster.Job
	change             *enact.Change
}

// want is the priority the job should have after this round.
func (t target) wantPriority() int {
	if t.change != nil {
		return t.change.Target.Priority
	}
	return t.job.Priority
}

// targets runs the change layer on the policy's decisions, and lists each
// job's decision in rank order with its change, if any.
func (p *Planner) targets(state *cluster.State, index []*cluster.Job, r *policy.Result) ([]target, enact.Phases) {
	inv := inventory(state)
	jobs := make([]enact.Job, len(index))
	for i, j := range index {
		// A job submitted without the hold may be placed by Nomad any
		// moment after it arrives, and a placement written then would
		// replace its new allocation.
		settled := state.Time.Sub(j.Submitted) >= placementGrace && j.Waiting >= placementGrace.Seconds()
		jobs[i] = enact.Job{Key: j.Key(), Namespace: j.Namespace, ID: j.ID, Priority: j.Priority,
			Live: j.Running(), Held: j.Held, Settled: settled, Finishing: j.Finishing(), UserModel: rewrite.UserModel(j.Spec),
			Tasks: cluster.GPUTasks(j.Spec), Model: j.LiveModel()}
	}
	phases := enact.Plan(inv, jobs, r.Decisions)
	byJob := make(map[int]*enact.Change, phases.Len())
	for _, phase := range [][]enact.Change{phases.Stops, phases.Rest} {
		for k := range phase {
			byJob[phase[k].Job] = &phase[k]
		}
	}
	out := make([]target, 0, len(r.Order))
	for _, i := range r.Order {
		j := index[i]
		out = append(out, target{key: j.Key(), namespace: j.Namespace, id: j.ID,
			decision: r.Decisions[i], job: j, change: byJob[i]})
	}
	return out, phases
}

// released lists the jobs the planner changed but no longer manages, each
// with the change that gives it back to its user.
func (p *Planner) released(stubs []*api.JobListStub) []enact.Change {
	var out []enact.Change
	for _, s := range stubs {
		if s.Stop || s.Status == "dead" || !cluster.PlannerMeta(s.Meta) {
			continue
		}
		if _, ok := p.managed(orDefault(s.Namespace), s.Meta); ok && cluster.Manageable(s) {
			continue
		}
		out = append(out, enact.Give(cluster.Key(orDefault(s.Namespace), s.ID)))
	}
	return out
}

// inventory is what the change layer needs to know of the cluster.
func inventory(state *cluster.State) enact.Inventory {
	inv := enact.Inventory{Offers: map[string]enact.Offer{}, Smallest: map[string]enact.Capacity{}}
	smaller := func(key string, c enact.Capacity) {
		old, ok := inv.Smallest[key]
		if !ok || c.CPUs < old.CPUs {
			old.CPUs = c.CPUs
		}
		if !ok || c.MemoryGB < old.MemoryGB {
			old.MemoryGB = c.MemoryGB
		}
		inv.Smallest[key] = old
	}
	for _, n := range state.Nodes {
		inv.NodeIDs = append(inv.NodeIDs, n.ID)
		if len(n.GPUs) == 0 {
			continue
		}
		c := enact.Capacity{CPUs: float64(n.CPUCores), MemoryGB: float64(n.MemoryMB) / 1024}
		smaller("", c)
		for _, g := range n.GPUs {
			o := inv.Offers[g.Model]
			o.Lanes, o.Whole = o.Lanes || g.Lanes(), o.Whole || !g.Lanes()
			o.LanesTyped = o.LanesTyped || g.Type == cluster.LaneType
			inv.Offers[g.Model] = o
			smaller(g.Model, c)
		}
		if n.CPUCores > 0 && inv.MHzPerCore == 0 {
			inv.MHzPerCore = float64(n.CPUMHz) / float64(n.CPUCores)
		}
	}
	return inv
}

// apply writes the changes, one phase after the other (enact.Phases
// decides the order), with a few writers in parallel under the shared rate
// limit.
func (p *Planner) apply(ctx context.Context, phases enact.Phases, specs map[string]*api.Job) map[string]rewrite.Result {
	results := make(map[string]rewrite.Result, phases.Len())
	actions := make(map[string]enact.Action, phases.Len())
	writes := make([][]rewrite.Write, 0, 2)
	for _, phase := range [][]enact.Change{phases.Stops, phases.Rest} {
		ws := make([]rewrite.Write, 0, len(phase))
		for _, c := range phase {
			// The spec this round read saves a read per job.
			ws = append(ws, rewrite.Write{Key: c.Key, Spec: specs[c.Key], Target: c.Target})
			actions[c.Key] = c.Action
		}
		writes = append(writes, ws)
	}
	var mu sync.Mutex
	p.writer.ApplyPhases(ctx, writes, p.cfg.Writers, func(w rewrite.Write, res rewrite.Result) {
		p.metrics.writes.WithLabelValues(string(res.Outcome)).Inc()
		p.metrics.conflicts.Add(float64(res.Conflicts))
		if res.Outcome == rewrite.Written {
			p.metrics.actions.WithLabelValues(string(actions[w.Key])).Inc()
		}
		mu.Lock()
		results[w.Key] = res
		mu.Unlock()
	})
	return results
}

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
			m.attainedBase, m.executedBase, m.waitFrom = old.attainedBase, old.executedBase, old.waitFrom
		}
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
		Warnings: append([]string(nil), p.warnings...), Rounds: p.rounds, Policy: p.policy.Name}
	if p.lastRound != nil {
		r := *p.lastRound
		s.LastRound = &r
	}
	return s
}

func countState(s *policy.Snapshot, st policy.JobState) int {
	n := 0
	for _, j := range s.Jobs {
		if j.State == st {
			n++
		}
	}
	return n
}

func isNotFound(err error) bool {
	return err != nil && strings.Contains(err.Error(), nomadx.ErrNotFound.Error())
}

func orDefault(ns string) string {
	if ns == "" {
		return "default"
	}
	return ns
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func unix(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return float64(t.UnixNano()) / 1e9
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
