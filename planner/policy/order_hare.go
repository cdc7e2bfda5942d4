package policy

// hareOrder minimises total weighted JCT on heterogeneous GPUs, after Hare:
// it orders jobs by Smith's rule on the single-machine relaxation (see
// RelaxedJob), where the cluster's GPUs are one machine and a job needs
// GPUs × its fastest run time of work: w / work, highest first, which for
// jobs all present is the relaxation's optimal order. The relaxation's
// optimum bounds what any schedule of the round's jobs can reach
// (Result.Bound). The placer ("earliest") then gives each job, in that
// order, the GPUs on which it would finish earliest. It does not preempt.
type hareOrder struct{}

func (hareOrder) Name() string     { return "hare" }
func (hareOrder) Preemptive() bool { return false }

func (hareOrder) Order(s *Snapshot, ds []Decision) float64 {
	for i := range ds {
		j := &s.Jobs[i]
		ds[i].k1 = float64(max(j.GPUs, 1)) * j.bestTime() / j.weight()
		ds[i].Reason = "Smith's rule on the relaxation: weighted shortest GPU-time on the fastest model"
	}
	return inf
}

// bound is the relaxation's bound on Σ w_j (C_j − now) over the round's
// jobs whose run time is known (WeightedFlowBound with every job released
// now). With no release to wait for, preemptive WSPT is Smith's order,
// which r.Order already is, so the bound takes one pass.
func (hareOrder) bound(s *Snapshot, r *Result) float64 {
	gpus := float64(s.capacity().healthy())
	if gpus == 0 {
		return 0
	}
	done, trivial, mean := 0.0, 0.0, 0.0
	for _, i := range r.Order {
		j := &s.Jobs[i]
		t := j.bestTime()
		if t <= 0 || t > 1e300 {
			continue
		}
		w := j.weight()
		work := float64(max(j.GPUs, 1)) * t / gpus
		done += work
		trivial += w * t
		mean += w * (done - work/2 + t/2)
	}
	return max(trivial, mean)
}
