package policy

import (
	"slices"

	"github.com/caravan-gpu/caravan/internal/minheap"
)

// earliestPlacer is Hare's greedy step, list scheduling in rank order: each
// job goes to the GPUs on which it would finish earliest, counting when
// busy GPUs free up (from running jobs' remaining time, where known) and
// the GPUs the jobs ranked above it were given. A job may so wait for a
// faster model that frees soon rather than start on a slower one now;
// the GPUs it waits for are planned for it, and a job ranked below it
// uses them now only if it finishes before the planned start. Running
// jobs keep their GPUs unless the order preempts.
//
// Blind, it never reads a job's remaining work, which a live planner does
// not know: it expects each job to run as long again as it has (at least
// a round), at the speeds its profile gives (Job.blindTimeOn).
type earliestPlacer struct {
	blind   bool
	horizon float64 // blind: the least run time a job is expected to have left (0: a Gavel round)
}

func (p earliestPlacer) Name() string {
	if p.blind {
		return earliestBlindPlacer
	}
	return "earliest"
}
func (earliestPlacer) countsOnly() {}

func (p earliestPlacer) Place(s *Snapshot, r *Result, preemptive, blocking bool) {
	horizon := 0.0 // clairvoyant
	if p.blind {
		horizon = orRound(p.horizon)
	}
	k, undo := runningKeeper(s, r, preemptive, blocking, horizon)
	tl := newTimeline(s, r, k, horizon)
	displaced := make(map[int]string, len(undo))
	for _, u := range undo {
		displaced[u.job] = u.reason
	}
	blocked := false
	for _, i := range r.Order {
		j, d := &s.Jobs[i], &r.Decisions[i]
		if reason, ok := displaced[i]; ok {
			if k.fits(j) {
				d.Reason = reason
				k.keep(j, d)
				tl.running(j, d)
			}
			continue
		}
		if j.State != Pending || d.Run {
			continue
		}
		switch {
		case blocked:
			d.Reason = r.join(d.Reason, "; waits behind the head of the queue")
			continue
		case tl.full():
			// Nothing can start now: the rest only wait, so their plan
			// is not worked out.
			d.Reason = r.join(d.Reason, "; waits: not enough free GPUs")
			blocked = blocking
			continue
		}
		if !tl.place(j, d) {
			d.Reason = r.join(d.Reason, "; waits: not enough free GPUs")
			blocked = blocking
			continue
		}
		d.Reason = r.join(d.Reason, tl.note(d.GPUModel, d.Run))
		if !d.Run {
			blocked = blocking
		}
	}
}

// timeline is when the GPUs of each model become free, as the walk plans
// them. A GPU is free now, free now but planned for a waiting job from a
// later time (a hole a shorter job may fill), or busy until a time.
type timeline struct {
	s       *Snapshot
	c       *capacity
	k       *keeper
	now     float64
	horizon float64              // > 0: times are guessed, at least this (Job.blindTimeOn)
	busy    []floatHeap          // per model: when each busy or planned GPU frees
	holes   [][]float64          // per model: end of each free-now GPU's hole
	front   []int                // kth's scratch
	notes   map[string][2]string // model → its notes for a job that waits, starts
}

// note is the reason's note for a job placed on model: kept across
// rounds, since building it for every waiting job of every round was most
// of a run's allocation.
func (tl *timeline) note(model string, starts bool) string {
	n, ok := tl.notes[model]
	if !ok {
		n = [2]string{"; waits for a " + model + " to free up: it finishes earlier there",
			"; starts on " + model + ", where it finishes earliest"}
		if tl.notes == nil {
			tl.notes = map[string][2]string{}
		}
		tl.notes[model] = n
	}
	if starts {
		return n[1]
	}
	return n[0]
}

// newTimeline builds the round's timeline in r's scratch timeline, whose
// storage it reuses: a timeline per round was most of a run's allocation.
func newTimeline(s *Snapshot, r *Result, k *keeper, horizon float64) *timeline {
	c := s.capacity()
	tl := &r.timeline
	*tl = timeline{s: s, c: c, k: k, now: s.Now, horizon: horizon, busy: emptied(tl.busy, len(c.models)),
		holes: emptied(tl.holes, len(c.models)), front: tl.front, notes: tl.notes}
	for i := range s.Jobs {
		if j, d := &s.Jobs[i], &r.Decisions[i]; j.State == Running && d.Run {
			tl.running(j, d)
		}
	}
	// GPUs busy with lane jobs, or otherwise of unknown end, never free up
	// as far as the plan knows.
	for m := range c.models {
		for len(tl.busy[m]) < c.total[m]-k.free[m] {
			tl.busy[m].push(inf)
		}
	}
	return tl
}

// running enters a running job that keeps its whole GPUs: they free up
// when it ends.
func (tl *timeline) running(j *Job, d *Decision) {
	m := tl.c.runningModel(tl.s, j)
	if m < 0 || d.Lane {
		return
	}
	end := tl.now + tl.timeOn(j, tl.c.models[m])
	for range max(j.GPUs, 1) {
		tl.busy[m].push(end)
	}
}

