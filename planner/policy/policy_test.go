package policy

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/shoenig/test/must"
)

func nodes(model string, n, gpus int) []Node {
	var out []Node
	for i := 0; i < n; i++ {
		node := Node{ID: model, CPUs: 24, MemoryGB: 500, Healthy: true}
		for g := 0; g < gpus; g++ {
			node.GPUs = append(node.GPUs, GPU{Model: model, Healthy: true, Lanes: 2})
		}
		out = append(out, node)
	}
	return out
}

// randomV100Nodes is one to four nodes of eight whole V100s each, for the
// tests that check a round's rule on one GPU model.
func randomV100Nodes(rng *rand.Rand) []Node {
	var out []Node
	for n := 0; n < 1+rng.IntN(4); n++ {
		node := Node{Healthy: true}
		for g := 0; g < 8; g++ {
			node.GPUs = append(node.GPUs, GPU{Model: "V100", Healthy: true})
		}
		out = append(out, node)
	}
	return out
}

func job(id string, arrival float64, gpus int) Job {
	return Job{ID: id, Arrival: arrival, GPUs: gpus, PrevQueue: -1, PrevRank: -1, Remaining: -1}
}

func plan(t *testing.T, name string, cfg Config, s *Snapshot) *Result {
	t.Helper()
	p, err := Parse(name, cfg)
	must.NoError(t, err)
	return p.Plan(s, nil)
}

func ranked(s *Snapshot, r *Result) []string {
	var ids []string
	for _, i := range r.Order {
		ids = append(ids, s.Jobs[i].ID)
	}
	return ids
}

func running(s *Snapshot, r *Result) []string {
	var ids []string
	for _, i := range r.Order {
		if r.Decisions[i].Run {
			ids = append(ids, s.Jobs[i].ID)
		}
	}
	return ids
}

func TestParse(t *testing.T) {
	cases := []struct {
		name              string
		order, place, err string
		sized, blocking   bool
		migrate           bool
	}{
		{name: "fifo", order: "fifo", place: "count", blocking: true},
		{name: "fjf", order: "fifo", place: "count"},
		{name: "las", order: "las", place: "count"},
		{name: "allox", order: "fifo", place: "match"},
		{name: "hare", order: "hare", place: "earliest"},
		{name: "hare+fastest", order: "hare", place: "fastest"},
		{name: "pack", order: "las", place: "pack"},
		{name: "gittins+consolidated", order: "gittins", place: "consolidated"},
		{name: "LAS+match+synergy-greedy", order: "las", place: "match", sized: true},
		{name: "las+migrate", order: "las", place: "count", migrate: true},
		{name: "allox+migrate", order: "fifo", place: "match", migrate: true},
		{name: "las+earliest+migrate+synergy", order: "las", place: "earliest", migrate: true, sized: true},
		{name: "las+earliest-blind+migrate-blind", order: "las", place: "earliest-blind", migrate: true},
		{name: "lifo", err: `unknown order "lifo"`},
		{name: "las+teleport", err: `unknown step "teleport"`},
	}
	sens, err := NewSensitivity([]SensitivityRow{{Model: "m", GPUs: 1, CPUsPerGPU: 3, MemGBPerGPU: 62.5, Throughput: 1}})
	must.NoError(t, err)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Parse(tc.name, Config{Sensitivity: sens})
			if tc.err != "" {
				must.ErrorContains(t, err, tc.err)
				return
			}
			must.NoError(t, err)
			must.Eq(t, tc.order, p.Order.Name())
			must.Eq(t, tc.place, p.Place.Name())
			must.Eq(t, tc.sized, p.Size != nil)
			must.Eq(t, tc.blocking, p.Blocking)
			must.Eq(t, tc.migrate, p.Migrate != nil)
		})
	}
	_, err = Parse("las+synergy", Config{})
	must.ErrorContains(t, err, "needs a sensitivity table")
}

func TestLASQueuesAndPreemption(t *testing.T) {
	// Four GPUs. A (queue 2) and B (queue 1) run; C and D are new. New
	// jobs rank first; C and D take three GPUs, so B keeps one and A is
	// preempted.
	a, b, c, d := job("A", 0, 2), job("B", 1, 1), job("C", 2, 2), job("D", 3, 1)
	a.State, a.Attained, a.PrevQueue, a.PrevRank = Running, 8000, 2, 1
	b.State, b.Attained, b.PrevQueue, b.PrevRank = Running, 4000, 1, 0
	s := &Snapshot{Nodes: nodes("V100", 1, 4), Jobs: []Job{a, b, c, d}}
	r := plan(t, "las", Config{}, s)
	must.Eq(t, []string{"C", "D", "B", "A"}, ranked(s, r))
	must.Eq(t, []string{"C", "D", "B"}, running(s, r))
	must.Eq(t, 2, r.Decisions[0].Queue)
	must.Eq(t, 1, r.Decisions[1].Queue)
	must.StrContains(t, r.Decisions[0].Reason, "preempted")
	// The next cut crossing among the jobs that run: C reaches 3250 GPU-s
	// on 2 GPUs after 1625 s (D needs 3250 s, B 7200-4000 = 3200 s).
	must.Eq(t, 1625.0, r.Wake)
}

func TestLASKeepsOrderWithinQueue(t *testing.T) {
	// Both in queue 0; the running one stays ahead even though it arrived
	// later, so a queue does not thrash.
	early, late := job("early", 0, 2), job("late", 5, 2)
	late.State, late.PrevQueue, late.PrevRank = Running, 0, 0
	early.PrevQueue, early.PrevRank = 0, 1
	s := &Snapshot{Nodes: nodes("V100", 1, 2), Jobs: []Job{early, late}}
	r := plan(t, "las", Config{}, s)
	must.Eq(t, []string{"late", "early"}, ranked(s, r))
	must.Eq(t, []string{"late"}, running(s, r))
}

func TestPromoteKnob(t *testing.T) {
	cases := []struct {
		wait     float64
		promoted bool
	}{{99, false}, {100, true}}
	for _, tc := range cases {
		j := job("j", 0, 1)
		j.Attained, j.Executed, j.Wait = 5000, 50, tc.wait
		s := &Snapshot{Nodes: nodes("V100", 1, 1), Jobs: []Job{j}}
		r := plan(t, "las", Config{PromoteKnob: 2}, s)
		must.Eq(t, tc.promoted, r.Decisions[0].Promoted)
		if tc.promoted {
			must.Eq(t, 0, r.Decisions[0].Queue)
			// Promoted and started in one round: the promotion resets the
			// job's service, so its next demotion check is a whole queue
			// away (3250 GPU-s on 1 GPU), not at once from its old 5000.
			must.True(t, r.Decisions[0].Run)
			must.Eq(t, 3250.0, r.Wake)
		} else {
			must.Eq(t, 1, r.Decisions[0].Queue)
		}
	}
}

// A job promoted and started in one round is ranked by 2D-Gittins from zero
// attained service, as it will be from the next round on.
func TestGittinsRanksPromotedJobFromZero(t *testing.T) {
	sizes := NewSizeDistribution([]float64{100, 200, 1000, 8000})
	fresh, promoted := job("fresh", 10, 1), job("promoted", 0, 1)
	fresh.Attained, fresh.Executed, fresh.PrevQueue, fresh.PrevRank = 150, 150, 0, 0
	promoted.Attained, promoted.Executed, promoted.Wait = 5000, 50, 100
	s := &Snapshot{Nodes: nodes("V100", 1, 1), Jobs: []Job{fresh, promoted}, CompletedSizes: sizes}
	r := plan(t, "gittins", Config{PromoteKnob: 2}, s)
	must.True(t, r.Decisions[1].Promoted)
	must.StrContains(t, r.Decisions[1].Reason, "promoted")
	// From zero its index (a sample of 100 finishes within a quantum) beats
	// the fresh job's at 150; from 5000 it ranks last.
	must.Eq(t, []string{"promoted", "fresh"}, ranked(s, r))
}

