// Package enact turns a policy's decisions into the Nomad changes that carry
// them out. It is the last step of a planning round and a pure function:
// decisions and the jobs as Nomad has them go in, the writes that make
// Nomad do exactly what the policy decided come out. The live planner reads
// state, calls the policy, calls Plan and applies what it returns.
//
// How a decision is carried out:
//
//	pending, Run      release the hold, with the GPU model, lane and size
//	                  the policy chose, in one write
//	pending, not Run  hold: Nomad places nothing of the job, even when it fits
//	running, not Run  hold: Nomad stops every allocation of the job at once
//	running, Run      leave it be
//	running, Migrate  to another GPU model: hold it, which stops its
//	                  allocations (a Migrate change); once they have
//	                  stopped, the same decision starts it, pinned to the
//	                  new model. Pinning the model on the running job
//	                  instead would have Nomad replace its allocations in
//	                  place, and Nomad backs out a replacement it cannot
//	                  place at once, so two jobs trading models would
//	                  never move. Held, the two stop first, then start on
//	                  the GPUs each other freed.
//	running, Migrate  on its own model (Synergy's: it is re-sized, or its
//	                  lease moves it): a running task keeps the CPU and
//	                  memory it started with, so the same: hold it, and
//	                  once it has stopped the decision of that round
//	                  starts it with what the policy gives it then.
//
// Every job also gets its band's priority, so that Nomad's eval broker
// dequeues released jobs in band order.
package enact

import (
	"math"
	"slices"

	"github.com/caravan-gpu/caravan/planner/policy"
	"github.com/caravan-gpu/caravan/planner/target"
)

// Action says what a change does to a job.
type Action string

const (
	// Start releases a held job so that Nomad places it.
	Start Action = "start"
	// Hold keeps a pending job from being placed.
	Hold Action = "hold"
	// Preempt holds a running job, which stops its allocations.
	Preempt Action = "preempt"
	// Place sets where an unheld pending job runs (one submitted without
	// the hold that the policy starts).
	Place Action = "place"
	// Reprioritize changes the priority alone.
	Reprioritize Action = "priority"
	// Restore gives a job the planner no longer manages back to its user.
	Restore Action = "restore"
	// Migrate holds a running job that the policy moves to another GPU
	// model, which stops its allocations; it is started on the new model
	// once they have stopped.
	Migrate Action = "migrate"
)

// Offer says how a GPU model is offered in the cluster.
type Offer struct {
	Lanes bool // as lanes on some nodes
	Whole bool // as whole GPUs on some nodes
	// LanesTyped says the lanes are a device type of their own
	// (cluster.LaneType): a job placed on one must ask for that type.
	LanesTyped bool
}

// Capacity is a node's host resources.
type Capacity struct {
	CPUs     float64 // cores
	MemoryGB float64
}

// Inventory is what Plan needs to know of the cluster.
type Inventory struct {
	// Offers holds every GPU model in the cluster.
	Offers map[string]Offer
	// MHzPerCore converts the sizer's cores into Nomad's MHz.
	MHzPerCore float64
	// Smallest is, per GPU model, the smallest host resources of a node
	// with that model; "" is the smallest of all GPU nodes. A task is
	// never sized past it, or it would fit nowhere.
	Smallest map[string]Capacity
	// NodeIDs are the Nomad node IDs of the policy's Snapshot.Nodes, in
	// the same order: a decision's Slots name nodes by index into it.
	NodeIDs []string
	// Devices are, per node of NodeIDs and per GPU of that node in the
	// Snapshot's order, the GPU's device instance IDs (its lanes, for a
	// GPU cut into lanes).
	Devices [][][]string
}

