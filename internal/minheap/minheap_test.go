package minheap

import (
	"container/heap"
	"math/rand/v2"
	"testing"
	"unsafe"
)

type pair struct{ key, id int }

func lessPair(a, b *pair) bool { return a.key < b.key }

// refHeap is container/heap over the same elements.
type refHeap []pair

func (h refHeap) Len() int           { return len(h) }
func (h refHeap) Less(i, j int) bool { return lessPair(&h[i], &h[j]) }
func (h refHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *refHeap) Push(x any)        { *h = append(*h, x.(pair)) }
func (h *refHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// The heap pops in the order container/heap does, equal keys included:
// the simulator's results depend on the order of events that tie.
func TestPopsAsContainerHeapDoes(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var h []pair
	var e []Entry[int]
	ref := &refHeap{}
	id := 0
	for step := 0; step < 20000; step++ {
		if len(h) == 0 || rng.IntN(3) > 0 {
			x := pair{rng.IntN(50), id}
			id++
			h = PushFunc(h, x, lessPair)
			e = Push(e, Entry[int]{Key: float64(x.key), Value: x.id})
			heap.Push(ref, x)
			continue
		}
		var got pair
		got, h = PopFunc(h, lessPair)
		var ge Entry[int]
		ge, e = Pop(e)
		want := heap.Pop(ref).(pair)
		if got != want {
			t.Fatalf("step %d: PopFunc popped %v, container/heap %v", step, got, want)
		}
		if (pair{int(ge.Key), ge.Value}) != want {
			t.Fatalf("step %d: Pop popped %v, container/heap %v", step, ge, want)
		}
	}
}

// Plain values pop least first, as sorting them would.
func TestOrderedPopsSorted(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var h, popped []float64
	for step := 0; step < 20000; step++ {
		if len(h) == 0 || rng.IntN(3) > 0 {
			h = PushOrdered(h, float64(rng.IntN(50)))
			continue
		}
		var x float64
		x, h = PopOrdered(h)
		for _, y := range h {
			if y < x {
				t.Fatalf("step %d: popped %v with %v still in the heap", step, x, y)
			}
		}
		popped = append(popped, x)
	}
	if len(popped) == 0 {
		t.Fatal("nothing popped")
	}
}

// An empty Value adds nothing to an Entry.
func TestEmptyValueAddsNoPadding(t *testing.T) {
	if got, want := unsafe.Sizeof(Entry[struct{}]{}), unsafe.Sizeof(float64(0))+unsafe.Sizeof(0); got != want {
		t.Fatalf("Entry[struct{}] is %d bytes, want %d", got, want)
	}
}

func BenchmarkPushPop(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	h := make([]Entry[int], 0, 1024)
	for i := 0; i < 1000; i++ {
		h = Push(h, Entry[int]{Key: float64(rng.IntN(1 << 20)), Tie: i})
	}
	for b.Loop() {
		var x Entry[int]
		x, h = Pop(h)
		x.Key += float64(rng.IntN(1 << 10))
		h = Push(h, x)
	}
}

func BenchmarkPushPopFunc(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	h := make([]pair, 0, 1024)
	for i := 0; i < 1000; i++ {
		h = PushFunc(h, pair{rng.IntN(1 << 20), i}, lessPair)
	}
	for b.Loop() {
		var x pair
		x, h = PopFunc(h, lessPair)
		x.key += rng.IntN(1 << 10)
		h = PushFunc(h, x, lessPair)
	}
}

// Indexed pops its elements by key whatever keys fell while they waited,
// each once, the first one ahead of its equals; Clear empties it.
func TestIndexedPopsByKeyAfterDecreases(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for trial := 0; trial < 200; trial++ {
		n := 1 + rng.IntN(60)
		key := make([]float64, n)
		first := rng.IntN(n)
		h := NewIndexed(key, first)
		in := map[int]bool{}
		for step := 0; step < 3*n; step++ {
			v := rng.IntN(n)
			if !in[v] {
				key[v] = float64(rng.IntN(1000))
			} else {
				key[v] -= float64(rng.IntN(100))
			}
			in[v] = true
			h.Fix(v)
		}
		if h.Len() != len(in) {
			t.Fatalf("trial %d: %d in the heap, want %d", trial, h.Len(), len(in))
		}
		prev := -1
		for h.Len() > 0 {
			v := h.Pop()
			if !in[v] {
				t.Fatalf("trial %d: %d popped twice", trial, v)
			}
			delete(in, v)
			if prev >= 0 && (key[v] < key[prev] || key[v] == key[prev] && v == first) {
				t.Fatalf("trial %d: %d (key %g) after %d (key %g)", trial, v, key[v], prev, key[prev])
			}
			prev = v
		}
		h.Fix(0)
		h.Clear()
		if h.Len() != 0 || h.at[0] != -1 {
			t.Fatalf("trial %d: Clear left %d", trial, h.Len())
		}
	}
}
