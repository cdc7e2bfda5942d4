// Package rewrite turns a planner decision into a change of a Nomad job and
// writes it safely: compare-and-set on JobModifyIndex, retried on conflict
// from a fresh read, rate-limited, and never destructive to a running job.
package rewrite

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/caravan-gpu/caravan/planner/cluster"
	"github.com/caravan-gpu/caravan/planner/nomadx"
	"github.com/caravan-gpu/caravan/planner/target"
	"github.com/hashicorp/nomad/api"
)

// Target and Placement are what the planner wants a job to look like
// (package target); this package carries them out.
type (
	Target    = target.Target
	Placement = target.Placement
)

// nodePin is the group constraint that keeps a group on nodes.
func nodePin(nodes []string) owned {
	if len(nodes) == 1 {
		return owned{cluster.AttrNodeID, "=", nodes[0]}
	}
	return owned{cluster.AttrNodeID, "set_contains_any", strings.Join(nodes, ",")}
}

// devicePin is the device constraint that lets a request take only the
// given instances, in a stable order. It is set_contains_any even for one
// ID: Nomad checks it twice, against the device group's whole ID list
// (which must hold any of them) and against each instance.
func devicePin(ids []string) owned {
	return owned{cluster.AttrDeviceIDs, "set_contains_any", strings.Join(slices.Sorted(slices.Values(ids)), ",")}
}

// userNodePin says the job's own spec picks its nodes for group tg, by a
// constraint the planner did not add.
func userNodePin(job *api.Job, tg *api.TaskGroup, mine map[owned]bool) bool {
	for _, cs := range [][]*api.Constraint{job.Constraints, tg.Constraints} {
		for _, c := range cs {
			if (c.LTarget == cluster.AttrNodeID || c.LTarget == cluster.AttrNodeName) && !mine[owned{c.LTarget, c.Operand, c.RTarget}] {
				return true
			}
		}
	}
	return false
}

// Change lists what Rewrite changed, in words, for the decision record.
type Change []string

// Rewrite changes job toward t and returns what it changed. A job with a live
// allocation only ever has its priority changed: Nomad updates priority in
// place, while constraints, resources and meta would replace the allocation.
func Rewrite(job *api.Job, t Target, live bool) Change {
	var changed Change
	if t.Restore {
		changed = append(changed, hold(job, false, live)...)
		if !live {
			changed = append(changed, place(job, Placement{})...)
		}
		return changed
	}
	if t.Priority > 0 && (job.Priority == nil || *job.Priority != t.Priority) {
		old := 0
		if job.Priority != nil {
			old = *job.Priority
		}
		p := t.Priority
		job.Priority = &p
		changed = append(changed, fmt.Sprintf("priority %d→%d", old, p))
	}
	changed = append(changed, hold(job, t.Hold, live)...)
	if live || t.Placement == nil {
		return changed
	}
	return append(changed, place(job, *t.Placement)...)
}

// hold adds or removes the planner's hold.
func hold(job *api.Job, want, live bool) Change {
	if cluster.Held(job) == want {
		return nil
	}
	if want {
		setMeta(job, cluster.MetaHeld, "true")
		job.Constraints = append(job.Constraints, cluster.HoldConstraint())
		if live {
			return Change{"hold: preempted, every allocation stops"}
		}
		return Change{"hold: waits for the planner"}
	}
	setMeta(job, cluster.MetaHeld, "")
	kept := job.Constraints[:0]
	for _, c := range job.Constraints {
		if !cluster.IsHold(c) {
			kept = append(kept, c)
		}
	}
	job.Constraints = kept
	return Change{"release: Nomad may place it"}
}

// renameTarget marks, among the planner's own entries in a job's meta, a
// GPU request it renamed to cluster.LaneRequest; RTarget is the old name.
const renameTarget = "device"

func renamedFrom(name string) owned { return owned{renameTarget, "renamed from", name} }

