package policy

import (
	"cmp"
	"fmt"
	"math"
	"slices"
)

// synergySizer is Synergy's resource-sensitive allocation (Mohan et al.,
// OSDI '22), per server and on GPU, CPU and memory together. Each job in
// rank order asks for its demand, the least CPU and memory per GPU that
// reach its best throughput (sensitivity.csv), on GPUs of one server where
// it fits, else spread over the servers with the fewest free GPUs that fit
// it:
//
//   - GREEDY gives a job its demand or skips it: the job waits, and the
//     GPUs it would have had go to the jobs after it;
//   - TUNE falls back to the job's GPU-proportional share when the demand
//     does not fit, then shrinks the jobs above their share on the servers
//     with free GPUs down to it, so a job with GPUs always runs.
//
// A running task's CPU and memory change only when it restarts, so a
// running job keeps what it started with (Job.CPUs, Job.MemoryGB) and,
// under an order that does not preempt, is sized before the jobs that
// start. Its size changes only by a restart (Decision.Migrate): when TUNE
// shrinks it for a job that starts, when what it holds no longer fits, or
// at its lease's end. With a lease, as the reference runs it, a running
// job whose lease has ended gives its GPUs back and is placed again in
// rank order with the jobs that start: it may move or be re-sized (a
// restart), or, under GREEDY, wait. A job's speedup is its profiled
// throughput at what it got over that at its proportional share, 0 with no
// CPU. Lane jobs are not sized.
type synergySizer struct {
	sens  *Sensitivity
	tune  bool
	lease float64 // seconds; 0: running jobs keep their GPUs
}

// leasePeriod is the lease a time t falls in. Leases end together, at
// multiples of the lease, as the reference's rounds do; the slack keeps a
// round woken at a lease's end, a rounding error early, in the next one.
func (z synergySizer) leasePeriod(t float64) float64 {
	return math.Floor(t/z.lease + 1e-9)
}

// leaseEnded says running job i, which the placer keeps on known GPUs,
// took them in a lease that has ended.
func (z synergySizer) leaseEnded(s *Snapshot, i int, d *Decision) bool {
	j := &s.Jobs[i]
	return z.lease > 0 && j.State == Running && d.Run && !d.Lane && len(d.Slots) > 0 &&
		z.leasePeriod(s.Now) > z.leasePeriod(j.Placed)
}

// Wake is the end of the current lease, when a job runs on whole GPUs.
func (z synergySizer) Wake(s *Snapshot, r *Result) float64 {
	if z.lease <= 0 {
		return inf
	}
	for i := range r.Decisions {
		if d := &r.Decisions[i]; d.Run && !d.Lane {
			return (z.leasePeriod(s.Now)+1)*z.lease - s.Now
		}
	}
	return inf
}

func (z synergySizer) Name() string {
	if z.tune {
		return "synergy-tune"
	}
	return "synergy-greedy"
}

// synServer is one node in a sizing round: its free GPUs and host
// resources, and the jobs holding some of them.
type synServer struct {
	free             [][]int // free GPU indices per model
	cpu, mem         float64 // free
	fairCPU, fairMem float64 // the GPU-proportional share per GPU
	allocs           []*synAlloc
}

// synShare is CPU and memory per GPU: a job's demand, or each server's
// proportional share (fair).
type synShare struct {
	fair     bool
	cpu, mem float64
}

func (sh synShare) on(sv *synServer) (float64, float64) {
	if sh.fair {
		return sv.fairCPU, sv.fairMem
	}
	return sh.cpu, sh.mem
}

// synPart is a job's GPUs on one node and what it holds there per GPU.
type synPart struct {
	node, gpus int
	cpu, mem   float64
}

// synAlloc is one job's allocation in the round.
type synAlloc struct {
	job   int
	g     int
	grid  *sensGrid
	parts []synPart
	held  []Slot // the GPUs it held before its lease ended
	// keep is what a running job holds per GPU now, tried first; set when
	// keeps, for a running job of known size whose lease goes on.
	keep  synShare
	keeps bool
}

func (a *synAlloc) onNodes() int { return len(a.parts) }

