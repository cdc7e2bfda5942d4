package policy

import (
	"fmt"
	"testing"
)

// planningSnapshot is a large live-like round: 10,000 pending and 5,000
// running jobs on 512 nodes of 8 GPUs (4,096 GPUs, two lanes each) of two
// models.
func planningSnapshot() *Snapshot {
	s := &Snapshot{Now: 1e6}
	for n := 0; n < 512; n++ {
		node := Node{ID: fmt.Sprint("node-", n), CPUs: 64, MemoryGB: 512, Healthy: true}
		model := "V100"
		if n%2 == 1 {
			model = "P100"
		}
		for g := 0; g < 8; g++ {
			node.GPUs = append(node.GPUs, GPU{Model: model, Healthy: true})
		}
		s.Nodes = append(s.Nodes, node)
	}
	// 3,000 one-GPU jobs on whole GPUs and 2,000 on lanes, two per GPU:
	// 4,000 of the 4,096 GPUs busy.
	gpus := []int{1, 1, 1, 1, 1, 1, 1, 2, 4, 8}
	for i := 0; i < 15000; i++ {
		j := Job{ID: fmt.Sprint("job-", i), Arrival: float64(i), GPUs: gpus[i%len(gpus)], Weight: 1,
			Remaining: float64(100 + (i*7919)%100000), PrevQueue: -1, PrevRank: -1}
		if i < 5000 {
			g, lane := i, -1
			if i >= 3000 {
				g, lane = 3000+(i-3000)/2, (i-3000)%2
			}
			node := g / 8
			j.State, j.GPUs, j.GPUModel = Running, 1, s.Nodes[node].GPUs[0].Model
			j.Placement = []Slot{{Node: node, GPU: g % 8, Lane: lane}}
			j.Attained, j.Executed = float64((i*31)%20000), float64((i*31)%20000)
		} else {
			j.Wait = float64(15000 - i)
		}
		s.Jobs = append(s.Jobs, j)
	}
	for n := range s.Nodes {
		for g := range s.Nodes[n].GPUs {
			s.Nodes[n].GPUs[g].Lanes = 2
		}
	}
	return s
}

// BenchmarkPlanRound is one planning round of the live planner's size.
// Target: ≤ 10 ms, but for allox, which matches all 10,000 pending jobs
// (BenchmarkMatchWholeQueue holds its target).
func BenchmarkPlanRound(b *testing.B) {
	for _, name := range []string{"fifo", "las", "gittins", "srtf", "hare", "allox", "las+consolidated", "las+pack", "predict"} {
		b.Run(name, func(b *testing.B) {
			p, err := Parse(name, Config{JobSizes: NewSizeDistribution([]float64{100, 1000, 5000, 20000, 80000})})
			if err != nil {
				b.Fatal(err)
			}
			s := planningSnapshot()
			r := p.Plan(s, nil)
			for i := range s.Jobs {
				s.Jobs[i].PrevQueue, s.Jobs[i].PrevRank = r.Decisions[i].Queue, r.Decisions[i].Rank
			}
			b.ReportAllocs()
			for b.Loop() {
				p.Plan(s, r)
			}
		})
	}
}

// BenchmarkPlanRoundMigrate is a round of las+migrate on the snapshot of
// BenchmarkPlanRound, its jobs gaining 1× to 2× on a V100 over a P100:
// "unsettled" with the running jobs on models at random, so the round
// moves hundreds of them (every round redoes that work, as nothing is
// carried out); "settled" after those moves are carried out, as most live
// rounds are. Target: ≤ 10 ms.
func BenchmarkPlanRoundMigrate(b *testing.B) {
	for _, settled := range []bool{false, true} {
		name := "unsettled"
		if settled {
			name = "settled"
		}
		b.Run(name, func(b *testing.B) {
			p, err := Parse("las+migrate", Config{})
			if err != nil {
				b.Fatal(err)
			}
			s := planningSnapshot()
			for i := range s.Jobs {
				j := &s.Jobs[i]
				j.RemainingWork, j.Throughput = j.Remaining, map[string]float64{"V100": 1 + float64(i%5)/4, "P100": 1}
			}
			r := p.Plan(s, nil)
			moved := 0
			for i := range s.Jobs {
				d := &r.Decisions[i]
				s.Jobs[i].PrevQueue, s.Jobs[i].PrevRank = d.Queue, d.Rank
				if d.Migrate {
					moved++
					if settled {
						s.Jobs[i].GPUModel, s.Jobs[i].Placement = d.GPUModel, nil
					}
				}
			}
			if moved == 0 {
				b.Fatal("no job migrates: the benchmark measures nothing")
			}
			b.ReportAllocs()
			for b.Loop() {
				p.Plan(s, r)
			}
			b.ReportMetric(float64(moved), "moves/first-round")
		})
	}
}

