package sim

import (
	"math/rand/v2"
	"reflect"
	"strconv"
	"testing"

	"github.com/caravan-gpu/caravan/planner/policy"
	"github.com/caravan-gpu/caravan/planner/trace"
	"github.com/shoenig/test/must"
)

// scrambled hands its order the snapshot with every unfinished job's
// remaining time and work replaced by noise.
type scrambled struct {
	policy.Orderer
	rng *rand.Rand
}

func (o scrambled) Order(s *policy.Snapshot, ds []policy.Decision) float64 {
	for i := range s.Jobs {
		s.Jobs[i].Remaining = o.rng.ExpFloat64() * 3600
		s.Jobs[i].RemainingWork = o.rng.ExpFloat64() * 3600
	}
	return o.Orderer.Order(s, ds)
}

// TestPredictUsesNoFutureInformation runs a congested trace twice under
// the predict order, the second time with the durations of unfinished
// jobs scrambled in every snapshot: every job must end the same, since the
// order learns sizes only from jobs that have finished. srsf, which reads
// durations, must not.
func TestPredictUsesNoFutureInformation(t *testing.T) {
	jobs := trace.Synthetic(trace.SyntheticOptions{Jobs: 1500, Seed: 5, Load: 60})
	for i := range jobs {
		jobs[i].Group = "team" + strconv.Itoa(i%4)
	}
	for _, tc := range []struct {
		name string
		same bool
	}{{"predict", true}, {"srsf", false}} {
		t.Run(tc.name, func(t *testing.T) {
			run := func(scramble bool) *Result {
				p := mustPolicy(t, tc.name, policy.Config{})
				if scramble {
					p.Order = scrambled{Orderer: p.Order, rng: rand.New(rand.NewPCG(1, 2))}
				}
				res, err := Run(Config{Cluster: cluster(t, "n4g8"), Policy: p}, jobs)
				must.NoError(t, err)
				must.Eq(t, 0, res.Summary.Unfinished)
				return res
			}
			plain, noisy := run(false), run(true)
			same := true
			for i := range plain.Jobs {
				same = same && reflect.DeepEqual(plain.Jobs[i], noisy.Jobs[i])
			}
			must.Eq(t, tc.same, same)
		})
	}
}