func TestGittinsIndex(t *testing.T) {
	// Sizes 100, 200, 1000 with quantum 150. At a=0 the quantum finishes
	// the 100 job: P = 1/3, E[min(S,150)] = (100+150+150)/3, so the index
	// is 1/400. At a=100: 200 finishes (1 of 2), used 100+150 -> 1/250.
	d := NewSizeDistribution([]float64{1000, 100, 200})
	must.Eq(t, 1.0/400, d.Gittins(0, 150))
	must.Eq(t, 1.0/250, d.Gittins(100, 150))
	must.Eq(t, 0.0, d.Gittins(1000, 150))

	// Within a queue a higher index runs first: a job at 100 GPU-s is
	// closer to finishing than a fresh one.
	fresh, near := job("fresh", 0, 1), job("near", 1, 1)
	near.Attained = 100
	s := &Snapshot{Nodes: nodes("V100", 1, 1), Jobs: []Job{fresh, near}}
	r := plan(t, "gittins", Config{JobSizes: d, GittinsDelta: 150}, s)
	must.Eq(t, []string{"near", "fresh"}, ranked(s, r))
}

func TestReferenceGittinsTable(t *testing.T) {
	// The reference sums raw sizes: for a = 99 with sizes 100, 200, 1000
	// and delta 150: idx 0, idx_delta 2 (first above 249), p = 2/3
	// rounded to 0.66667, e = floor((100 + 200 + 150*1)/3) = 150, and the
	// index is round(0.66667e6/150, 4) = 4444.4667.
	d := NewSizeDistribution([]float64{100, 200, 1000})
	tbl := d.referenceGittins(150)
	must.Eq(t, 4444.4667, tbl[0])
}

func TestFIFOBlocksFJFSkips(t *testing.T) {
	big, small := job("big", 0, 4), job("small", 1, 1)
	hold := job("hold", -1, 1)
	hold.State = Running
	s := &Snapshot{Nodes: nodes("V100", 1, 4), Jobs: []Job{hold, big, small}}
	must.Eq(t, []string{"hold"}, running(s, plan(t, "fifo", Config{}, s)))
	must.Eq(t, []string{"hold", "small"}, running(s, plan(t, "fjf", Config{}, s)))
}

func TestShortestRemaining(t *testing.T) {
	long, short := job("long", 0, 1), job("short", 1, 4)
	long.Remaining, short.Remaining = 1000, 300
	s := &Snapshot{Nodes: nodes("V100", 1, 4), Jobs: []Job{long, short}}
	must.Eq(t, []string{"short", "long"}, ranked(s, plan(t, "srtf", Config{}, s)))
	// In GPU-time the 4-GPU job is longer: 1200 > 1000.
	must.Eq(t, []string{"long", "short"}, ranked(s, plan(t, "srsf", Config{}, s)))
}

func heteroSnapshot() *Snapshot {
	s := &Snapshot{Nodes: append(nodes("V100", 1, 2), nodes("K80", 1, 2)...)}
	// "conv" gains 4x on a V100, "rec" barely gains.
	rec, conv := job("rec", 0, 2), job("conv", 1, 2)
	conv.RemainingWork, conv.Throughput = 3600, map[string]float64{"V100": 4, "K80": 1}
	rec.RemainingWork, rec.Throughput = 1100, map[string]float64{"V100": 1.1, "K80": 1}
	s.Jobs = []Job{rec, conv}
	return s
}

func TestHeterogeneityAwarePlacement(t *testing.T) {
	for _, name := range []string{"allox", "hare"} {
		t.Run(name, func(t *testing.T) {
			s := heteroSnapshot()
			r := plan(t, name, Config{}, s)
			must.Eq(t, "K80", r.Decisions[0].GPUModel)  // rec
			must.Eq(t, "V100", r.Decisions[1].GPUModel) // conv
			must.True(t, r.Decisions[0].Run && r.Decisions[1].Run)
		})
	}
	// The agnostic count placer gives the first-ranked job (rec) the model
	// with the most free GPUs, the first listed on a tie: V100.
	s := heteroSnapshot()
	r := plan(t, "fjf", Config{}, s)
	must.Eq(t, "V100", r.Decisions[0].GPUModel)
}

// assignToGroups finds the least-cost assignment: checked against every
// assignment of small random cases, with groups of several alike slots and
// forbidden pairs, where a row's groups have room for all rows.
func TestAssignToGroupsAgreesWithEnumeration(t *testing.T) {
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 9))
		rows, groups := 1+rng.IntN(6), 1+rng.IntN(4)
		capacity := make([]int, groups)
		for g := range capacity {
			capacity[g] = 1 + rng.IntN(3)
		}
		cost := make([][]float64, rows)
		for r := range cost {
			cost[r] = make([]float64, groups)
			for g := range cost[r] {
				cost[r][g] = float64(rng.IntN(50))
				if rng.IntN(5) == 0 {
					cost[r][g] = math.Inf(1)
				}
			}
		}
		for r := range cost {
			room, last := 0, -1
			for g := range cost[r] {
				if !math.IsInf(cost[r][g], 1) {
					room, last = room+capacity[g], g
				}
			}
			if last >= 0 && room < rows {
				capacity[last] += rows - room
			}
		}
		got := assignToGroups(cost, capacity)
		used := make([]int, groups)
		gotN, gotCost := 0, 0.0
		for r, g := range got {
			if g >= 0 {
				must.False(t, math.IsInf(cost[r][g], 1), must.Sprintf("seed %d: a forbidden pair", seed))
				used[g]++
				gotN++
				gotCost += cost[r][g]
			}
		}
		for g := range used {
			must.True(t, used[g] <= capacity[g], must.Sprintf("seed %d: group %d over capacity", seed, g))
		}
		// Enumerate: most rows assigned, then least cost.
		bestN, bestCost := -1, 0.0
		var walk func(r, n int, c float64)
		walk = func(r, n int, c float64) {
			if r == rows {
				if n > bestN || (n == bestN && c < bestCost) {
					bestN, bestCost = n, c
				}
				return
			}
			walk(r+1, n, c)
			for g := range capacity {
				if !math.IsInf(cost[r][g], 1) && capacity[g] > 0 {
					capacity[g]--
					walk(r+1, n+1, c+cost[r][g])
					capacity[g]++
				}
			}
		}
		walk(0, 0, 0)
		must.Eq(t, bestN, gotN, must.Sprintf("seed %d: rows assigned", seed))
		must.InDelta(t, bestCost, gotCost, 1e-9, must.Sprintf("seed %d: cost", seed))
	}
}

// alloxCluster is one node with free GPUs of the given models, in order.
func alloxCluster(models ...string) []Node {
	n := Node{ID: "n", CPUs: 64, MemoryGB: 512, Healthy: true}
	for _, m := range models {
		n.GPUs = append(n.GPUs, GPU{Model: m, Healthy: true})
	}
	return []Node{n}
}

