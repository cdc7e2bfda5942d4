package policy

import (
	"math"
	"slices"
)

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
	// windows counts the windows made: a RemainingMemo made before a
	// window it would consult existed is stale.
	windows int
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

// Add records a finished job; a service that is not a number is not
// recorded.
func (h *History) Add(group string, gpus int, service float64) {
	if math.IsNaN(service) {
		return
	}
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
	h.windows++
	return &sizeWindow{ring: make([]float64, 0, h.window), trustBelow: math.Inf(-1)}
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
	return h.ExpectedRemainingMemo(group, gpus, a, nil)
}

// RemainingMemo keeps what ExpectedRemaining found for one job, so that
// asking again for the same job, at the same or a larger attained
// service, mostly costs a few comparisons: a key it passed over still has
// too few sizes above while its least trusted size stays at or below the
// service (sizeWindow.trustBelow); the key it used gives a constant less
// the service while unchanged and no size is crossed. The zero value is
// empty.
type RemainingMemo struct {
	h       *History       // whose lookup it keeps
	keys    [3]*sizeWindow // the job's keys, narrowest first; nil where none yet
	level   int8           // the key used; 3: none
	windows int            // History.windows then: a window made since, for any key, may be one of the job's
	version uint32         // the used key's version then
	scale   float64        // the job's GPUs
	// mean is the used key's mean of the sizes above the attained service
	// (in service per GPU in the overall key), valid while the service
	// (per GPU there) stays below until.
	mean, until float64
}

// ExpectedRemainingMemo is ExpectedRemaining, to the bit, for a job whose
// attained service never falls between calls with the same memo (nil:
// none). A memo belongs to one job of one group and GPU count, and one
// History.
func (h *History) ExpectedRemainingMemo(group string, gpus int, a float64, m *RemainingMemo) (rem float64, ok bool) {
	if h == nil {
		return max(a, 1), false
	}
	gpus = max(gpus, 1)
	var local RemainingMemo
	switch {
	case m == nil: // each key looked up only if reached
		m = &local
		m.scale = float64(gpus)
	case m.fresh(h, a):
		if m.level == 3 {
			return max(a, 1), false
		}
		if m.level < 2 {
			return m.mean - a, true
		}
		return (m.mean - a/m.scale) * m.scale, true
	case m.h != h || m.windows != h.windows:
		*m = RemainingMemo{h: h, keys: [3]*sizeWindow{h.key(0, group, gpus), h.key(1, group, gpus), h.key(2, group, gpus)},
			windows: h.windows, scale: float64(gpus)}
	}
	for l := range 3 {
		w := m.keys[l]
		if m == &local {
			w = h.key(l, group, gpus)
		}
		if w == nil {
			continue
		}
		if r, n, mean, until := w.meanAbove(m.service(l, a)); n >= minTail {
			m.level, m.version, m.mean, m.until = int8(l), w.version, mean, until
			if l == 2 {
				return r * m.scale, true
			}
			return r, true
		}
	}
	m.level = 3
	return max(a, 1), false
}

// key is the window of a job's key at level l (0: its group and GPU
// count, 1: its GPU count, 2: every job), or nil.
func (h *History) key(l int, group string, gpus int) *sizeWindow {
	switch l {
	case 0:
		return h.byGroup[group][gpus]
	case 1:
		return h.byGPUs[gpus]
	}
	return h.all
}

// Holds says the memo still gives ExpectedRemaining for attained service
// a in h, with nothing looked up again.
func (m *RemainingMemo) Holds(h *History, a float64) bool { return h != nil && m.fresh(h, a) }

// fresh says m holds for attained service a in h.
func (m *RemainingMemo) fresh(h *History, a float64) bool {
	if m.h != h || m.windows != h.windows {
		return false
	}
	for l := range m.level {
		// Passed over: too few sizes above the service then, and still (a
		// NaN service is never held).
		if w := m.keys[l]; w != nil && !(m.service(int(l), a) >= w.trustBelow) {
			return false
		}
	}
	if m.level == 3 {
		return true
	}
	return m.keys[m.level].version == m.version && m.service(int(m.level), a) < m.until
}

// service is attained service a as key level l keeps it: per GPU in the
// overall key.
func (m *RemainingMemo) service(l int, a float64) float64 {
	if l == 2 {
		return a / m.scale
	}
	return a
}

// sizeWindow is a ring of recent sizes, kept sorted alongside with
// prefix sums so that reads cost O(log n) and never modify it.
type sizeWindow struct {
	ring   []float64
	next   int
	sorted []float64
	prefix []float64 // prefix[i] = sum(sorted[:i])
	// version counts the sizes added: a RemainingMemo that used it
	// before is stale.
	version uint32
	// trustBelow is the least attained service with fewer than minTail
	// sizes above it (−Inf with fewer than minTail sizes): its minTail-th
	// largest size.
	trustBelow float64
}

func (w *sizeWindow) add(v float64) {
	w.version++
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
	w.trustBelow = math.Inf(-1)
	if n := len(w.sorted); n >= minTail {
		w.trustBelow = w.sorted[n-minTail]
	}
}

// meanAbove is the mean of (v − a) over the sizes v above a (r), how many
// there are, their own mean, and the least of them (until): for every b
// in [a, until) the sizes above b are the same, and r is mean − b.
func (w *sizeWindow) meanAbove(a float64) (r float64, above int, mean, until float64) {
	n := len(w.sorted)
	i := indexAbove(w.sorted, a, 0, n) // the window holds no NaN (History.Add)
	above = n - i
	if above == 0 {
		return 0, 0, 0, inf
	}
	mean = (w.prefix[n] - w.prefix[i]) / float64(above)
	return mean - a, above, mean, w.sorted[i]
}
