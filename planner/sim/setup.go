package sim

// This file holds the clients' shared set-up of starts (Config.StartsShared).

import (
	"math"

	"github.com/caravan-gpu/caravan/planner/policy"
)

var inf = math.Inf(1)

// setupPool is the starts whose tasks the clients are setting up, under
// Config.StartsShared: each task joins the set-up StartLatency after its
// start and needs StartSpread of it, and every task in set-up gets an
// equal share of it, as a client sets up the allocations it was given
// side by side. A start's tasks join together and need the same, so they
// end together, and the starts end in the order they joined. A start's
// end moves as later ones join (later) or leave (sooner).
type setupPool struct {
	at     float64      // when left was last brought up to date
	starts []setupStart // in the order they join
	done   []float64    // scratch: each start's end, as worked out anew
	saved  []float64    // scratch: each start's left, kept while plan runs ahead
}

type setupStart struct {
	job   int
	join  float64 // when its tasks join the set-up
	tasks float64
	left  float64 // set-up each task still needs, as of at
	end   float64 // when its set-up ends, as last worked out
}

// advance brings the set-up to time t, dropping the starts done by then.
func (p *setupPool) advance(t float64) {
	if t <= p.at {
		return
	}
	p.run(t, nil)
	p.at = t
	w := 0
	for _, st := range p.starts {
		if st.left > 0 && st.end > t {
			p.starts[w] = st
			w++
		}
	}
	p.starts = p.starts[:w]
}

// run shares the set-up out from p.at until t, each start's left as of
// then, and notes in ends (when given) when each start is done: with
// t = +Inf, every start's end as things stand.
func (p *setupPool) run(t float64, ends []float64) {
	now := p.at
	for now < t {
		shared, least, next := 0.0, 0.0, t
		for k := range p.starts {
			st := &p.starts[k]
			switch {
			case st.left <= 0:
			case st.join <= now:
				if shared == 0 || st.left < least {
					least = st.left
				}
				shared += st.tasks
			default:
				next = min(next, st.join)
			}
		}
		if shared == 0 {
			if next >= t {
				return
			}
			now = next
			continue
		}
		// Each task in set-up gets 1/shared of it: the least left ends
		// after least·shared, unless a start joins (or t comes) first.
		at, step := now+least*shared, least
		if at > next {
			at, step = next, (next-now)/shared
		}
		for k := range p.starts {
			if st := &p.starts[k]; st.left > 0 && st.join <= now {
				// The least left is used up exactly (x − x = 0); where
				// a join comes first, rounding may use one up too.
				if st.left -= step; st.left <= 0 {
					st.left = 0
					if ends != nil {
						ends[k] = at
					}
				}
			}
		}
		now = at
	}
}

// plan works out every start's end anew, as of p.at, into p.done.
func (p *setupPool) plan() []float64 {
	p.saved, p.done = p.saved[:0], p.done[:0]
	for _, st := range p.starts {
		p.saved = append(p.saved, st.left)
		p.done = append(p.done, p.at) // a start with nothing left ends now
	}
	p.run(inf, p.done)
	for k := range p.starts {
		p.starts[k].left = p.saved[k]
	}
	return p.done
}

// setupJoin enters job i's start, of tasks tasks joining the set-up at
// join, and says when its set-up ends. The starts its joining delays are
// charged the delay.
func (s *simulator) setupJoin(i int, join, tasks float64) float64 {
	p := &s.setup
	p.advance(s.now)
	st := setupStart{job: i, join: join, tasks: tasks, left: s.cfg.StartSpread, end: inf}
	k := len(p.starts)
	for k > 0 && p.starts[k-1].join > join {
		k--
	}
	p.starts = append(p.starts, setupStart{})
	copy(p.starts[k+1:], p.starts[k:])
	p.starts[k] = st
	s.setupMoved()
	return p.starts[k].end
}

// sharedSetUp enters job i's start, whose tasks join the set-up latency
// from now, and says how long until its set-up ends; with no spread there
// is no set-up, and it is latency.
func (s *simulator) sharedSetUp(i int, latency float64) float64 {
	if !(s.cfg.StartSpread > 0) {
		return latency
	}
	return s.setupJoin(i, s.now+latency, float64(max(s.jobs[i].GPUs, 1))) - s.now
}

// setupLeave takes job i's start out of the set-up, when it is taken
// back before its tasks ran: the starts it shared with end sooner.
func (s *simulator) setupLeave(i int) {
	p := &s.setup
	p.advance(s.now)
	for k := range p.starts {
		if p.starts[k].job == i {
			p.starts = append(p.starts[:k], p.starts[k+1:]...)
			s.setupMoved()
			return
		}
	}
}

// setupMoved works out the starts' ends anew and moves each running
// job's by as much as its end moved (a start of inf end is new).
func (s *simulator) setupMoved() {
	p := &s.setup
	ends := p.plan()
	for k := range p.starts {
		st := &p.starts[k]
		old := st.end
		st.end = ends[k]
		if old == inf || ends[k] == old {
			continue
		}
		js := &s.jobs[st.job]
		if js.done || js.State != policy.Running {
			continue
		}
		s.settle(js)
		delta := ends[k] - old
		js.latency = max(js.latency+delta, 0)
		js.work += delta * s.wallRate(js)
		s.reschedule(st.job)
		if js.laneShare > 0 && js.latency > 0 {
			s.pushLaneWake(st.job, s.now+js.latency)
		}
	}
}