// perGPU is the job's CPU and memory per GPU, and its proportional share
// per GPU, averaged over its nodes.
func (a *synAlloc) perGPU(sv []synServer) (cpu, mem, fairCPU, fairMem float64) {
	for _, p := range a.parts {
		k := float64(p.gpus)
		cpu, mem = cpu+k*p.cpu, mem+k*p.mem
		fairCPU, fairMem = fairCPU+k*sv[p.node].fairCPU, fairMem+k*sv[p.node].fairMem
	}
	g := float64(max(a.g, 1))
	return cpu / g, mem / g, fairCPU / g, fairMem / g
}

// synRound is one round of Synergy sizing.
type synRound struct {
	z       synergySizer
	s       *Snapshot
	c       *capacity
	sv      []synServer
	biggest [][2]float64 // per model: most CPUs and memory of one of its nodes
	heldBy  map[Slot]int // whole GPUs given back at a lease's end: the job that held each
	cands   []int        // fewestFreeFirst's, reused: valid until its next call
}

const synEps = 1e-9

func (z synergySizer) Size(s *Snapshot, r *Result, preemptive, blocking bool) {
	c := s.capacity()
	rd := &synRound{z: z, s: s, c: c, sv: make([]synServer, len(s.Nodes)), biggest: make([][2]float64, len(c.models))}
	for n := range s.Nodes {
		node, sv := &s.Nodes[n], &rd.sv[n]
		sv.free = make([][]int, len(c.models))
		if !node.Healthy || len(c.byNode[n]) == 0 {
			continue
		}
		for k, g := range c.byNode[n] {
			m := c.modelOf[n][k]
			sv.free[m] = append(sv.free[m], g)
			rd.biggest[m] = [2]float64{max(rd.biggest[m][0], node.CPUs), max(rd.biggest[m][1], node.MemoryGB)}
		}
		gpus := float64(len(c.byNode[n]))
		sv.cpu, sv.mem = node.CPUs, node.MemoryGB
		sv.fairCPU, sv.fairMem = node.CPUs/gpus, node.MemoryGB/gpus
	}
	// GPUs that running jobs keep, or that the placer picked, are taken;
	// those of the running jobs whose lease ended are given back.
	var relet map[int][]Slot // the GPUs each of them held
	for i := range r.Decisions {
		d := &r.Decisions[i]
		if !d.Run {
			continue
		}
		if z.leaseEnded(s, i, d) {
			if relet == nil {
				relet = make(map[int][]Slot)
			}
			relet[i], d.Slots = d.Slots, nil
			if rd.heldBy == nil {
				rd.heldBy = make(map[Slot]int)
			}
			for _, sl := range relet[i] {
				rd.heldBy[Slot{Node: sl.Node, GPU: sl.GPU, Lane: -1}] = i
			}
			continue
		}
		for _, sl := range d.Slots {
			rd.takeGPU(sl)
		}
	}
	// The order of sizing: running jobs on no known GPUs claim some first;
	// under an order that does not preempt, running jobs come before the
	// jobs that start; else rank order.
	order := make([]int, 0, len(r.Order))
	first := func(keep func(i int) bool) {
		for _, i := range r.Order {
			if keep(i) {
				order = append(order, i)
			}
		}
	}
	running := func(i int) bool { return s.Jobs[i].State == Running && r.Decisions[i].Run }
	isRelet := func(i int) bool { _, ok := relet[i]; return ok }
	first(func(i int) bool { return running(i) && len(r.Decisions[i].Slots) == 0 && !isRelet(i) })
	if !preemptive {
		first(func(i int) bool { return running(i) && len(r.Decisions[i].Slots) > 0 })
		first(func(i int) bool { return !running(i) || isRelet(i) })
	} else {
		first(func(i int) bool { return !running(i) || len(r.Decisions[i].Slots) > 0 || isRelet(i) })
	}

	var allocs []*synAlloc
	freed, blocked := false, false
	for _, i := range order {
		j, d := &s.Jobs[i], &r.Decisions[i]
		if d.Lane {
			continue
		}
		a := &synAlloc{job: i, g: max(j.GPUs, 1), grid: z.sens.grid(j.Model, j.GPUs)}
		switch held, ok := relet[i]; {
		case ok:
			// Its lease ended: placed again on its model, as a start is.
			a.held = held
			if m := c.find(d.GPUModel); m < 0 || !rd.size(a, d, m) {
				d.Run, d.GPUModel, d.Slots = false, "", nil
				d.Reason = r.join(d.Reason, "; its lease ended, and its CPU and memory demand fits no server with free GPUs")
				freed, blocked = true, blocking
				continue
			}
			d.Renewed = true
			if !sameSlots(held, d.Slots) {
				d.Migrate = true
				d.Reason = r.join(d.Reason, "; its lease ended: placed again on other GPUs")
			}
		case j.State == Running && d.Run:
			if (j.CPUs > 0 || j.MemoryGB > 0) && !d.Migrate {
				g := float64(a.g)
				a.keep, a.keeps = synShare{cpu: j.CPUs / g, mem: j.MemoryGB / g}, true
			}
			ok := rd.size(a, d, -1)
			switch {
			case ok:
			case preemptive:
				d.Run = false
				rd.release(d.Slots)
				d.Reason = r.join(d.Reason, "; preempted: its CPU and memory demand no longer fits its servers")
				freed = true
				continue
			default:
				rd.squeeze(a, d)
			}
		case blocked:
			if d.Run {
				d.Run, d.GPUModel, d.Slots = false, "", nil
				d.Reason = r.join(d.Reason, "; waits behind the head of the queue")
			}
			continue
		case d.Run:
			m := c.find(d.GPUModel)
			if !rd.size(a, d, m) {
				rd.release(d.Slots)
				d.Run, d.GPUModel, d.Slots = false, "", nil
				d.Reason = r.join(d.Reason, "; skipped: its CPU and memory demand fits no server with free GPUs")
				freed, blocked = true, blocking
				continue
			}
		case j.State == Running:
			continue // preempted by the placer
		default:
			// Left waiting by the placer: GPUs a skipped job left may fit
			// it now, as in the reference's single pass.
			m := -1
			if freed {
				m = rd.mostFree(j)
			}
			if m < 0 || !rd.size(a, d, m) {
				blocked = blocking
				continue
			}
			d.Run, d.GPUModel = true, c.models[m]
			d.Reason = r.join(d.Reason, "; starts on the GPUs a skipped job left")
		}
		allocs = append(allocs, a)
	}
	for _, a := range allocs {
		d := &r.Decisions[a.job]
		cpu, mem, fc, fm := a.perGPU(rd.sv)
		g := float64(a.g)
		d.CPUs, d.MemoryGB, d.Speedup = cpu*g, mem*g, 1
		if a.grid != nil {
			if base := a.grid.at(fc, fm); base > 0 {
				d.Speedup = a.grid.at(cpu, mem) / base
			}
		}
		rd.restartIfResized(a, d, r)
	}
}

