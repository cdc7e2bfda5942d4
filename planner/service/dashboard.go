package service

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/caravan-gpu/caravan/planner/cluster"
	"github.com/caravan-gpu/caravan/planner/enact"
	"github.com/caravan-gpu/caravan/planner/plannerapi"
	"github.com/caravan-gpu/caravan/planner/plot"
	"github.com/caravan-gpu/caravan/planner/policy"
	"github.com/caravan-gpu/caravan/planner/rewrite"
	"github.com/hashicorp/nomad/api"
)

// Bounds on what the dashboard keeps in memory.
const (
	// decisionLimit is how many recent writes the decision timeline keeps.
	decisionLimit = 500
	// jctLimit is how many completion times the live JCT CDF keeps.
	jctLimit = 10000
	// utilLimit is how many utilisation changes the live plot keeps.
	utilLimit = 20000
	// statsTTL is how long the GPU memory read from the nodes is reused, so
	// that several open dashboards do not each ask every node.
	statsTTL = 2 * time.Second
	// statsTimeout bounds the reads of the nodes' statistics.
	statsTimeout = 2 * time.Second
	// statsReaders is how many nodes' statistics are read at once: each
	// read is forwarded by a Nomad server to the node's client.
	statsReaders = 16
)

// dashboard is what the planner keeps for the dashboard beyond its queue:
// the GPU map, the decision timeline and the live results. Guarded by the
// planner's mu.
type dashboard struct {
	gpus plannerapi.GPUMap
	// decisions holds recent writes, oldest first, at most
	// 2 × decisionLimit before it is cut back.
	decisions []plannerapi.Decision
	// written is what the planner last wrote to each job, to tell when a
	// user's edit overrode it.
	written   map[string]writeMark
	jcts      []float64
	util      []utilSample
	submitted map[string]time.Time // managed jobs seen last round

	statsMu  sync.Mutex // serialises the reads of node statistics
	statsAt  time.Time
	statsUse map[string]uint64 // node ID/instance → MiB in use
	statsErr string
}

// writeMark is the job's index and priority after the planner's write.
type writeMark struct {
	index    uint64
	priority int
}

// utilSample says that from T (seconds since the planner started) on,
// Busy of GPUs GPUs were held.
type utilSample struct {
	T, Busy float64
	GPUs    int
}

// busyGPUs counts the physical GPUs and how many of them allocations hold,
// a lane counting as its share of its GPU however many of its slots are
// taken.
func busyGPUs(lanes []cluster.Lane) (int, float64) {
	gpus := map[string]bool{}
	held := map[string]float64{}
	for _, l := range lanes {
		gpu := l.NodeID + "/" + l.GPU
		gpus[gpu] = true
		if l.Job != "" {
			held[gpu+"/"+l.Lane] = l.Share
		}
	}
	busy := 0.0
	for _, share := range held {
		busy += share
	}
	return len(gpus), math.Min(busy, float64(len(gpus)))
}

// noteGPUs keeps the round's GPU map and a utilisation sample when it
// changed.
func (p *Planner) noteGPUs(now time.Time, lanes []cluster.Lane) {
	gpus, busy := busyGPUs(lanes)
	p.mu.Lock()
	defer p.mu.Unlock()
	d := &p.dash
	d.gpus = plannerapi.GPUMap{Time: now, Lanes: lanes, GPUs: gpus, Busy: busy}
	t := now.Sub(p.startedAt).Seconds()
	if n := len(d.util); n == 0 || d.util[n-1].Busy != busy || d.util[n-1].GPUs != gpus {
		d.util = append(d.util, utilSample{T: t, Busy: busy, GPUs: gpus})
		if len(d.util) > 2*utilLimit {
			d.util = slices.Clone(d.util[len(d.util)-utilLimit:])
		}
	}
}

// noteCompletion keeps a completed job's JCT for the live CDF.
func (p *Planner) noteCompletion(jct float64) {
	if !(jct > 0) {
		return
	}
	d := &p.dash
	d.jcts = append(d.jcts, jct)
	if len(d.jcts) > 2*jctLimit {
		d.jcts = slices.Clone(d.jcts[len(d.jcts)-jctLimit:])
	}
}

// finishedAt is when the job's last completed allocation finished.
func finishedAt(key string, allocs []*api.AllocationListStub) time.Time {
	var last time.Time
	for _, a := range allocs {
		if cluster.Key(orDefault(a.Namespace), a.JobID) != key || a.ClientStatus != "complete" {
			continue
		}
		for _, ts := range a.TaskStates {
			if ts != nil && ts.FinishedAt.After(last) {
				last = ts.FinishedAt
			}
		}
	}
	return last
}