// renamed returns the name a request had before the planner renamed it.
func renamed(mine map[owned]bool) (string, bool) {
	for o := range mine {
		if o.LTarget == renameTarget {
			return o.RTarget, true
		}
	}
	return "", false
}

// isPlainGPURequest says a request asks for any NVIDIA GPU, of no model.
func isPlainGPURequest(name string) bool { return name == "gpu" || name == "nvidia/gpu" }

// isLaneRequest says a request asks for lanes by their device type.
func isLaneRequest(name string) bool {
	parts := strings.Split(name, "/")
	return len(parts) == 1 && parts[0] == cluster.LaneType || len(parts) >= 2 && parts[1] == cluster.LaneType
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
	originals := parseResources(job.Meta[cluster.MetaResources])
	keep := map[string]resources{}
	for _, tg := range job.TaskGroups {
		gpus := false
		for _, task := range tg.Tasks {
			gpus = gpus || len(cluster.GPURequests(task)) > 0
		}
		if gpus {
			var kept []*api.Constraint
			for _, c := range tg.Constraints {
				if !mine[owned{c.LTarget, c.Operand, c.RTarget}] {
					kept = append(kept, c)
				}
			}
			if len(p.Nodes) > 0 && !userNodePin(job, tg, mine) {
				pin := nodePin(p.Nodes)
				kept = append(kept, &api.Constraint{LTarget: pin.LTarget, Operand: pin.Operand, RTarget: pin.RTarget})
				want = append(want, pin)
			}
			tg.Constraints = kept
		}
		for _, task := range tg.Tasks {
			reqs := cluster.GPURequests(task)
			if len(reqs) == 0 {
				continue
			}
			for _, d := range reqs {
				// Undo the planner's own rename; a user's "nvidia/lane" is theirs.
				if from, ok := renamed(mine); ok && isPlainGPURequest(from) && d.Name == cluster.LaneRequest {
					d.Name = from
				}
				var rename []owned
				if p.LaneRequest && isPlainGPURequest(d.Name) {
					rename = append(rename, renamedFrom(d.Name))
					d.Name = cluster.LaneRequest
				}
				// Drop what the planner added last time; keep the user's own.
				var kept []*api.Constraint
				userModel, userLane, userDevices := strings.Count(d.Name, "/") >= 2, isLaneRequest(d.Name) && !p.LaneRequest, false
				for _, c := range d.Constraints {
					if mine[owned{c.LTarget, c.Operand, c.RTarget}] {
						continue
					}
					kept = append(kept, c)
					userModel = userModel || c.LTarget == cluster.AttrModel
					userLane = userLane || c.LTarget == cluster.AttrLanesPerGPU
					userDevices = userDevices || c.LTarget == cluster.AttrDeviceIDs || c.RTarget == cluster.AttrDeviceIDs
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
				if len(p.Devices) > 0 && !userDevices {
					add = append(add, devicePin(p.Devices))
				}
				for _, o := range add {
					kept = append(kept, &api.Constraint{LTarget: o.LTarget, Operand: o.Operand, RTarget: o.RTarget})
				}
				d.Constraints = kept
				want = append(append(want, add...), rename...)
			}
			if task.Resources == nil {
				task.Resources = &api.Resources{}
			}
			key := nomadx.Value(tg.Name) + "/" + task.Name
			user, sized := originals[key]
			if !sized {
				user = resources{CPU: task.Resources.CPU, MemoryMB: task.Resources.MemoryMB}
			}
			// What the placement does not size is the user's own.
			cpu, mem := user.CPU, user.MemoryMB
			if p.CPU > 0 {
				cpu = &p.CPU
			}
			if p.MemoryMB > 0 {
				mem = &p.MemoryMB
			}
			if nomadx.Value(task.Resources.CPU) != nomadx.Value(cpu) {
				changed = append(changed, fmt.Sprintf("task %s cpu %d MHz", task.Name, nomadx.Value(cpu)))
			}
			if nomadx.Value(task.Resources.MemoryMB) != nomadx.Value(mem) {
				changed = append(changed, fmt.Sprintf("task %s memory %d MB", task.Name, nomadx.Value(mem)))
			}
			task.Resources.CPU, task.Resources.MemoryMB = copyInt(cpu), copyInt(mem)
			if p.CPU > 0 || p.MemoryMB > 0 {
				keep[key] = user
			}
		}
	}
	setMeta(job, cluster.MetaResources, formatResources(keep))
	after := formatOwned(dedupe(want))
	if after != before {
		setMeta(job, cluster.MetaPlacement, after)
		for _, o := range dedupe(want) {
			if o.LTarget == renameTarget {
				changed = append(changed, "device "+o.RTarget+" → "+cluster.LaneRequest)
				continue
			}
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
	_, picked := UserModels(job)
	return picked
}

// UserModels lists the GPU models the job's own spec allows, where it names
// them: by device name ("nvidia/gpu/Tesla T4") or by an equality constraint
// on the model attribute. picked is true when the user chose models in any
// way, including ways (regexp, set_contains) that give no list.
func UserModels(job *api.Job) (models []string, picked bool) {
	if job == nil {
		return nil, false
	}
	mine := parseOwned("")
	if job.Meta != nil {
		mine = parseOwned(job.Meta[cluster.MetaPlacement])
	}
	listed := true
	for _, tg := range job.TaskGroups {
		for _, task := range tg.Tasks {
			for _, d := range cluster.GPURequests(task) {
				if parts := strings.SplitN(d.Name, "/", 3); len(parts) == 3 {
					picked = true
					models = append(models, parts[2])
				}
				for _, c := range d.Constraints {
					if c.LTarget != cluster.AttrModel || mine[owned{c.LTarget, c.Operand, c.RTarget}] {
						continue
					}
					picked = true
					if c.Operand == "=" || c.Operand == "==" || c.Operand == "is" {
						models = append(models, c.RTarget)
					} else {
						listed = false
					}
				}
			}
		}
	}
	if !listed {
		return nil, picked
	}
	slices.Sort(models)
	return slices.Compact(models), picked
}

// setMeta sets a meta key of the planner's, or removes it when value is
// empty.
func setMeta(job *api.Job, key, value string) {
	if value == "" {
		delete(job.Meta, key)
		return
	}
	if job.Meta == nil {
		job.Meta = map[string]string{}
	}
	job.Meta[key] = value
}

// resources are a task's CPU and memory as its user wrote them, kept in the
// job's meta while the planner sizes the task, so they can be given back.
type resources struct{ CPU, MemoryMB *int }

// parseResources reads "group/task=cpu,memory;..." with "-" for unset.
func parseResources(meta string) map[string]resources {
	out := map[string]resources{}
	for _, part := range strings.Split(meta, ";") {
		key, val, ok := strings.Cut(part, "=")
		if !ok {
			continue
		}
		cpu, mem, ok := strings.Cut(val, ",")
		if !ok {
			continue
		}
		out[key] = resources{CPU: parseOptInt(cpu), MemoryMB: parseOptInt(mem)}
	}
	return out
}

func formatResources(rs map[string]resources) string {
	var parts []string
	for k, r := range rs {
		parts = append(parts, k+"="+formatOptInt(r.CPU)+","+formatOptInt(r.MemoryMB))
	}
	sort.Strings(parts)
	return strings.Join(parts, ";")
}

func parseOptInt(s string) *int {
	v, err := strconv.Atoi(s)
	if err != nil {
		return nil
	}
	return &v
}

func formatOptInt(v *int) string {
	if v == nil {
		return "-"
	}
	return strconv.Itoa(*v)
}

func copyInt(v *int) *int {
	if v == nil {
		return nil
	}
	c := *v
	return &c
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
