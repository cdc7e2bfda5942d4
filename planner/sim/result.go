package sim

import (
	"math"
	"slices"

	"github.com/caravan-gpu/caravan/planner/policy"
)

// Summary is a run's headline metrics; times are in seconds.
type Summary struct {
	Policy      string  `json:"policy"`
	Jobs        int     `json:"jobs"`
	Unfinished  int     `json:"unfinished"`
	AvgJCT      float64 `json:"avg_jct"`
	MedianJCT   float64 `json:"median_jct"`
	P95JCT      float64 `json:"p95_jct"`
	P99JCT      float64 `json:"p99_jct"`
	WeightedJCT float64 `json:"weighted_jct"`
	Makespan    float64 `json:"makespan"`
	AvgQueueing float64 `json:"avg_queueing"`
	// Utilization is busy GPU-seconds over GPUs × makespan.
	Utilization float64 `json:"gpu_utilization"`
	// FTF is finish-time fairness: JCT over the job's run time alone on
	// its fastest GPUs (1 is ideal), mean and worst.
	FTFMean     float64 `json:"ftf_mean"`
	FTFMax      float64 `json:"ftf_max"`
	Preemptions int     `json:"preemptions"`
	Migrations  int     `json:"migrations"`
}

func (s *simulator) result() *Result {
	res := &Result{Policy: s.cfg.Policy.Name, GPUs: s.gpus, Util: s.util, Rounds: s.rounds, Restarts: s.restarts, snapErr: s.snapErr}
	res.Jobs = make([]JobResult, len(s.jobs))
	for i := range s.jobs {
		js := &s.jobs[i]
		jr := &res.Jobs[i] // filled in place: a copy of each costs more
		*jr = JobResult{ID: js.ID, GPUs: js.GPUs, Weight: js.Weight, Arrival: js.Arrival, Start: js.start,
			Queueing: js.queued, Isolated: js.isolated, Preemptions: js.preempts, Stops: js.stops, RanOn: js.ranOn, Migrations: js.migrations, GPUModel: js.GPUModel,
			Nodes: js.nodes, Model: js.Model}
		if !js.done {
			jr.Finish, jr.JCT, jr.Start = math.NaN(), math.NaN(), math.NaN()
		} else {
			jr.Finish = js.finish
			jr.JCT = js.finish - js.Arrival
		}
	}
	res.Summary = Summarize(s.cfg.Policy.Name, s.gpus, res.Jobs, s.busyArea)
	return res
}

// Summarize computes a run's metrics from its jobs: a job with a NaN JCT
// is unfinished. busyArea is the GPU-seconds the GPUs were busy, for the
// utilisation; the live replay computes the same metrics from what Nomad
// recorded, with BusyArea.
func Summarize(policyName string, gpus int, jobs []JobResult, busyArea float64) Summary {
	jcts := make([]float64, 0, len(jobs))
	sum := Summary{Policy: policyName, Jobs: len(jobs)}
	var wsum, wjct, ftfSum float64
	ftfN := 0
	first, last := math.Inf(1), 0.0
	for i := range jobs {
		jr := &jobs[i]
		first = min(first, jr.Arrival)
		if math.IsNaN(jr.JCT) {
			sum.Unfinished++
			continue
		}
		last = max(last, jr.Finish)
		jcts = append(jcts, jr.JCT)
		w := jr.Weight
		if w <= 0 {
			w = 1
		}
		wsum += w
		wjct += w * jr.JCT
		sum.AvgQueueing += jr.Queueing
		sum.Preemptions += jr.Preemptions
		sum.Migrations += jr.Migrations
		if jr.Isolated > 0 {
			f := jr.JCT / jr.Isolated
			ftfSum += f
			ftfN++
			sum.FTFMax = max(sum.FTFMax, f)
		}
	}
	if n := len(jcts); n > 0 {
		slices.Sort(jcts)
		total := 0.0
		for _, v := range jcts {
			total += v
		}
		sum.AvgJCT = total / float64(n)
		sum.MedianJCT = Percentile(jcts, 50)
		sum.P95JCT = Percentile(jcts, 95)
		sum.P99JCT = Percentile(jcts, 99)
		sum.WeightedJCT = wjct / wsum
		sum.AvgQueueing /= float64(n)
		sum.Makespan = last - first
		if sum.Makespan > 0 && gpus > 0 {
			sum.Utilization = busyArea / (float64(gpus) * sum.Makespan)
		}
	}
	if ftfN > 0 {
		sum.FTFMean = ftfSum / float64(ftfN)
	}
	return sum
}

// WeightedJCTBound is a lower bound on the weighted average JCT
// (Summary.WeightedJCT) that any policy can reach on these jobs and gpus
// GPUs, from Hare's single-machine relaxation (policy.WeightedFlowBound),
// each job needing its isolated run time on its GPUs. It holds for runs on
// whole GPUs without sizing, which lanes and Synergy's sizing can beat.
func WeightedJCTBound(jobs []JobResult, gpus int) float64 {
	relaxed := make([]policy.RelaxedJob, 0, len(jobs))
	wsum := 0.0
	for _, j := range jobs {
		w := j.Weight
		if w <= 0 {
			w = 1
		}
		wsum += w
		relaxed = append(relaxed, policy.RelaxedJob{Release: j.Arrival, GPUs: j.GPUs, Time: j.Isolated, Weight: w})
	}
	if wsum == 0 {
		return 0
	}
	return policy.WeightedFlowBound(relaxed, gpus) / wsum
}

// BusyArea integrates busy GPUs over time: util is a step function (Busy
// GPUs from T on, sorted by T), counted up to end.
func BusyArea(util []UtilPoint, end float64) float64 {
	area := 0.0
	for i, p := range util {
		next := end
		if i+1 < len(util) {
			next = min(util[i+1].T, end)
		}
		if next > p.T {
			area += p.Busy * (next - p.T)
		}
	}
	return area
}

// Percentile is the nearest-rank percentile p (0 to 100) of sorted values;
// the median of an even count is the mean of the middle two.
func Percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	if p == 50 && len(sorted)%2 == 0 {
		return (sorted[len(sorted)/2-1] + sorted[len(sorted)/2]) / 2
	}
	k := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(k, 1), len(sorted))-1]
}
