package policy

import (
	"cmp"
	"math"
	"slices"

	"github.com/caravan-gpu/caravan/internal/minheap"
)

// assignPositions solves AlloX's matching: row r placed on model m in
// position p (1 = last in a GPU's queue) costs p × times[r][m] (+Inf: not
// allowed there), and model m offers width[m] slots in each position. It
// returns each row's model and position at least total cost (-1, 0 for a
// row no model takes).
//
// It is successive shortest paths over the groups of alike slots, a
// model's position being one group (as assignToGroups, its reference in
// the tests, does), but it walks only the edges a shortest path can need.
// In a least-cost matching each model runs its rows shortest last (the
// exchange argument of SPT), so a row that enters a model goes to the
// position its time ranks it in there (or one earlier, where a longer row
// leaves the model), and a path moves along a model's positions one at a
// time: a position's longest row down one, or its shortest up one. A
// popped group then costs O(its rows × models + positions), where
// relaxing every group from every row cost O(its rows × groups). Rows are
// added longest first, so that a new row mostly ranks last where it goes
// and its path ends at once.
func assignPositions(times [][]float64, width []int) (model, pos []int) {
	s := newPositionSolver(times, width)
	if s.oneModel() {
		return s.model, s.pos
	}
	order := make([]int, s.rows)
	least := make([]float64, s.rows)
	for r := range order {
		order[r] = r
		least[r] = math.Inf(1) // over the models with a free slot
		for m, t := range s.timesOf(r) {
			if s.width[m] > 0 {
				least[r] = min(least[r], t)
			}
		}
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(least[b], least[a]) })
	for _, r := range order {
		if !math.IsInf(least[r], 1) && s.groups > 0 {
			s.add(r)
		}
	}
	return s.model, s.pos
}

// positionSolver is assignPositions' state between rows.
type positionSolver struct {
	rows, models, groups int
	times                []float64 // row after row, a popped group's rows' side by side
	width                []int
	first, positions     []int // model m's positions are groups first[m] ...
	groupModel, groupPos []int
	model, pos           []int // each row's, as assigned so far
	members              [][]int
	// ends are each group's shortest and longest row while its rows stay
	// ({-1, -1}: to be found).
	ends [][2]int
	// ranked are each model's rows' times there, ascending; changes, the
	// times that joined (+1) and left (-1) it, in order; counted, each
	// row's counts on each model (see counts).
	ranked  [][]float64
	changes [][]rankChange
	counted []rowCounts
	// across[g*models+m] are group g's rows by time on model m (≠ g's),
	// longest first, those that may run there.
	across [][]acrossRow
	// Successive shortest paths: Johnson potentials, the sink last.
	pot, dist []float64
	prev      []int // group a path enters this one from; -1: the new row
	via       []int // the row it moves
	done      []bool
	touched   []int // the groups (and sink) this search set a distance for
	// heap holds the groups with a distance not yet done, by distance, the
	// sink first on a tie (a path that ends there need not move a full
	// group's rows).
	heap *minheap.Indexed
}

type rankChange struct {
	t     float64
	delta int32
}

type rowCounts struct {
	seen               int32 // len(changes) when counted; -1: never
	longer, notShorter int32
}

type acrossRow struct {
	t, own float64 // time on the other model, and on the group's
	row    int
}

func newPositionSolver(rowTimes [][]float64, width []int) *positionSolver {
	s := &positionSolver{rows: len(rowTimes), models: len(width), width: width}
	s.times = make([]float64, 0, s.rows*s.models)
	for _, ts := range rowTimes {
		s.times = append(s.times, ts[:s.models]...)
	}
	s.model, s.pos = make([]int, s.rows), make([]int, s.rows)
	for r := range s.model {
		s.model[r] = -1
	}
	s.first, s.positions = make([]int, s.models), make([]int, s.models)
	for m, w := range width {
		s.first[m] = s.groups
		if w > 0 {
			s.positions[m] = (s.rows + w - 1) / w
		}
		s.groups += s.positions[m]
	}
	s.groupModel, s.groupPos = make([]int, s.groups), make([]int, s.groups)
	for m := range width {
		for p := 1; p <= s.positions[m]; p++ {
			s.groupModel[s.first[m]+p-1], s.groupPos[s.first[m]+p-1] = m, p
		}
	}
	s.members, s.ends = make([][]int, s.groups), make([][2]int, s.groups)
	for g := range s.ends {
		s.ends[g] = [2]int{-1, -1}
	}
	s.ranked, s.changes = make([][]float64, s.models), make([][]rankChange, s.models)
	s.counted = make([]rowCounts, s.rows*s.models)
	for i := range s.counted {
		s.counted[i].seen = -1
	}
	s.across = make([][]acrossRow, s.groups*s.models)
	s.pot, s.dist = make([]float64, s.groups+1), make([]float64, s.groups+1)
	s.prev, s.via, s.done = make([]int, s.groups+1), make([]int, s.groups), make([]bool, s.groups+1)
	for v := range s.dist {
		s.dist[v], s.prev[v] = math.Inf(1), -1
	}
	s.heap = minheap.NewIndexed(s.dist, s.groups)
	return s
}

