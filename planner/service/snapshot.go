package service

import (
	"math"
	"slices"

	"github.com/caravan-gpu/caravan/gpu/reservation"
	"github.com/caravan-gpu/caravan/planner/cluster"
	"github.com/caravan-gpu/caravan/planner/policy"
	"github.com/caravan-gpu/caravan/planner/profile"
	"github.com/caravan-gpu/caravan/planner/rewrite"
)

// memory is what the planner remembers of a job between rounds: the policy
// asks for the previous queue and rank, and a promoted job's service counts
// from the promotion on.
type memory struct {
	prevQueue, prevRank int
	attainedBase        float64
	executedBase        float64
	// waitFrom is when a promoted job's current wait began, 0 when unset.
	waitFrom float64
	// renewedAt is when a round last renewed the job where it ran
	// (Decision.Renewed), 0 when never: it took its GPUs again then.
	renewedAt float64
	// restarting says the planner held the running job to restart it and
	// its allocations have not stopped yet (enact.Job.Restarting).
	restarting bool
}

// snapshotInput is the part of the planner's state that goes into a policy
// snapshot besides the cluster.
type snapshotInput struct {
	state    *cluster.State
	memory   map[string]*memory
	profiles map[string]profile.Profile
	sizes    *policy.SizeDistribution
	finished *policy.History
	// coreMHz is planning.core_mhz.
	coreMHz float64
}

// toSnapshot converts the live cluster state into the policy's Snapshot, the
// same type the simulator fills. Jobs are in state.Jobs order, skipping jobs
// that ask for no GPU; index maps snapshot positions back to them.
func toSnapshot(in snapshotInput) (snap *policy.Snapshot, index []*cluster.Job) {
	st := in.state
	snap = &policy.Snapshot{Now: unix(st.Time)}
	perCore := mhzPerCore(st.Nodes, in.coreMHz)
	// where maps node ID and device instance ID to the policy's GPU and
	// lane, so that running jobs carry their placement: without it the
	// policy counts every lane job as a whole GPU of its own.
	where := map[[2]string]policy.Slot{}
	groupModel := map[string]string{}
	for ni, n := range st.Nodes {
		for _, g := range n.GPUs {
			groupModel[g.Name] = g.Model
		}
		pn := policy.Node{ID: n.ID, CPUs: nodeCores(n, in.coreMHz), MemoryGB: float64(n.MemoryMB) / 1024, Healthy: n.Ready}
		for _, g := range n.GPUs {
			gpus, at := physicalGPUs(g)
			for id, gl := range at {
				where[[2]string{n.ID, id}] = policy.Slot{Node: ni, GPU: len(pn.GPUs) + gl.gpu, Lane: gl.lane}
			}
			pn.GPUs = append(pn.GPUs, gpus...)
		}
		snap.Nodes = append(snap.Nodes, pn)
	}
	for _, j := range st.Jobs {
		// A job that has finished in all but Nomad's word needs no GPUs,
		// and a write would make Nomad run it again.
		if j.GPUs <= 0 || j.Done() {
			continue
		}
		m := in.memory[j.Key()]
		pj := policy.Job{
			ID: j.Key(), Arrival: unix(j.Submitted), GPUs: j.GPUs, GPUMemoryMB: int(j.GPUMemoryMiB),
			Attained: j.Attained, Executed: j.Executed, Remaining: -1, PrevQueue: -1, PrevRank: -1,
			Model: j.Profile, Weight: j.Weight, Group: j.Group,
		}
		if models, _ := rewrite.UserModels(j.Spec); len(models) > 0 {
			// A device name ("nvidia/gpu/<group>") names a device group,
			// which may carry its lane layout besides the model.
			for k, m := range models {
				if model, ok := groupModel[m]; ok {
					models[k] = model
				}
			}
			pj.Models = models
		}
		if j.Running() {
			pj.State = policy.Running
			pj.CPUs, pj.MemoryGB = heldResources(j, perCore)
			pj.Placed = placedAt(j, snap.Now)
			if m != nil {
				pj.Placed = max(pj.Placed, m.renewedAt)
			}
			for _, a := range j.Allocs {
				if !a.Live() {
					continue
				}
				if a.Model != "" {
					pj.GPUModel = a.Model
				}
				for _, id := range a.DeviceIDs {
					sl, ok := where[[2]string{a.NodeID, id}]
					// Two slots of one lane are one lane to the policy.
					if ok && !slices.Contains(pj.Placement, sl) {
						pj.Placement = append(pj.Placement, sl)
					}
				}
			}
		} else {
			pj.Wait = snap.Now - lastRunEnd(j)
			pj.GPUModel = lastModel(j)
		}
		if m != nil {
			pj.PrevQueue, pj.PrevRank = m.prevQueue, m.prevRank
			pj.Attained = math.Max(0, pj.Attained-m.attainedBase)
			pj.Executed = math.Max(0, pj.Executed-m.executedBase)
			if pj.State == policy.Pending && m.waitFrom > 0 {
				pj.Wait = math.Min(pj.Wait, snap.Now-m.waitFrom)
			}
		}
		if pj.Wait < 0 {
			pj.Wait = 0
		}
		p, profiled := in.profiles[j.Profile]
		profiled = profiled && len(p.Throughput) > 0
		switch {
		case profiled && j.Duration > 0:
			// Work in the profile's unit: the duration on the fastest
			// model at its rate, less what each model has done.
			pj.Throughput = p.Throughput
			best := 0.0
			for _, r := range p.Throughput {
				best = max(best, r)
			}
			done := 0.0
			for m, t := range j.ExecutedOn {
				done += t * p.Throughput[m]
			}
			pj.RemainingWork = max(j.Duration*best-done, 1e-9)
			pj.Remaining = pj.RemainingWork / best
		case profiled:
			pj.Throughput = p.Throughput
			// The remaining work is unknown; one unit makes the time on
			// each model its inverse throughput, which is what speedup
			// matching compares.
			pj.RemainingWork = 1
		case j.Duration > 0:
			pj.Remaining = max(j.Duration-j.Executed, 0)
		}
		snap.Jobs = append(snap.Jobs, pj)
		index = append(index, j)
	}
	if in.sizes.Len() > 0 {
		snap.CompletedSizes = in.sizes
	}
	snap.History = in.finished
	return snap, index
}