// TestAlloXAgreesWithGavel works small cases by hand and checks them
// against Gavel's allox.py (scheduler/policies/allox.py): its
// get_allocation logic, with scipy's assignment solver replaced by an
// enumeration of every assignment (scipy returns one optimum; these cases
// have one), run on the same input. Compared: which jobs the free GPUs
// start, on which model. allox.py gives a job in slot k of worker w, with
// p its processing time on w's type, the cost (k+1)·p; per worker, the job
// with the highest k runs now.
//
//   - per-GPU slots: one V100 and two K80s free, J1 takes 9 s on a V100
//     and 21 s on a K80, J2 20 s and 30 s. J1 ahead of J2 on the V100
//     costs 2·9 + 20 = 38, J1 on the V100 and J2 on a K80 9 + 30 = 39, the
//     other way 20 + 21 = 41, both on the K80s 21 + 30 = 51. allox.py
//     starts J1 on the V100; J2 waits behind it and the K80s stay idle.
//     The old matching pooled each model into one server, slots costing
//     k·p ÷ its GPUs: J2 on the K80s cost 30/2 = 15 and started there.
//   - queue heads: two V100s and a K80 free, five jobs (V100 s, K80 s):
//     J1 (10, 100), J2 (11, 100), J3 (30, 100), J4 (40, 100), J5 (20,
//     22). Optimum 134: J5 on the K80 (22); on the V100s J1 and J2 in
//     position 2 (2·10 + 2·11), J3 and J4 in position 1 behind them (30 +
//     40). allox.py starts J1, J2 on the V100s and J5 on the K80; J3 and J4
//     wait.
func TestAlloXAgreesWithGavel(t *testing.T) {
	type jobTimes struct {
		id        string
		v100, k80 float64
	}
	cases := []struct {
		name    string
		gpus    []string
		jobs    []jobTimes
		running map[string]string // job -> model it starts on
	}{
		{"per-GPU slots", []string{"V100", "K80", "K80"},
			[]jobTimes{{"J1", 9, 21}, {"J2", 20, 30}},
			map[string]string{"J1": "V100"}},
		{"queue heads", []string{"V100", "V100", "K80"},
			[]jobTimes{{"J1", 10, 100}, {"J2", 11, 100}, {"J3", 30, 100}, {"J4", 40, 100}, {"J5", 20, 22}},
			map[string]string{"J1": "V100", "J2": "V100", "J5": "K80"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := &Snapshot{Nodes: alloxCluster(tc.gpus...)}
			for k, jt := range tc.jobs {
				j := job(jt.id, float64(k), 1)
				// One step of work: the time on a model is 1 ÷ its rate.
				j.RemainingWork, j.Throughput = 1, map[string]float64{"V100": 1 / jt.v100, "K80": 1 / jt.k80}
				s.Jobs = append(s.Jobs, j)
			}
			r := plan(t, "allox", Config{}, s)
			got := map[string]string{}
			for i, d := range r.Decisions {
				if d.Run {
					got[s.Jobs[i].ID] = d.GPUModel
				}
			}
			must.Eq(t, tc.running, got)
		})
	}
}

// The fairness knob keeps the ⌈(1−f)·n⌉ longest-waiting jobs, but never
// fewer than the free GPUs: with f = 1 and three GPUs free, the three
// oldest are matched (allox.py keeps max(⌊α·m⌋, n) of m jobs on n free
// workers, α = 1 − f). Before, f = 1 matched the oldest job alone.
func TestAlloXFairnessKeepsAsManyJobsAsFreeGPUs(t *testing.T) {
	cases := []struct {
		fairness float64
		matched  []string
	}{
		{1, []string{"J1", "J2", "J3"}},
		{0.5, []string{"J1", "J2", "J3"}}, // ⌈0.5·5⌉ = 3
		{0.2, []string{"J1", "J2", "J3", "J4"}},
		{0, []string{"J1", "J2", "J3", "J4", "J5"}},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprint(tc.fairness), func(t *testing.T) {
			s := &Snapshot{Nodes: alloxCluster("V100", "V100", "K80")}
			for k := range 5 {
				j := job(fmt.Sprint("J", k+1), float64(k), 1)
				j.Remaining = 100
				s.Jobs = append(s.Jobs, j)
			}
			r := plan(t, "allox", Config{Fairness: tc.fairness}, s)
			var matched []string
			for i, d := range r.Decisions {
				if strings.Contains(d.Reason, "matched to") {
					matched = append(matched, s.Jobs[i].ID)
				}
			}
			must.Eq(t, tc.matched, matched)
		})
	}
}

// AlloX matches the whole pending queue: on two free GPUs of two models,
// the two shortest of 60 waiting jobs start, however recently they came
// (the matching once took only the 48 longest-waiting).
func TestAlloXMatchesTheWholeQueue(t *testing.T) {
	s := &Snapshot{Nodes: alloxCluster("V100", "K80")}
	for k := range 60 {
		j := job(fmt.Sprint("J", k+1), float64(k), 1)
		j.RemainingWork, j.Throughput = 1000, map[string]float64{"V100": 2, "K80": 1}
		if k >= 58 {
			j.RemainingWork = 10 // the two newest are the shortest
		}
		s.Jobs = append(s.Jobs, j)
	}
	r := plan(t, "allox", Config{}, s)
	var started []string
	for i, d := range r.Decisions {
		if d.Run {
			started = append(started, s.Jobs[i].ID)
		}
	}
	must.Eq(t, []string{"J59", "J60"}, started)
}

func TestConsolidatedBestFit(t *testing.T) {
	// Node 0 has 1 free GPU, node 1 has 4: a 1-GPU job goes to node 0 and
	// a 4-GPU job to node 1, keeping both on one node.
	s := &Snapshot{Nodes: nodes("V100", 2, 4)}
	hold := job("hold", 0, 3)
	hold.State, hold.Placement = Running, []Slot{{0, 0, -1}, {0, 1, -1}, {0, 2, -1}}
	s.Jobs = []Job{hold, job("four", 1, 4), job("one", 2, 1)}
	r := plan(t, "fjf+consolidated", Config{}, s)
	must.Eq(t, []Slot{{1, 0, -1}, {1, 1, -1}, {1, 2, -1}, {1, 3, -1}}, r.Decisions[1].Slots)
	must.Eq(t, []Slot{{0, 3, -1}}, r.Decisions[2].Slots)
}

func TestPackJoinsLanes(t *testing.T) {
	// One GPU with two lanes: a running lane job and a waiting one-GPU job
	// that shares it when the pair gains (0.7 + 0.8 > 1), not when it
	// loses (0.4 + 0.5).
	cases := []struct {
		self, partner float64
		joins         bool
	}{{0.7, 0.8, true}, {0.4, 0.5, false}}
	for _, tc := range cases {
		col := NewColocation([]ColocationSample{
			{GPU: "v100", Self: "b", Partner: "a", Factor: tc.self},
			{GPU: "v100", Self: "a", Partner: "b", Factor: tc.partner},
		}, nil)
		a, b := job("a", 0, 1), job("b", 1, 1)
		a.Model, b.Model = "a", "b"
		a.State, a.Placement = Running, []Slot{{0, 0, 0}}
		s := &Snapshot{Nodes: nodes("V100", 1, 1), Jobs: []Job{a, b}}
		r := plan(t, "fjf+pack", Config{Colocation: col}, s)
		must.Eq(t, tc.joins, r.Decisions[1].Run)
		if tc.joins {
			must.True(t, r.Decisions[1].Lane)
			must.Eq(t, []Slot{{0, 0, 1}}, r.Decisions[1].Slots)
		}
	}
}

func TestNomadPriority(t *testing.T) {
	must.Eq(t, 80, NomadPriority(0))
	must.Eq(t, 78, NomadPriority(2))
	must.Eq(t, 71, NomadPriority(20))
	// Nomad preempts only jobs 10 or more below: never one managed job
	// for another.
	for band := range 30 {
		must.Less(t, 10, NomadPriority(0)-NomadPriority(band))
		must.LessEq(t, NomadPriority(band), NomadPriority(band+1))
	}
}