// oneModel assigns the rows at once where one model alone has slots:
// shortest last (SPT), the k-th longest in position ⌈k/width⌉.
func (s *positionSolver) oneModel() bool {
	only := -1
	for m, w := range s.width {
		if w > 0 {
			if only >= 0 {
				return false
			}
			only = m
		}
	}
	if only < 0 {
		return true // no slot: every row unassigned
	}
	var rows []int
	for r := range s.rows {
		if !math.IsInf(s.time(r, only), 1) {
			rows = append(rows, r)
		}
	}
	slices.SortStableFunc(rows, func(a, b int) int { return cmp.Compare(s.time(b, only), s.time(a, only)) })
	for k, r := range rows {
		s.model[r], s.pos[r] = only, k/s.width[only]+1
	}
	return true
}

func (s *positionSolver) timesOf(r int) []float64 { return s.times[r*s.models : (r+1)*s.models] }

func (s *positionSolver) time(r, m int) float64 { return s.times[r*s.models+m] }

// add places row r along a shortest augmenting path.
func (s *positionSolver) add(r int) {
	sink := s.groups
	for _, v := range s.touched {
		s.dist[v], s.prev[v], s.done[v] = math.Inf(1), -1, false
	}
	s.touched = s.touched[:0]
	s.heap.Clear()
	for m := range s.width {
		if t := s.time(r, m); s.width[m] > 0 && !math.IsInf(t, 1) {
			lo, hi := s.ranks(r, m)
			s.enter(m, lo, hi, t, r, -1, 0)
		}
	}
	for s.heap.Len() > 0 {
		g := s.heap.Pop()
		s.done[g] = true
		if g == sink {
			break
		}
		s.expand(g)
	}
	if !s.done[sink] {
		return // no model takes it; nothing changed
	}
	// Johnson's update, less dist[sink] for every group: only those the
	// search reached closer than the sink change (the differences are
	// what count).
	for _, v := range s.touched {
		s.pot[v] += min(s.dist[v]-s.dist[sink], 0)
	}
	// Walk the path back: each row on it moves into the group after it.
	for g := s.prev[sink]; ; {
		from := s.prev[g]
		moved := r
		if from >= 0 {
			moved = s.via[g]
			s.leave(from, moved)
		}
		s.join(g, moved)
		if from < 0 {
			break
		}
		g = from
	}
}

// ranks are the positions row r ranks in on model m: from one rank
// earlier (where a longer row leaves) to its rank behind the rows as
// long.
func (s *positionSolver) ranks(r, m int) (lo, hi int) {
	kLo, kHi := s.rankCounts(r, m)
	return min(kLo+1, s.positions[m]), min(kHi+1, s.positions[m])
}

// rankCounts counts the positions of model m whose last row is followed
// by a row longer than row r there (kLo), and those whose last row is at
// least as long (kHi).
func (s *positionSolver) rankCounts(r, m int) (kLo, kHi int) {
	longer, notShorter := s.counts(r, m)
	if longer > 0 {
		kLo = (longer - 1) / s.width[m]
	}
	return kLo, notShorter / s.width[m]
}

// counts are how many of model m's rows are longer there than row r, and
// how many are at least as long. A search follows the path that Dijkstra
// takes through a model's positions, so most rows are counted again after
// a row or two joined or left the model: the changes since are replayed
// where they are few.
func (s *positionSolver) counts(r, m int) (longer, notShorter int) {
	t, c, changes := s.time(r, m), &s.counted[r*s.models+m], s.changes[m]
	if c.seen >= 0 && len(changes)-int(c.seen) <= 32 {
		for _, ch := range changes[c.seen:] {
			if ch.t > t {
				c.longer += ch.delta
			}
			if ch.t >= t {
				c.notShorter += ch.delta
			}
		}
	} else {
		ts := s.ranked[m]
		at, _ := slices.BinarySearch(ts, t)
		above := at
		for above < len(ts) && ts[above] == t {
			above++
		}
		c.longer, c.notShorter = int32(len(ts)-above), int32(len(ts)-at)
	}
	c.seen = int32(len(changes))
	return int(c.longer), int(c.notShorter)
}

// enter relaxes model m's positions lo to hi for row r of time t there,
// coming from group from (-1: r is the new row) at c less r's cost there.
func (s *positionSolver) enter(m, lo, hi int, t float64, r, from int, c float64) {
	for p := lo; p <= hi; p++ {
		h := s.first[m] + p - 1
		s.relax(h, from, r, c+float64(p)*t-s.pot[h])
	}
}