// restartIfResized marks a running job whose CPU or memory the round
// changed as a restart, since a running task keeps what it started with;
// one that keeps them gets exactly what it holds.
func (rd *synRound) restartIfResized(a *synAlloc, d *Decision, r *Result) {
	j := &rd.s.Jobs[a.job]
	if j.State != Running || j.CPUs <= 0 && j.MemoryGB <= 0 {
		return
	}
	if sameSize(d.CPUs, j.CPUs) && sameSize(d.MemoryGB, j.MemoryGB) {
		d.CPUs, d.MemoryGB = j.CPUs, j.MemoryGB
		return
	}
	if !d.Migrate {
		d.Migrate = true
		d.Reason = r.join(d.Reason, fmt.Sprintf("; re-sized from %.2f CPUs and %.1f GB to %.2f and %.1f: restarts", j.CPUs, j.MemoryGB, d.CPUs, d.MemoryGB))
	}
}

// sameSize says two sizes differ by no more than rounding.
func sameSize(a, b float64) bool { return math.Abs(a-b) <= 1e-6*max(1, math.Abs(b)) }

// sameSlots says a and b hold the same GPUs, in any order.
func sameSlots(a, b []Slot) bool {
	if len(a) != len(b) {
		return false
	}
	for _, sl := range a {
		if !slices.Contains(b, sl) {
			return false
		}
	}
	return true
}

// takeGPU marks a slot's GPU taken (a lane's GPU once).
func (rd *synRound) takeGPU(sl Slot) {
	if sl.Node < 0 || sl.Node >= len(rd.sv) {
		return
	}
	for m, free := range rd.sv[sl.Node].free {
		if k := slices.Index(free, sl.GPU); k >= 0 {
			rd.sv[sl.Node].free[m] = slices.Delete(free, k, k+1)
			return
		}
	}
}

