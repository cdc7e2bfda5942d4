package policy

import "math"

// assignToGroups solves the assignment problem whose columns come in
// groups of alike slots: row r costs cost[r][g] in any of group g's
// capacity[g] slots (+Inf: not allowed). It returns each row's group, -1
// for a row that may use no group, at least cost. The groups a row may use
// must have room for all the rows together, as AlloX's do (⌈n/w⌉
// positions of w slots each for n jobs): then every row is assigned, and
// which rows to leave out is never a question of cost.
//
// It adds the rows one at a time along a shortest augmenting path
// (successive shortest paths with Johnson potentials and Dijkstra), so
// it costs O(rows² × groups × log) however many slots a group has: AlloX's slots at one position on the free GPUs of one model
// are all alike, and the matching stays cheap when many GPUs are free.
func assignToGroups(cost [][]float64, capacity []int) []int {
	rows := len(cost)
	groups := len(capacity)
	out := make([]int, rows)
	for r := range out {
		out[r] = -1
	}
	if rows == 0 || groups == 0 {
		return out
	}
	// Nodes: rows [0, rows), groups [rows, rows+groups), the sink last.
	n := rows + groups + 1
	sink := n - 1
	pot := make([]float64, n)
	dist := make([]float64, n)
	prev := make([]int, n)
	done := make([]bool, n)
	members := make([][]int, groups)
	var q nodeHeap
	for src := 0; src < rows; src++ {
		for v := range dist {
			dist[v], prev[v], done[v] = math.Inf(1), -1, false
		}
		dist[src] = 0
		q = append(q[:0], nodeDist{src, 0})
		for len(q) > 0 {
			u := q.pop().node
			if done[u] {
				continue
			}
			if u == sink {
				break
			}
			done[u] = true
			relax := func(v int, w float64) {
				if nd := dist[u] + w + pot[u] - pot[v]; !done[v] && nd < dist[v] {
					dist[v], prev[v] = nd, u
					q.push(nodeDist{v, nd})
				}
			}
			switch {
			case u < rows: // a row moves to any other group it may use
				for g, w := range cost[u] {
					if !math.IsInf(w, 1) && out[u] != g {
						relax(rows+g, w)
					}
				}
			default: // a group gives up one of its rows, or has a slot left
				g := u - rows
				for _, r := range members[g] {
					relax(r, -cost[r][g])
				}
				if len(members[g]) < capacity[g] {
					relax(sink, 0)
				}
			}
		}
		if math.IsInf(dist[sink], 1) {
			continue // no group takes this row; nothing changed
		}
		for v := range pot {
			pot[v] += min(dist[v], dist[sink])
		}
		// Walk the path back: each row on it moves into the group after it.
		for g := prev[sink] - rows; ; {
			r := prev[rows+g]
			if old := out[r]; old >= 0 {
				members[old] = remove(members[old], r)
			}
			out[r] = g
			members[g] = append(members[g], r)
			if r == src {
				break
			}
			g = prev[r] - rows
		}
	}
	return out
}

func remove(s []int, x int) []int {
	for i, v := range s {
		if v == x {
			return append(s[:i], s[i+1:]...)
		}
	}
	return s
}

type nodeDist struct {
	node int
	dist float64
}

// nodeHeap is a binary min-heap on dist.
type nodeHeap []nodeDist

func (h *nodeHeap) push(x nodeDist) {
	*h = append(*h, x)
	q := *h
	for i := len(q) - 1; i > 0; {
		p := (i - 1) / 2
		if q[p].dist <= q[i].dist {
			break
		}
		q[p], q[i] = q[i], q[p]
		i = p
	}
}

func (h *nodeHeap) pop() nodeDist {
	q := *h
	top := q[0]
	last := len(q) - 1
	q[0] = q[last]
	q = q[:last]
	for i := 0; ; {
		l, s := 2*i+1, i
		if l < len(q) && q[l].dist < q[s].dist {
			s = l
		}
		if r := l + 1; r < len(q) && q[r].dist < q[s].dist {
			s = r
		}
		if s == i {
			break
		}
		q[s], q[i] = q[i], q[s]
		i = s
	}
	*h = q
	return top
}