// BenchmarkMatchManyFreeGPUs is one AlloX round on the cluster of
// BenchmarkPlanRound with its last 128 nodes idle: 1,024 GPUs free and
// 10,000 jobs pending, all matched (21,000 one-GPU pieces). The jobs gain
// 1× to 2× on a V100 over a P100, so they compete for the V100s. Ten
// times BenchmarkMatchWholeQueue's queue, it shows how the round grows
// with the queue (docs/simulator.md); no target of its own.
func BenchmarkMatchManyFreeGPUs(b *testing.B) {
	p, err := Parse("allox", Config{})
	if err != nil {
		b.Fatal(err)
	}
	s := planningSnapshot()
	for i := range s.Jobs {
		j := &s.Jobs[i]
		if j.State == Running && j.Placement[0].Node >= 384 {
			j.State, j.Placement, j.GPUModel, j.PrevQueue, j.PrevRank = Pending, nil, "", -1, -1
		}
		j.RemainingWork, j.Throughput = j.Remaining, map[string]float64{"V100": 1 + float64(i%5)/4, "P100": 1}
	}
	r := p.Plan(s, nil)
	b.ReportAllocs()
	for b.Loop() {
		p.Plan(s, r)
	}
}

// BenchmarkMatchWholeQueue is one AlloX round over the whole pending
// queue: 1,000 jobs of one to four GPUs waiting on 100 GPUs of three
// models, free of them 4 to 100; the fewer free, the more positions each
// GPU's queue has. Target: ≤ 100 ms.
func BenchmarkMatchWholeQueue(b *testing.B) {
	for _, free := range []int{4, 12, 36, 100} {
		b.Run(fmt.Sprint("free-", free), func(b *testing.B) {
			p, err := Parse("allox", Config{})
			if err != nil {
				b.Fatal(err)
			}
			s := wholeQueueSnapshot(free)
			r := p.Plan(s, nil)
			b.ReportAllocs()
			for b.Loop() {
				p.Plan(s, r)
			}
		})
	}
}

// wholeQueueSnapshot is 1,000 pending jobs on 25 nodes of 4 GPUs (V100,
// P100 and K80 in turn), all but free of the GPUs running a job, the jobs
// 1× to 4× faster on a V100 than on a K80, each its own way.
func wholeQueueSnapshot(free int) *Snapshot {
	s := &Snapshot{Now: 1e6}
	models := []string{"V100", "P100", "K80"}
	for n := 0; n < 25; n++ {
		node := Node{ID: fmt.Sprint("node-", n), CPUs: 64, MemoryGB: 512, Healthy: true}
		for range 4 {
			node.GPUs = append(node.GPUs, GPU{Model: models[n%3], Healthy: true})
		}
		s.Nodes = append(s.Nodes, node)
	}
	// The busy GPUs go round the nodes, so the free ones are of every model.
	for i := range 100 - free {
		node := i % 25
		s.Jobs = append(s.Jobs, Job{ID: fmt.Sprint("run-", i), Arrival: float64(i), GPUs: 1, Weight: 1, State: Running,
			GPUModel: s.Nodes[node].GPUs[0].Model, Placement: []Slot{{Node: node, GPU: i / 25, Lane: -1}},
			Remaining: 1000, RemainingWork: 1000, Throughput: map[string]float64{"V100": 3, "P100": 2, "K80": 1},
			PrevQueue: -1, PrevRank: -1})
	}
	gpus := []int{1, 1, 1, 1, 1, 1, 2, 4}
	for i := range 1000 {
		work := float64(100 + (i*7919)%100000)
		s.Jobs = append(s.Jobs, Job{ID: fmt.Sprint("job-", i), Arrival: float64(1000 + i), GPUs: gpus[i%len(gpus)], Weight: 1,
			Remaining: work, RemainingWork: work, Wait: float64(1000 - i), PrevQueue: -1, PrevRank: -1,
			Throughput: map[string]float64{"V100": 1 + float64(i%7)/2, "P100": 1 + float64(i%3)/3, "K80": 0.5 + float64(i%5)/10}})
	}
	return s
}
