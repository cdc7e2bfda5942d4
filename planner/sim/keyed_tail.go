package sim

// This file holds the keyed queue's tail: the running jobs of the last queue, which a round visits one by one only where their order decides something.

import (
	"math"
	"slices"

	"github.com/caravan-gpu/caravan/planner/policy"
)

// tailItem is a running job of the last queue. Ranked by Gittins index,
// until expire its index has not fallen below the one its k2 was worked
// out from: it ranks no later than k2 says; until positive its index is
// above zero.
type tailItem struct {
	keyedItem
	expire, positive float64
	// Until floorUntil its index is at least floor (IndexHint.FloorUntil).
	floor, floorUntil float64
}

// rankGPUs is a running job's key within its queue, and its GPUs.
type rankGPUs struct {
	k2   float64
	gpus int32
}

// bound sets until when a tail job's key bounds its rank (expire), and
// until when its index is surely above zero (positive), from the lookups
// its key was last worked out with.
func (q *keyedQueue) bound(t *tailItem) {
	s := q.sim
	js := &s.jobs[t.Job]
	h := &q.indices[t.Job].hint
	t.expire = q.reaches(js, h.RisesUntil(q.ranked))
	t.positive = q.reaches(js, h.PositiveUntil(q.ranked))
	floor, until := h.FloorUntil(q.ranked, -q.indices[t.Job].key)
	t.floor, t.floorUntil = floor, q.reaches(js, until)
}

// done takes js, settled lazily and now done, out of the tail's count;
// its entry there goes at the next round (tidyTail).
func (q *keyedQueue) done(js *jobState) {
	js.lazy = false
	if js.inTail {
		js.inTail = false
		q.tailGPUs -= js.GPUs
		q.tailDone++
	}
}

// tidyTail drops the tail's entries of jobs done since, and logs now, at
// the start of a round, as a time the round settles every job at.
func (q *keyedQueue) tidyTail() {
	s := q.sim
	if q.tailDone > 0 {
		q.tail = slices.DeleteFunc(q.tail, func(t tailItem) bool { return s.jobs[t.Job].done })
		q.tailDone = 0
	}
	if len(q.tail) == 0 && len(q.ran) == 0 && len(q.pend) == 0 {
		q.log = q.log[:0] // no job is settled lazily
		return
	}
	q.logSettle(s.now)
}

// toTail adds a job of the last queue that a round keeps running, or
// starts, to the tail.
func (q *keyedQueue) toTail(it *keyedItem) {
	s := q.sim
	js := &s.jobs[it.Job]
	t := tailItem{keyedItem: *it, expire: math.Inf(-1), positive: math.Inf(-1), floorUntil: math.Inf(-1)}
	t.wake = math.Inf(1) // it stays in the last queue (RunWake)
	if q.ranked == nil {
		// Under 2D-LAS the tail is in rank order: by its jobs' numbers.
		t.K2, t.K3 = ranInQueue, float64(js.seq)
	} else {
		q.bound(&t)
	}
	if !js.lazy {
		js.lazy, js.logAt = true, int32(len(q.log))
	}
	js.inTail = true
	q.tail = append(q.tail, t)
	q.tailGPUs += int(it.gpus)
}

// reaches is the earliest time running job js's attained service may
// reach until (from IndexHint.RisesUntil or PositiveUntil): it grows by
// at most its GPUs each second.
func (q *keyedQueue) reaches(js *jobState, until float64) float64 {
	s := q.sim
	if math.IsInf(until, 1) {
		return until
	}
	// Settling adds the service up in rounded steps: keep well clear of
	// the bound.
	until -= 1e-8 * math.Abs(until)
	if !(until > js.Attained) {
		return math.Inf(-1)
	}
	return s.now + (until-js.Attained)/float64(max(js.GPUs, 1))
}

// spliceTail puts the tail's jobs in run, as the last queue's running
// jobs that rank first there, ahead of run[r:], for the walk to visit
// them one by one; the tail is left empty, for the jobs the walk keeps.
func (q *keyedQueue) spliceTail(run []keyedItem, r int) []keyedItem {
	s := q.sim
	rest := append(q.spliced[:0], run[r:]...)
	run = run[:r]
	for k := range q.tail {
		t := &q.tail[k]
		js := &s.jobs[t.Job]
		js.inTail = false
		if q.ranked != nil {
			s.settle(js) // its index is worked out anew
		}
		run = append(run, t.keyedItem)
	}
	q.spliced = rest
	q.tail, q.tailGPUs = q.tail[:0], 0
	return append(run, rest...)
}

