package policy

import (
	"math"
	"slices"
)

// DefaultMatchWindow bounds how many pending jobs one AlloX matching
// considers; the assignment costs O(window³ × models).
const DefaultMatchWindow = 48

// matchPlacer is AlloX: a min-cost bipartite matching of pending jobs to
// (GPU model, position) pairs. A job in position k from the end of a
// model's schedule delays k jobs, so it costs k × its run time on that
// model (scaled by its GPUs over the model's GPUs, so that multi-GPU jobs
// and pools of different sizes compare). Each model then starts its jobs
// from the highest position down while they fit. The fairness knob in
// [0,1] narrows the window to the longest-waiting share of pending jobs:
// 0 matches the whole window for efficiency, 1 only the oldest job.
// GPUs the matching leaves idle go to the remaining jobs in rank order.
type matchPlacer struct {
	fairness float64
	window   int
}

func (matchPlacer) Name() string { return "match" }

func (p matchPlacer) Place(s *Snapshot, r *Result, preemptive, blocking bool) {
	c := s.capacity()
	// Running jobs first, and collect the pending ones in rank order. The
	// matching itself never preempts; under a preemptive order, a running
	// job keeps its GPUs only if the pending jobs ranked above it leave
	// room for it, each on its fastest free model as Hare would, and the
	// matching then places the pending jobs on what is free.
	var k *keeper
	var undo []preemption
	if preemptive {
		k, undo = keepRunningBelowPending(s, r, blocking)
	} else {
		k = walkByCountKeeper(s, r, false, blocking, nil, shareLanes)
	}
	var pending []int
	for _, i := range r.Order {
		if s.Jobs[i].State == Pending {
			pending = append(pending, i)
		}
	}
	if len(pending) == 0 {
		return
	}
	window := p.window
	if window <= 0 {
		window = DefaultMatchWindow
	}
	n := len(pending)
	if p.fairness > 0 {
		n = max(1, int(math.Ceil((1-p.fairness)*float64(n))))
	}
	// The longest-waiting jobs form the window.
	byWait := slices.Clone(pending)
	slices.SortStableFunc(byWait, func(a, b int) int {
		wa, wb := s.Jobs[a].Wait, s.Jobs[b].Wait
		switch {
		case wa > wb:
			return -1
		case wa < wb:
			return 1
		}
		return 0
	})
	win := byWait[:min(n, window)]
	models := len(c.models)
	cols := models * len(win)
	cost := make([][]float64, len(win))
	for a, i := range win {
		j := &s.Jobs[i]
		g := float64(max(j.GPUs, 1))
		cost[a] = make([]float64, cols)
		for m := 0; m < models; m++ {
			t := j.timeOn(c.models[m])
			for k := 0; k < len(win); k++ {
				v := float64(k+1) * t * g / float64(max(c.total[m], 1))
				if j.GPUs > c.total[m] || math.IsInf(t, 1) || !j.allows(c.models[m]) {
					v = 1e18
				}
				cost[a][m*len(win)+k] = v
			}
		}
	}
	assign := hungarian(cost)
	type pick struct{ job, model, pos int }
	var picks []pick
	for a, col := range assign {
		if col < 0 || cost[a][col] >= 1e18 {
			continue
		}
		picks = append(picks, pick{win[a], col / len(win), col % len(win)})
	}
	// Highest position first: those are the jobs the matching runs first.
	slices.SortStableFunc(picks, func(a, b pick) int { return b.pos - a.pos })
	matched := make(map[int]bool, len(picks))
	for _, pk := range picks {
		matched[pk.job] = true
		j, d := &s.Jobs[pk.job], &r.Decisions[pk.job]
		g := max(j.GPUs, 1)
		if k.room(j, pk.model, g) >= g {
			k.take(j, d, pk.model, g)
			d.Reason = r.join(d.Reason, "; matched to "+d.GPUModel)
		} else {
			d.GPUModel = c.models[pk.model]
			d.Reason = r.join(d.Reason, "; matched to "+c.models[pk.model]+", waits for it")
		}
	}
	// Keep the GPUs busy: the rest start in rank order on their fastest
	// free model. That includes window jobs the matching could not cost,
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

// preemption is a running job the preemptive walk displaced, with its
// reason before the walk.
type preemption struct {
	job    int
	reason string
}

// keepRunningBelowPending runs the preemptive count walk to learn which
// running jobs the pending jobs ranked above them displace, then undoes the
// walk's starts, and returns a keeper holding only the running jobs kept,
// and the displaced ones in rank order.
func keepRunningBelowPending(s *Snapshot, r *Result, blocking bool) (*keeper, []preemption) {
	c := s.capacity()
	reasons := make(map[int]string, len(s.Jobs))
	for i := range s.Jobs {
		reasons[i] = r.Decisions[i].Reason
	}
	walkByCountKeeper(s, r, true, blocking, func(j *Job, free []int, g int) int {
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

// hungarian solves the rectangular assignment problem (rows <= columns)
// and returns the column of each row. It is the O(rows² × columns)
// potentials method.
func hungarian(cost [][]float64) []int {
	n := len(cost)
	if n == 0 {
		return nil
	}
	m := len(cost[0])
	u := make([]float64, n+1)
	v := make([]float64, m+1)
	p := make([]int, m+1) // p[col] = row (1-based), 0 = free
	way := make([]int, m+1)
	minv := make([]float64, m+1)
	used := make([]bool, m+1)
	for i := 1; i <= n; i++ {
		p[0] = i
		j0 := 0
		for k := range minv {
			minv[k] = math.Inf(1)
			used[k] = false
		}
		for {
			used[j0] = true
			i0, delta, j1 := p[j0], math.Inf(1), 0
			for j := 1; j <= m; j++ {
				if used[j] {
					continue
				}
				cur := cost[i0-1][j-1] - u[i0] - v[j]
				if cur < minv[j] {
					minv[j], way[j] = cur, j0
				}
				if minv[j] < delta {
					delta, j1 = minv[j], j
				}
			}
			for j := 0; j <= m; j++ {
				if used[j] {
					u[p[j]] += delta
					v[j] -= delta
				} else {
					minv[j] -= delta
				}
			}
			j0 = j1
			if p[j0] == 0 {
				break
			}
		}
		for j0 != 0 {
			j1 := way[j0]
			p[j0] = p[j1]
			j0 = j1
		}
	}
	out := make([]int, n)
	for k := range out {
		out[k] = -1
	}
	for j := 1; j <= m; j++ {
		if p[j] > 0 {
			out[p[j]-1] = j - 1
		}
	}
	return out
}
