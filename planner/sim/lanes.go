package sim

import (
	"github.com/caravan-gpu/caravan/internal/minheap"
	"github.com/caravan-gpu/caravan/planner/policy"
)

type gpuKey struct{ node, gpu int }

func (s *simulator) lanes() map[gpuKey][]int {
	if s.laneOcc == nil {
		s.laneOcc = map[gpuKey][]int{}
	}
	return s.laneOcc
}

func (s *simulator) occupyLane(i int, sl slot) {
	js := &s.jobs[i]
	k := gpuKey{sl.Node, sl.GPU}
	occ := s.lanes()
	if len(occ[k]) == 0 {
		s.setBusy(1)
	}
	occ[k] = append(occ[k], i)
	js.laneShare = 1 / float64(s.snap.Nodes[sl.Node].GPUs[sl.GPU].LaneCount())
	s.anyLanes = true
}

func (s *simulator) releaseLane(i int) {
	js := &s.jobs[i]
	if len(js.Placement) != 1 {
		return
	}
	k := gpuKey{js.Placement[0].Node, js.Placement[0].GPU}
	occ := s.lanes()
	list := occ[k]
	for n, o := range list {
		if o == i {
			list = append(list[:n], list[n+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(occ, k)
		s.setBusy(-1)
	} else {
		occ[k] = list
	}
	js.laneShare = 0
	for _, o := range list {
		s.reschedule(o)
	}
}

// laneFactor is the share of its solo speed job i keeps next to its
// partners on the same GPU. A job still in its start latency has no task
// running: its wait is the wall clock's, and it slows no partner. Live,
// a lane's partner counts once its process runs.
func (s *simulator) laneFactor(i int) float64 {
	js := &s.jobs[i]
	if len(js.Placement) != 1 || js.latency > 0 {
		return 1
	}
	k := gpuKey{js.Placement[0].Node, js.Placement[0].GPU}
	f := 1.0
	for _, o := range s.lanes()[k] {
		if o == i {
			continue
		}
		partner := &s.jobs[o]
		s.settle(partner)
		if partner.latency <= 0 {
			f *= s.cfg.Colocation.Factor(js.GPUModel, js.Model, partner.Model)
		}
	}
	return f
}

// pushLaneWake notes that lane job i's task comes to run at t.
func (s *simulator) pushLaneWake(i int, t float64) {
	s.laneWakes = minheap.Push(s.laneWakes, minheap.Entry[struct{}]{Key: t, Tie: i})
}

// wakeLanesAt re-rates, at time t, each lane job whose start latency ends
// then, and its partners: from now on its task runs beside theirs.
func (s *simulator) wakeLanesAt(t float64) {
	for len(s.laneWakes) > 0 && s.laneWakes[0].Key <= t {
		var e minheap.Entry[struct{}]
		e, s.laneWakes = minheap.Pop(s.laneWakes)
		js := &s.jobs[e.Tie]
		if js.done || js.State != policy.Running || js.laneShare == 0 || len(js.Placement) != 1 {
			continue // preempted or finished since: nothing woke
		}
		s.settle(js)
		if js.latency > 1e-9*max(1, t) {
			continue // a later start's: its own wake is due
		}
		js.latency = 0 // what rounding left of it
		for _, o := range s.lanes()[gpuKey{js.Placement[0].Node, js.Placement[0].GPU}] {
			s.reschedule(o)
		}
	}
}

func (s *simulator) refreshLaneRates() {
	for _, list := range s.lanes() {
		if len(list) > 1 || s.jobs[list[0]].rate != s.baseRate(&s.jobs[list[0]])*s.jobs[list[0]].speedup {
			for _, o := range list {
				s.reschedule(o)
			}
		}
	}
}
