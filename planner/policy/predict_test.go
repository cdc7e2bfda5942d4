package policy

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/shoenig/test/must"
)

// historyOf records sizes for group g on gpus GPUs.
func historyOf(h *History, g string, gpus int, sizes ...float64) *History {
	for _, v := range sizes {
		h.Add(g, gpus, v)
	}
	return h
}

// wholeGPUs takes the lanes off every GPU.
func wholeGPUs(ns []Node) []Node {
	for i := range ns {
		for g := range ns[i].GPUs {
			ns[i].GPUs[g].Lanes = 0
		}
	}
	return ns
}

func repeat(v float64, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = v
	}
	return out
}

func TestExpectedRemaining(t *testing.T) {
	h := NewHistory(0)
	historyOf(h, "vision", 1, repeat(100, minTail)...)
	historyOf(h, "vision", 1, repeat(300, minTail)...)
	historyOf(h, "speech", 8, repeat(8000, minTail)...)
	historyOf(h, "nlp", 1, 50) // too few of its own: falls back to 1-GPU jobs
	cases := []struct {
		name     string
		group    string
		gpus     int
		attained float64
		want     float64
		known    bool
	}{
		{"new job: mean of its group's sizes", "vision", 1, 0, 200, true},
		{"past the short sizes: only the long ones count", "vision", 1, 100, 200, true},
		{"half way through the long ones", "vision", 1, 150, 150, true},
		{"other group, other GPU count", "speech", 8, 1000, 7000, true},
		{"group too small: all 1-GPU jobs", "nlp", 1, 0, (100*minTail + 300*minTail + 50) / float64(2*minTail+1), true},
		{"unknown group: its GPU count", "audio", 8, 0, 8000, true},
		// Every job's key keeps time per GPU (8000 GPU-s on 8 GPUs is 1000
		// s), which a 2-GPU job scales by two.
		{"GPU count never seen: every job, per GPU", "audio", 2, 0, 2 * (100*minTail + 300*minTail + 50 + 1000*minTail) / float64(3*minTail+1), true},
		{"beyond every size: as much again", "vision", 1, 9000, 9000, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, known := h.ExpectedRemaining(tc.group, tc.gpus, tc.attained)
			must.Eq(t, tc.known, known)
			must.InDelta(t, tc.want, got, 1e-9)
		})
	}
	var none *History
	got, known := none.ExpectedRemaining("vision", 1, 30)
	must.False(t, known)
	must.Eq(t, 30, got)
}

func TestHistoryKeepsTheRecentWindow(t *testing.T) {
	h := historyOf(NewHistory(minTail), "vision", 1, repeat(1000, minTail)...)
	historyOf(h, "vision", 1, repeat(10, minTail)...)
	got, known := h.ExpectedRemaining("vision", 1, 0)
	must.True(t, known)
	must.InDelta(t, 10, got, 1e-9)
	must.Eq(t, 2*minTail, h.Len())
}

func TestPredictOrder(t *testing.T) {
	h := NewHistory(0)
	historyOf(h, "short", 1, repeat(60, 8*minTail)...)
	historyOf(h, "short", 1, repeat(36000, minTail)...)
	historyOf(h, "long", 1, repeat(20000, minTail)...)
	historyOf(h, "mid", 1, repeat(12000, minTail)...)
	historyOf(h, "wide", 8, repeat(8*600, minTail)...)
	at := func(id, group string, arrival float64, gpus int, attained float64, state JobState) Job {
		j := job(id, arrival, gpus)
		j.Group, j.Attained, j.State = group, attained, state
		return j
	}
	cases := []struct {
		name string
		jobs []Job
		gpus int
		rank []string
		run  []string
	}{
		{
			name: "a group of short jobs goes before one of long jobs, whatever the arrival",
			jobs: []Job{at("l", "long", 0, 1, 0, Pending), at("s", "short", 5, 1, 0, Pending)},
			gpus: 1, rank: []string{"s", "l"}, run: []string{"s"},
		},
		{
			name: "GPU-time counts: 8 GPUs of 600 s beat one GPU of 20000 s",
			jobs: []Job{at("l", "long", 0, 1, 0, Pending), at("w", "wide", 5, 8, 0, Pending)},
			gpus: 8, rank: []string{"w", "l"}, run: []string{"w"},
		},
		{
			name: "a short-group job that outlived the short sizes falls behind the long group",
			jobs: []Job{at("s", "short", 0, 1, 600, Pending), at("l", "long", 5, 1, 0, Pending)},
			gpus: 1, rank: []string{"l", "s"}, run: []string{"l"},
		},
		{
			name: "a new short job preempts a long one",
			jobs: []Job{at("l", "long", 0, 1, 100, Running), at("s", "short", 5, 1, 0, Pending)},
			gpus: 1, rank: []string{"s", "l"}, run: []string{"s"},
		},
		{
			name: "a running job keeps its GPU against a job not a quarter as long",
			jobs: []Job{at("l", "long", 0, 1, 100, Running), at("m", "mid", 5, 1, 0, Pending)},
			gpus: 1, rank: []string{"l", "m"}, run: []string{"l"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := &Snapshot{Nodes: wholeGPUs(nodes("V100", 1, tc.gpus)), Jobs: tc.jobs, History: h}
			r := plan(t, "predict", Config{}, s)
			must.Eq(t, tc.rank, ranked(s, r))
			must.Eq(t, tc.run, running(s, r))
		})
	}
}

