// Package minheap is the one binary min-heap of the planner's hot loops,
// over a slice. Every heap pops equal elements in the order container/heap
// would (the same sifts), so a heap that must agree bit for bit with
// another (the simulator's fast path with Policy.Plan) meets ties alike.
//
// Push and Pop order Entry values by Key, then Tie, compared in place;
// PushOrdered and PopOrdered order plain values.
// PushFunc and PopFunc take a less function for orders of more fields;
// their sift-down is too large to inline, so each compare is a call
// there, which a hot heap of Entry values does not pay. container/heap
// pays an interface call for every compare and swap.
package minheap

import "cmp"

// Entry is an element of a heap ordered by Key, then Tie, least first;
// Value rides along. Value comes first so that an empty one (struct{})
// adds no padding: a trailing zero-size field would.
type Entry[V any] struct {
	Value V
	Key   float64
	Tie   int
}

func (a *Entry[V]) less(b *Entry[V]) bool {
	return a.Key < b.Key || a.Key == b.Key && a.Tie < b.Tie
}

// Push adds x to the heap h and returns it.
func Push[V any](h []Entry[V], x Entry[V]) []Entry[V] {
	h = append(h, x)
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if !h[i].less(&h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
	return h
}

// Pop removes the least entry of h, which must not be empty, and returns
// it and the heap.
func Pop[V any](h []Entry[V]) (Entry[V], []Entry[V]) {
	n := len(h) - 1
	h[0], h[n] = h[n], h[0]
	for i := 0; ; {
		c := 2*i + 1
		if c >= n {
			break
		}
		if c+1 < n && h[c+1].less(&h[c]) {
			c++
		}
		if !h[c].less(&h[i]) {
			break
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
	return h[n], h[:n]
}

// PushOrdered adds x to the heap h of plain values and returns it.
func PushOrdered[T cmp.Ordered](h []T, x T) []T {
	h = append(h, x)
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if !(h[i] < h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
	return h
}

// PopOrdered removes the least value of h, which must not be empty, and
// returns it and the heap.
func PopOrdered[T cmp.Ordered](h []T) (T, []T) {
	n := len(h) - 1
	h[0], h[n] = h[n], h[0]
	for i := 0; ; {
		c := 2*i + 1
		if c >= n {
			break
		}
		if c+1 < n && h[c+1] < h[c] {
			c++
		}
		if !(h[c] < h[i]) {
			break
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
	return h[n], h[:n]
}

// PushFunc adds x to the heap h, least first by less, and returns it.
func PushFunc[T any](h []T, x T, less func(a, b *T) bool) []T {
	h = append(h, x)
	UpFunc(h, len(h)-1, less)
	return h
}

// UpFunc moves h[i] up to its place: after it was appended, or made less.
func UpFunc[T any](h []T, i int, less func(a, b *T) bool) {
	for i > 0 {
		p := (i - 1) / 2
		if !less(&h[i], &h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

// PopFunc removes the least element of h, which must not be empty, and
// returns it and the heap.
func PopFunc[T any](h []T, less func(a, b *T) bool) (T, []T) {
	n := len(h) - 1
	h[0], h[n] = h[n], h[0]
	DownFunc(h[:n], 0, less)
	return h[n], h[:n]
}

// DownFunc moves h[i] down to its place: after it was replaced, or made
// greater.
func DownFunc[T any](h []T, i int, less func(a, b *T) bool) {
	n := len(h)
	for {
		c := 2*i + 1
		if c >= n {
			return
		}
		if c+1 < n && less(&h[c+1], &h[c]) {
			c++
		}
		if !less(&h[c], &h[i]) {
			return
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
}

// Indexed is a heap of the ints 0 to len(key)-1, each in it at most once,
// least key first, that moves an element up in place when its key falls
// (Dijkstra's decrease-key), where Push would add it again. The keys are
// the caller's, compared in place. Among equal keys the element first (if
// not -1) comes before the others, and the rest in any order.
type Indexed struct {
	heap  []int
	at    []int // each element's index in heap, -1 when out
	key   []float64
	first int
}

// NewIndexed is an empty Indexed heap over key.
func NewIndexed(key []float64, first int) *Indexed {
	h := &Indexed{at: make([]int, len(key)), key: key, first: first}
	for v := range h.at {
		h.at[v] = -1
	}
	return h
}

func (h *Indexed) less(a, b int) bool {
	ka, kb := h.key[a], h.key[b]
	return ka < kb || ka == kb && a == h.first
}

// Len is how many elements are in the heap.
func (h *Indexed) Len() int { return len(h.heap) }

// Fix adds v, or moves it up to its place after its key fell.
func (h *Indexed) Fix(v int) {
	i := h.at[v]
	if i < 0 {
		i = len(h.heap)
		h.heap = append(h.heap, v)
	}
	for i > 0 {
		up := (i - 1) / 2
		if !h.less(v, h.heap[up]) {
			break
		}
		h.heap[i] = h.heap[up]
		h.at[h.heap[i]] = i
		i = up
	}
	h.heap[i], h.at[v] = v, i
}

// Pop removes the least element, which must be there, and returns it.
func (h *Indexed) Pop() int {
	top := h.heap[0]
	h.at[top] = -1
	last := h.heap[len(h.heap)-1]
	h.heap = h.heap[:len(h.heap)-1]
	if len(h.heap) == 0 {
		return top
	}
	i := 0
	for {
		c := 2*i + 1
		if c >= len(h.heap) {
			break
		}
		if c+1 < len(h.heap) && h.less(h.heap[c+1], h.heap[c]) {
			c++
		}
		if !h.less(h.heap[c], last) {
			break
		}
		h.heap[i] = h.heap[c]
		h.at[h.heap[i]] = i
		i = c
	}
	h.heap[i], h.at[last] = last, i
	return top
}

// Clear empties the heap.
func (h *Indexed) Clear() {
	for _, v := range h.heap {
		h.at[v] = -1
	}
	h.heap = h.heap[:0]
}