// gpuLane is where a device instance lies among a group's physical GPUs.
type gpuLane struct{ gpu, lane int }

// physicalGPUs turns a device group into the policy's physical GPUs, and
// says where each instance lies: a group of lanes (and time-slice slots)
// holds LanesPerGPU × Slots instances per GPU, sorted by ID.
func physicalGPUs(g *cluster.GPUGroup) ([]policy.GPU, map[string]gpuLane) {
	per := g.PerGPU()
	at := make(map[string]gpuLane, len(g.Instances))
	for k, in := range g.Instances {
		gl := gpuLane{gpu: k / per, lane: -1}
		if g.Lanes() {
			gl.lane = k % per / max(g.Slots, 1)
			if l, ok := reservation.LaneOf(in.ID); ok && l < g.LanesPerGPU {
				gl.lane = l
			}
		}
		at[in.ID] = gl
	}
	n := (len(g.Instances) + per - 1) / per
	var out []policy.GPU
	for i := 0; i < n; i++ {
		healthy := true
		for _, in := range g.Instances[i*per : min((i+1)*per, len(g.Instances))] {
			healthy = healthy && in.Healthy
		}
		gpu := policy.GPU{Model: g.Model, MemoryMB: int(g.GPUMemoryMiB), Healthy: healthy}
		if g.Lanes() {
			gpu.Lanes = g.LanesPerGPU
			gpu.LaneMemoryMB = int(g.MemoryMiB)
		}
		out = append(out, gpu)
	}
	return out, at
}

// placedAt is when a running job took its GPUs: the latest start of its
// live allocations, or now for one placed and not yet started.
func placedAt(j *cluster.Job, now float64) float64 {
	at := 0.0
	for _, a := range j.Allocs {
		if !a.Live() {
			continue
		}
		if a.Started.IsZero() {
			return now
		}
		at = max(at, unix(a.Started))
	}
	return at
}

// lastModel is the GPU model of the job's allocation that started last,
// "" if none started on a known model: the blind steps guess a waiting
// job's remaining time from its speed there, as the simulator keeps it.
func lastModel(j *cluster.Job) string {
	model, at := "", 0.0
	for _, a := range j.Allocs {
		if a.Model != "" && !a.Started.IsZero() && (model == "" || unix(a.Started) > at) {
			model, at = a.Model, unix(a.Started)
		}
	}
	return model
}

// lastRunEnd is when the job last stopped running, or its submission when it
// never ran: the start of its current wait.
func lastRunEnd(j *cluster.Job) float64 {
	end := unix(j.Submitted)
	for _, a := range j.Allocs {
		if !a.Finished.IsZero() && unix(a.Finished) > end {
			end = unix(a.Finished)
		}
	}
	return end
}

// heldResources is the CPU (cores) and memory (GB) a running job's GPU
// tasks hold together, as its spec has them: Synergy's sizer keeps them
// until the job restarts. Cores count as they are; MHz turn into cores at
// perCore, and count as unknown (0) without it.
func heldResources(j *cluster.Job, perCore float64) (cpus, memoryGB float64) {
	mhz, cores, mem := cluster.GPUTaskResources(j.Spec)
	tasks := float64(cluster.GPUTasks(j.Spec))
	switch {
	case cores > 0:
		cpus = float64(cores) * tasks
	case mhz > 0 && perCore > 0:
		cpus = float64(mhz) / perCore * tasks
	}
	return cpus, float64(mem) / 1024 * tasks
}