// noteOverrides finds the jobs whose spec changed since the planner wrote
// it and no longer carries the priority it wrote: a user registered the
// job again over the planner's write. Each goes on the timeline once.
func (p *Planner) noteOverrides(now time.Time, specs map[string]*api.Job) {
	p.mu.Lock()
	defer p.mu.Unlock()
	d := &p.dash
	for key, mark := range d.written {
		spec := specs[key]
		if spec == nil {
			delete(d.written, key)
			continue
		}
		if spec.JobModifyIndex == nil || *spec.JobModifyIndex == mark.index {
			continue
		}
		delete(d.written, key)
		priority := 0
		if spec.Priority != nil {
			priority = *spec.Priority
		}
		if priority == mark.priority {
			continue
		}
		ns, id, _ := strings.Cut(key, "/")
		p.addDecision(plannerapi.Decision{Namespace: ns, Job: id,
			Record: plannerapi.Record{Time: now, Priority: priority, Outcome: "overridden",
				Reason: "the planner will write its decision again next round"},
			Override: fmt.Sprintf("a user registered the job again: priority %d written by the planner is now %d", mark.priority, priority)})
	}
}

// noteWrites puts the round's writes on the timeline. Called with p.mu
// held.
func (p *Planner) noteWrites(now time.Time, changes []enact.Change, results map[string]rewrite.Result, reasons map[string]string) {
	if len(results) == 0 {
		return
	}
	d := &p.dash
	if d.written == nil {
		d.written = map[string]writeMark{}
	}
	for _, c := range changes {
		res, ok := results[c.Key]
		if !ok || res.Outcome == rewrite.Unchanged {
			continue
		}
		ns, id, _ := strings.Cut(c.Key, "/")
		reason, ok := reasons[c.Key]
		if !ok {
			reason = "no longer managed: the planner gives the job back as its user wrote it"
		}
		dec := plannerapi.Decision{Namespace: ns, Job: id, Action: string(c.Action),
			Record: record(now, c.Target.Priority, res, reason)}
		var why []string
		if res.Conflicts > 0 {
			why = append(why, fmt.Sprintf("%d user edit(s) landed between the planner's read and its write; it read the job again and wrote on top of them", res.Conflicts))
		}
		if res.Restored > 0 {
			why = append(why, fmt.Sprintf("the write replaced %d concurrent user edit(s), written back with the planner's change on top", res.Restored))
		}
		if res.Outcome == rewrite.Skipped {
			why = append(why, "the job was stopped or removed before the write")
		}
		dec.Override = strings.Join(why, "; ")
		p.addDecision(dec)
		if res.Outcome == rewrite.Written && res.Job != nil && res.Job.JobModifyIndex != nil {
			d.written[c.Key] = writeMark{index: *res.Job.JobModifyIndex, priority: c.Target.Priority}
		}
	}
}

// addDecision appends to the bounded timeline. Called with p.mu held.
func (p *Planner) addDecision(dec plannerapi.Decision) {
	d := &p.dash
	d.decisions = append(d.decisions, dec)
	if len(d.decisions) > 2*decisionLimit {
		d.decisions = slices.Clone(d.decisions[len(d.decisions)-decisionLimit:])
	}
}

// Decisions returns up to limit recent writes, newest first.
func (p *Planner) Decisions(limit int) plannerapi.Decisions {
	if limit <= 0 || limit > decisionLimit {
		limit = decisionLimit
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	all := p.dash.decisions
	out := make([]plannerapi.Decision, 0, min(limit, len(all)))
	for i := len(all) - 1; i >= 0 && len(out) < limit; i-- {
		out = append(out, all[i])
	}
	return plannerapi.Decisions{Decisions: out}
}

// GPUs returns the latest GPU map with the GPU memory each instance's
// processes use, read from the nodes at most every statsTTL.
func (p *Planner) GPUs(ctx context.Context) plannerapi.GPUMap {
	used, statsErr := p.memoryInUse(ctx)
	p.mu.Lock()
	m := p.dash.gpus
	p.mu.Unlock()
	m.Lanes = slices.Clone(m.Lanes)
	for i := range m.Lanes {
		if v, ok := used[m.Lanes[i].NodeID+"/"+m.Lanes[i].Instance]; ok {
			m.Lanes[i].MemoryUsedMiB = &v
		}
	}
	m.StatsError = statsErr
	return m
}

// memoryInUse reads the device plugins' statistics of every node with
// GPUs: the summary of each instance is its memory in use.
func (p *Planner) memoryInUse(ctx context.Context) (map[string]uint64, string) {
	d := &p.dash
	d.statsMu.Lock()
	defer d.statsMu.Unlock()
	if time.Since(d.statsAt) < statsTTL {
		return d.statsUse, d.statsErr
	}
	p.mu.Lock()
	nodes := map[string]bool{}
	for _, l := range p.dash.gpus.Lanes {
		nodes[l.NodeID] = true
	}
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, statsTimeout)
	defer cancel()
	used := map[string]uint64{}
	var errs []string
	var mu sync.Mutex
	var wg sync.WaitGroup
	slots := make(chan struct{}, statsReaders)
	for id := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			slots <- struct{}{}
			defer func() { <-slots }()
			stats, err := p.nomad.NodeStats(ctx, id)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Sprintf("node %s: %v", id, err))
				return
			}
			for _, g := range stats.DeviceStats {
				for inst, s := range g.InstanceStats {
					if s != nil && s.Summary != nil && s.Summary.IntNumeratorVal != nil && *s.Summary.IntNumeratorVal >= 0 {
						used[id+"/"+inst] = uint64(*s.Summary.IntNumeratorVal)
					}
				}
			}
		}()
	}
	wg.Wait()
	sort.Strings(errs)
	d.statsAt, d.statsUse, d.statsErr = time.Now(), used, strings.Join(errs, "; ")
	return used, d.statsErr
}