// modelOf is the model index of a slot's GPU, or -1.
func (rd *synRound) modelOf(sl Slot) int {
	if sl.Node < 0 || sl.Node >= len(rd.s.Nodes) || sl.GPU < 0 || sl.GPU >= len(rd.s.Nodes[sl.Node].GPUs) {
		return -1
	}
	return rd.c.find(rd.s.Nodes[sl.Node].GPUs[sl.GPU].Model)
}

// release gives back the GPUs of slots.
func (rd *synRound) release(slots []Slot) {
	for _, sl := range slots {
		if m := rd.modelOf(sl); m >= 0 && !slices.Contains(rd.sv[sl.Node].free[m], sl.GPU) {
			rd.sv[sl.Node].free[m] = append(rd.sv[sl.Node].free[m], sl.GPU)
			slices.Sort(rd.sv[sl.Node].free[m])
		}
	}
}

// mostFree is the model with the most free GPUs that has room for j and
// that j may run on, or -1.
func (rd *synRound) mostFree(j *Job) int {
	best, bestFree := -1, 0
	for m, model := range rd.c.models {
		if !j.allows(model) {
			continue
		}
		free := 0
		for n := range rd.sv {
			free += len(rd.sv[n].free[m])
		}
		if free >= max(j.GPUs, 1) && free > bestFree {
			best, bestFree = m, free
		}
	}
	return best
}

// size gives job a its CPU and memory: on the GPUs in d.Slots when it has
// them, else on GPUs of model m it takes (and records in d.Slots). It
// reports false when the job gets nothing: GREEDY's demand does not fit,
// or (TUNE) not even its share after shrinking others.
func (rd *synRound) size(a *synAlloc, d *Decision, m int) bool {
	fixed := len(d.Slots) > 0
	var parts []synPart
	if fixed {
		parts = rd.partsOf(d.Slots)
	} else if m < 0 {
		// A running job on GPUs we do not know: it holds GPUs of the
		// model it runs on (the one a migration moves it to), taken here
		// like a start's.
		if m = rd.c.find(d.GPUModel); m < 0 {
			m = rd.c.runningModel(rd.s, &rd.s.Jobs[a.job])
		}
		if m < 0 {
			return false
		}
	}
	if fixed {
		m = rd.modelOf(d.Slots[0])
	}
	demand := rd.demand(a, m)
	try := func(sh synShare) bool {
		if fixed {
			return rd.fitFixed(a, parts, sh)
		}
		return rd.place(a, d, m, sh)
	}
	if a.keeps && try(a.keep) {
		return true
	}
	if try(demand) {
		return true
	}
	if !rd.z.tune {
		return false
	}
	want := demand
	if rd.aboveFair(a, parts, m, demand) {
		want = synShare{fair: true}
		if try(want) {
			return true
		}
	}
	// Shrink the jobs above their share on the servers with free GPUs (the
	// job's own, when it has them), then try once more.
	under := parts
	if !fixed {
		under = rd.underused(m, a.g)
	}
	for _, p := range under {
		rd.shrinkPeers(p.node, p.gpus, want)
	}
	return try(want)
}

// demand is what job a asks for per GPU: the least CPU and memory that
// reach its best throughput, at most the largest server's worth of model m
// for the whole job, as Synergy caps its profiles; a job larger than a
// server, or without a profile, asks for the proportional share.
func (rd *synRound) demand(a *synAlloc, m int) synShare {
	if a.grid == nil || m < 0 || a.g > rd.c.perNode[m] {
		return synShare{fair: true}
	}
	g := float64(a.g)
	return synShare{cpu: min(a.grid.best[0], rd.biggest[m][0]/g), mem: min(a.grid.best[1], rd.biggest[m][1]/g)}
}

// partsOf groups slots by node.
func (rd *synRound) partsOf(slots []Slot) []synPart {
	var parts []synPart
	for _, sl := range slots {
		if k := slices.IndexFunc(parts, func(p synPart) bool { return p.node == sl.Node }); k >= 0 {
			parts[k].gpus++
		} else if sl.Node >= 0 && sl.Node < len(rd.sv) {
			parts = append(parts, synPart{node: sl.Node, gpus: 1})
		}
	}
	return parts
}