// Job is a managed job as Nomad has it now.
type Job struct {
	Key, Namespace, ID string
	Priority           int
	// Live says allocations of the job are placed and meant to run.
	Live bool
	// Held says the job carries the planner's hold.
	Held bool
	// Settled says an unheld job has waited long enough that Nomad is not
	// about to place it: a write then would replace a new allocation.
	Settled bool
	// Finishing says some of the job's allocations completed while others
	// still run: a new version would run the completed ones again, so the
	// job is left alone.
	Finishing bool
	// UserModel says the user chose the GPU model; it is never pinned.
	UserModel bool
	// Tasks is how many GPU tasks run the job, over all its allocations:
	// the sizer's CPU and memory for the job are split among them.
	Tasks int
	// Model is the GPU model the job's live allocations run on ("" when
	// none runs, or they run on several).
	Model string
	// TaskCPU (MHz) and TaskMemoryMB are what each of its GPU tasks holds
	// now, and Nodes the Nomad nodes its live allocations run on.
	TaskCPU, TaskMemoryMB int
	Nodes                 []string
	// Restarting says the planner held the running job to restart it (a
	// Migrate change) and its allocations have not stopped yet: its hold
	// is kept until they have, whatever the policy decides meanwhile.
	Restarting bool
}

// Change is one write to a job.
type Change struct {
	Job    int // index into the jobs and decisions given to Plan
	Key    string
	Action Action
	Target target.Target
}

// Phases are a round's changes in the order Nomad must see them: every
// change that stops allocations (a preemption, a hold, a migration)
// written before any other, so that the GPUs the stops free are free when
// Nomad evaluates the jobs started in their place. The order is decided
// here only; the writer carries the phases out one after the other.
type Phases struct {
	Stops []Change
	Rest  []Change
}

// All is every change, the stops first.
func (p Phases) All() []Change {
	return append(append(make([]Change, 0, len(p.Stops)+len(p.Rest)), p.Stops...), p.Rest...)
}

// Len is the number of changes.
func (p Phases) Len() int { return len(p.Stops) + len(p.Rest) }

// Plan returns the changes that carry out decisions, in phases. jobs and
// decisions are indexed alike.
func Plan(inv Inventory, jobs []Job, decisions []policy.Decision) Phases {
	var stops, rest []Change
	for i, d := range decisions {
		j := jobs[i]
		if j.Finishing {
			continue
		}
		want := target.Target{Priority: policy.NomadPriority(d.Band), Hold: !d.Run}
		c := Change{Job: i, Key: j.Key, Target: want}
		restarts := d.Run && d.Migrate && j.Live && restartChanges(inv, j, d)
		switch {
		case restarts && !j.Held:
			c.Action, c.Target.Hold = Migrate, true
		case j.Live && j.Held && (restarts || j.Restarting):
			// Held to restart: wait for its allocations to stop.
			continue
		case !d.Run && j.Live:
			c.Action = Preempt
		case !d.Run && !j.Held:
			c.Action = Hold
		case d.Run && j.Held && j.Live:
			// Held while it ran (a preemption the policy took back before
			// its stop went through): release it, placement untouched.
			c.Action = Start
		case d.Run && j.Held:
			c.Action, c.Target.Placement = Start, placement(inv, j, d)
		case d.Run && !j.Held && !j.Live && j.Settled:
			if pl := placement(inv, j, d); !pl.IsZero() {
				c.Action, c.Target.Placement = Place, pl
			}
		}
		if c.Action == "" && want.Priority != j.Priority {
			c.Action = Reprioritize
		}
		switch c.Action {
		case "":
		case Preempt, Hold, Migrate:
			stops = append(stops, c)
		default:
			rest = append(rest, c)
		}
	}
	return Phases{Stops: stops, Rest: rest}
}

// restartChanges says a running job's restart would change something Nomad
// sees: its GPU model, the size of its tasks, or its nodes. A decision on
// its own model that changes none of them (a stale one, or a move to other
// GPUs of the nodes it is on, which Nomad does not pin) leaves it be.
func restartChanges(inv Inventory, j Job, d policy.Decision) bool {
	if j.Model != "" && d.GPUModel != "" && j.Model != d.GPUModel {
		return true
	}
	pl := placement(inv, j, d)
	if pl.CPU > 0 && pl.CPU != j.TaskCPU || pl.MemoryMB > 0 && pl.MemoryMB != j.TaskMemoryMB {
		return true
	}
	if len(pl.Nodes) == 0 || len(j.Nodes) == 0 {
		return false
	}
	for _, n := range pl.Nodes {
		if !slices.Contains(j.Nodes, n) {
			return true
		}
	}
	return len(pl.Nodes) != len(j.Nodes)
}

