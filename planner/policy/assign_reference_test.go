package policy

import (
	"math"
	"slices"

	"github.com/caravan-gpu/caravan/internal/minheap"
)

// assignToGroups, the reference assignPositions is checked against,
// solves the assignment problem whose columns come in groups of alike
// slots: row r costs cost[r][g] in any of group g's
// capacity[g] slots (+Inf: not allowed). It returns each row's group, -1
// for a row that may use no group, at least cost. The groups a row may use
// must have room for all the rows together, as AlloX's do (⌈n/w⌉
// positions of w slots each for n jobs): then every row is assigned, and
// which rows to leave out is never a question of cost.
//
// It adds the rows one at a time along a shortest augmenting path
// (successive shortest paths with Johnson potentials). A path enters a
// group, moves one of its rows to another group, and so on until a group
// with a free slot; the rows' own potentials cancel along it, so Dijkstra
// runs over the groups alone, each popped group relaxing every group.
func assignToGroups(cost [][]float64, capacity []int) []int {
	rows, groups := len(cost), len(capacity)
	out := make([]int, rows)
	for r := range out {
		out[r] = -1
	}
	if rows == 0 || groups == 0 {
		return out
	}
	pot := make([]float64, groups+1) // the sink last
	dist := make([]float64, groups+1)
	prev := make([]int, groups+1) // group a path enters this one from; -1: the new row
	via := make([]int, groups)    // the row it moves
	done := make([]bool, groups+1)
	members := make([][]int, groups)
	sink := groups
	var q nodeHeap
	for src := 0; src < rows; src++ {
		q = q[:0]
		for g := range dist {
			dist[g], prev[g], done[g] = math.Inf(1), -1, false
		}
		var relax func(v, from, row int, d float64)
		relax = func(v, from, row int, d float64) {
			if done[v] || d >= dist[v] {
				return
			}
			dist[v], prev[v] = d, from
			if v == sink {
				q.push(nodeDist{v, d, 0})
				return
			}
			via[v] = row
			q.push(nodeDist{v, d, 1})
			// A group with a free slot reaches the sink at once: offering
			// it now lets the sink win a tie against a full group, whose
			// rows need not then be moved.
			if len(members[v]) < capacity[v] {
				relax(sink, v, -1, d+pot[v]-pot[sink])
			}
		}
		for g, w := range cost[src] {
			if !math.IsInf(w, 1) {
				relax(g, -1, -1, w-pot[g])
			}
		}
		for len(q) > 0 {
			g := q.pop().node
			if done[g] {
				continue
			}
			done[g] = true
			if g == sink {
				break
			}
			// One of its rows moves to another group it may use.
			for _, r := range members[g] {
				for h, w := range cost[r] {
					if h != g && !math.IsInf(w, 1) {
						relax(h, g, r, dist[g]+w-cost[r][g]+pot[g]-pot[h])
					}
				}
			}
		}
		if !done[sink] {
			continue // no group takes this row; nothing changed
		}
		for v := range pot {
			pot[v] += min(dist[v], dist[sink])
		}
		// Walk the path back: each row on it moves into the group after it.
		for g := prev[sink]; ; {
			from := prev[g]
			r := src
			if from >= 0 {
				r = via[g]
				members[from] = slices.DeleteFunc(members[from], func(x int) bool { return x == r })
			}
			out[r] = g
			members[g] = append(members[g], r)
			if from < 0 {
				break
			}
			g = from
		}
	}
	return out
}

type nodeDist struct {
	node int
	dist float64
	tie  int // lower first among equal dist
}

// nodeHeap is a min-heap on dist, then tie.
type nodeHeap []minheap.Entry[int] // Key: dist, Tie: tie, Value: node

func (h *nodeHeap) push(x nodeDist) {
	*h = minheap.Push(*h, minheap.Entry[int]{Key: x.dist, Tie: x.tie, Value: x.node})
}

func (h *nodeHeap) pop() nodeDist {
	x, q := minheap.Pop(*h)
	*h = q
	return nodeDist{node: x.Value, dist: x.Key, tie: x.Tie}
}