func TestFirstAboveMatchesLinearScan(t *testing.T) {
	samples := []float64{0, 0, 1, 1, 1, 2.5, 60, 60, 61, 1144, 1144, 13136, 254884, 1e7}
	d := NewSizeDistribution(samples)
	probes := append([]float64{-5, 0.5, 3, 1e8, 59.9, 60.1}, samples...)
	for _, v := range probes {
		want := 0
		for want < len(d.sorted) && d.sorted[want] <= v {
			want++
		}
		must.Eq(t, want, d.firstAbove(v), must.Sprintf("v=%v", v))
	}
}

func TestSortNearlySortedMatchesAFullSort(t *testing.T) {
	r := &Result{}
	for seed := range uint64(500) {
		rng := rand.New(rand.NewPCG(seed, 3))
		n := rng.IntN(300)
		items := make([]Rank, n)
		for i := range items {
			items[i] = Rank{K1: float64(rng.IntN(3)), K2: float64(i), Arrival: float64(rng.IntN(5)), Job: i}
		}
		slices.SortFunc(items, CompareRanks[float64, int])
		// Move a few items, or many, as rounds do.
		for range rng.IntN(1 + n/(1+rng.IntN(20))) {
			k := rng.IntN(n)
			items[k].K2 = float64(rng.IntN(n + 1))
			if rng.IntN(4) == 0 {
				items[k].K1 = float64(rng.IntN(3))
			}
		}
		want := slices.Clone(items)
		slices.SortFunc(want, CompareRanks[float64, int])
		// Holes, ranks no job held, are dropped.
		for range rng.IntN(1 + n/4) {
			k := rng.IntN(len(items) + 1)
			items = slices.Insert(items, k, Rank{K1: float64(rng.IntN(3)), Job: -1})
		}
		got := r.sortNearlySorted(items)
		if !slices.Equal(got, want) {
			t.Fatalf("seed %d: got %v, want %v", seed, got, want)
		}
	}
}

func TestFirstAboveMatchesABinarySearchOnRandomSamples(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 5))
		var samples []float64
		for range 1 + rng.IntN(2000) {
			switch rng.IntN(4) {
			case 0:
				samples = append(samples, float64(rng.IntN(10))) // zeros and repeats
			case 1:
				samples = append(samples, math.Exp(rng.Float64()*60)) // a huge range
			default:
				samples = append(samples, rng.Float64()*1e5)
			}
		}
		d := NewSizeDistribution(samples)
		for range 200 {
			v := []float64{-1, 0, rng.Float64() * 1e5, math.Exp(rng.Float64() * 70), d.sorted[rng.IntN(len(d.sorted))]}[rng.IntN(5)]
			want, _ := slices.BinarySearchFunc(d.sorted, v, func(e, t float64) int {
				if e <= t {
					return -1
				}
				return 1
			})
			if got := d.firstAbove(v); got != want {
				t.Fatalf("seed %d: firstAbove(%g) = %d, want %d", seed, v, got, want)
			}
		}
	}
}

// TestEnterRanksLikeARound starts two arrivals with Enter instead of a
// round each, and checks that the next round orders every job as if
// those rounds had run.
func TestEnterRanksLikeARound(t *testing.T) {
	p, err := Parse("las", Config{})
	must.NoError(t, err)
	base := &Snapshot{Nodes: nodes("V100", 2, 4)}
	for k, attained := range []float64{0, 100, 4000, 200, 9000} {
		j := job(fmt.Sprint("run", k), float64(k), 1)
		j.State, j.Attained, j.Executed, j.GPUModel = Running, attained, attained, "V100"
		base.Jobs = append(base.Jobs, j)
	}
	settle := func(s *Snapshot, r *Result) {
		for i := range s.Jobs {
			s.Jobs[i].PrevQueue, s.Jobs[i].PrevRank = r.Decisions[i].Queue, r.Decisions[i].Rank
			if r.Decisions[i].Run {
				s.Jobs[i].State = Running
			}
		}
	}
	arrive := func(s *Snapshot, id string, at float64, gpus int) *Job {
		s.Jobs = append(s.Jobs, job(id, at, gpus))
		return &s.Jobs[len(s.Jobs)-1]
	}
	settle(base, p.Plan(base, nil))

	// With a round per arrival.
	rounds := &Snapshot{Nodes: base.Nodes, Jobs: slices.Clone(base.Jobs)}
	arrive(rounds, "a", 10, 1)
	settle(rounds, p.Plan(rounds, nil))
	arrive(rounds, "b", 11, 1)
	settle(rounds, p.Plan(rounds, nil))

	// With Enter.
	entered := &Snapshot{Nodes: base.Nodes, Jobs: slices.Clone(base.Jobs)}
	for k, id := range []string{"a", "b"} {
		must.True(t, p.Settled(entered, &entered.Jobs[0]))
		j := arrive(entered, id, float64(10+k), 1)
		p.Enter(j, len(base.Jobs)+k)
		j.State = Running
	}

	// A big job arrives and must preempt: the order decides who.
	for _, s := range []*Snapshot{rounds, entered} {
		arrive(s, "big", 12, 6)
	}
	want, got := p.Plan(rounds, nil), p.Plan(entered, nil)
	must.Eq(t, ranked(rounds, want), ranked(entered, got))
}

// A GPU cut into lanes takes one lane job per lane: once a lane job runs on
// it, one-GPU jobs that fit a lane start on its spare lanes, and the count
// placers do not count it as full. Jobs too big for a lane, and placers that
// give concrete lanes themselves, do not.
func TestCountPlacersShareLanes(t *testing.T) {
	laned := []Node{{ID: "n", CPUs: 8, MemoryGB: 64, Healthy: true,
		GPUs: []GPU{{Model: "H100", MemoryMB: 80000, Lanes: 4, LaneMemoryMB: 20000, Healthy: true}}}}
	on := job("on", 0, 1)
	on.State, on.Placement, on.GPUMemoryMB = Running, []Slot{{Node: 0, GPU: 0, Lane: 0}}, 10000
	jobs := []Job{on}
	for i := 1; i <= 4; i++ {
		j := job(fmt.Sprintf("p%d", i), float64(i), 1)
		j.GPUMemoryMB = 10000
		jobs = append(jobs, j)
	}
	big := job("big", 9, 1)
	big.GPUMemoryMB = 30000
	jobs = append(jobs, big)
	for _, name := range []string{"fjf", "hare", "allox"} {
		t.Run(name, func(t *testing.T) {
			s := &Snapshot{Nodes: laned, Jobs: slices.Clone(jobs)}
			r := plan(t, name, Config{}, s)
			must.Eq(t, []string{"on", "p1", "p2", "p3"}, running(s, r))
			for i := 1; i <= 3; i++ {
				must.True(t, r.Decisions[i].Lane, must.Sprint(s.Jobs[i].ID, " runs on a lane"))
			}
		})
	}
	// Consolidated placement hands out whole GPUs: the shared GPU is full.
	s := &Snapshot{Nodes: laned, Jobs: slices.Clone(jobs)}
	must.Eq(t, []string{"on"}, running(s, plan(t, "fjf+consolidated", Config{}, s)))

	// On an idle laned GPU the first one-GPU job takes a lane, the next
	// ones share the GPU.
	s = &Snapshot{Nodes: laned, Jobs: slices.Clone(jobs[1:])}
	must.Eq(t, []string{"p1", "p2", "p3", "p4"}, running(s, plan(t, "fjf", Config{}, s)))
}

