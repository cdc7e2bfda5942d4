package policy

// hareOrder minimises total weighted JCT on heterogeneous GPUs, after Hare:
// jobs are ordered by the Smith ratio of a relaxation where each job runs
// on its fastest GPU model, GPUs × best time ÷ weight, lowest first. The
// matching placer ("fastest") then gives each job the free model that
// finishes it earliest. It does not preempt.
type hareOrder struct{}

func (hareOrder) Name() string     { return "hare" }
func (hareOrder) Preemptive() bool { return false }

func (hareOrder) Order(s *Snapshot, ds []Decision) float64 {
	for i := range ds {
		j := &s.Jobs[i]
		ds[i].k1 = float64(max(j.GPUs, 1)) * j.bestTime() / j.weight()
		ds[i].Reason = "weighted shortest GPU-time on the fastest model"
	}
	return inf
}
