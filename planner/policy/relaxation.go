package policy

import (
	"cmp"
	"slices"

	"github.com/caravan-gpu/caravan/internal/minheap"
)

// RelaxedJob is one job of the single-machine relaxation that Hare orders
// by and bounds total weighted completion time with: the cluster's G GPUs
// become one machine of speed G, on which the job needs GPUs × its fastest
// run time of work, released at Release.
type RelaxedJob struct {
	Release float64 // seconds
	GPUs    int
	Time    float64 // run time alone on its fastest GPU model, seconds
	Weight  float64 // 0 means 1
}

// WeightedFlowBound is a lower bound on Σ w_j (C_j − Release_j), the total
// weighted completion time measured from release (weighted JCT, unnormalised),
// of any schedule of jobs on gpus GPUs where job j holds its GPUs whole for
// at least its Time and runs at most at its fastest rate. It is the larger
// of two bounds:
//
//   - each job ends at least Time after its release: Σ w_j Time_j;
//   - the mean busy time M_j of a job's work is at least its mean busy
//     time in the relaxation's preemptive WSPT schedule, which minimises
//     Σ w_j M_j on one machine with release dates (Goemans 1997), and a job
//     that runs Time_j before C_j has M_j ≤ C_j − Time_j/2, so
//     Σ w_j C_j ≥ Σ w_j (M_j^WSPT + Time_j/2).
//
// Lanes and sizing can run a job faster than alone on its GPUs, so the
// bound holds for whole-GPU, unsized runs.
func WeightedFlowBound(jobs []RelaxedJob, gpus int) float64 {
	if gpus <= 0 || len(jobs) == 0 {
		return 0
	}
	type item struct {
		release, work, left, w, t float64
		busy                      float64 // ∫ t dt over the work done so far
	}
	items := make([]item, 0, len(jobs))
	trivial := 0.0
	for _, j := range jobs {
		w := j.Weight
		if w <= 0 {
			w = 1
		}
		if j.Time <= 0 || j.Time != j.Time || j.Time > 1e300 {
			continue // no work, or unknown
		}
		trivial += w * j.Time
		work := float64(max(j.GPUs, 1)) * j.Time / float64(gpus)
		items = append(items, item{release: j.Release, work: work, left: work, w: w, t: j.Time})
	}
	slices.SortStableFunc(items, func(a, b item) int { return cmp.Compare(a.release, b.release) })
	// Preemptive WSPT: at every moment the released job with the largest
	// w / work runs; events are releases and completions.
	// A heap of the released jobs, on w/work, largest first (its Key is
	// −w/work), then index (Tie).
	var avail []minheap.Entry[struct{}]
	now, next := 0.0, 0
	for next < len(items) || len(avail) > 0 {
		if len(avail) == 0 {
			now = max(now, items[next].release)
		}
		for next < len(items) && items[next].release <= now {
			avail = minheap.Push(avail, minheap.Entry[struct{}]{Key: -items[next].w / items[next].work, Tie: next})
			next++
		}
		top := &items[avail[0].Tie]
		if next < len(items) && items[next].release < now+top.left {
			// Preempted at the next release, if it comes before the end.
			until := items[next].release
			top.busy += (until - now) * (until + now) / 2
			top.left -= until - now
			now = until
			continue
		}
		until := now + top.left
		top.busy += top.left * (until + now) / 2
		top.left, now = 0, until
		_, avail = minheap.Pop(avail)
	}
	mean := 0.0
	for _, it := range items {
		mean += it.w * (it.busy/it.work + it.t/2 - it.release)
	}
	return max(trivial, mean)
}
