package service

// From a round's decisions to Nomad writes: enact's phases, carried out by
// the writer.

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/caravan-gpu/caravan/planner/cluster"
	"github.com/caravan-gpu/caravan/planner/enact"
	"github.com/caravan-gpu/caravan/planner/policy"
	"github.com/caravan-gpu/caravan/planner/rewrite"
	"github.com/hashicorp/nomad/api"
)

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

// settled says Nomad is not about to place job j, so that a placement
// written now replaces no allocation it is making. A job submitted without
// the hold may be placed any moment after it arrives, and one the planner
// has just released (or a user has just updated) is being placed now: a
// gang's placement written then pinned it to the two nodes that its first
// allocations had taken, and its other half never placed.
func settled(now time.Time, j *cluster.Job) bool {
	return now.Sub(j.Submitted) >= placementGrace && j.Waiting >= placementGrace.Seconds() &&
		now.Sub(j.Modified) >= placementGrace
}

// targets runs the change layer on the policy's decisions, and lists each
// job's decision in rank order with its change, if any.
// restarting lists the jobs held to restart (see enact.Job.Restarting).
func (p *Planner) targets(state *cluster.State, index []*cluster.Job, r *policy.Result, restarting map[string]bool) ([]target, enact.Phases) {
	inv := inventory(state, p.cfg.CoreMHz)
	jobs := make([]enact.Job, len(index))
	for i, j := range index {
		cpu, _, mem := cluster.GPUTaskResources(j.Spec)
		live := j.Running()
		jobs[i] = enact.Job{Key: j.Key(), Namespace: j.Namespace, ID: j.ID, Priority: j.Priority,
			Live: live, Held: j.Held, Settled: settled(state.Time, j), Finishing: j.Finishing(), UserModel: rewrite.UserModel(j.Spec),
			Tasks: cluster.GPUTasks(j.Spec), Model: j.LiveModel(), TaskCPU: cpu, TaskMemoryMB: mem, Nodes: liveNodes(j),
			Restarting: live && j.Held && restarting[j.Key()]}
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

// liveNodes lists the nodes of a job's live allocations, each once.
func liveNodes(j *cluster.Job) []string {
	var nodes []string
	for _, a := range j.Allocs {
		if a.Live() && a.NodeID != "" && !slices.Contains(nodes, a.NodeID) {
			nodes = append(nodes, a.NodeID)
		}
	}
	return nodes
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

// inventory is what the change layer needs to know of the cluster; coreMHz
// is planning.core_mhz.
func inventory(state *cluster.State, coreMHz float64) enact.Inventory {
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
		inv.Devices = append(inv.Devices, nodeDevices(n))
		if len(n.GPUs) == 0 {
			continue
		}
		c := enact.Capacity{CPUs: nodeCores(n, coreMHz), MemoryGB: float64(n.MemoryMB) / 1024}
		smaller("", c)
		for _, g := range n.GPUs {
			o := inv.Offers[g.Model]
			o.Lanes, o.Whole = o.Lanes || g.Lanes(), o.Whole || !g.Lanes()
			o.LanesTyped = o.LanesTyped || g.Type == cluster.LaneType
			inv.Offers[g.Model] = o
			smaller(g.Model, c)
		}
	}
	inv.MHzPerCore = mhzPerCore(state.Nodes, coreMHz)
	return inv
}

// mhzPerCore converts between the sizer's cores and Nomad's MHz:
// planning.core_mhz when set, else that of the first GPU node that
// reports its cores.
func mhzPerCore(nodes []*cluster.Node, coreMHz float64) float64 {
	if coreMHz > 0 {
		return coreMHz
	}
	for _, n := range nodes {
		if len(n.GPUs) > 0 && n.CPUCores > 0 {
			return float64(n.CPUMHz) / float64(n.CPUCores)
		}
	}
	return 0
}

// nodeDevices is, per physical GPU of the node in the Snapshot's order
// (toSnapshot), its device instance IDs, sorted.
func nodeDevices(n *cluster.Node) [][]string {
	var devs [][]string
	for _, g := range n.GPUs {
		gpus, at := physicalGPUs(g)
		base := len(devs)
		devs = append(devs, make([][]string, len(gpus))...)
		for id, gl := range at {
			devs[base+gl.gpu] = append(devs[base+gl.gpu], id)
		}
	}
	for _, ids := range devs {
		slices.Sort(ids)
	}
	return devs
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
	stats := p.writer.ApplyPhases(ctx, writes, p.cfg.Writers, func(w rewrite.Write, res rewrite.Result) {
		p.metrics.writes.WithLabelValues(string(res.Outcome)).Inc()
		p.metrics.conflicts.Add(float64(res.Conflicts))
		if res.Outcome == rewrite.Written {
			p.metrics.actions.WithLabelValues(string(actions[w.Key])).Inc()
		}
		mu.Lock()
		results[w.Key] = res
		mu.Unlock()
	})
	if stats.StopWait > 0 {
		p.metrics.stopWait.Observe(stats.StopWait.Seconds())
	}
	if stats.StopsPending > 0 {
		p.metrics.stopsPending.Add(float64(stats.StopsPending))
		p.log.Warn("wrote a round's starts before Nomad had stopped what its holds preempt; Nomad may preempt others in their place",
			"jobs", stats.StopsPending, "waited", stats.StopWait)
	}
	return results
}

// nodeCores is a node's CPU in the sizer's cores: its bandwidth in cores
// of planning.core_mhz when that is set, else the cores Nomad counts.
func nodeCores(n *cluster.Node, coreMHz float64) float64 {
	if coreMHz > 0 {
		return float64(n.CPUMHz) / coreMHz
	}
	return float64(n.CPUCores)
}
