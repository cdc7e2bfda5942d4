package policy

// fastestPlacer is Hare's greedy step: each job, in rank order, gets the
// free GPU model on which it finishes earliest, using the job's per-model
// throughput (any model when it has none).
type fastestPlacer struct{}

func (fastestPlacer) Name() string { return "fastest" }
func (fastestPlacer) countsOnly()  {}
func (fastestPlacer) firstFit()    {}

func (fastestPlacer) Place(s *Snapshot, r *Result, preemptive, blocking bool) {
	c := s.capacity()
	walkByCount(s, r, preemptive, blocking, func(j *Job, free []int, g int) int {
		return fastestFree(c, j, free, g)
	}, shareLanes)
}

// fastestFree is the model with room for g GPUs that runs j fastest; ties
// go to the model with more free GPUs.
func fastestFree(c *capacity, j *Job, free []int, g int) int {
	return fastestFreeBy(c, j, free, g, j.timeOn)
}

// fastestFreeBy is fastestFree with j's time on each model from timeOn.
func fastestFreeBy(c *capacity, j *Job, free []int, g int, timeOn func(model string) float64) int {
	best, bestT := -1, inf
	for m, f := range free {
		if f < g || !j.allows(c.models[m]) {
			continue
		}
		t := timeOn(c.models[m])
		if best < 0 || t < bestT || (t == bestT && f > free[best]) {
			best, bestT = m, t
		}
	}
	return best
}
