package trace

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/caravan-gpu/caravan/internal/shareddata"
)

// sharedData is the shared data file rel; the test skips without it.
func sharedData(tb testing.TB, rel string) string {
	tb.Helper()
	return shareddata.Require(tb, rel)
}

const tiresiasSample = "job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n" +
	"0,1,0,606,vgg19,164,30\n1,8,30,133,vgg11,147,23\n"

func TestParseTiresias(t *testing.T) {
	jobs, err := ParseTiresias(strings.NewReader(tiresiasSample), "t.csv")
	must.NoError(t, err)
	must.Eq(t, []Job{
		{ID: "0", Arrival: 0, GPUs: 1, Duration: 164, Model: "vgg19", Weight: 1},
		{ID: "1", Arrival: 30, GPUs: 8, Duration: 147, Model: "vgg11", Weight: 1},
	}, jobs)
}

func TestParseErrorsNameFileLineField(t *testing.T) {
	cases := []struct {
		name  string
		parse func() error
		want  string
	}{
		{"tiresias gpus", func() error {
			_, err := ParseTiresias(strings.NewReader("job_id,num_gpu,submit_time,duration\n0,x,0,5\n"), "a.csv")
			return err
		}, `a.csv:2: field num_gpu: not an integer: "x"`},
		{"tiresias negative", func() error {
			_, err := ParseTiresias(strings.NewReader("job_id,num_gpu,submit_time,duration\n0,1,-4,5\n"), "a.csv")
			return err
		}, "a.csv:2: field submit_time: -4 is below 0"},
		{"tiresias missing column", func() error {
			_, err := ParseTiresias(strings.NewReader("job_id,num_gpu,duration\n"), "a.csv")
			return err
		}, "a.csv:1: field submit_time: missing column"},
		{"philly timestamp", func() error {
			_, err := ParsePhilly(strings.NewReader("timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09,66.0,1,66.0,c\n"), "p.csv")
			return err
		}, `p.csv:2: field timestamp: want YYYY-MM-DD HH:MM:SS, got "2017-10-09"`},
		{"philly short line", func() error {
			_, err := ParsePhilly(strings.NewReader("timestamp,duration,num_gpus\n2017-10-09 07:01:55,66\n"), "p.csv")
			return err
		}, "p.csv:2: field num_gpus: missing value: line has 2 fields"},
		{"gavel fields", func() error {
			_, err := ParseGavel(strings.NewReader("a\tb\tc\n"), "g.trace")
			return err
		}, "g.trace:1: want 7 or 10 tab-separated fields, got 3"},
		{"gavel steps", func() error {
			_, err := ParseGavel(strings.NewReader("LM\tcmd\t-n\t1\tmany\t0.0\t1\n"), "g.trace")
			return err
		}, `g.trace:1: field total_steps: not a number: "many"`},
		{"pai gpus", func() error {
			_, err := ParsePAIMachines(strings.NewReader("m1,V100,96,512,8\nm2,V100,96,512,eight\n"), "pai.csv")
			return err
		}, `pai.csv:2: field cap_gpu: not an integer: "eight"`},
		{"cluster spec rows", func() error {
			_, err := ParseClusterSpec(strings.NewReader("num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node\n1,2,4,8,64\n1,2,4,8,64\n"), "c.csv")
			return err
		}, "c.csv:3: a cluster spec has one data row"},
		{"sensitivity value", func() error {
			_, err := ParseSensitivity(strings.NewReader("model,gpus,cpus_per_gpu,mem_gb_per_gpu,normalized_throughput\nalexnet,1,0,62.5,1\n"), "s.csv")
			return err
		}, "s.csv:2: field cpus_per_gpu: 0 is below 1e-09"},
		{"throughputs key", func() error {
			_, err := ParseThroughputs(strings.NewReader(`{"v100": {"bad key": {"null": 1}}}`), "tp.json")
			return err
		}, `tp.json:1: field v100/bad key: want a key like`},
		{"empty", func() error {
			_, err := ParseTiresias(strings.NewReader(""), "e.csv")
			return err
		}, "e.csv:1: no data rows"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.parse()
			must.Error(t, err)
			must.StrContains(t, err.Error(), tc.want)
			var pe *ParseError
			must.True(t, errors.As(err, &pe))
		})
	}
}

