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

func (o shortestRemainingOrder) Order(s *Snapshot, ds []Decision) float64 {
	for i := range ds {
		j := &s.Jobs[i]
		k := j.bestTime()
		reason := "shortest remaining time first"
		if o.gpuTime {
			k *= float64(max(j.GPUs, 1))
			reason = "shortest remaining GPU-time first"
		}
		ds[i].k1 = k
		ds[i].Reason = reason
	}
	return inf
}
