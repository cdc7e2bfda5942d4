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
