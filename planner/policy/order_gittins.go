package policy

import (
	"math"
	"slices"
)

// SizeDistribution is a sorted sample of job sizes in GPU-seconds, with
// prefix sums so a Gittins index costs O(log n).
type SizeDistribution struct {
	sorted []float64
	prefix []float64 // prefix[i] = sum(sorted[:i])

	// A bucket index narrows each search to a few samples: start[k] is
	// the first sample in bucket k or above. Buckets are the top bits of a
	// float's representation, which order like the floats themselves for
	// positive values: a log scale without calling math.Log.
	start []int32
	base  uint64
	shift uint
}

// maxSizeBuckets bounds the bucket index; mantissa bits are dropped until
// the samples' range fits.
const maxSizeBuckets = 1 << 13

// MinLearnedSizes is how many jobs must have completed before 2D-Gittins
// learns its size distribution from them. From one or two sizes every
// running job past them looks done for: a live round preempted eight of
// twelve running jobs at once for the jobs waiting behind them.
const MinLearnedSizes = 10

// Relearn says whether sizes learned when built jobs had completed are
// learned again now that n have: from MinLearnedSizes on, each time the
// count has grown by a tenth. The simulator and the live planner both keep
// to it, so that both rank by the same distribution.
func Relearn(built, n int) bool {
	return n >= MinLearnedSizes && float64(n) >= 1.1*float64(built)
}

// NewSizeDistribution copies and sorts samples.
func NewSizeDistribution(samples []float64) *SizeDistribution {
	sorted := slices.Clone(samples)
	slices.Sort(sorted)
	return newSorted(sorted)
}

// With is the distribution of d's samples and more, as
// NewSizeDistribution would build it from all of them: more is sorted
// and merged in, rather than every sample sorted again.
func (d *SizeDistribution) With(more []float64) *SizeDistribution {
	add := slices.Clone(more)
	slices.Sort(add)
	old := d.sorted
	sorted := make([]float64, 0, len(old)+len(add))
	i, j := 0, 0
	for i < len(old) && j < len(add) {
		if add[j] < old[i] {
			sorted = append(sorted, add[j])
			j++
		} else {
			sorted = append(sorted, old[i])
			i++
		}
	}
	sorted = append(append(sorted, old[i:]...), add[j:]...)
	return newSorted(sorted)
}

// newSorted builds a distribution on sorted samples, which it keeps.
func newSorted(sorted []float64) *SizeDistribution {
	d := &SizeDistribution{sorted: sorted}
	d.prefix = make([]float64, len(d.sorted)+1)
	for i, v := range d.sorted {
		d.prefix[i+1] = d.prefix[i] + v
	}
	if n := len(d.sorted); n > 0 {
		lo, hi := sizeBits(d.sorted[0]), sizeBits(d.sorted[n-1])
		d.shift = 52 - 7 // 128 buckets per doubling
		for (hi>>d.shift)-(lo>>d.shift) >= maxSizeBuckets-1 {
			d.shift++
		}
		d.base = lo >> d.shift
		buckets := int((hi>>d.shift)-d.base) + 1
		d.start = make([]int32, buckets+1)
		i := 0
		for k := 0; k <= buckets; k++ {
			for i < n && d.bucket(d.sorted[i]) < k {
				i++
			}
			d.start[k] = int32(i)
		}
	}
	return d
}

// sizeBits is v's representation, with v clamped to a small positive value
// so that the order of the bits is the order of the values.
func sizeBits(v float64) uint64 { return math.Float64bits(max(v, 1e-9)) }

// bucket is monotone in v, so a sample in a lower bucket than v is below
// v and one in a higher bucket is above it.
func (d *SizeDistribution) bucket(v float64) int {
	b := sizeBits(v) >> d.shift
	if b < d.base {
		return 0
	}
	return min(int(b-d.base), len(d.start)-2)
}

// Len is the number of samples.
func (d *SizeDistribution) Len() int {
	if d == nil {
		return 0
	}
	return len(d.sorted)
}

// firstAbove is the index of the first sample strictly greater than v.
func (d *SizeDistribution) firstAbove(v float64) int {
	lo, hi := 0, len(d.sorted)
	if d.start != nil {
		k := d.bucket(v)
		lo, hi = int(d.start[k]), int(d.start[k+1])
	}
	return d.searchAbove(v, lo, hi)
}

