// Package policy holds caravan's scheduling policies as pure functions: a
// Snapshot of the cluster and its jobs goes in, one Decision per job comes
// out. The live planner and the trace simulator call the same code, so a
// policy never knows which of the two is driving it.
//
// A Policy is three small steps run in sequence (see Policy.Plan):
//
//	Orderer  ranks jobs and puts them in queues and priority bands
//	Placer   walks that order and decides who runs now, where, and on what
//	Sizer    gives running jobs their CPU and host memory
//
// Each concrete step lives in its own file (order_las.go, place_match.go,
// ...), so a new policy is one new file plus a line in registry.go.
package policy

import "time"

// Snapshot is what a policy sees: the cluster and every job that is pending
// or running, at time Now. Policies must not modify it.
type Snapshot struct {
	// Now is the snapshot time in seconds on the caller's clock (trace time
	// in the simulator, Unix time live). Only differences matter.
	Now float64

	Nodes []Node
	Jobs  []Job

	// CompletedSizes, when set, is the distribution of GPU-seconds of the
	// jobs completed so far. 2D-Gittins learns from it when it was not
	// given a fixed sample file.
	CompletedSizes *SizeDistribution
	// History, when set, holds the finished jobs the caller has seen, by
	// group and GPU count; the predict order learns sizes from it.
	History *History

	cap *capacity // derived from Nodes on first use
}

// Node is one client node and its GPUs.
type Node struct {
	ID       string
	GPUs     []GPU
	CPUs     float64 // cores
	MemoryGB float64 // host memory
	Healthy  bool
}

// GPU is one physical GPU. A GPU split into lanes (MPS partitions) can run
// up to Lanes jobs that each fit in LaneMemoryMB.
type GPU struct {
	Model        string // "V100", "P100", ...
	MemoryMB     int
	Lanes        int // 0 or 1: whole GPU only
	LaneMemoryMB int
	Healthy      bool
}

// LaneCount is the number of lanes, counting an unsplit GPU as one.
func (g GPU) LaneCount() int {
	if g.Lanes < 1 {
		return 1
	}
	return g.Lanes
}

// JobState says whether a job holds GPUs now.
type JobState uint8

const (
	Pending JobState = iota
	Running
)

func (s JobState) String() string {
	if s == Running {
		return "running"
	}
	return "pending"
}

// Job is one GPU job as the planner tracks it.
type Job struct {
	// The fields every round reads come first, so that they share a cache
	// line: planning is bound by memory access to the jobs.

	Arrival float64 // seconds, same clock as Snapshot.Now
	GPUs    int     // GPUs requested
	State   JobState

	// Attained is the service in GPU-seconds counted for queueing since
	// the job last entered the top queue: executed time × GPUs, where a
	// job on a lane counts its share of the GPU. The caller resets it (with
	// Executed and Wait) when a decision says Promoted.
	Attained float64
	// Executed is the run time in seconds since the job last entered the
	// top queue.
	Executed float64
	// Wait is the current wait in seconds: time pending since the job last
	// ran, or since arrival if it never ran.
	Wait float64

	// Remaining is the oracle remaining run time in seconds on the
	// reference GPU; negative when unknown. Only srtf, srsf, hare and
	// matching read it.
	Remaining float64

	// PrevQueue and PrevRank are the Queue and Rank of this job's decision
	// in the previous round, or -1 for a job not planned before. Queue
	// policies keep order stable within a queue with them.
	PrevQueue int
	PrevRank  int

	ID          string
	GPUMemoryMB int     // memory needed per GPU; 0 = unknown, fits anywhere
	Weight      float64 // for weighted JCT; 0 means 1
	// Group is the team, virtual cluster or user the job belongs to, "" if
	// unknown; jobs of one group tend to be alike in size.
	Group string

	// Placement is where a running job is now; empty for pending jobs and
	// for count-only callers that do not track GPUs.
	Placement []Slot
	// GPUModel is the model a running job is on, for count-only callers;
	// for a waiting job, the model it last ran on ("" if it never ran or
	// the caller does not know).
	GPUModel string
	// Placed is when a running job took its current GPUs (it started or
	// moved), on Now's clock. Synergy's lease reads it; 0 if unknown.
	Placed float64
	// CPUs and MemoryGB are the host resources a running job holds now, as
	// it started with them (0: unknown, or not sized). A running task's
	// resources change only when it restarts, so Synergy's sizer keeps
	// them and marks any change as a restart (Decision.Migrate).
	CPUs     float64
	MemoryGB float64

	// Throughput is optional work rate per GPU model (any unit, e.g.
	// steps/s for the job's GPU count). Heterogeneity-aware steps use it;
	// missing models count as the job's slowest known rate.
	Throughput map[string]float64
	// Model names the network (for sensitivity and co-location lookups).
	Model string
	// Models, when set, are the only GPU models the job may run on: the
	// user's own choice, which every placer keeps.
	Models []string

	// RemainingWork is the work left in Throughput's unit (e.g. steps);
	// with Throughput it gives the remaining time on each GPU model.
	RemainingWork float64
}