// TestPredictReadsNoDuration plans random snapshots twice, the second time
// with every job's remaining time and work scrambled: the decisions must
// not change, as the order learns only from finished jobs.
func TestPredictReadsNoDuration(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	groups := []string{"a", "b", "c", ""}
	for round := 0; round < 50; round++ {
		h := NewHistory(20)
		for k := 0; k < 200; k++ {
			gpus := []int{1, 1, 1, 2, 4, 8}[rng.IntN(6)]
			h.Add(groups[rng.IntN(len(groups))], gpus, rng.ExpFloat64()*3600*float64(gpus))
		}
		s := &Snapshot{Nodes: nodes("V100", 2, 8), History: h}
		for k := 0; k < 40; k++ {
			j := job(string(rune('A'+k)), float64(k), []int{1, 1, 2, 4, 8}[rng.IntN(5)])
			j.Group = groups[rng.IntN(len(groups))]
			j.Attained = rng.ExpFloat64() * 2000
			j.Remaining = rng.ExpFloat64() * 5000
			if rng.IntN(3) == 0 {
				j.State = Running
			}
			s.Jobs = append(s.Jobs, j)
		}
		p, err := Parse("predict", Config{})
		must.NoError(t, err)
		want := p.Plan(s, nil)
		scrambled := *s
		scrambled.Jobs = append([]Job(nil), s.Jobs...)
		for i := range scrambled.Jobs {
			scrambled.Jobs[i].Remaining = rng.ExpFloat64() * 5000
			scrambled.Jobs[i].RemainingWork = rng.ExpFloat64() * 5000
		}
		got := p.Plan(&scrambled, nil)
		must.Eq(t, want.Order, got.Order)
		for i := range want.Decisions {
			must.Eq(t, want.Decisions[i].Run, got.Decisions[i].Run)
		}
	}
}

// A window's sums are carried over from the first changed size on: they
// must be, bit for bit, the sums of its sorted sizes added up in order.
func TestSizeWindowSumsMatchAFreshSum(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	w := &sizeWindow{ring: make([]float64, 0, 7)}
	for step := range 500 {
		v := float64(rng.IntN(20)) // repeats, so equal sizes come and go
		if rng.IntN(3) == 0 {
			v = rng.ExpFloat64() * 1e4
		}
		w.add(v)
		sum := 0.0
		must.Eq(t, len(w.sorted)+1, len(w.prefix), must.Sprintf("step %d", step))
		for i, s := range w.sorted {
			must.Eq(t, sum, w.prefix[i], must.Sprintf("step %d, prefix %d", step, i))
			sum += s
		}
		must.Eq(t, sum, w.prefix[len(w.sorted)], must.Sprintf("step %d", step))
	}
}

func TestOnlyPredictReadsHistory(t *testing.T) {
	for _, name := range []string{"fifo", "las", "gittins", "srsf", "hare", "predict"} {
		p, err := Parse(name, Config{})
		must.NoError(t, err)
		must.Eq(t, name == "predict", p.ReadsHistory(), must.Sprint(name))
	}
}