// timeOn is the run time the plan expects j to have left on model.
func (tl *timeline) timeOn(j *Job, model string) float64 {
	if tl.horizon == 0 {
		return j.timeOn(model)
	}
	from := j.GPUModel // a waiting job's: the model it last ran on
	if j.State == Running && tl.c.find(from) < 0 {
		from = tl.c.models[tl.c.runningModel(tl.s, j)]
	}
	return j.blindTimeOn(from, model, tl.horizon)
}

// full says no job can start now: no free GPU, spare lane or hole.
func (tl *timeline) full() bool {
	for m := range tl.c.models {
		if tl.k.free[m] > 0 || tl.k.spare[m] > 0 || len(tl.holes[m]) > 0 {
			return false
		}
	}
	return true
}

// place plans j on the model where it finishes earliest, starting it now
// (d.Run) or planning the GPUs it waits for (d.GPUModel set). It returns
// false when j can finish nowhere in a known time and cannot start now.
func (tl *timeline) place(j *Job, d *Decision) bool {
	g := max(j.GPUs, 1)
	best, bestNow, bestFinish, bestRoom := -1, false, inf, -1
	for m, model := range tl.c.models {
		if !j.allows(model) || g > tl.c.total[m] {
			continue
		}
		t := tl.timeOn(j, model)
		room := tl.k.room(j, m, g) + tl.holesFitting(m, tl.now+t)
		now, finish := room >= g, tl.now+t
		if !now {
			finish = max(tl.busy[m].kth(g-tl.k.free[m], &tl.front), tl.now) + t
		}
		// Earliest finish; on a tie, starting now, then the most room.
		better := finish < bestFinish || (finish == bestFinish && (now && !bestNow || now == bestNow && room > bestRoom))
		if best < 0 || better {
			best, bestNow, bestFinish, bestRoom = m, now, finish, room
		}
	}
	switch {
	case best < 0:
		return false
	case bestNow:
		tl.startNow(j, d, best, g)
		return true
	case bestFinish >= inf:
		return false // it would wait for GPUs of unknown end
	}
	t := tl.timeOn(j, tl.c.models[best])
	tl.reserve(best, g, bestFinish-t, bestFinish)
	d.GPUModel = tl.c.models[best]
	return true
}

// startNow starts j on model m, filling holes it ends before if the free
// GPUs and spare lanes are not enough.
func (tl *timeline) startNow(j *Job, d *Decision, m, g int) {
	t := tl.timeOn(j, tl.c.models[m])
	fromHoles := max(0, g-tl.k.room(j, m, g))
	if fromHoles > 0 {
		// Use the holes that end first among those long enough, keeping
		// the longer ones for longer jobs.
		h := tl.holes[m]
		slices.Sort(h)
		at, _ := slices.BinarySearch(h, tl.now+t)
		tl.holes[m] = append(h[:at], h[at+fromHoles:]...)
		tl.k.free[m] += fromHoles
	}
	free := tl.k.free[m]
	tl.k.take(j, d, m, g)
	// The whole GPUs it took off the free ones are busy until it ends;
	// holes keep the end planned for them.
	for range free - tl.k.free[m] - fromHoles {
		tl.busy[m].push(tl.now + t)
	}
}

// reserve plans g GPUs of model m from start to finish for a waiting job:
// the free ones become holes until start, and the g that free up first
// are busy until finish.
func (tl *timeline) reserve(m, g int, start, finish float64) {
	f := tl.k.free[m]
	for range f {
		tl.holes[m] = append(tl.holes[m], start)
	}
	tl.k.free[m] = 0
	for range g - f {
		tl.busy[m].pop()
	}
	for range g {
		tl.busy[m].push(finish)
	}
}

// holesFitting counts the holes of model m that end no earlier than end.
func (tl *timeline) holesFitting(m int, end float64) int {
	n := 0
	for _, h := range tl.holes[m] {
		if h >= end {
			n++
		}
	}
	return n
}

// emptied is s resized to n slices, each emptied, keeping the storage
// that s and its slices hold.
func emptied[S ~[]E, E any](s []S, n int) []S {
	s = slices.Grow(s[:0], n)[:n]
	for i := range s {
		s[i] = s[i][:0]
	}
	return s
}

// floatHeap is a min-heap of values.
type floatHeap []float64

func (h *floatHeap) push(x float64) { *h = minheap.PushOrdered(*h, x) }

func (h *floatHeap) pop() float64 {
	x, q := minheap.PopOrdered(*h)
	*h = q
	return x
}

// kth is the k-th smallest value (1-based), +Inf when there are fewer. It
// walks the heap from the root, O(k log k): k is a job's GPU count.
// scratch holds the walk's front between calls.
func (h floatHeap) kth(k int, scratch *[]int) float64 {
	if k <= 0 || k > len(h) {
		return inf
	}
	// front[head:] are heap indices whose parents were taken, smallest
	// first.
	front, head := append((*scratch)[:0], 0), 0
	defer func() { *scratch = front }()
	for {
		i := front[head]
		if k--; k == 0 {
			return h[i]
		}
		head++
		for _, c := range [2]int{2*i + 1, 2*i + 2} {
			if c < len(h) {
				at, _ := slices.BinarySearchFunc(front[head:], h[c], func(x int, v float64) int {
					if h[x] < v {
						return -1
					}
					return 1
				})
				front = slices.Insert(front, head+at, c)
			}
		}
	}
}
