package service

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/caravan-gpu/caravan/planner/cluster"
	"github.com/caravan-gpu/caravan/planner/nomadx/nomadxtest"
	"github.com/caravan-gpu/caravan/planner/policy"
	"github.com/shoenig/test/must"
)

// The history in Consul KV is read in both forms: bare GPU-seconds (what
// earlier planners and caravan replay write) and finished jobs with their
// group and GPU count.
func TestFinishedJobDecodes(t *testing.T) {
	cases := []struct {
		name string
		in   string
		want []finishedJob
		err  bool
	}{
		{"sizes", `[2, 5.5]`, []finishedJob{{GPUSeconds: 2}, {GPUSeconds: 5.5}}, false},
		{"jobs", `[{"gpu_seconds": 60, "group": "vision", "gpus": 8}]`, []finishedJob{{GPUSeconds: 60, Group: "vision", GPUs: 8}}, false},
		{"mixed", `[3, {"gpu_seconds": 4}]`, []finishedJob{{GPUSeconds: 3}, {GPUSeconds: 4}}, false},
		{"not a job", `["soon"]`, nil, true},
		{"bad field", `[{"gpus": "eight"}]`, nil, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got []finishedJob
			err := json.Unmarshal([]byte(tc.in), &got)
			if tc.err {
				must.Error(t, err)
				return
			}
			must.NoError(t, err)
			must.Eq(t, tc.want, got)
			back, err := json.Marshal(got)
			must.NoError(t, err)
			var again []finishedJob
			must.NoError(t, json.Unmarshal(back, &again))
			must.Eq(t, got, again)
		})
	}
}

// The history is outside input (Consul KV): whatever it holds, decoding
// errors or gives jobs the policies can learn from.
func FuzzFinishedJobs(f *testing.F) {
	f.Add([]byte(`[2, 5.5]`))
	f.Add([]byte(`[{"gpu_seconds": 60, "group": "vision", "gpus": 8}]`))
	f.Add([]byte(`[{"gpu_seconds": -1, "gpus": -3}]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var jobs []finishedJob
		if json.Unmarshal(data, &jobs) != nil {
			return
		}
		h := historyOf(jobs)
		must.Eq(t, len(jobs), h.Len())
		for _, j := range jobs {
			h.ExpectedRemaining(j.Group, j.GPUs, 0)
		}
		policy.NewSizeDistribution(sizesOf(jobs)).Len()
	})
}

// A job's group and the planner's finished jobs reach the policy, which
// ranks a job of a group of short jobs first.
func TestSnapshotCarriesGroupAndHistory(t *testing.T) {
	now := time.Unix(10_000, 0)
	state := &cluster.State{Time: now, Jobs: []*cluster.Job{
		{Namespace: "default", ID: "long", Group: "speech", GPUs: 1, Submitted: now.Add(-2 * time.Minute)},
		{Namespace: "default", ID: "short", Group: "vision", GPUs: 1, Submitted: now.Add(-time.Minute)},
	}}
	var done []finishedJob
	for k := 0; k < 30; k++ {
		done = append(done, finishedJob{GPUSeconds: 60, Group: "vision", GPUs: 1},
			finishedJob{GPUSeconds: 36000, Group: "speech", GPUs: 1})
	}
	snap, _ := toSnapshot(snapshotInput{state: state, memory: map[string]*memory{},
		sizes: policy.NewSizeDistribution(sizesOf(done)), finished: historyOf(done)})
	must.Eq(t, "speech", snap.Jobs[0].Group)
	must.Eq(t, 60, snap.CompletedSizes.Len())
	p, err := policy.Parse("predict", policy.Config{})
	must.NoError(t, err)
	r := p.Plan(snap, nil)
	must.Eq(t, []int{1, 0}, r.Order)
}

// 2D-Gittins learns the completed sizes as the simulator does: not before
// policy.MinLearnedSizes jobs have completed (from one or two sizes every
// running job past them looks done for), then each time the count has
// grown by a tenth; predict's history takes every completion.
func TestGittinsLearnsSizesAsTheSimulatorDoes(t *testing.T) {
	p, err := New(settings(t, `planning { policy = "gittins" }`), nomadxtest.New(), nil, nil)
	must.NoError(t, err)
	var history []finishedJob
	add := func(n int) {
		p.mu.Lock()
		defer p.mu.Unlock()
		for k := 0; k < n; k++ {
			history = append(history, finishedJob{GPUSeconds: float64(10 * (len(history) + 1)), GPUs: 1})
		}
		p.completions += n
		p.setHistory(slices.Clone(history))
	}
	add(policy.MinLearnedSizes - 1)
	must.Nil(t, p.sizes, must.Sprint("too few completed jobs to learn from"))
	must.Eq(t, policy.MinLearnedSizes-1, p.finished.Len())
	add(1)
	must.Eq(t, policy.MinLearnedSizes, p.sizes.Len())
	add(1)
	must.Eq(t, policy.MinLearnedSizes+1, p.sizes.Len(), must.Sprint("11 is a tenth more than 10"))
	add(1)
	must.Eq(t, policy.MinLearnedSizes+1, p.sizes.Len(), must.Sprint("12 is less than a tenth more than 11"))
	must.Eq(t, policy.MinLearnedSizes+2, p.finished.Len())
}