func (s *positionSolver) relax(v, from, row int, d float64) {
	if s.done[v] || d >= s.dist[v] {
		return
	}
	if math.IsInf(s.dist[v], 1) {
		s.touched = append(s.touched, v)
	}
	s.dist[v], s.prev[v] = d, from
	s.heap.Fix(v)
	if v == s.groups {
		return
	}
	s.via[v] = row
	// A group with a free slot reaches the sink at once.
	if len(s.members[v]) < s.width[s.groupModel[v]] {
		s.relax(s.groups, v, -1, d+s.pot[v]-s.pot[s.groups])
	}
}

// expand relaxes the edges out of group g: one of its rows moves.
func (s *positionSolver) expand(g int) {
	if len(s.members[g]) == 0 {
		return
	}
	m, p := s.groupModel[g], s.groupPos[g]
	base := s.dist[g] + s.pot[g]
	// Along the model: its shortest row up a position, its longest down.
	if s.ends[g][0] < 0 {
		short, long := s.members[g][0], s.members[g][0]
		for _, r := range s.members[g][1:] {
			if s.time(r, m) < s.time(short, m) {
				short = r
			}
			if s.time(r, m) > s.time(long, m) {
				long = r
			}
		}
		s.ends[g] = [2]int{short, long}
	}
	short, long := s.ends[g][0], s.ends[g][1]
	if p < s.positions[m] {
		s.relax(g+1, g, short, base+s.time(short, m)-s.pot[g+1])
	}
	if p > 1 {
		s.relax(g-1, g, long, base-s.time(long, m)-s.pot[g-1])
	}
	// Across models: each row to where it ranks there. The rows come
	// longest first, so the positions they rank in only rise, and the
	// rows ending each position are walked once.
	at := float64(p)
	for m2, w := range s.width {
		if m2 == m || w == 0 {
			continue
		}
		list := s.across[g*s.models+m2]
		if len(list) == 0 {
			continue
		}
		ts, first, last := s.ranked[m2], s.first[m2], s.positions[m2]
		n := len(ts)
		kLo, kHi := s.rankCounts(list[0].row, m2) // then walked from there
		maxLo, maxHi := (n-1)/w, n/w
		for _, e := range list {
			for kLo < maxLo && ts[n-(kLo+1)*w-1] > e.t {
				kLo++
			}
			for kHi < maxHi && ts[n-(kHi+1)*w] >= e.t {
				kHi++
			}
			c := base - at*e.own
			for p := min(kLo+1, last); p <= min(kHi+1, last); p++ {
				h := first + p - 1
				if d := c + float64(p)*e.t - s.pot[h]; d < s.dist[h] {
					s.relax(h, g, e.row, d)
				}
			}
		}
	}
}

// join puts row r in group g.
func (s *positionSolver) join(g, r int) {
	m := s.groupModel[g]
	if s.model[r] != m {
		if old := s.model[r]; old >= 0 {
			s.ranked[old] = removeSorted(s.ranked[old], s.time(r, old))
			s.changes[old] = append(s.changes[old], rankChange{s.time(r, old), -1})
		}
		s.ranked[m] = insertSorted(s.ranked[m], s.time(r, m))
		s.changes[m] = append(s.changes[m], rankChange{s.time(r, m), +1})
	}
	s.model[r], s.pos[r] = m, s.groupPos[g]
	s.members[g] = append(s.members[g], r)
	s.ends[g] = [2]int{-1, -1}
	for m2 := range s.width {
		if t := s.time(r, m2); m2 != m && !math.IsInf(t, 1) {
			list := s.across[g*s.models+m2]
			i, _ := slices.BinarySearchFunc(list, t, func(e acrossRow, t float64) int { return cmp.Compare(t, e.t) })
			s.across[g*s.models+m2] = slices.Insert(list, i, acrossRow{t: t, own: s.time(r, m), row: r})
		}
	}
}

// leave takes row r out of group g (its model stays r's until it joins
// another group).
func (s *positionSolver) leave(g, r int) {
	if i := slices.Index(s.members[g], r); i >= 0 {
		s.members[g] = slices.Delete(s.members[g], i, i+1)
	}
	s.ends[g] = [2]int{-1, -1}
	for m2 := range s.width {
		list := s.across[g*s.models+m2]
		for i := range list {
			if list[i].row == r {
				s.across[g*s.models+m2] = slices.Delete(list, i, i+1)
				break
			}
		}
	}
}

func insertSorted(s []float64, x float64) []float64 {
	i, _ := slices.BinarySearch(s, x)
	return slices.Insert(s, i, x)
}

func removeSorted(s []float64, x float64) []float64 {
	i, found := slices.BinarySearch(s, x)
	if found {
		return slices.Delete(s, i, i+1)
	}
	return s
}