// splitTail readies the last queue for the walk under 2D-Gittins, with
// free GPUs not yet taken there and h the waiting job that ranks first
// among those that fit in them: before h only running jobs rank, and if
// they all fit, they keep running whatever their order. If they do not
// all fit, it tries again from the running job some way up, whose ahead
// do fit. It leaves the jobs ahead in the tail, says how many GPUs they
// hold (ahead), and puts the other running jobs of the queue in run[r:],
// sorted, for the walk to go on from there. A tail job that ranks ahead
// for sure (see rankTail) needs no new index. Otherwise ahead is -1, and
// every running job of the queue is in run[r:], to be ordered there.
func (q *keyedQueue) splitTail(run []keyedItem, r, free int, h *keyedItem) ([]keyedItem, int) {
	s := q.sim
	extra := run[r:] // the queue's other running jobs, new to it
	for k := range extra {
		extra[k].K3 = q.indexKey(int(extra[k].Job))
	}
	ahead := q.rankTail(extra, h)
	if ahead > free {
		// Some of them do not fit. Those whose keys are below some key,
		// at most free less the widest job's GPUs, mostly still do: the
		// walk goes on from that key.
		keys := q.keys[:0]
		for k := range q.tail {
			if q.isAhead[k] {
				keys = append(keys, rankGPUs{q.tail[k].K3, q.tail[k].gpus})
			}
		}
		for k := range extra {
			if q.isAhead[len(q.tail)+k] {
				keys = append(keys, rankGPUs{extra[k].K3, extra[k].gpus})
			}
		}
		q.keys = keys
		widest := q.sizes[len(q.sizes)-1]
		if k2, ok := keyPastFull(keys, free-widest); ok {
			// Ahead of every job of key k2.
			pivot := keyedItem{RankOf: policy.RankOf[int32, int32]{K1: q.lastQ, K3: k2, Arrival: math.Inf(-1), Job: -1}}
			ahead = q.rankTail(extra, &pivot)
		}
		if ahead > free {
			return q.spliceTail(run, r), -1 // the walk visits them all, in order
		}
	}
	behind, n := q.spliced[:0], len(q.tail)
	if q.tailBehind > 0 {
		w := 0
		for k := range q.tail {
			t := &q.tail[k]
			if q.isAhead[k] {
				if w != k {
					q.tail[w] = *t
				}
				w++
			} else {
				s.jobs[t.Job].inTail = false
				q.tailGPUs -= int(t.gpus)
				behind = append(behind, t.keyedItem)
			}
		}
		q.tail = q.tail[:w]
	}
	for k := range extra {
		if q.isAhead[n+k] {
			q.toTail(&extra[k])
		} else {
			behind = append(behind, extra[k])
		}
	}
	q.spliced = behind
	slices.SortFunc(behind, compareRanks)
	return append(run[:r], behind...), ahead
}

// rankTail marks in q.isAhead which of the tail's jobs, then extra's,
// rank before th, and says how many GPUs those hold. A tail job is given
// its index now only where it may not rank before th. It surely does if
// its index has not fallen since it ranked before th (expire); or if th's
// index is zero, and its own is above zero (positive) or it arrived first
// (no index is below zero); or if its floor (floorUntil) is above th's
// index. On a congested cluster the first waiting job of the last queue is
// mostly one past every learned size, of index zero.
func (q *keyedQueue) rankTail(extra []keyedItem, th *keyedItem) int {
	s := q.sim
	q.isAhead = slices.Grow(q.isAhead[:0], len(q.tail)+len(extra))[:len(q.tail)+len(extra)]
	ahead, zero, now := 0, th.K3 == 0, s.now
	q.tailBehind = 0
	for k := range q.tail {
		t := &q.tail[k]
		// Every job of the tail, and th, are of the last queue and of no
		// group: they rank by index, then arrival, then index in the
		// trace.
		var before bool
		if zero && now < t.positive {
			before = true
		} else {
			first := t.Arrival < th.Arrival || t.Arrival == th.Arrival && t.Job < th.Job
			before = now < t.expire && (t.K3 < th.K3 || t.K3 == th.K3 && first) || zero && first ||
				now < t.floorUntil && t.floor > -th.K3
		}
		if !before {
			// It may leave the tail, and the walk bounds its index anew
			// from its attained service: settle it.
			s.settle(&s.jobs[t.Job])
			// An index of zero stays zero until its bound expires (no
			// sample enters the quantum's window before then; past every
			// sample, it never expires): that key is exact, and so is its
			// rank.
			if !(now < t.expire && t.K3 == 0) {
				t.K3 = q.indexKey(int(t.Job))
				q.bound(t)
				before = t.Before(&th.RankOf)
			}
		}
		q.isAhead[k] = before
		if before {
			ahead += int(t.gpus)
		} else {
			q.tailBehind++
		}
	}
	for k := range extra {
		before := extra[k].Before(&th.RankOf)
		q.isAhead[len(q.tail)+k] = before
		if before {
			ahead += int(extra[k].gpus)
		}
	}
	return ahead
}

// keyPastFull is the least key k2 whose jobs, with those of every key
// below it, hold more than limit GPUs; ok when some job's key is below it
// and the jobs of keys below fit in limit. A weighted selection, in time
// linear in len(keys) where a sort took n log n: it reorders keys.
func keyPastFull(keys []rankGPUs, limit int) (k2 float64, ok bool) {
	below := 0 // GPUs of the keys left of keys[lo:hi], all below them
	lo, hi := 0, len(keys)
	for lo < hi {
		pivot := keys[lo+(hi-lo)/2].k2
		// Three ways: keys[lo:lt] below the pivot, keys[lt:gt] equal,
		// keys[gt:hi] above.
		lt, gt, under, at := lo, hi, 0, 0
		for i := lo; i < gt; {
			switch k := keys[i]; {
			case k.k2 < pivot:
				keys[lt], keys[i] = k, keys[lt]
				under += int(k.gpus)
				lt++
				i++
			case k.k2 > pivot:
				gt--
				keys[gt], keys[i] = k, keys[gt]
			default:
				at += int(k.gpus)
				i++
			}
		}
		switch {
		case below+under > limit:
			hi = lt
		case below+under+at > limit:
			return pivot, below+under > 0
		default:
			below += under + at
			lo = gt
		}
	}
	return 0, false // every job fits
}