// aboveFair says the demand exceeds the proportional share somewhere the
// job would run.
func (rd *synRound) aboveFair(a *synAlloc, parts []synPart, m int, sh synShare) bool {
	if sh.fair {
		return false
	}
	for n := range rd.sv {
		sv := &rd.sv[n]
		if parts != nil && !slices.ContainsFunc(parts, func(p synPart) bool { return p.node == n }) {
			continue
		}
		if parts == nil && (m < 0 || len(sv.free[m]) == 0) {
			continue
		}
		if sh.cpu > sv.fairCPU+synEps || sh.mem > sv.fairMem+synEps {
			return true
		}
	}
	return false
}

// fits is how many GPUs' worth of share sh node n has room for.
func (rd *synRound) fits(n int, sh synShare) int {
	sv := &rd.sv[n]
	cpu, mem := sh.on(sv)
	k := 1 << 30
	if cpu > 0 {
		k = min(k, int((sv.cpu+synEps)/cpu))
	}
	if mem > 0 {
		k = min(k, int((sv.mem+synEps)/mem))
	}
	return k
}

// fitFixed sizes a job whose GPUs are given.
func (rd *synRound) fitFixed(a *synAlloc, parts []synPart, sh synShare) bool {
	for _, p := range parts {
		if rd.fits(p.node, sh) < p.gpus {
			return false
		}
	}
	for _, p := range parts {
		rd.hold(a, p, sh)
	}
	return true
}

// hold gives a its share on part p's node.
func (rd *synRound) hold(a *synAlloc, p synPart, sh synShare) {
	sv := &rd.sv[p.node]
	p.cpu, p.mem = sh.on(sv)
	k := float64(p.gpus)
	sv.cpu -= k * p.cpu
	sv.mem -= k * p.mem
	a.parts = append(a.parts, p)
	sv.allocs = append(sv.allocs, a)
}

// place finds GPUs of model m for a with share sh per GPU, as Synergy
// places: a multi-GPU job on one server where it all fits, the one with
// the fewest free GPUs; else GPU by GPU from the servers with the fewest
// free GPUs that fit one more. It takes them and records them in d.Slots.
//
// A job placed again at its lease's end goes first, among servers with as
// many free GPUs, to one it held GPUs on, and there takes those GPUs: the
// reference's GPUs are alike, and here a move costs a restart.
func (rd *synRound) place(a *synAlloc, d *Decision, m int, sh synShare) bool {
	// GPU by GPU it fits where the servers' room adds up to its GPUs, and
	// on one server only if so: a queue of thousands that GREEDY skips
	// is told so without a sort.
	room := 0
	for n := range rd.sv {
		if k := len(rd.sv[n].free[m]); k > 0 {
			room += min(k, rd.fits(n, sh))
		}
	}
	if room < a.g {
		return false
	}
	cands := rd.fewestFreeFirst(m, a.held)
	var parts []synPart
	if a.g > 1 {
		for _, n := range cands {
			if len(rd.sv[n].free[m]) >= a.g && rd.fits(n, sh) >= a.g {
				parts = []synPart{{node: n, gpus: a.g}}
				break
			}
		}
	}
	if parts == nil {
		need := a.g
		for _, n := range cands {
			if k := min(len(rd.sv[n].free[m]), need, rd.fits(n, sh)); k > 0 {
				parts = append(parts, synPart{node: n, gpus: k})
				need -= k
			}
			if need == 0 {
				break
			}
		}
		if need > 0 {
			return false
		}
	}
	d.Slots = nil
	for _, p := range parts {
		sv := &rd.sv[p.node]
		free := rd.heldFirst(sv.free[m], a, p.node)
		for _, g := range free[:p.gpus] {
			d.Slots = append(d.Slots, Slot{Node: p.node, GPU: g, Lane: -1})
		}
		sv.free[m] = free[p.gpus:]
		if rd.heldBy != nil {
			slices.Sort(sv.free[m])
		}
		rd.hold(a, p, sh)
	}
	return true
}

// heldFirst orders the free GPUs of node n, in place, for job a to take
// at a lease's end: those it held first, then those no job held, then
// those another job held, so that no job moves to make room for nothing.
func (rd *synRound) heldFirst(free []int, a *synAlloc, n int) []int {
	if rd.heldBy == nil {
		return free
	}
	rank := func(g int) int {
		switch i, ok := rd.heldBy[Slot{Node: n, GPU: g, Lane: -1}]; {
		case ok && i == a.job:
			return 0
		case !ok:
			return 1
		}
		return 2
	}
	slices.SortStableFunc(free, func(x, y int) int { return cmp.Compare(rank(x), rank(y)) })
	return free
}

