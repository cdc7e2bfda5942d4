package policy

// consolidatedPlacer counts first (walkByCount) and then gives each job
// concrete GPUs, as few nodes as possible: the fullest single node that
// still has room (best fit), else whole nodes, most free first. A job the
// count admitted but fragmentation cannot place waits.
type consolidatedPlacer struct{}

func (consolidatedPlacer) Name() string { return "consolidated" }

func (consolidatedPlacer) Place(s *Snapshot, r *Result, preemptive, blocking bool) {
	consolidate(s, r, preemptive, blocking, nil)
}

// consolidate is the placement consolidatedPlacer makes and packPlacer
// builds on: count, then give every job that starts whole GPUs. placed,
// when set, sees each job that starts, in rank order, right after its
// placement. It returns the round's occupancy.
func consolidate(s *Snapshot, r *Result, preemptive, blocking bool, placed func(i int, j *Job, d *Decision, occ *occupancy)) *occupancy {
	walkByCountAgnostic(s, r, preemptive, blocking, false)
	occ := newOccupancy(s, r)
	for _, i := range r.Order {
		j, d := &s.Jobs[i], &r.Decisions[i]
		if !d.Run || j.State == Running {
			continue
		}
		occ.placeWhole(s, j, d)
		if placed != nil {
			placed(i, j, d, occ)
		}
	}
	return occ
}