// A job that names its GPU models runs on no other, whatever the placer.
func TestPlacersKeepTheJobsOwnModels(t *testing.T) {
	for _, name := range []string{"fjf", "hare", "allox"} {
		t.Run(name, func(t *testing.T) {
			s := heteroSnapshot()
			// conv runs 4x faster on a V100 but its user chose the K80.
			s.Jobs[1].Models = []string{"K80"}
			r := plan(t, name, Config{}, s)
			must.Eq(t, "K80", r.Decisions[1].GPUModel)
			must.True(t, r.Decisions[1].Run)
			must.NotEq(t, "K80", r.Decisions[0].GPUModel, must.Sprint("rec goes where conv does not"))
		})
	}
}

// Under a preemptive order, matching preempts a running job that a pending
// job ranked above it needs, then places the pending job by the matching.
func TestMatchPreemptsUnderPreemptiveOrder(t *testing.T) {
	long, short := job("long", 0, 1), job("short", 10, 1)
	long.State, long.Attained, long.GPUModel = Running, 10000, "V100"
	s := &Snapshot{Nodes: []Node{{ID: "n", Healthy: true, GPUs: []GPU{{Model: "V100", Healthy: true}}}}, Jobs: []Job{long, short}}
	r := plan(t, "las+match", Config{}, s)
	must.Eq(t, []string{"short"}, running(s, r))
	must.StrContains(t, r.Decisions[0].Reason, "preempted")
	// AlloX's own order is not preemptive: the running job keeps its GPU.
	s = &Snapshot{Nodes: s.Nodes, Jobs: []Job{long, short}}
	must.Eq(t, []string{"long"}, running(s, plan(t, "allox", Config{}, s)))
}

// A running job displaced by a pending job that the matching then does not
// start there keeps running: no preemption for nothing.
func TestMatchKeepsRunningJobThePendingJobDoesNotTake(t *testing.T) {
	long := job("long", 0, 1)
	long.State, long.Attained, long.GPUModel = Running, 10000, "K80"
	// The preemptive walk gives a the free V100 and b long's K80; the
	// matching queues both on the V100 (on the K80 they would crawl), so
	// the K80 stays free and long keeps it.
	a, b := job("a", 10, 1), job("b", 11, 1)
	for _, j := range []*Job{&a, &b} {
		j.RemainingWork, j.Throughput = 100, map[string]float64{"V100": 10, "K80": 0.1}
	}
	s := &Snapshot{Nodes: alloxCluster("V100", "K80"), Jobs: []Job{long, a, b}}
	r := plan(t, "las+match", Config{}, s)
	must.Eq(t, []string{"a", "long"}, running(s, r))
	must.Eq(t, "V100", r.Decisions[2].GPUModel)
	must.StrContains(t, r.Decisions[2].Reason, "waits behind its queue")
	must.StrNotContains(t, r.Decisions[0].Reason, "preempted")
}

// A round of a policy that StartsInArrivalOrder, on one GPU model, starts
// exactly the pending jobs the rule picks: in arrival order (ties by
// index), each one the free GPUs hold, and under strict FIFO up to the
// first one they do not. Random snapshots, some with jobs larger than the
// cluster and ties in arrival.
func TestStartsInArrivalOrderIsARound(t *testing.T) {
	for _, tc := range []struct {
		name string
		want bool
	}{
		{"fifo", true}, {"fjf", true}, {"fjf+fastest", true}, {"fifo+fastest", true},
		{"fjf+earliest", false}, {"fjf+consolidated", false}, {"allox", false},
		{"las", false}, {"gittins", false}, {"srsf", false}, {"hare", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Parse(tc.name, Config{})
			must.NoError(t, err)
			must.Eq(t, tc.want, p.StartsInArrivalOrder())
			if !tc.want {
				return
			}
			rng := rand.New(rand.NewPCG(7, 11))
			for round := 0; round < 300; round++ {
				s := &Snapshot{Nodes: randomV100Nodes(rng)}
				total := 8 * len(s.Nodes)
				free := total
				for k := 0; k < 40; k++ {
					j := job(fmt.Sprint(k), float64(rng.IntN(20)), 1<<rng.IntN(6))
					if rng.IntN(3) == 0 && j.GPUs <= free {
						j.State, j.GPUModel = Running, "V100"
						free -= j.GPUs
					}
					s.Jobs = append(s.Jobs, j)
				}
				pending := []int{}
				for i, j := range s.Jobs {
					if j.State == Pending {
						pending = append(pending, i)
					}
				}
				slices.SortStableFunc(pending, func(a, b int) int { return int(s.Jobs[a].Arrival - s.Jobs[b].Arrival) })
				want := map[int]bool{}
				for _, i := range pending {
					if g := s.Jobs[i].GPUs; g <= free {
						want[i] = true
						free -= g
					} else if p.Blocking {
						break
					}
				}
				r := p.Plan(s, nil)
				for i, j := range s.Jobs {
					d := r.Decisions[i]
					must.Eq(t, j.State == Running || want[i], d.Run, must.Sprintf("round %d job %d", round, i))
					if d.Run {
						must.Eq(t, "V100", d.GPUModel)
						must.Eq(t, 1.0, d.Speedup)
						must.False(t, d.Lane)
					}
				}
			}
		})
	}
}

// Under a policy that CanStartArrivalsPastWaiting, after a round and
// with the running jobs' remaining time fallen since, arrivals that fit
// the free GPUs start and every other job keeps its decision, though
// jobs wait. Random snapshots on one GPU model.
func TestArrivalsStartPastWaitingJobs(t *testing.T) {
	for _, tc := range []struct {
		name string
		want bool
	}{
		{"srsf", true}, {"srtf", true}, {"srtf+fastest", true},
		{"las", false}, {"gittins", false}, {"fifo", false}, {"fjf", false}, {"hare", false}, {"srsf+earliest", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Parse(tc.name, Config{})
			must.NoError(t, err)
			must.Eq(t, tc.want, p.CanStartArrivalsPastWaiting())
			if !tc.want {
				return
			}
			rng := rand.New(rand.NewPCG(3, 5))
			tried := 0
			for round := 0; round < 400; round++ {
				s := &Snapshot{Nodes: []Node{{Healthy: true}, {Healthy: true}}}
				for n := range s.Nodes {
					for g := 0; g < 8; g++ {
						s.Nodes[n].GPUs = append(s.Nodes[n].GPUs, GPU{Model: "V100", Healthy: true})
					}
				}
				for k := 0; k < 12; k++ {
					j := job(fmt.Sprint(k), float64(k), 1<<rng.IntN(4))
					j.Remaining = float64(1 + rng.IntN(1000))
					s.Jobs = append(s.Jobs, j)
				}
				r0 := p.Plan(s, nil)
				free := 16
				for i := range s.Jobs {
					j, d := &s.Jobs[i], r0.Decisions[i]
					j.PrevQueue, j.PrevRank = d.Queue, d.Rank
					j.State = Pending
					if d.Run {
						j.State, j.GPUModel = Running, "V100"
						free -= j.GPUs
						j.Remaining = max(j.Remaining-float64(rng.IntN(500)), 0)
					}
				}
				before := len(s.Jobs)
				for k := 0; free > 0 && k < 3; k++ {
					g := 1 + rng.IntN(free)
					j := job(fmt.Sprint("a", k), 20, g)
					j.Remaining = float64(1 + rng.IntN(1000))
					s.Jobs = append(s.Jobs, j)
					free -= g
				}
				if len(s.Jobs) == before {
					continue
				}
				tried++
				r := p.Plan(s, nil)
				for i, j := range s.Jobs {
					must.Eq(t, i >= before || j.State == Running, r.Decisions[i].Run, must.Sprintf("round %d job %s", round, j.ID))
				}
			}
			must.Greater(t, 50, tried)
		})
	}
}

