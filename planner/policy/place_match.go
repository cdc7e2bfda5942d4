package policy

import (
	"math"
	"slices"
)

// matchPlacer is AlloX (Le et al., EuroSys '20, as in Gavel's allox.py): a
// min-cost bipartite matching of pending jobs to (free GPU, position) slots.
// A job in position k from the end of a GPU's queue delays the k-1 jobs
// behind it and itself, so it costs k × its run time on that GPU's model.
// Each free GPU then starts the job at the head of its queue; the jobs
// behind wait for the next round. The fairness knob f in [0,1] keeps only
// the ⌈(1−f)·n⌉ longest-waiting of the n pending jobs (by time since
// arrival), but never fewer than there are free GPUs, as AlloX does.
//
// Beyond AlloX, which takes one-GPU jobs only, a g-GPU job enters the
// matching as g one-GPU pieces, goes where most of them go, and starts at
// the head of its queue when g GPUs of the model are free; and GPUs the
// matching leaves idle go to the remaining jobs in rank order.
type matchPlacer struct {
	fairness float64
}

func (matchPlacer) Name() string { return "match" }

func (p matchPlacer) Place(s *Snapshot, r *Result, preemptive, blocking bool) {
	c := s.capacity()
	// Running jobs first, and collect the pending ones in rank order. The
	// matching itself never preempts; under a preemptive order, a running
	// job keeps its GPUs only if the pending jobs ranked above it leave
	// room for it, each on its fastest free model as Hare would, and the
	// matching then places the pending jobs on what is free.
	k, undo := runningKeeper(s, r, preemptive, blocking, 0)
	var pending []int
	for _, i := range r.Order {
		if s.Jobs[i].State == Pending {
			pending = append(pending, i)
		}
	}
	if len(pending) == 0 {
		return
	}
	matched := p.match(s, r, k, pending)
	// Keep the GPUs busy: the rest start in rank order on their fastest
	// free model. That includes matched jobs the matching could not cost,
	// such as live jobs whose run time is unknown. In the same walk, a
	// running job that the preemptive walk displaced keeps running if its
	// GPUs are still free when its rank comes: the pending jobs above it
	// that displaced it did not take them, and stopping it would be for
	// nothing.
	displaced := make(map[int]string, len(undo))
	for _, u := range undo {
		displaced[u.job] = u.reason
	}
	room := make([]int, len(c.models))
	for _, i := range r.Order {
		j, d := &s.Jobs[i], &r.Decisions[i]
		if reason, ok := displaced[i]; ok {
			if k.fits(j) {
				d.Reason = reason
				k.keep(j, d)
			}
			continue
		}
		if j.State != Pending || d.Run || matched[i] {
			continue
		}
		g := max(j.GPUs, 1)
		for m := range room {
			room[m] = k.room(j, m, g)
		}
		if m := fastestFree(c, j, room, g); m >= 0 {
			k.take(j, d, m, g)
			d.Reason = r.join(d.Reason, "; backfills "+d.GPUModel)
		} else {
			d.Reason = r.join(d.Reason, "; waits: not enough free GPUs")
		}
	}
}

// slotGroup is the matching's column for position pos (1 = last) on the
// free GPUs of one model: every free GPU of a model offers a slot at each
// position, all alike, so the group has one slot per free GPU.
type slotGroup struct{ model, pos int }

