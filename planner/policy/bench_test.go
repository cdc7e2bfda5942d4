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
// Target: ≤ 10 ms.
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
// BenchmarkPlanRound with its last 128 nodes idle: 1,024 GPUs free, so the
// matching takes the 1,024 longest-waiting of the pending jobs (never fewer
// jobs than free GPUs). The jobs gain 1× to 2× on a V100 over a P100, so
// they compete for the V100s. Target: ≤ 10 ms.
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
