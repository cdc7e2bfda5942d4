package policy

// shortestRemainingOrder is the oracle that knows durations: shortest
// remaining time first (srtf) or, with gpuTime, shortest remaining
// GPU-time first (srsf). Jobs with unknown durations go last. It preempts.
type shortestRemainingOrder struct{ gpuTime bool }

func (o shortestRemainingOrder) Name() string {
	if o.gpuTime {
		return "srsf"
	}
	return "srtf"
}

func (shortestRemainingOrder) Preemptive() bool      { return true }
func (shortestRemainingOrder) keyFallsWhileRunning() {}

// key is the remaining time, times the GPUs under srsf.
func (o shortestRemainingOrder) key(_ *History, j *Job, _ *RemainingMemo) float64 {
	k := j.bestTime()
	if o.gpuTime {
		k *= float64(max(j.GPUs, 1))
	}
	return k
}

func (o shortestRemainingOrder) Order(s *Snapshot, ds []Decision) float64 {
	reason := "shortest remaining time first"
	if o.gpuTime {
		reason = "shortest remaining GPU-time first"
	}
	for i := range ds {
		ds[i].k1 = o.key(nil, &s.Jobs[i], nil)
		ds[i].Reason = reason
	}
	return inf
}
