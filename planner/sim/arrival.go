package sim

import (
	"math"
	"slices"

	"github.com/caravan-gpu/caravan/planner/policy"
)

// arrivalQueue holds the pending jobs of a run whose rounds start jobs in
// arrival order (Policy.StartsInArrivalOrder), one queue per GPU count, so
// that a round finds the first pending job that fits the free GPUs without
// walking the jobs that do not. Under such a policy a job never returns
// to pending once started, so each queue only ever loses its head.
type arrivalQueue struct {
	sizes  []int   // GPU counts, ascending
	queues [][]int // per size: pending job indices in arrival order
	heads  []int   // per size: position of the first pending job in queues
}

func newArrivalQueue(jobs []jobState) *arrivalQueue {
	q := &arrivalQueue{}
	for i := range jobs {
		if g := jobs[i].GPUs; !slices.Contains(q.sizes, g) {
			q.sizes = append(q.sizes, g)
		}
	}
	slices.Sort(q.sizes)
	q.queues = make([][]int, len(q.sizes))
	q.heads = make([]int, len(q.sizes))
	return q
}

// add queues job i, which arrives after every job queued so far.
func (q *arrivalQueue) add(i, gpus int) {
	k, _ := slices.BinarySearch(q.sizes, gpus)
	q.queues[k] = append(q.queues[k], i)
}

// first is the queue holding the earliest pending job of at most limit
// GPUs, or -1.
func (q *arrivalQueue) first(limit float64) int {
	best, bestJob := -1, math.MaxInt
	for k, g := range q.sizes {
		if float64(g) > limit {
			break
		}
		if h := q.heads[k]; h < len(q.queues[k]) && q.queues[k][h] < bestJob {
			best, bestJob = k, q.queues[k][h]
		}
	}
	return best
}

// pop takes the head of queue k.
func (q *arrivalQueue) pop(k int) int {
	i := q.queues[k][q.heads[k]]
	q.heads[k]++
	return i
}

// useArrivalQueue says rounds may be carried out on the arrival queue:
// the policy starts jobs in arrival order, on one GPU model, with whole
// GPUs, and no job is limited to some models.
func (s *simulator) useArrivalQueue() bool {
	if !s.maySkipRounds() || s.cfg.noShortcut || s.model == "" || !s.cfg.Policy.StartsInArrivalOrder() {
		return false
	}
	for i := range s.jobs {
		if len(s.jobs[i].Models) > 0 {
			return false
		}
	}
	return true
}

// arrivalRound is a planning round of a policy that starts jobs in
// arrival order (see Policy.StartsInArrivalOrder): the earliest pending
// jobs that fit start, and under a blocking policy the first that does
// not fit stops the round. Jobs that stay pending are not looked at; their
// wait is brought up to date when they start.
func (s *simulator) arrivalRound() {
	s.rounds++
	s.startInArrivalOrder()
}

// startInArrivalOrder starts what an arrivalRound starts.
func (s *simulator) startInArrivalOrder() {
	q := s.arrivals
	blocking := s.cfg.Policy.Blocking
	start := policy.Decision{Job: -1, Run: true, GPUModel: s.model, Speedup: 1}
	for {
		free := float64(s.gpus) - s.busy
		limit := free
		if blocking {
			limit = math.Inf(1) // the head, whether it fits or not
		}
		k := q.first(limit)
		if k < 0 || float64(q.sizes[k]) > free {
			break
		}
		s.start(q.pop(k), &start)
	}
	s.blocked = s.pending > 0
	s.head = -1
	if k := q.first(math.Inf(1)); k >= 0 && blocking {
		s.head = q.queues[k][q.heads[k]]
	}
	s.wakeAt = math.Inf(1)
}
