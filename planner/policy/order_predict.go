package policy

// runningBias divides a running job's predicted remaining service in the
// order: a waiting job preempts it only when predicted to need less than
// a quarter as much. Without it, jobs of like predictions preempt each
// other back and forth as each one's prediction grows with its service
// (seven times 2D-LAS's preemptions on the Philly trace). Chosen by a
// sweep on traces the default is not reported on (docs/simulator.md, A
// default that never loses).
const runningBias = 4.0

// DefaultPredictFloor is predict's floor (Config.PredictFloor) in
// GPU-seconds: a running job the history cannot predict yields to a new
// one after 4 GPU-seconds of service.
const DefaultPredictFloor = 1.0

// predictOrder ranks jobs by the GPU-seconds they are expected to use
// before they finish, learned from the sizes of finished jobs of the same
// group and GPU count (Snapshot.History) given the service each job has
// attained: shortest predicted remaining GPU-time first. It never reads a
// job's own duration. It preempts.
type predictOrder struct {
	floor float64 // Config.PredictFloor
}

func (predictOrder) Name() string     { return "predict" }
func (predictOrder) Preemptive() bool { return true }

// predictKey is j's key: its predicted remaining GPU-time, less for a
// running job; ok is false where the history is too thin to predict.
func (o predictOrder) predictKey(h *History, j *Job, m *RemainingMemo) (key float64, ok bool) {
	rem, ok := h.ExpectedRemainingMemo(j.Group, j.GPUs, j.Attained, m)
	if !ok {
		rem = max(j.Attained, o.floor)
	}
	if j.State == Running {
		rem /= runningBias
	}
	return rem, ok
}

func (o predictOrder) key(h *History, j *Job, m *RemainingMemo) float64 {
	k, _ := o.predictKey(h, j, m)
	return k
}

func (o predictOrder) Order(s *Snapshot, ds []Decision) float64 {
	for i := range ds {
		rem, ok := o.predictKey(s.History, &s.Jobs[i], nil)
		ds[i].k1 = rem
		ds[i].Reason = "shortest predicted remaining GPU-time first"
		if !ok {
			ds[i].Reason = "too few finished jobs larger than it: predicted to use as much again as it has"
		}
	}
	return inf
}