// searchAbove is the index of the first sample in [lo, hi) strictly
// greater than v, or hi, by binary search.
func (d *SizeDistribution) searchAbove(v float64, lo, hi int) int {
	return indexAbove(d.sorted, v, lo, hi)
}

// indexAbove is the index of the first of sorted[lo:hi], ascending,
// strictly greater than v, or hi, by binary search.
func indexAbove(sorted []float64, v float64, lo, hi int) int {
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if sorted[m] <= v {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// firstAboveFrom is firstAbove(v), searched ahead from at when at is at
// or below it (a running job's attained service only grows).
func (d *SizeDistribution) firstAboveFrom(v float64, at *int32) int {
	n, i := len(d.sorted), int(*at)
	if i >= 0 && i <= n && (i == 0 || d.sorted[i-1] <= v) {
		// Gallop ahead from i, then search the last stride.
		step := 1
		for i+step <= n && d.sorted[i+step-1] <= v {
			i += step
			step *= 2
		}
		i = d.searchAbove(v, i, min(i+step, n))
		*at = int32(i)
		return i
	}
	i = d.firstAbove(v)
	*at = int32(i)
	return i
}

// Gittins is the Gittins index of a job that has attained a GPU-seconds,
// for a service quantum delta: the chance it finishes within delta more,
// divided by the service it is expected to use in that quantum. Higher
// runs first; a job beyond every sample gets 0.
func (d *SizeDistribution) Gittins(a, delta float64) float64 {
	return d.GittinsFrom(a, delta, &IndexHint{lo: -1, hi: -1})
}

// GittinsFrom is Gittins, with the lookups started from where h says the
// job's last ones ended, and h updated. While a and a+delta stay between
// the same samples as last time, the terms h kept give the index without
// a lookup.
func (d *SizeDistribution) GittinsFrom(a, delta float64, h *IndexHint) float64 {
	if h.of == d && h.delta == delta && h.loFrom <= a && a < h.loTo {
		if end := a + delta; h.hiFrom <= end && end < h.hiTo {
			return gittinsOf(a, h.between, h.beyondQuantum, h.done)
		}
	}
	n := len(d.sorted)
	lo := d.firstAboveFrom(a, &h.lo)
	h.of, h.delta = d, delta
	h.loFrom, h.loTo = d.sampleBelow(lo), d.sampleAt(lo)
	if lo >= n {
		h.hiFrom, h.hiTo = math.Inf(-1), math.Inf(1)
		h.between, h.beyondQuantum, h.done = 0, 0, 0
		return 0
	}
	hi := d.firstAboveFrom(a+delta, &h.hi)
	h.hiFrom, h.hiTo = d.sampleBelow(hi), d.sampleAt(hi)
	h.between = d.prefix[hi] - d.prefix[lo]
	h.beyondQuantum = delta * float64(n-hi)
	h.done = float64(hi - lo)
	return gittinsOf(a, h.between, h.beyondQuantum, h.done)
}

// gittinsOf is the index at attained service a, from the samples'
// terms: between, the sum of the samples above a and at most a+delta
// away; beyondQuantum, delta times the count of those further; done, the
// count of those within. Each term is rounded on its own, so that the
// index is the same to the bit whether the terms were kept or found anew.
func gittinsOf(a, between, beyondQuantum, done float64) float64 {
	// E[min(S-a, delta)] over samples above a, times their count.
	used := float64(between-a*done) + beyondQuantum
	if used <= 0 {
		return 0
	}
	return done / used
}

// sampleAt is sample i, or +Inf past the last.
func (d *SizeDistribution) sampleAt(i int) float64 {
	if i >= len(d.sorted) {
		return math.Inf(1)
	}
	return d.sorted[i]
}

// sampleBelow is sample i-1, or -Inf before the first.
func (d *SizeDistribution) sampleBelow(i int) float64 {
	if i <= 0 {
		return math.Inf(-1)
	}
	return d.sorted[i-1]
}

// referenceGittins reproduces the index table of Tiresias' simulator,
// which sums the raw sizes rather than the service left, floors the mean
// and rounds as Python 2 did. The table has one value per sample.
func (d *SizeDistribution) referenceGittins(delta float64) []float64 {
	data := d.sorted
	n := len(data)
	idxAbove := func(v float64) int { return d.firstAbove(v) }
	out := make([]float64, n)
	for i, v := range data {
		a := math.Trunc(v - 1)
		if a > data[n-1]-1 {
			continue
		}
		idx := idxAbove(a)
		var idxDelta int
		if a+delta > data[n-1]-1 {
			idxDelta = n - 1
		} else {
			idxDelta = idxAbove(a + delta)
		}
		p := roundTo((float64(idxDelta-idx))/float64(n-idx), 5)
		eSum := d.prefix[idxDelta] - d.prefix[idx] + delta*float64(n-idxDelta)
		e := roundTo(math.Floor(eSum/float64(n-idx)), 5)
		if e == 0 {
			continue
		}
		out[i] = roundTo(p*1e6/e, 4)
	}
	return out
}

func roundTo(v float64, places int) float64 {
	p := math.Pow(10, float64(places))
	return math.Round(v*p) / p
}

// gittinsOrder is Tiresias' 2D-Gittins: the 2D-LAS queues, and within a
// queue the highest Gittins index first, ties by arrival.
type gittinsOrder struct {
	q     queues
	sizes *SizeDistribution // nil: learn from Snapshot.CompletedSizes
	delta float64
	table []float64 // compat: reference index per sample

	reasons []string
}

func newGittinsOrder(q queues, sizes *SizeDistribution, delta float64) *gittinsOrder {
	if delta <= 0 {
		delta = q.cuts[0]
	}
	o := &gittinsOrder{q: q, sizes: sizes, delta: delta}
	for _, r := range q.reasons {
		o.reasons = append(o.reasons, r+"; highest Gittins index first")
	}
	if q.compat && sizes.Len() > 0 {
		o.table = sizes.referenceGittins(delta)
	}
	return o
}

func (*gittinsOrder) Name() string     { return "gittins" }
func (*gittinsOrder) Preemptive() bool { return true }

func (o *gittinsOrder) index(d *SizeDistribution, a float64) float64 {
	if o.table != nil {
		// Reference lookup: 0 past the last sample, else the entry of the
		// first sample above a.
		n := len(d.sorted)
		if n == 0 || a > d.sorted[n-1] {
			return 0
		}
		return o.table[d.firstAbove(a)]
	}
	return d.Gittins(a, o.delta)
}

// indexFrom is index, with the lookups started from h (see GittinsFrom).
func (o *gittinsOrder) indexFrom(d *SizeDistribution, a float64, h *IndexHint) float64 {
	if o.table != nil {
		return o.index(d, a)
	}
	return d.GittinsFrom(a, o.delta, h)
}

func (o *gittinsOrder) Order(s *Snapshot, ds []Decision) float64 {
	o.q.assign(s, ds)
	dist := o.ranksBy(s)
	if dist == nil {
		return inf // nothing learned yet: plain 2D-LAS order
	}
	// Every job that has not run yet has attained nothing: on a congested
	// cluster that is most pending jobs, so their index is worked out once.
	fresh := math.NaN()
	for i := range ds {
		attained, _, _ := counters(&s.Jobs[i], &ds[i])
		var index float64
		switch {
		case attained != 0:
			index = o.index(dist, attained)
		case math.IsNaN(fresh):
			fresh = o.index(dist, 0)
			index = fresh
		default:
			index = fresh
		}
		ds[i].k2, ds[i].k3 = -index, 0
		if !ds[i].Promoted {
			ds[i].Reason = o.reasons[ds[i].Queue]
		}
	}
	return inf
}

// settled: with a size distribution the order is the Gittins index, whole
// from the Snapshot; until then 2D-Gittins orders like 2D-LAS.
func (o *gittinsOrder) settled(s *Snapshot, j *Job) bool {
	return o.settledAll(s) || o.q.settled(j)
}
func (o *gittinsOrder) settledAll(s *Snapshot) bool { return o.ranksBy(s) != nil }

// ranksBy is the size distribution a round of s ranks by: the preset
// sizes, else the completed ones; nil while there are none, and it ranks
// as 2D-LAS does.
func (o *gittinsOrder) ranksBy(s *Snapshot) *SizeDistribution {
	if o.sizes.Len() > 0 {
		return o.sizes
	}
	if s.CompletedSizes.Len() > 0 {
		return s.CompletedSizes
	}
	return nil
}
func (o *gittinsOrder) entryQueue() int { return o.q.queueOf(0) }

func (o *gittinsOrder) queueRule() QueueRule { return QueueRule{q: &o.q, g: o} }

func (o *gittinsOrder) Wake(s *Snapshot, r *Result) float64 { return o.q.wake(s, r) }