// allows says whether the job may run on model.
func (j *Job) allows(model string) bool {
	if len(j.Models) == 0 {
		return true
	}
	for _, m := range j.Models {
		if m == model {
			return true
		}
	}
	return false
}

// weight returns Weight with the zero value meaning 1.
func (j *Job) weight() float64 {
	if j.Weight <= 0 {
		return 1
	}
	return j.Weight
}

// timeOn is the job's remaining run time on model, or on the reference GPU
// when the job has no throughput for it.
func (j *Job) timeOn(model string) float64 {
	if j.RemainingWork > 0 && j.Throughput != nil {
		if t := j.Throughput[model]; t > 0 {
			return j.RemainingWork / t
		}
		if slow := j.slowestRate(); slow > 0 {
			return j.RemainingWork / slow
		}
	}
	if j.Remaining < 0 {
		return inf
	}
	return j.Remaining
}

func (j *Job) slowestRate() float64 {
	slow := 0.0
	for _, t := range j.Throughput {
		if t > 0 && (slow == 0 || t < slow) {
			slow = t
		}
	}
	return slow
}

// bestTime is the remaining time on the fastest model the job knows.
func (j *Job) bestTime() float64 {
	if j.RemainingWork > 0 && len(j.Throughput) > 0 {
		best := 0.0
		for _, t := range j.Throughput {
			best = max(best, t)
		}
		if best > 0 {
			return j.RemainingWork / best
		}
	}
	if j.Remaining < 0 {
		return inf
	}
	return j.Remaining
}

// Slot is one GPU (or one lane of it) given to a job.
type Slot struct {
	Node int // index into Snapshot.Nodes
	GPU  int // index into Node.GPUs
	Lane int // -1 for the whole GPU
}

// Decision is a policy's verdict for one job.
type Decision struct {
	// The fields every round reads come first, so that they share a cache
	// line (see Job).

	Job int // index into Snapshot.Jobs

	Rank  int // position in the policy's order, 0 first
	Queue int // queue index for multi-queue policies, 0 highest
	Band  int // priority band, 0 highest; see NomadPriority

	// Run says whether the job should hold GPUs after this round. A running
	// job with Run false is preempted; a pending one with Run true starts.
	Run bool
	// Promoted tells the caller to reset the job's Attained, Executed and
	// Wait: the starvation knob moved it back to the top queue.
	Promoted bool
	// Migrate says a running job restarts: it moves to GPUModel (see
	// Migration), or, Synergy's, to the GPUs in Slots or with the new
	// CPUs and MemoryGB. The caller stops it and starts it again so.
	Migrate bool
	// Renewed says a running job's lease ended and it was placed again:
	// the caller sets its Placed to Now, whether it moved or not.
	Renewed bool
	Lane    bool // runs on a lane (co-located) rather than whole GPUs

	// Sort keys set by the Orderer, compared in turn, lower first.
	k1, k2, k3 float64

	// GPUModel is the chosen GPU model when Run, "" if any; for a job that
	// waits, the model it waits for, when the placer matched it to one.
	GPUModel string
	Slots    []Slot // concrete GPUs when the placer picks them

	// CPUs and MemoryGB are the host resources sized for the job (0 when
	// no sizer ran: the caller's default share applies). Speedup is the
	// sizer's expected throughput relative to that default share.
	CPUs     float64
	MemoryGB float64
	Speedup  float64

	// Reason says in words why the job got this decision.
	Reason string
}

// NomadPriority maps a band to a Nomad job priority (1..100, higher wins):
// 80 for band 0, one less a band, and never below LowestPriority. Nomad's
// eval broker dequeues higher priorities first, so released jobs are
// placed band by band; and since Nomad's preemption evicts only
// allocations of jobs at least 10 below the one it places, no managed job
// is ever evicted by Nomad for another: the planner alone preempts them,
// by holds it decides and the simulator models. A spacing of 10 let a
// start that Nomad scheduled before the hold that freed its GPUs evict
// tasks of Nomad's choosing, often one of a gang.
func NomadPriority(band int) int {
	return max(TopPriority-band, LowestPriority)
}

// TopPriority and LowestPriority bound the managed jobs' Nomad
// priorities, 9 apart: less than the lead of 10 Nomad's preemption needs.
const (
	TopPriority    = 80
	LowestPriority = TopPriority - 9
)

// Seconds converts a duration to the float seconds a Snapshot uses.
func Seconds(d time.Duration) float64 { return d.Seconds() }