// match runs the AlloX matching over the pending jobs fairness keeps, starts
// the job at the head of each free GPU's queue, and returns the jobs it
// matched.
func (p matchPlacer) match(s *Snapshot, r *Result, k *keeper, pending []int) map[int]bool {
	c := s.capacity()
	workers := 0
	for m := range c.models {
		workers += k.free[m]
	}
	if workers == 0 {
		return nil // no free GPU: no slot to match to
	}
	win := matchWindow(s, pending, p.fairness, workers)
	// A g-GPU job enters as g one-GPU pieces (at most one per free GPU),
	// each costing what a one-GPU job of its run time would.
	var pieceOf []int // window index of each piece
	pieces := make([]int, len(win))
	for a, i := range win {
		pieces[a] = min(max(s.Jobs[i].GPUs, 1), workers)
		for range pieces[a] {
			pieceOf = append(pieceOf, a)
		}
	}
	// A model with w free GPUs needs positions up to ⌈n/w⌉ for n pieces:
	// the matching fills a position on every GPU before the next (a later
	// position costs more), so no GPU of it holds more.
	var groups []slotGroup
	firstGroup := make([]int, len(c.models))
	for m := range c.models {
		firstGroup[m] = len(groups)
		if w := k.free[m]; w > 0 {
			for pos := 1; pos <= (len(pieceOf)+w-1)/w; pos++ {
				groups = append(groups, slotGroup{m, pos})
			}
		}
	}
	jobTime := make([][]float64, len(win))
	for a, i := range win {
		j := &s.Jobs[i]
		jobTime[a] = make([]float64, len(c.models))
		for m, model := range c.models {
			t := j.timeOn(model)
			if max(j.GPUs, 1) > c.total[m] || math.IsInf(t, 1) || !j.allows(model) {
				jobTime[a][m] = inf // no slot of the model for it
				continue
			}
			// Among equals, the longer-waiting job takes the higher
			// position and runs first: a nudge far below any real difference.
			jobTime[a][m] = t * (1 + 1e-9*float64(a)/float64(len(win)))
		}
	}
	times := make([][]float64, len(pieceOf))
	for x, a := range pieceOf {
		times[x] = jobTime[a]
	}
	pieceModel, piecePos := assignPositions(times, k.free)
	assign := make([]int, len(pieceOf))
	for x := range assign {
		assign[x] = -1
		if m := pieceModel[x]; m >= 0 {
			assign[x] = firstGroup[m] + piecePos[x] - 1
		}
	}
	jobCost := func(a, b int) float64 { return float64(groups[b].pos) * jobTime[a][groups[b].model] }

	group := jobGroups(pieceOf, pieces, assign, jobCost, len(groups))
	// Lay each group's jobs on its model's GPUs, the longest waiting first;
	// a GPU's queue head is its job in the highest position, so the jobs of
	// a position that fit on GPUs with no job above them are heads. Heads
	// start, highest position first; the jobs behind them wait.
	members := make([][]int, len(groups)) // window indices, in window order
	used := make([]int, len(groups))      // pieces
	for a, b := range group {
		if b >= 0 {
			members[b] = append(members[b], a)
			used[b] += pieces[a]
		}
	}
	type head struct{ job, group int }
	var heads []head
	covered := make([]int, len(c.models)) // GPUs of the model with a job in a higher position
	for b := len(groups) - 1; b >= 0; b-- {
		m := groups[b].model
		if b == len(groups)-1 || groups[b+1].model != m {
			covered[m] = 0
		}
		uncovered := used[b] - covered[m]
		for _, a := range members[b] {
			if pieces[a] <= uncovered {
				heads = append(heads, head{win[a], b})
				uncovered -= pieces[a]
			}
		}
		covered[m] = max(covered[m], used[b])
	}
	slices.SortStableFunc(heads, func(x, y head) int { return groups[y.group].pos - groups[x.group].pos })
	isHead := make(map[int]bool, len(heads))
	for _, h := range heads {
		isHead[h.job] = true
		j, d := &s.Jobs[h.job], &r.Decisions[h.job]
		m, g := groups[h.group].model, max(j.GPUs, 1)
		if k.room(j, m, g) >= g {
			k.take(j, d, m, g)
			d.Reason = r.join(d.Reason, "; matched to "+d.GPUModel)
		} else {
			d.GPUModel = c.models[m]
			d.Reason = r.join(d.Reason, "; matched to "+c.models[m]+", waits for it")
		}
	}
	matched := make(map[int]bool, len(win))
	for a, b := range group {
		if b < 0 {
			continue
		}
		i := win[a]
		matched[i] = true
		if !isHead[i] {
			d := &r.Decisions[i]
			d.GPUModel = c.models[groups[b].model]
			d.Reason = r.join(d.Reason, "; matched to "+d.GPUModel+", waits behind its queue")
		}
	}
	return matched
}