// fewestFreeFirst lists the servers with free GPUs of model m, those with
// the fewest first, then those holding a GPU of held (stable on server
// order).
func (rd *synRound) fewestFreeFirst(m int, held []Slot) []int {
	cands := rd.cands[:0]
	for n := range rd.sv {
		if len(rd.sv[n].free[m]) > 0 {
			cands = append(cands, n)
		}
	}
	heldOn := func(n int) bool { return slices.ContainsFunc(held, func(sl Slot) bool { return sl.Node == n }) }
	slices.SortStableFunc(cands, func(x, y int) int {
		if c := cmp.Compare(len(rd.sv[x].free[m]), len(rd.sv[y].free[m])); c != 0 || held == nil {
			return c
		}
		switch hx, hy := heldOn(x), heldOn(y); {
		case hx && !hy:
			return -1
		case hy && !hx:
			return 1
		}
		return 0
	})
	rd.cands = cands
	return cands
}

// underused is where a job of g GPUs of model m would shrink others to
// fit: a server with g free GPUs, else the ones with the fewest free GPUs
// that add up to g.
func (rd *synRound) underused(m, g int) []synPart {
	if g > 1 {
		for n := range rd.sv {
			if len(rd.sv[n].free[m]) >= g {
				return []synPart{{node: n, gpus: g}}
			}
		}
	}
	cands := rd.fewestFreeFirst(m, nil)
	var parts []synPart
	for _, n := range cands {
		k := min(len(rd.sv[n].free[m]), g)
		parts = append(parts, synPart{node: n, gpus: k})
		if g -= k; g == 0 {
			break
		}
	}
	return parts
}

// shrinkPeers takes jobs on node n above their proportional share down to
// it until k GPUs' worth of share sh fits there: jobs on one server first,
// then those with the most CPU per GPU, then memory.
func (rd *synRound) shrinkPeers(n, k int, sh synShare) {
	sv := &rd.sv[n]
	cpu, mem := sh.on(sv)
	needCPU, needMem := float64(k)*cpu-sv.cpu, float64(k)*mem-sv.mem
	if needCPU <= synEps && needMem <= synEps {
		return
	}
	peers := slices.Clone(sv.allocs)
	slices.SortStableFunc(peers, func(x, y *synAlloc) int {
		if c := cmp.Compare(x.onNodes(), y.onNodes()); c != 0 {
			return c
		}
		xc, xm, _, _ := x.perGPU(rd.sv)
		yc, ym, _, _ := y.perGPU(rd.sv)
		if c := cmp.Compare(yc, xc); c != 0 {
			return c
		}
		return cmp.Compare(ym, xm)
	})
	for _, p := range peers {
		if needCPU <= synEps && needMem <= synEps {
			return
		}
		gotCPU, gotMem := rd.toFair(p, n)
		needCPU, needMem = needCPU-gotCPU, needMem-gotMem
	}
}

// toFair brings every part of p down to its server's proportional share,
// giving back what was above it, and returns what node n got back.
func (rd *synRound) toFair(p *synAlloc, n int) (cpu, mem float64) {
	for k := range p.parts {
		part := &p.parts[k]
		sv := &rd.sv[part.node]
		c, m := min(part.cpu, sv.fairCPU), min(part.mem, sv.fairMem)
		dc, dm := float64(part.gpus)*(part.cpu-c), float64(part.gpus)*(part.mem-m)
		sv.cpu, sv.mem = sv.cpu+dc, sv.mem+dm
		part.cpu, part.mem = c, m
		if part.node == n {
			cpu, mem = cpu+dc, mem+dm
		}
	}
	return cpu, mem
}

// squeeze gives a running job that must keep running and whose demand no
// longer fits what is left on its servers, up to its demand per GPU.
func (rd *synRound) squeeze(a *synAlloc, d *Decision) {
	parts := rd.partsOf(d.Slots)
	demand := rd.demand(a, rd.modelOf(d.Slots[0]))
	for _, p := range parts {
		sv := &rd.sv[p.node]
		cpu, mem := demand.on(sv)
		k := float64(p.gpus)
		p.cpu, p.mem = max(0, min(cpu, sv.cpu/k)), max(0, min(mem, sv.mem/k))
		sv.cpu -= k * p.cpu
		sv.mem -= k * p.mem
		a.parts = append(a.parts, p)
		sv.allocs = append(sv.allocs, a)
	}
}
