// Package rewrite turns a planner decision into a change of a Nomad job and
// writes it safely: compare-and-set on JobModifyIndex, retried on conflict
// from a fresh read, rate-limited, and never destructive to a running job.
package rewrite

import (
	"fmt"
	"sort"
	"strings"

	"github.com/caravan-gpu/caravan/planner/cluster"
	"github.com/hashicorp/nomad/api"
)

// Target is what the planner wants a job to look like.
type Target struct {
	Priority int
	// Placement is applied only to a job with no live allocation, since
	// changing it on a running job would make Nomad replace the allocation.
	Placement *Placement
}

// Placement pins where a job's GPU tasks may run. Zero fields leave that
// aspect to the user's jobspec.
type Placement struct {
	Model string
	// Lane is nil for no preference, true for a lane, false for a whole GPU.
	Lane     *bool
	CPU      int // MHz per GPU task
	MemoryMB int // per GPU task
}

// Change lists what Rewrite changed, in words, for the decision record.
type Change []string

// Rewrite changes job toward t and returns what it changed. A job with a live
// allocation only ever has its priority changed: Nomad updates priority in
// place, while constraints, resources and meta would replace the allocation.
func Rewrite(job *api.Job, t Target, live bool) Change {
	var changed Change
	if t.Priority > 0 && (job.Priority == nil || *job.Priority != t.Priority) {
		old := 0
		if job.Priority != nil {
			old = *job.Priority
		}
		p := t.Priority
		job.Priority = &p
		changed = append(changed, fmt.Sprintf("priority %d→%d", old, p))
	}
	if live || t.Placement == nil {
		return changed
	}
	return append(changed, place(job, *t.Placement)...)
}

// owned is a constraint the planner added, as recorded in the job's meta.
type owned struct{ LTarget, Operand, RTarget string }

func (o owned) String() string { return o.LTarget + " " + o.Operand + " " + o.RTarget }

func parseOwned(meta string) map[owned]bool {
	out := map[owned]bool{}
	for _, part := range strings.Split(meta, ";") {
		f := strings.SplitN(part, "|", 3)
		if len(f) == 3 {
			out[owned{f[0], f[1], f[2]}] = true
		}
	}
	return out
}

func formatOwned(cs []owned) string {
	var parts []string
	for _, c := range cs {
		parts = append(parts, c.LTarget+"|"+c.Operand+"|"+c.RTarget)
	}
	sort.Strings(parts)
	return strings.Join(parts, ";")
}

func place(job *api.Job, p Placement) Change {
	before := ""
	if job.Meta != nil {
		before = job.Meta[cluster.MetaPlacement]
	}
	mine := parseOwned(before)
	var want []owned
	var changed Change
	for _, tg := range job.TaskGroups {
		for _, task := range tg.Tasks {
			reqs := cluster.GPURequests(task)
			if len(reqs) == 0 {
				continue
			}
			for _, d := range reqs {
				// Drop what the planner added last time; keep the user's own.
				var kept []*api.Constraint
				userModel, userLane := strings.Count(d.Name, "/") >= 2, false
				for _, c := range d.Constraints {
					if mine[owned{c.LTarget, c.Operand, c.RTarget}] {
						continue
					}
					kept = append(kept, c)
					userModel = userModel || c.LTarget == cluster.AttrModel
					userLane = userLane || c.LTarget == cluster.AttrLanesPerGPU
				}
				var add []owned
				if p.Model != "" && !userModel {
					add = append(add, owned{cluster.AttrModel, "=", p.Model})
				}
				if p.Lane != nil && !userLane {
					if *p.Lane {
						add = append(add, owned{cluster.AttrLanesPerGPU, ">", "1"})
					} else {
						add = append(add, owned{cluster.AttrLanesPerGPU, "<=", "1"})
					}
				}
				for _, o := range add {
					kept = append(kept, &api.Constraint{LTarget: o.LTarget, Operand: o.Operand, RTarget: o.RTarget})
				}
				d.Constraints = kept
				want = append(want, add...)
			}
			if task.Resources == nil {
				task.Resources = &api.Resources{}
			}
			if p.CPU > 0 && (task.Resources.CPU == nil || *task.Resources.CPU != p.CPU) {
				v := p.CPU
				task.Resources.CPU = &v
				changed = append(changed, fmt.Sprintf("task %s cpu %d MHz", task.Name, v))
			}
			if p.MemoryMB > 0 && (task.Resources.MemoryMB == nil || *task.Resources.MemoryMB != p.MemoryMB) {
				v := p.MemoryMB
				task.Resources.MemoryMB = &v
				changed = append(changed, fmt.Sprintf("task %s memory %d MB", task.Name, v))
			}
		}
	}
	after := formatOwned(dedupe(want))
	if after != before {
		if job.Meta == nil {
			job.Meta = map[string]string{}
		}
		if after == "" {
			delete(job.Meta, cluster.MetaPlacement)
		} else {
			job.Meta[cluster.MetaPlacement] = after
		}
		for _, o := range dedupe(want) {
			changed = append(changed, "constraint "+o.String())
		}
		if after == "" {
			changed = append(changed, "placement constraints removed")
		}
	}
	return changed
}

// UserModel reports whether the job's own spec picks a GPU model for any of
// its GPU requests, by device name or by a constraint the planner did not
// add. The planner never pins such a job.
func UserModel(job *api.Job) bool {
	if job == nil {
		return false
	}
	mine := parseOwned("")
	if job.Meta != nil {
		mine = parseOwned(job.Meta[cluster.MetaPlacement])
	}
	for _, tg := range job.TaskGroups {
		for _, task := range tg.Tasks {
			for _, d := range cluster.GPURequests(task) {
				if strings.Count(d.Name, "/") >= 2 {
					return true
				}
				for _, c := range d.Constraints {
					if c.LTarget == cluster.AttrModel && !mine[owned{c.LTarget, c.Operand, c.RTarget}] {
						return true
					}
				}
			}
		}
	}
	return false
}

func dedupe(cs []owned) []owned {
	seen := map[owned]bool{}
	var out []owned
	for _, c := range cs {
		if !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
	}
	return out
}