// jobGroups puts each job where most of its pieces went (the cheaper
// group on a tie); a one-GPU job, where its one piece went; -1 where none
// of its pieces was matched.
func jobGroups(pieceOf, pieces, assign []int, jobCost func(a, b int) float64, nGroups int) []int {
	group := make([]int, len(pieces))
	votes := make([]int, nGroups)
	for x := 0; x < len(pieceOf); {
		a := pieceOf[x]
		group[a] = -1
		for y := x; y < x+pieces[a]; y++ {
			if b := assign[y]; b >= 0 {
				votes[b]++
				if g := group[a]; g < 0 || votes[b] > votes[g] || (votes[b] == votes[g] && jobCost(a, b) < jobCost(a, g)) {
					group[a] = b
				}
			}
		}
		for y := x; y < x+pieces[a]; y++ {
			if b := assign[y]; b >= 0 {
				votes[b] = 0
			}
		}
		x += pieces[a]
	}
	return group
}

// matchWindow is the pending jobs the matching considers, longest since
// arrival first: the ⌈(1−f)·n⌉ oldest of n, never fewer than the free
// GPUs, as AlloX does: with f = 0 the whole queue.
func matchWindow(s *Snapshot, pending []int, fairness float64, workers int) []int {
	n := len(pending)
	keep := n
	if fairness > 0 {
		keep = int(math.Ceil((1 - fairness) * float64(n)))
	}
	keep = min(max(keep, workers), n)
	byAge := slices.Clone(pending)
	slices.SortStableFunc(byAge, func(a, b int) int {
		aa, ab := s.Jobs[a].Arrival, s.Jobs[b].Arrival
		switch {
		case aa < ab:
			return -1
		case aa > ab:
			return 1
		}
		return 0
	})
	return byAge[:keep]
}

// preemption is a running job the preemptive walk displaced, with its
// reason before the walk.
type preemption struct {
	job    int
	reason string
}

// runningKeeper is the keeper the matching and earliest placers start
// from: preemptive, the running jobs the pending ones ranked above them do
// not displace, and the displaced ones; otherwise every running job. With
// a blind horizon (> 0) it never reads remaining work or time.
func runningKeeper(s *Snapshot, r *Result, preemptive, blocking bool, blind float64) (*keeper, []preemption) {
	if preemptive {
		return keepRunningBelowPending(s, r, blocking, blind)
	}
	return walkByCountKeeper(s, r, false, blocking, nil, shareLanes), nil
}

// keepRunningBelowPending runs the preemptive count walk to learn which
// running jobs the pending jobs ranked above them displace, then undoes the
// walk's starts, and returns a keeper holding only the running jobs kept,
// and the displaced ones in rank order.
func keepRunningBelowPending(s *Snapshot, r *Result, blocking bool, blind float64) (*keeper, []preemption) {
	c := s.capacity()
	reasons := make(map[int]string, len(s.Jobs))
	for i := range s.Jobs {
		reasons[i] = r.Decisions[i].Reason
	}
	walkByCountKeeper(s, r, true, blocking, func(j *Job, free []int, g int) int {
		if blind > 0 {
			return fastestFreeBy(c, j, free, g, func(model string) float64 { return j.blindTimeOn(j.GPUModel, model, blind) })
		}
		return fastestFree(c, j, free, g)
	}, shareLanes)
	k := &keeper{c: c, s: s, free: append([]int(nil), c.total...), spare: make([]int, len(c.total)), share: shareLanes}
	var displaced []preemption
	for _, i := range r.Order {
		j, d := &s.Jobs[i], &r.Decisions[i]
		switch {
		case j.State == Pending:
			d.Run, d.GPUModel, d.Lane, d.Reason = false, "", false, reasons[i]
		case d.Run:
			k.keep(j, d)
		default:
			displaced = append(displaced, preemption{i, reasons[i]})
		}
	}
	return k, displaced
}
