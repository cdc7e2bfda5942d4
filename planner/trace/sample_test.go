package trace

import (
	"testing"

	"github.com/shoenig/test/must"
)

func TestSample(t *testing.T) {
	jobs := []Job{
		{ID: "a", Group: "x", Arrival: 100, GPUs: 1, Duration: 50},
		{ID: "b", Group: "y", Arrival: 110, GPUs: 4, Duration: 10},
		{ID: "c", Group: "x", Arrival: 130, GPUs: 2, Duration: 5000},
		{ID: "d", Group: "x", Arrival: 90, GPUs: 8, Duration: 100},
		{ID: "e", Group: "x", Arrival: 200, GPUs: 0, Duration: 40},
	}
	ids := func(js []Job) []string {
		var out []string
		for _, j := range js {
			out = append(out, j.ID)
		}
		return out
	}

	got, err := Sample(jobs, SampleOptions{})
	must.NoError(t, err)
	must.Eq(t, []string{"d", "a", "b", "c", "e"}, ids(got), must.Sprint("in arrival order"))
	must.Eq(t, 0.0, got[0].Arrival, must.Sprint("arrivals start at 0"))
	must.Eq(t, 110.0, got[4].Arrival)
	must.Eq(t, 90.0, jobs[3].Arrival, must.Sprint("the input is left alone"))

	got, err = Sample(jobs, SampleOptions{Group: "x", MaxDuration: 1000, Skip: 1, Take: 2})
	must.NoError(t, err)
	must.Eq(t, []string{"a", "e"}, ids(got))
	must.Eq(t, []float64{0, 100}, []float64{got[0].Arrival, got[1].Arrival})

	// 90 GPU-s of work (a job of 0 GPUs takes one) over 100 s offers 0.9
	// GPUs; at load 0.45 the arrivals spread to 200 s.
	got, err = Sample(jobs, SampleOptions{Group: "x", MaxDuration: 1000, Skip: 1, Take: 2, Load: 0.45})
	must.NoError(t, err)
	must.InDelta(t, 200.0, got[1].Arrival, 1e-9)

	// At most 2 GPUs: the 4- and 8-GPU jobs go; a job of 0 GPUs (one)
	// stays.
	got, err = Sample(jobs, SampleOptions{MaxGPUs: 2})
	must.NoError(t, err)
	must.Eq(t, []string{"a", "c", "e"}, ids(got))
	_, err = Sample(jobs, SampleOptions{Group: "y", MaxGPUs: 1})
	must.ErrorContains(t, err, `group "y" with jobs of at most 1 GPUs holds 0 jobs`)

	_, err = Sample(jobs, SampleOptions{Group: "z"})
	must.ErrorContains(t, err, `group "z" holds 0 jobs`)
	_, err = Sample(jobs, SampleOptions{Skip: 5})
	must.ErrorContains(t, err, "nothing is left after skipping 5")
	for _, bad := range []SampleOptions{{MaxDuration: -1}, {MaxGPUs: -1}, {Skip: -1}, {Take: -2}, {Load: -3}} {
		_, err := Sample(jobs, bad)
		must.Error(t, err)
	}
}

// Jobs given in steps offer the run time Seconds gives them; without it
// (or throughputs) a load cannot be set, and the error says so.
func TestSampleLoadOfJobsInSteps(t *testing.T) {
	jobs := []Job{
		{ID: "a", Arrival: 0, GPUs: 2, Steps: 1000, JobType: "r"},
		{ID: "b", Arrival: 100, GPUs: 1, Steps: 500, JobType: "r"},
	}
	_, err := Sample(jobs, SampleOptions{Load: 1})
	must.ErrorContains(t, err, "need throughputs")
	// 10 steps/s: 2 × 100 s + 1 × 50 s = 250 GPU-s over 100 s offers 2.5
	// GPUs; at load 1 the arrivals spread to 250 s.
	tenPerSecond := func(j *Job) float64 { return j.Steps / 10 }
	got, err := Sample(jobs, SampleOptions{Load: 1, Seconds: tenPerSecond})
	must.NoError(t, err)
	must.Eq(t, 250.0, got[1].Arrival)
	must.Eq(t, 0.0, got[0].Duration, must.Sprint("the jobs themselves are left as listed"))
}

// A duration cap reads a job given in steps at its run time from Seconds,
// and without throughputs says it cannot, rather than keep every such job.
func TestSampleMaxDurationOfJobsInSteps(t *testing.T) {
	jobs := []Job{
		{ID: "a", Arrival: 0, GPUs: 2, Steps: 1000, JobType: "r"},
		{ID: "b", Arrival: 100, GPUs: 1, Steps: 500, JobType: "r"},
		{ID: "c", Arrival: 150, GPUs: 1, Duration: 40},
	}
	tenPerSecond := func(j *Job) float64 { return j.Steps / 10 } // a: 100 s, b: 50 s
	got, err := Sample(jobs, SampleOptions{MaxDuration: 60, Seconds: tenPerSecond})
	must.NoError(t, err)
	must.Eq(t, 2, len(got))
	must.Eq(t, []string{"b", "c"}, []string{got[0].ID, got[1].ID})
	_, err = Sample(jobs, SampleOptions{MaxDuration: 60})
	must.ErrorContains(t, err, "job a is given in steps, and its run time needs throughputs")
}