// A round of a policy that RanksByKey, on one GPU model, runs exactly the
// jobs the first-fit walk picks: every job, running or pending, in order
// of (RankKey, arrival, index), runs if the GPUs not yet taken hold it.
// Random snapshots with ties in key and arrival, unknown durations, jobs
// larger than the cluster, and running jobs that together fill it.
func TestRanksByKeyIsARound(t *testing.T) {
	for _, tc := range []struct {
		name string
		want bool
	}{
		{"srsf", true}, {"srtf", true}, {"srsf+fastest", true},
		{"srsf+consolidated", false}, {"srsf+earliest", false}, {"las", false}, {"gittins", false},
		{"fifo", false}, {"fjf", false}, {"hare", false}, {"predict", true}, {"predict+consolidated", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Parse(tc.name, Config{})
			must.NoError(t, err)
			must.Eq(t, tc.want, p.RanksByKey())
			must.Eq(t, tc.want || strings.HasPrefix(tc.name, "srsf+") || strings.HasPrefix(tc.name, "predict+"), p.RankKey() != nil)
			if !tc.want {
				return
			}
			rng := rand.New(rand.NewPCG(3, 5))
			for round := 0; round < 400; round++ {
				s := &Snapshot{Nodes: randomV100Nodes(rng), History: NewHistory(20)}
				for range rng.IntN(200) {
					s.History.Add(fmt.Sprint("g", rng.IntN(3)), 1<<rng.IntN(4), float64(rng.IntN(40)))
				}
				total := 8 * len(s.Nodes)
				free := total
				for k := 0; k < 40; k++ {
					j := job(fmt.Sprint(k), float64(rng.IntN(10)), 1<<rng.IntN(7))
					if rng.IntN(8) > 0 {
						j.Remaining = float64(rng.IntN(30))
					}
					j.Group, j.Attained = fmt.Sprint("g", rng.IntN(4)), float64(rng.IntN(3)*rng.IntN(20))
					if rng.IntN(2) == 0 && j.GPUs <= free {
						j.State, j.GPUModel = Running, "V100"
						free -= j.GPUs
					}
					s.Jobs = append(s.Jobs, j)
				}
				order := make([]int, len(s.Jobs))
				for i := range order {
					order[i] = i
				}
				key := p.RankKey()
				slices.SortStableFunc(order, func(a, b int) int {
					ja, jb := &s.Jobs[a], &s.Jobs[b]
					return cmp.Or(cmp.Compare(key(s.History, ja, nil), key(s.History, jb, nil)), cmp.Compare(ja.Arrival, jb.Arrival))
				})
				want, left := map[int]bool{}, total
				for _, i := range order {
					if g := s.Jobs[i].GPUs; g <= left {
						want[i] = true
						left -= g
					}
				}
				r := p.Plan(s, nil)
				for i := range s.Jobs {
					d := r.Decisions[i]
					must.Eq(t, want[i], d.Run, must.Sprintf("round %d job %d", round, i))
					if d.Run {
						must.Eq(t, "V100", d.GPUModel)
						must.False(t, d.Lane)
					}
				}
			}
		})
	}
}

// A round of a policy that RanksByQueue, on one GPU model, runs exactly
// the jobs the rule's first-fit walk picks, and wakes at the least
// RunWake of the jobs it runs. Random snapshots with jobs that crossed a
// cut while running, arrivals, ties in arrival, and last rounds' ranks.
func TestRanksByQueueIsARound(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want bool
	}{
		{"las", Config{QueueCuts: []float64{10, 50}}, true},
		{"las", Config{}, true},
		{"las+fastest", Config{}, true},
		{"las", Config{PromoteKnob: 2}, false},
		{"las", Config{Compat: true}, false},
		{"las+consolidated", Config{}, false},
		{"gittins", Config{QueueCuts: []float64{10, 50}}, true},
		{"gittins", Config{PromoteKnob: 2}, false},
		{"srsf", Config{}, false}, {"fifo", Config{}, false},
	} {
		t.Run(fmt.Sprintf("%s/%v/%v/%v", tc.name, tc.cfg.QueueCuts, tc.cfg.PromoteKnob, tc.cfg.Compat), func(t *testing.T) {
			p, err := Parse(tc.name, tc.cfg)
			must.NoError(t, err)
			rule, ok := p.RanksByQueue()
			must.Eq(t, tc.want, ok)
			if !ok {
				return
			}
			scale := 1.0
			if tc.cfg.QueueCuts == nil {
				scale = 100
			}
			rng := rand.New(rand.NewPCG(9, 2))
			for round := 0; round < 400; round++ {
				s := &Snapshot{Nodes: randomV100Nodes(rng)}
				total := 8 * len(s.Nodes)
				free := total
				ranks := rng.Perm(40)
				for k := 0; k < 40; k++ {
					j := job(fmt.Sprint(k), float64(rng.IntN(10)), 1<<rng.IntN(7))
					j.Attained = scale * float64(rng.IntN(80))
					j.Executed = j.Attained / float64(j.GPUs)
					qi := rule.Queue(&j)
					switch {
					case rng.IntN(2) == 0 && j.GPUs <= free:
						j.State, j.GPUModel = Running, "V100"
						free -= j.GPUs
						j.PrevQueue = max(qi-rng.IntN(2), 0) // some crossed a cut
					case j.Attained == 0 && rng.IntN(2) == 0:
						// an arrival
					default:
						j.PrevQueue = qi
					}
					if j.PrevQueue >= 0 {
						j.PrevRank = ranks[k]
					}
					s.Jobs = append(s.Jobs, j)
				}
				if tc.name == "gittins" && round%2 == 1 {
					var sizes []float64
					for k := 0; k < 30; k++ {
						sizes = append(sizes, float64(1+rng.IntN(100)))
					}
					s.CompletedSizes = NewSizeDistribution(sizes)
				}
				type place struct {
					queue, group, rank int
					key                float64
				}
				placeOf := func(i int) place {
					j := &s.Jobs[i]
					qi := rule.Queue(j)
					if d := rule.Sizes(s); d != nil {
						return place{queue: qi, key: rule.Key(d, j, nil)}
					}
					switch {
					case j.PrevQueue == qi && j.State == Running:
						return place{qi, 0, j.PrevRank, 0}
					case j.PrevQueue == qi:
						return place{qi, 1, j.PrevRank, 0}
					case j.PrevQueue < 0:
						return place{qi, 2, 0, 0}
					}
					return place{qi, 3, 0, 0}
				}
				order := make([]int, len(s.Jobs))
				for i := range order {
					order[i] = i
				}
				slices.SortStableFunc(order, func(a, b int) int {
					pa, pb := placeOf(a), placeOf(b)
					return cmp.Or(cmp.Compare(pa.queue, pb.queue), cmp.Compare(pa.key, pb.key), cmp.Compare(pa.group, pb.group),
						cmp.Compare(pa.rank, pb.rank), cmp.Compare(s.Jobs[a].Arrival, s.Jobs[b].Arrival))
				})
				want, left, wake := map[int]bool{}, total, math.Inf(1)
				for _, i := range order {
					if g := s.Jobs[i].GPUs; g <= left {
						want[i] = true
						left -= g
						wake = min(wake, rule.RunWake(&s.Jobs[i], rule.Queue(&s.Jobs[i])))
					}
				}
				r := p.Plan(s, nil)
				for i := range s.Jobs {
					must.Eq(t, want[i], r.Decisions[i].Run, must.Sprintf("round %d job %d", round, i))
					must.Eq(t, rule.Queue(&s.Jobs[i]), r.Decisions[i].Queue)
				}
				must.Eq(t, wake, r.Wake, must.Sprintf("round %d", round))
			}
		})
	}
}

