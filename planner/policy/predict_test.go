package policy

import (
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