// liveRun is the live cluster as a plot run: completions and utilisation
// since the planner started, with a last point now.
func (p *Planner) liveRun(now time.Time) plot.Run {
	p.mu.Lock()
	defer p.mu.Unlock()
	d := &p.dash
	run := plot.Run{Name: "live cluster", GPUs: d.gpus.GPUs, JCT: slices.Clone(d.jcts)}
	run.Util = make([]plot.UtilPoint, 0, len(d.util)+1)
	for _, u := range d.util {
		run.Util = append(run.Util, plot.UtilPoint{T: u.T, Busy: u.Busy})
	}
	if n := len(d.util); n > 0 {
		run.Util = append(run.Util, plot.UtilPoint{T: max(now.Sub(p.startedAt).Seconds(), d.util[n-1].T), Busy: d.util[n-1].Busy})
	}
	return run
}

// Results summarises the live cluster since the planner started.
func (p *Planner) Results(now time.Time) plannerapi.Results {
	p.mu.Lock()
	defer p.mu.Unlock()
	d := &p.dash
	r := plannerapi.Results{Since: p.startedAt, Completed: len(d.jcts), GPUs: d.gpus.GPUs, Busy: d.gpus.Busy}
	if len(d.jcts) > 0 {
		sorted := slices.Clone(d.jcts)
		slices.Sort(sorted)
		sum := 0.0
		for _, v := range sorted {
			sum += v
		}
		r.MeanJCT = sum / float64(len(sorted))
		r.MedianJCT = sorted[len(sorted)/2]
		if len(sorted)%2 == 0 {
			r.MedianJCT = (sorted[len(sorted)/2-1] + sorted[len(sorted)/2]) / 2
		}
	}
	// Busy GPU-seconds over GPU-seconds, each step weighed by its own GPU
	// count.
	end := now.Sub(p.startedAt).Seconds()
	var busy, total float64
	for i, u := range d.util {
		next := end
		if i+1 < len(d.util) {
			next = d.util[i+1].T
		}
		span := math.Max(next-u.T, 0)
		busy += u.Busy * span
		total += float64(u.GPUs) * span
	}
	if total > 0 {
		r.Utilization = busy / total
	}
	return r
}

// QueueQuery picks part of the queue: the jobs whose key (namespace/ID) or
// group holds Filter in any case, from Offset on, at most Limit of them
// (0: no limit).
type QueueQuery struct {
	Offset, Limit int
	Filter        string
}

// QueuePage returns the jobs of the latest queue that q picks, in rank
// order, with how many match and how many of those run. The zero query
// returns the whole queue, as Queue does.
func (p *Planner) QueuePage(q QueueQuery) plannerapi.Queue {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := plannerapi.Queue{Leader: p.leader, Time: p.queue.Time, Offset: q.Offset, Limit: q.Limit}
	filter := strings.ToLower(q.Filter)
	for _, j := range p.queue.Jobs {
		key := cluster.Key(j.Namespace, j.Job)
		j.Group = p.live[key].Group
		if filter != "" && !strings.Contains(strings.ToLower(key), filter) && !strings.Contains(strings.ToLower(j.Group), filter) {
			continue
		}
		if out.Total >= q.Offset && (q.Limit == 0 || len(out.Jobs) < q.Limit) {
			out.Jobs = append(out.Jobs, j)
		}
		out.Total++
		if j.State == policy.Running.String() {
			out.Running++
		}
	}
	return out
}

// jobGroup is the group of a job the last round managed, "" for another.
func (p *Planner) jobGroup(key string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.live[key].Group
}