// GittinsFrom gives Gittins' index bit for bit, with one hint carried
// along a job's growing attained service (small steps, jumps, falls, and
// into new sizes and quanta, and sizes learned since with the same
// quantum) and with hints that point anywhere.
func TestGittinsFromMatchesGittins(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 8))
	h := IndexHint{} // carried into each new distribution too
	for trial := 0; trial < 50; trial++ {
		var sizes []float64
		for k := 0; k < 1+rng.IntN(300); k++ {
			sizes = append(sizes, float64(1+rng.IntN(5000))) // with repeats
		}
		d := NewSizeDistribution(sizes)
		delta := float64(1 + rng.IntN(3000))
		a := 0.0
		for step := 0; step < 500; step++ {
			switch rng.IntN(13) {
			case 12: // sizes learned since: the same samples and more
				sizes = append(sizes, float64(1+rng.IntN(5000)))
				d = NewSizeDistribution(sizes)
			case 10: // another quantum over the same sizes
				delta = float64(1 + rng.IntN(3000))
			case 11: // a fall: another job's service
				a = max(a-float64(rng.IntN(500)), 0)
			case 0:
				a += float64(rng.IntN(2000))
			case 1:
				a = float64(rng.IntN(6000))
			default:
				a += rng.Float64() * 20
			}
			must.Eq(t, d.Gittins(a, delta), d.GittinsFrom(a, delta, &h), must.Sprintf("trial %d step %d a %v", trial, step, a))
			odd := IndexHint{lo: int32(rng.IntN(400) - 50), hi: int32(rng.IntN(400) - 50)}
			must.Eq(t, d.Gittins(a, delta), d.GittinsFrom(a, delta, &odd))
		}
	}
}

// The index worked out at attained service a does not fall, to the bit,
// while the service grows below RisesUntil, which is at most the next
// sample above a (where the index falls); it bounds nothing for other
// sizes. Most trials get a bound above a.
func TestIndexRisesUntil(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 2))
	bounded := 0
	for trial := 0; trial < 300; trial++ {
		var sizes []float64
		for k := 0; k < 1+rng.IntN(300); k++ {
			sizes = append(sizes, math.Round(math.Exp(rng.NormFloat64()*2+6))) // with repeats
		}
		d := NewSizeDistribution(sizes)
		delta := float64(1 + rng.IntN(3000))
		var h IndexHint
		a := rng.Float64() * 1.2 * d.sorted[len(d.sorted)-1]
		index := d.GittinsFrom(a, delta, &h)
		until := h.RisesUntil(d)
		label := must.Sprintf("trial %d a %v until %v", trial, a, until)
		must.Eq(t, math.Inf(-1), h.RisesUntil(NewSizeDistribution(sizes)), label)
		must.LessEq(t, d.sampleAt(d.firstAbove(a)), until, label)
		if until > a {
			bounded++
		}
		for step := 0; step < 50 && a < until; step++ {
			b := a + (min(until, a+1e6)-a)*rng.Float64()
			must.GreaterEq(t, index, d.Gittins(b, delta), must.Sprintf("trial %d from %v to %v, until %v", trial, a, b, until))
		}
	}
	must.Greater(t, 200, bounded)
}

// randomIndexLookup is a Gittins index looked up at a random attained
// service within a random size sample (log-normal, of one of three
// spreads, with repeats) for a random quantum, and the hint it left.
func randomIndexLookup(rng *rand.Rand) (sizes []float64, d *SizeDistribution, delta, a float64, h IndexHint, index float64) {
	spread := []float64{0.5, 1, 2}[rng.IntN(3)]
	for k := 0; k < 1+rng.IntN(300); k++ {
		sizes = append(sizes, math.Round(math.Exp(rng.NormFloat64()*spread+7)))
	}
	d = NewSizeDistribution(sizes)
	delta = float64(1 + rng.IntN(3000))
	a = rng.Float64() * d.sorted[len(d.sorted)-1]
	index = d.GittinsFrom(a, delta, &h)
	return sizes, d, delta, a, h, index
}

// The index stays above zero while the attained service grows below
// PositiveUntil, which often lies beyond the next sample (where the index
// may fall); it bounds nothing for other sizes.
func TestIndexPositiveUntil(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 3))
	far := 0
	for trial := 0; trial < 300; trial++ {
		sizes, d, delta, a, h, index := randomIndexLookup(rng)
		until := h.PositiveUntil(d)
		label := must.Sprintf("trial %d a %v index %v until %v", trial, a, index, until)
		must.Eq(t, math.Inf(-1), h.PositiveUntil(NewSizeDistribution(sizes)), label)
		if until > d.sampleAt(d.firstAbove(a)) {
			far++
		}
		servicesBelow(rng, a, until, func(b float64) {
			must.Greater(t, 0, d.Gittins(b, delta), must.Sprintf("trial %d from %v to %v, until %v", trial, a, b, until))
		})
	}
	must.Greater(t, 40, far)
	var none IndexHint // no sizes yet: no bound
	must.Eq(t, math.Inf(-1), none.PositiveUntil(nil))
	must.Eq(t, math.Inf(-1), none.RisesUntil(nil))
}

// servicesBelow calls check at up to 50 attained services from a to just
// below until: the edge first, then drawn at random.
func servicesBelow(rng *rand.Rand, a, until float64, check func(b float64)) {
	for step := 0; step < 50 && a < until; step++ {
		b := a + (until-a)*rng.Float64()
		if step == 0 {
			b = math.Nextafter(until, math.Inf(-1))
		}
		check(b)
	}
}

// The floor FloorUntil gives holds at every attained service up to its
// bound, at the bound's edge too, and reaches further than the next
// sample in a good share of trials (where it spares a new index).
func TestIndexFloorUntil(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 13))
	far := 0
	for trial := 0; trial < 400; trial++ {
		sizes, d, delta, a, h, index := randomIndexLookup(rng)
		floor, until := h.FloorUntil(d, index)
		label := must.Sprintf("trial %d a %v index %v floor %v until %v", trial, a, index, floor, until)
		_, other := h.FloorUntil(NewSizeDistribution(sizes), index)
		must.Eq(t, math.Inf(-1), other, label)
		if math.IsInf(until, -1) {
			continue
		}
		must.Greater(t, 0, floor, label)
		must.LessEq(t, index, floor, label)
		if until > d.sampleAt(d.firstAbove(a)) {
			far++
		}
		servicesBelow(rng, a, until, func(b float64) {
			must.GreaterEq(t, floor, d.Gittins(b, delta), must.Sprintf("trial %d from %v to %v, until %v, floor %v", trial, a, b, until, floor))
		})
	}
	must.Greater(t, 40, far)
	var none IndexHint
	_, until := none.FloorUntil(nil, 1)
	must.Eq(t, math.Inf(-1), until)
}

// A distribution grown by With is the one built from all its samples at
// once: the same sorted samples, prefix sums and buckets.
func TestSizeDistributionWithIsAllAtOnce(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 9))
	var all []float64
	d := NewSizeDistribution(nil)
	for step := 0; step < 40; step++ {
		var more []float64
		for k := 0; k < rng.IntN(60); k++ {
			v := math.Exp(rng.NormFloat64()*3 + 5)
			switch rng.IntN(5) {
			case 0:
				v = math.Round(v) // repeats
			case 1:
				v = 0
			}
			more = append(more, v)
		}
		all = append(all, more...)
		d = d.With(more)
		must.Eq(t, NewSizeDistribution(all), d, must.Sprintf("step %d", step))
	}
}

