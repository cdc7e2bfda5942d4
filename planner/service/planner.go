// Package service is the live planner: each round it reads Nomad into a
// policy snapshot, runs the shared policies, and turns their decisions into
// job priorities and placement constraints that Nomad's own scheduler and
// preemption carry out. Only the replica holding the Consul lock writes.
//
// One job per file: round.go the round, changes.go its writes, term.go the
// leadership term, kv.go Consul KV, record.go what the API serves of past
// rounds, dashboard.go and ui.go the dashboard, run.go the loop and the
// lock, http.go the API.
package service

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/caravan-gpu/caravan/planner/cluster"
	"github.com/caravan-gpu/caravan/planner/consulx"
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
	sizes          *policy.SizeDistribution // of history, for 2D-Gittins (policy.Relearn)
	completions    int                      // jobs completed, as counted into history
	sizesLearned   int                      // completions when sizes was built
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
		writer:    &rewrite.Writer{Nomad: nomad, Limiter: rewrite.NewLimiter(cfg.MaxWrites, cfg.WriteBurst), StopWait: cfg.StopWait},
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
