package trace

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
)

// SyntheticOptions shapes a Philly-like trace.
type SyntheticOptions struct {
	Jobs int
	Seed uint64
	// Load is the offered load in busy GPUs on average (Philly: ~374).
	Load float64
	// Models, when set, are assigned to jobs at random (for sizing).
	Models []string
	// Sizes is the shape of the durations (default SizesLognormal); each
	// shape keeps Philly's mean, so a load means the same busy GPUs.
	Sizes SizeShape
}

// SizeShape names a distribution of synthetic job durations. The shapes
// differ where size-based policies differ: in how a job's expected
// remaining time moves with the time it has run.
type SizeShape string

const (
	// SizesLognormal is Philly's heavy tail: the longer a job has run, the
	// longer it is expected to run on (what 2D-LAS bets on).
	SizesLognormal SizeShape = "lognormal"
	// SizesExponential is memoryless: time run says nothing of time left.
	SizesExponential SizeShape = "exponential"
	// SizesBimodal is many short jobs and a few long ones (4 in 5 with a
	// mean of 600 s, the rest long), each part exponential.
	SizesBimodal SizeShape = "bimodal"
	// SizesUniform is a light tail, uniform over [10 s, twice the mean]:
	// the longer a job has run, the sooner it ends (where 2D-LAS loses).
	SizesUniform SizeShape = "uniform"
)

// SizeShapes lists the shapes Synthetic takes.
func SizeShapes() []SizeShape {
	return []SizeShape{SizesLognormal, SizesExponential, SizesBimodal, SizesUniform}
}

// ParseSizeShape reads a shape's name ("" is the default).
func ParseSizeShape(name string) (SizeShape, error) {
	if name == "" {
		return SizesLognormal, nil
	}
	var names []string
	for _, s := range SizeShapes() {
		if string(s) == name {
			return s, nil
		}
		names = append(names, string(s))
	}
	return "", fmt.Errorf("unknown size shape %q (want one of %s)", name, strings.Join(names, ", "))
}

// phillyGPUs is the GPU-count mix of the Philly trace.
var phillyGPUs = []struct {
	gpus int
	frac float64
}{{1, 0.9317}, {2, 0.0221}, {4, 0.0227}, {8, 0.0200}, {16, 0.0024}, {32, 0.0008}, {64, 0.00007}, {128, 0.00004}}

// Synthetic generates a trace shaped like the Philly one: the same mix of
// GPU counts, log-normal durations with Philly's median (1,144 s) and mean
// (13,136 s), clamped to [10 s, 30 days] (or another shape of that mean,
// opts.Sizes), and Poisson arrivals at the rate that offers opts.Load busy
// GPUs. The same seed gives the same trace.
func Synthetic(opts SyntheticOptions) []Job {
	if opts.Jobs <= 0 {
		opts.Jobs = 10000
	}
	if opts.Load <= 0 {
		opts.Load = 374
	}
	rng := rand.New(rand.NewPCG(opts.Seed, 0x5ca1ab1e))
	const median, mean = 1144.0, 13136.0
	sigma := math.Sqrt(2 * math.Log(mean/median))
	mu := math.Log(median)
	meanGPUs := 0.0
	total := 0.0
	for _, g := range phillyGPUs {
		meanGPUs += float64(g.gpus) * g.frac
		total += g.frac
	}
	meanGPUs /= total
	rate := opts.Load / (meanGPUs * mean) // arrivals per second
	jobs := make([]Job, opts.Jobs)
	t := 0.0
	for i := range jobs {
		t += rng.ExpFloat64() / rate
		u := rng.Float64() * total
		g := 1
		for _, c := range phillyGPUs {
			if u < c.frac {
				g = c.gpus
				break
			}
			u -= c.frac
		}
		var d float64
		switch opts.Sizes {
		case SizesExponential:
			d = mean * rng.ExpFloat64()
		case SizesBimodal:
			const short, shortFrac = 600.0, 0.8
			if rng.Float64() < shortFrac {
				d = short * rng.ExpFloat64()
			} else {
				d = (mean - shortFrac*short) / (1 - shortFrac) * rng.ExpFloat64()
			}
		case SizesUniform:
			d = 10 + rng.Float64()*(2*mean-10)
		default:
			d = math.Exp(mu + sigma*rng.NormFloat64())
		}
		d = math.Round(min(max(d, 10), 30*86400))
		jobs[i] = Job{ID: strconv.Itoa(i), Arrival: math.Round(t), GPUs: g, Duration: d, Weight: 1}
		if len(opts.Models) > 0 {
			jobs[i].Model = opts.Models[rng.IntN(len(opts.Models))]
		}
	}
	return jobs
}

// AssignModels gives jobs without a model one of models, chosen by a
// seeded generator so runs are repeatable.
func AssignModels(jobs []Job, models []string, seed uint64) {
	if len(models) == 0 {
		return
	}
	rng := rand.New(rand.NewPCG(seed, 0xfeed))
	for i := range jobs {
		if jobs[i].Model == "" {
			jobs[i].Model = models[rng.IntN(len(models))]
		}
	}
}

// AssignWeights gives every job a weight drawn from weights by a seeded
// generator, so that runs are repeatable.
func AssignWeights(jobs []Job, weights []float64, seed uint64) {
	if len(weights) == 0 {
		return
	}
	rng := rand.New(rand.NewPCG(seed, 0x3e1))
	for i := range jobs {
		jobs[i].Weight = weights[rng.IntN(len(weights))]
	}
}