func TestShorthandAndMix(t *testing.T) {
	cases := []struct {
		spec  string
		gpus  int
		nodes int
		err   bool
	}{
		{"n32g4", 128, 32, false},
		{"n256g8", 2048, 256, false},
		{"32xV100,32xP100,20xK80", 84, 11, false},
		{"n0g4", 0, 0, true},
		{"32V100", 0, 0, true},
	}
	for _, tc := range cases {
		t.Run(tc.spec, func(t *testing.T) {
			c, err := ParseShorthand(tc.spec)
			if tc.err {
				must.Error(t, err)
				return
			}
			must.NoError(t, err)
			must.Eq(t, tc.gpus, c.GPUs())
			n := 0
			for _, g := range c.Groups {
				n += g.Count
			}
			must.Eq(t, tc.nodes, n)
		})
	}
}

func TestSyntheticIsPhillyLikeAndSeeded(t *testing.T) {
	a := Synthetic(SyntheticOptions{Jobs: 20000, Seed: 1})
	b := Synthetic(SyntheticOptions{Jobs: 20000, Seed: 1})
	must.Eq(t, a[:50], b[:50])
	one, busy := 0, 0.0
	for _, j := range a {
		if j.GPUs == 1 {
			one++
		}
		busy += j.Duration * float64(j.GPUs)
	}
	frac := float64(one) / float64(len(a))
	must.True(t, frac > 0.92 && frac < 0.94, must.Sprintf("1-GPU share %v", frac))
	load := busy / a[len(a)-1].Arrival
	// Heavy-tailed durations make the load noisy; it must be in the
	// neighbourhood of Philly's 374 busy GPUs.
	must.True(t, load > 200 && load < 600, must.Sprintf("offered load %v", load))
}

// TestSyntheticSizeShapes checks each shape's mean (Philly's, so that a
// load means the same) and the property that sets it apart: how the time
// left moves with the time run.
func TestSyntheticSizeShapes(t *testing.T) {
	// meanLeft is the mean of d − a over the durations d above a.
	meanLeft := func(jobs []Job, a float64) float64 {
		sum, n := 0.0, 0
		for _, j := range jobs {
			if j.Duration > a {
				sum += j.Duration - a
				n++
			}
		}
		return sum / float64(n)
	}
	for _, shape := range SizeShapes() {
		t.Run(string(shape), func(t *testing.T) {
			jobs := Synthetic(SyntheticOptions{Jobs: 40000, Seed: 3, Sizes: shape})
			must.Eq(t, jobs[:20], Synthetic(SyntheticOptions{Jobs: 20, Seed: 3, Sizes: shape}))
			sum := 0.0
			for _, j := range jobs {
				must.True(t, j.Duration >= 10 && j.Duration <= 30*86400)
				sum += j.Duration
			}
			mean := sum / float64(len(jobs))
			tol := 0.05
			if shape == SizesLognormal {
				tol = 0.25 // the heavy tail makes the sample mean noisy
			}
			must.True(t, math.Abs(mean/13136-1) < tol, must.Sprintf("mean %v", mean))
			young, old := meanLeft(jobs, 0), meanLeft(jobs, 3*3600)
			switch shape {
			case SizesLognormal, SizesBimodal:
				must.Greater(t, 1.5*young, old, must.Sprintf("time left grows with time run: %v then %v", young, old))
			case SizesExponential:
				must.True(t, math.Abs(old/young-1) < 0.1, must.Sprintf("memoryless: %v then %v", young, old))
			case SizesUniform:
				must.Less(t, young, old, must.Sprintf("time left falls with time run: %v then %v", young, old))
			}
		})
	}
	_, err := ParseSizeShape("pareto")
	must.ErrorContains(t, err, `unknown size shape "pareto"`)
	s, err := ParseSizeShape("")
	must.NoError(t, err)
	must.Eq(t, SizesLognormal, s)
}