// AlwaysSettled holds only where Settled holds for every job, and it
// holds for orders that keep no place between rounds and for 2D-Gittins
// once it ranks by index: the arrival shortcut then asks no job.
func TestAlwaysSettledMeansEveryJobIsSettled(t *testing.T) {
	sizes := NewSizeDistribution([]float64{50, 500, 5000})
	for _, tc := range []struct {
		name      string
		cfg       Config
		completed *SizeDistribution
		want      bool // always settled, whatever the jobs
	}{
		{"fifo", Config{}, nil, true},
		{"srsf", Config{}, nil, true},
		{"srtf", Config{}, nil, true},
		{"las", Config{QueueCuts: []float64{10, 50}}, nil, false},
		{"las", Config{QueueCuts: []float64{10, 50}, PromoteKnob: 2}, sizes, false},
		{"gittins", Config{QueueCuts: []float64{10, 50}}, nil, false},
		{"gittins", Config{QueueCuts: []float64{10, 50}}, sizes, true},
		{"gittins", Config{QueueCuts: []float64{10, 50}, JobSizes: sizes}, nil, true},
	} {
		t.Run(fmt.Sprintf("%s/%v/%v", tc.name, tc.cfg.JobSizes != nil, tc.completed != nil), func(t *testing.T) {
			p, err := Parse(tc.name, tc.cfg)
			must.NoError(t, err)
			rng := rand.New(rand.NewPCG(3, 5))
			unsettled := false
			for round := 0; round < 200; round++ {
				s := &Snapshot{Nodes: randomV100Nodes(rng), CompletedSizes: tc.completed}
				for k := 0; k < 1+rng.IntN(12); k++ {
					j := job(fmt.Sprint(k), float64(k), 1+rng.IntN(4))
					j.PrevQueue, j.Attained = rng.IntN(3), float64(rng.IntN(80))
					j.Executed = j.Attained
					if rng.IntN(2) == 0 {
						j.State = Running
					}
					j.Wait = float64(rng.IntN(400))
					s.Jobs = append(s.Jobs, j)
				}
				always := p.AlwaysSettled(s)
				must.Eq(t, tc.want, always)
				for i := range s.Jobs {
					if !p.Settled(s, &s.Jobs[i]) {
						unsettled = true
						must.False(t, always, must.Sprintf("job %d is not settled", i))
					}
				}
			}
			must.Eq(t, !tc.want, unsettled) // the random jobs include unsettled ones where they can
		})
	}
}

// A pending job ranked above a running one, with a GPU free on another
// model, starts on the free GPU: to a placer that tells models apart by
// their free GPUs alone, the running job's GPU is no better, and taking it
// would preempt the running job for nothing. It still takes the running
// job's model when nothing else has room, and keeping one running job
// never preempts another.
func TestAgnosticPlacersKeepJobsTheyWouldDisplaceForNothing(t *testing.T) {
	runningOn := func(id string, gpus int, model string, slots ...Slot) Job {
		j := job(id, 0, gpus)
		j.State, j.Attained, j.GPUModel, j.PrevQueue, j.PrevRank, j.Placement = Running, 10000, model, 2, 0, slots
		return j
	}
	models := func(j Job, m ...string) Job { j.Models = m; return j }
	k80 := func(n int) Node {
		node := Node{ID: "k80", Healthy: true}
		for range n {
			node.GPUs = append(node.GPUs, GPU{Model: "K80", Healthy: true})
		}
		return node
	}
	v100 := func(n int) Node {
		node := Node{ID: "v100", Healthy: true}
		for range n {
			node.GPUs = append(node.GPUs, GPU{Model: "V100", Healthy: true})
		}
		return node
	}
	for _, tc := range []struct {
		name    string
		nodes   []Node
		jobs    []Job
		running []string          // in rank order
		model   map[string]string // where the jobs that run run
	}{{
		name:    "the free GPU rather than the running job's",
		nodes:   []Node{k80(1), v100(1)},
		jobs:    []Job{runningOn("long", 1, "K80", Slot{Node: 0, GPU: 0, Lane: -1}), job("short", 10, 1)},
		running: []string{"short", "long"},
		model:   map[string]string{"short": "V100", "long": "K80"},
	}, {
		name:    "nothing else has room",
		nodes:   []Node{k80(1)},
		jobs:    []Job{runningOn("long", 1, "K80", Slot{Node: 0, GPU: 0, Lane: -1}), job("short", 10, 1)},
		running: []string{"short"},
		model:   map[string]string{"short": "K80"},
	}, {
		name:  "a gang kept by moving one start",
		nodes: []Node{k80(2), v100(2)},
		jobs: []Job{runningOn("gang", 2, "K80", Slot{Node: 0, GPU: 0, Lane: -1}, Slot{Node: 0, GPU: 1, Lane: -1}),
			job("a", 10, 1), job("b", 11, 1)},
		running: []string{"a", "b", "gang"},
		model:   map[string]string{"a": "V100", "b": "V100", "gang": "K80"},
	}, {
		// Keeping r2 would need a's K80, and the V100s are b's: one
		// preemption, not two.
		name:  "no second preemption to save the first",
		nodes: []Node{k80(2), v100(2)},
		jobs: []Job{runningOn("r1", 1, "K80", Slot{Node: 0, GPU: 0, Lane: -1}), runningOn("r2", 1, "K80", Slot{Node: 0, GPU: 1, Lane: -1}),
			job("a", 10, 1), job("b", 11, 2)},
		running: []string{"a", "b", "r1"},
		model:   map[string]string{"a": "K80", "b": "V100", "r1": "K80"},
	}, {
		name:    "a start that names its model stays",
		nodes:   []Node{k80(1), v100(1)},
		jobs:    []Job{runningOn("long", 1, "K80", Slot{Node: 0, GPU: 0, Lane: -1}), models(job("short", 10, 1), "K80")},
		running: []string{"short"},
		model:   map[string]string{"short": "K80"},
	}} {
		for _, name := range []string{"las", "gittins", "las+consolidated"} {
			t.Run(tc.name+"/"+name, func(t *testing.T) {
				s := &Snapshot{Nodes: tc.nodes, Jobs: slices.Clone(tc.jobs)}
				s.CompletedSizes = NewSizeDistribution([]float64{100, 200, 400})
				r := plan(t, name, Config{}, s)
				must.Eq(t, tc.running, running(s, r))
				for i, j := range s.Jobs {
					d := r.Decisions[i]
					if want, ok := tc.model[j.ID]; ok {
						must.Eq(t, want, d.GPUModel, must.Sprintf("%s's model", j.ID))
					}
					if j.State == Running {
						must.Eq(t, d.Run, !strings.Contains(d.Reason, "preempted"), must.Sprintf("%s: %q", j.ID, d.Reason))
					}
				}
			})
		}
	}
}

// With no history to predict from, predict expects a job to use as much
// again as it has attained, and at least its floor: a running job yields
// to a new one once it has attained four floors of service. The floor is
// a time, so a replay scales it with the trace.
func TestPredictFloorIsWhenARunningJobYieldsToANewOne(t *testing.T) {
	run := job("run", 0, 1)
	run.State, run.Attained, run.Placement = Running, 2, []Slot{{Node: 0, GPU: 0, Lane: -1}}
	snap := func() *Snapshot {
		return &Snapshot{Nodes: nodes("V100", 1, 1), Jobs: []Job{run, job("new", 10, 1)}, History: NewHistory(0)}
	}
	s := snap()
	r := plan(t, "predict", Config{}, s)
	must.Eq(t, []string{"run"}, running(s, r), must.Sprint("2 GPU-s attained: a quarter of it is below the default floor of 1"))
	s = snap()
	r = plan(t, "predict", Config{PredictFloor: 0.2}, s)
	must.Eq(t, []string{"new"}, running(s, r), must.Sprint("a fifth of the floor: 2 GPU-s is past four floors"))
	_, err := Parse("predict", Config{PredictFloor: -1})
	must.ErrorContains(t, err, "predict floor")
}