// A memo gives ExpectedRemaining's answer to the bit, and Holds only
// while it may: random histories growing between lookups, jobs of several
// groups and GPU counts whose attained service rises (by steps that land
// on recorded sizes too), windows made after a memo was, and jobs that
// fall to a broader key or past every key.
func TestRemainingMemoMatchesALookup(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 4))
	for trial := 0; trial < 300; trial++ {
		// Every third trial: one or two groups, windows about minTail
		// long, so that evictions flip the narrow keys in and out of trust.
		groups, h := 3, NewHistory(5+rng.IntN(60))
		if trial%3 == 0 {
			groups, h = 1+rng.IntN(2), NewHistory(minTail-1+rng.IntN(5))
		}
		type tracked struct {
			group string
			gpus  int
			a     float64
			memo  RemainingMemo
		}
		newJob := func() tracked {
			return tracked{group: string(rune('a' + rng.IntN(groups))), gpus: []int{0, 1, 2, 4}[rng.IntN(4)]}
		}
		jobs := make([]tracked, 12)
		for k := range jobs {
			jobs[k] = newJob()
		}
		var sizes []float64
		held, looked := 0, 0
		for step := 0; step < 300; step++ {
			if rng.IntN(6) == 0 {
				v := float64(1 + rng.IntN(60))
				if rng.IntN(2) == 0 {
					v = rng.Float64() * 100
				}
				gpus := 1 << rng.IntN(3)
				sizes = append(sizes, v, v/float64(gpus)) // as its keys keep it
				h.Add(string(rune('a'+rng.IntN(groups+1))), gpus, v)
			}
			for k := range jobs {
				j := &jobs[k]
				switch rng.IntN(8) {
				case 0: // waits
				case 1: // finishes; another job takes its place
					*j = newJob()
				case 2, 3:
					if len(sizes) > 0 { // lands on a recorded size (whole, or per GPU in the overall key)
						v := sizes[rng.IntN(len(sizes))]
						if rng.IntN(2) == 0 {
							v *= float64(max(j.gpus, 1))
						}
						j.a = max(j.a, v)
					}
				default:
					j.a += rng.Float64()
				}
				holds := j.memo.Holds(h, j.a)
				want, wantOK := h.ExpectedRemaining(j.group, j.gpus, j.a)
				got, gotOK := h.ExpectedRemainingMemo(j.group, j.gpus, j.a, &j.memo)
				if math.Float64bits(want) != math.Float64bits(got) || wantOK != gotOK {
					t.Fatalf("trial %d step %d job %d at %v: %v %v from the memo, %v %v looked up", trial, step, k, j.a, got, gotOK, want, wantOK)
				}
				if holds {
					held++
				}
				looked++
				if !j.memo.Holds(h, j.a) {
					t.Fatalf("trial %d step %d job %d: a memo just filled does not hold", trial, step, k)
				}
			}
		}
		must.Greater(t, 0, held)
		must.Less(t, looked, held)
	}
}

// A memo filled from an empty History reads no window, so only the count
// of windows made tells that sizes came since.
func TestRemainingMemoSeesTheFirstWindows(t *testing.T) {
	h := NewHistory(0)
	var m RemainingMemo
	rem, ok := h.ExpectedRemainingMemo("a", 1, 0, &m)
	must.Eq(t, 1, rem)
	must.False(t, ok)
	must.True(t, m.Holds(h, 0))
	historyOf(h, "a", 1, repeat(5, minTail)...)
	must.False(t, m.Holds(h, 0))
	rem, ok = h.ExpectedRemainingMemo("a", 1, 0, &m)
	must.Eq(t, 5, rem)
	must.True(t, ok)
}

// A NaN attained service is never held: the lookup's answer, ok too, once
// a key it passed over gains its tenth size.
func TestRemainingMemoHoldsNoNaN(t *testing.T) {
	h := historyOf(NewHistory(0), "a", 1, repeat(5, minTail-1)...)
	var m RemainingMemo
	h.ExpectedRemainingMemo("a", 1, math.NaN(), &m)
	h.Add("a", 1, 5)
	want, wantOK := h.ExpectedRemaining("a", 1, math.NaN())
	got, gotOK := h.ExpectedRemainingMemo("a", 1, math.NaN(), &m)
	must.Eq(t, math.Float64bits(want), math.Float64bits(got))
	must.Eq(t, wantOK, gotOK)
}

// A memo belongs to one History: another of as many windows does not hold
// it.
func TestRemainingMemoBelongsToOneHistory(t *testing.T) {
	short := historyOf(NewHistory(0), "a", 1, repeat(5, minTail)...)
	long := historyOf(NewHistory(0), "a", 1, repeat(50, minTail)...)
	var m RemainingMemo
	rem, _ := short.ExpectedRemainingMemo("a", 1, 0, &m)
	must.Eq(t, 5, rem)
	must.False(t, m.Holds(long, 0))
	rem, _ = long.ExpectedRemainingMemo("a", 1, 0, &m)
	must.Eq(t, 50, rem)
}