// Give returns the change that hands a job the planner no longer manages
// back to its user.
func Give(key string) Change {
	return Change{Job: -1, Key: key, Action: Restore, Target: target.Target{Restore: true}}
}

// placement is where and with what a started job runs. An empty one
// removes the pins and sizes of an earlier start.
func placement(inv Inventory, j Job, d policy.Decision) *target.Placement {
	pl := &target.Placement{}
	// With one model in the cluster a model constraint only churns.
	if len(inv.Offers) > 1 && !j.UserModel {
		pl.Model = d.GPUModel
	}
	// A lane or whole-GPU pin only where the model comes both ways: where
	// it comes one way, the wrong pin would make the job unplaceable.
	if o, ok := inv.Offers[pl.Model]; ok && o.Lanes && o.Whole || pl.Model == "" && offersBoth(inv) {
		lane := d.Lane
		pl.Lane = &lane
	}
	// Lanes offered under their own type are out of reach of a plain
	// nvidia/gpu request: a job placed on one, or on a model that comes
	// only as lanes, must ask for them by type.
	if o := offerOf(inv, d.GPUModel); o.LanesTyped && (d.Lane || !o.Whole) {
		pl.LaneRequest = true
	}
	pl.Nodes = nodesOf(inv, d.Slots)
	// A lane job's partners on a GPU slow it: it must land on the GPU
	// whose partners the placer counted, not on any free lane of the node.
	// So must a whole GPU of a model that comes only as lanes: the job asks
	// for one lane, and unpinned two such jobs could share a GPU.
	if len(d.Slots) == 1 && (d.Lane || lanesOnly(offerOf(inv, d.GPUModel))) {
		pl.Devices = devicesOf(inv, d.Slots[0])
	}
	if tasks := max(j.Tasks, 1); d.CPUs > 0 || d.MemoryGB > 0 {
		limit, ok := inv.Smallest[d.GPUModel]
		if !ok {
			limit = inv.Smallest[""]
		}
		cpus, mem := d.CPUs/float64(tasks), d.MemoryGB/float64(tasks)
		if limit.CPUs > 0 {
			cpus = math.Min(cpus, limit.CPUs)
		}
		if limit.MemoryGB > 0 {
			mem = math.Min(mem, limit.MemoryGB)
		}
		if cpus > 0 && inv.MHzPerCore > 0 {
			pl.CPU = max(1, int(math.Round(cpus*inv.MHzPerCore)))
		}
		if mem > 0 {
			pl.MemoryMB = max(1, int(math.Round(mem*1024)))
		}
	}
	return pl
}

// nodesOf lists the Nomad nodes of the slots a placer chose, each once, in
// the order the slots name them.
func nodesOf(inv Inventory, slots []policy.Slot) []string {
	var nodes []string
	for _, s := range slots {
		if s.Node < 0 || s.Node >= len(inv.NodeIDs) {
			continue
		}
		if id := inv.NodeIDs[s.Node]; !slices.Contains(nodes, id) {
			nodes = append(nodes, id)
		}
	}
	return nodes
}

// devicesOf is the device instances of the GPU a slot names, or none
// where the inventory does not know it.
func devicesOf(inv Inventory, s policy.Slot) []string {
	if s.Node < 0 || s.Node >= len(inv.Devices) || s.GPU < 0 || s.GPU >= len(inv.Devices[s.Node]) {
		return nil
	}
	return slices.Clone(inv.Devices[s.Node][s.GPU])
}

// offerOf is how model is offered, or how any model is for "".
func offerOf(inv Inventory, model string) Offer {
	if model != "" {
		return inv.Offers[model]
	}
	var all Offer
	for _, o := range inv.Offers {
		all.Lanes, all.Whole, all.LanesTyped = all.Lanes || o.Lanes, all.Whole || o.Whole, all.LanesTyped || o.LanesTyped
	}
	return all
}

// lanesOnly says a model comes as lanes and never whole.
func lanesOnly(o Offer) bool { return o.Lanes && !o.Whole }

func offersBoth(inv Inventory) bool {
	lanes, whole := false, false
	for _, o := range inv.Offers {
		lanes, whole = lanes || o.Lanes, whole || o.Whole
	}
	return lanes && whole
}