func TestRealFiles(t *testing.T) {
	t.Run("tiresias", func(t *testing.T) {
		jobs, err := LoadJobs(sharedData(t, "tiresias/60_job.csv"), "")
		must.NoError(t, err)
		must.Eq(t, 60, len(jobs))
	})
	t.Run("philly", func(t *testing.T) {
		jobs, err := LoadJobs(sharedData(t, "philly/philly.csv"), "philly")
		must.NoError(t, err)
		must.Eq(t, 82247, len(jobs))
		must.Eq(t, 0.0, jobs[0].Arrival)
		groups := map[string]bool{}
		for _, j := range jobs {
			groups[j.Group] = true
		}
		must.Eq(t, 15, len(groups)) // the virtual clusters
		must.False(t, groups[""])
	})
	t.Run("gavel msr", func(t *testing.T) {
		jobs, err := LoadJobs(sharedData(t, "gavel/traces/msr-seed0/0e4a51.trace"), "")
		must.NoError(t, err)
		must.Eq(t, 1181, len(jobs))
	})
	t.Run("gavel physical", func(t *testing.T) {
		jobs, err := LoadJobs(sharedData(t, "gavel/traces/physical_cluster/small_test.trace"), "gavel")
		must.NoError(t, err)
		must.Eq(t, 20, len(jobs))
	})
	t.Run("pai", func(t *testing.T) {
		c, err := LoadCluster(sharedData(t, "pai/pai_machine_spec.csv"))
		must.NoError(t, err)
		must.Eq(t, 6742, c.GPUs())
	})
	t.Run("cluster specs", func(t *testing.T) {
		for name, gpus := range map[string]int{"n32g4.csv": 128, "n256g8.csv": 2048, "cluster_spec.csv": 64, "n1g4.csv": 4} {
			c, err := LoadCluster(sharedData(t, "tiresias/"+name))
			must.NoError(t, err)
			must.Eq(t, gpus, c.GPUs(), must.Sprint(name))
		}
	})
	t.Run("throughputs", func(t *testing.T) {
		tp, err := LoadThroughputs(sharedData(t, "gavel/simulation_throughputs.json"))
		must.NoError(t, err)
		must.Eq(t, []string{"k80", "p100", "v100"}, tp.Models())
		v100 := tp.Solo("V100", "ResNet-18 (batch size 16)", 1)
		must.True(t, v100 > tp.Solo("K80", "ResNet-18 (batch size 16)", 1))
		must.Eq(t, v100, tp.Solo("V100M32", "ResNet-18 (batch size 16)", 1))
	})
	t.Run("sensitivity", func(t *testing.T) {
		s, err := LoadSensitivity(sharedData(t, "synergy/sensitivity.csv"))
		must.NoError(t, err)
		prop, ok := s.Throughput("alexnet", 1, 3, 62.5)
		must.True(t, ok)
		must.Eq(t, 1.0, prop)
		more, _ := s.Throughput("alexnet", 1, 12, 62.5)
		must.Greater(t, 1.5, more) // alexnet is CPU-sensitive
	})
	t.Run("job sizes", func(t *testing.T) {
		d, err := LoadJobSizes(sharedData(t, "tiresias/yarn-gput1000.csv"))
		must.NoError(t, err)
		must.Eq(t, 1001, d.Len())
	})
}

// A client lists its GPUs by model name; ByModelName orders a spec's node
// groups so, each model's groups kept in their own order.
func TestClusterByModelName(t *testing.T) {
	c, err := ParseShorthand("12xV100,4xP100,4xK80")
	must.NoError(t, err)
	var order []string
	for _, g := range c.ByModelName().Groups {
		order = append(order, fmt.Sprintf("%dx%d%s", g.Count, g.GPUs, g.GPUModel))
	}
	must.Eq(t, []string{"1x4K80", "1x4P100", "1x8V100", "1x4V100"}, order)
	must.Eq(t, "V100", c.Groups[0].GPUModel, must.Sprint("the spec itself is left as it was"))
}
