package policy

import "slices"

// History is what the caller has seen of finished jobs: each one's group
// (the team, virtual cluster or user that submitted it), GPU count and
// service in GPU-seconds. It keeps the most recent window of sizes per
// group and GPU count, per GPU count, and overall, since the jobs a team
// submits now resemble the ones it submitted lately more than older ones.
// The overall key keeps service per GPU (run time), which a job scales by
// its own GPU count: a 16-GPU job is not predicted from one-GPU jobs'
// GPU-seconds.
// The caller adds to it only as jobs finish, so a policy that reads it
// learns nothing about a job before that job is done.
type History struct {
	window int
	// The three keys: a group's jobs of one GPU count, every group's of
	// one GPU count, and every job (time per GPU). Maps keyed by a string
	// and by an int hash by their fast paths, which every round's lookups
	// of every job need.
	byGroup map[string]map[int]*sizeWindow
	byGPUs  map[int]*sizeWindow
	all     *sizeWindow
	count   int
}

// DefaultHistoryWindow is how many recent sizes History keeps per key.
const DefaultHistoryWindow = 100

// NewHistory keeps window recent sizes per key (DefaultHistoryWindow when
// window < 1).
func NewHistory(window int) *History {
	if window < 1 {
		window = DefaultHistoryWindow
	}
	return &History{window: window, byGroup: map[string]map[int]*sizeWindow{}, byGPUs: map[int]*sizeWindow{}}
}

// Add records a finished job.
func (h *History) Add(group string, gpus int, service float64) {
	gpus = max(gpus, 1)
	byGPU := h.byGroup[group]
	if byGPU == nil {
		byGPU = map[int]*sizeWindow{}
		h.byGroup[group] = byGPU
	}
	h.windowIn(byGPU, gpus).add(service)
	h.windowIn(h.byGPUs, gpus).add(service)
	if h.all == nil {
		h.all = h.newWindow()
	}
	h.all.add(service / float64(gpus))
	h.count++
}

// Len is how many finished jobs were added.
func (h *History) Len() int {
	if h == nil {
		return 0
	}
	return h.count
}

func (h *History) newWindow() *sizeWindow {
	return &sizeWindow{ring: make([]float64, 0, h.window)}
}

// windowIn is m's window for gpus, made if missing.
func (h *History) windowIn(m map[int]*sizeWindow, gpus int) *sizeWindow {
	w := m[gpus]
	if w == nil {
		w = h.newWindow()
		m[gpus] = w
	}
	return w
}

// minTail is how many recorded sizes above a job's attained service a key
// needs before its estimate is trusted over a broader key's. Chosen by a
// sweep on traces the default is not reported on (docs/simulator.md, A
// default that never loses).
const minTail = 10

// ExpectedRemaining is the service a job of group and gpus that has
// attained a GPU-seconds is expected to use before it finishes: the mean
// of (size − a) over the recent sizes above a, from the narrowest key with
// at least minTail of them (the overall key in service per GPU, scaled by
// gpus). With too few in every key (no history yet, or
// a job larger than nearly all recorded), the job is expected to use as
// much again as it has (ok is then false), as 2D-LAS would rank it.
func (h *History) ExpectedRemaining(group string, gpus int, a float64) (rem float64, ok bool) {
	if h != nil {
		gpus = max(gpus, 1)
		if w := h.byGroup[group][gpus]; w != nil {
			if r, n := w.meanAbove(a); n >= minTail {
				return r, true
			}
		}
		if w := h.byGPUs[gpus]; w != nil {
			if r, n := w.meanAbove(a); n >= minTail {
				return r, true
			}
		}
		if w := h.all; w != nil {
			scale := float64(gpus)
			if r, n := w.meanAbove(a / scale); n >= minTail {
				return r * scale, true
			}
		}
	}
	return max(a, 1), false
}

// sizeWindow is a ring of recent sizes, kept sorted alongside with
// prefix sums so that reads cost O(log n) and never modify it.
type sizeWindow struct {
	ring   []float64
	next   int
	sorted []float64
	prefix []float64 // prefix[i] = sum(sorted[:i])
}

func (w *sizeWindow) add(v float64) {
	// from is the first position whose size changed; the sums before it
	// hold, and the ones after are summed again in the same order.
	from := len(w.sorted)
	if len(w.ring) < cap(w.ring) {
		w.ring = append(w.ring, v)
	} else {
		old := w.ring[w.next]
		w.ring[w.next] = v
		w.next = (w.next + 1) % len(w.ring)
		i, _ := slices.BinarySearch(w.sorted, old)
		w.sorted = slices.Delete(w.sorted, i, i+1)
		from = i
	}
	i, _ := slices.BinarySearch(w.sorted, v)
	w.sorted = slices.Insert(w.sorted, i, v)
	from = min(from, i)
	if len(w.prefix) == 0 {
		w.prefix = append(w.prefix, 0)
	}
	w.prefix = w.prefix[:from+1]
	for _, s := range w.sorted[from:] {
		w.prefix = append(w.prefix, w.prefix[len(w.prefix)-1]+s)
	}
}

// meanAbove is the mean of (v − a) over the sizes v above a, and how many
// there are.
func (w *sizeWindow) meanAbove(a float64) (float64, int) {
	n := len(w.sorted)
	i, found := slices.BinarySearch(w.sorted, a)
	for found && i < n && w.sorted[i] <= a {
		i++
	}
	above := n - i
	if above == 0 {
		return 0, 0
	}
	return (w.prefix[n]-w.prefix[i])/float64(above) - a, above
}
