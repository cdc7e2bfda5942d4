// Package target holds what the planner wants a Nomad job to look like:
// the data the change layer (planner/enact) decides and the writer
// (planner/rewrite) carries out. It is plain data and imports nothing, so
// that deciding a round's changes needs no Nomad client.
package target

// Target is what the planner wants a job to look like.
type Target struct {
	Priority int
	// Hold says the job carries the planner's hold (cluster.HoldConstraint):
	// Nomad places nothing of a held job, and holding a job that runs stops
	// all of its allocations at once. False releases a held job.
	Hold bool
	// Placement is applied only to a job with no live allocation, since
	// changing it on a running job would make Nomad replace the allocation.
	Placement *Placement
	// Restore gives the job back to its user: no hold, none of the planner's
	// constraints, and the task resources the user wrote. It is for jobs
	// the planner no longer manages; Priority is left as it is.
	Restore bool
}

// Placement pins where a job's GPU tasks may run. Zero fields leave that
// aspect to the user's jobspec.
type Placement struct {
	Model string
	// Lane is nil for no preference, true for a lane, false for a whole GPU.
	Lane *bool
	// LaneRequest asks for lanes by their device type: a plain GPU request
	// ("nvidia/gpu", "gpu") becomes cluster.LaneRequest, for a job placed on
	// a lane where lanes are offered under a type of their own.
	LaneRequest bool
	CPU         int // MHz per GPU task
	MemoryMB    int // per GPU task
	// Nodes are the Nomad node IDs the placer chose for the job's GPUs:
	// each group with a GPU task is pinned to them, so that Nomad puts the
	// job where the policy counted it. None leaves the node to Nomad.
	Nodes []string
	// Devices are the device instance IDs the job's GPU requests may take:
	// for a lane job, the lanes of the GPU the placer chose, so that its
	// partners on that GPU are the ones the policy counted. Nomad picks
	// among a node's free instances at random otherwise. None leaves the
	// instances to Nomad.
	Devices []string
}

// IsZero says the placement pins and sizes nothing.
func (p Placement) IsZero() bool {
	return p.Model == "" && p.Lane == nil && !p.LaneRequest && p.CPU == 0 && p.MemoryMB == 0 && len(p.Nodes) == 0 && len(p.Devices) == 0
}
