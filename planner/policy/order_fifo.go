package policy

// fifoOrder serves jobs by arrival. With a blocking Policy it is YARN-CS's
// strict FIFO; without, it is fit-job-first (fjf): jobs that do not fit are
// skipped. It never preempts.
type fifoOrder struct{}

func (fifoOrder) Name() string     { return "fifo" }
func (fifoOrder) Preemptive() bool { return false }
func (fifoOrder) arrivalOrdered()  {}

func (fifoOrder) Order(s *Snapshot, ds []Decision) float64 {
	for i := range ds {
		ds[i].k1 = s.Jobs[i].Arrival
		ds[i].Reason = "arrival order"
	}
	return inf
}
