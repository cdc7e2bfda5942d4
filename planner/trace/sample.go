package trace

import (
	"errors"
	"fmt"
	"math"
	"sort"
)

// SampleOptions cut a sample from a trace, in this order: keep the jobs of
// one group (Philly's virtual cluster), of at most a duration and of at
// most a number of GPUs, skip the
// first of them by arrival, take the next, then spread or squeeze their
// arrivals to an offered load. Zero values keep everything as recorded.
type SampleOptions struct {
	Group       string
	MaxDuration float64 // seconds; 0 for any
	MaxGPUs     int     // 0 for any
	Skip, Take  int     // Take 0 for all
	// Load is the busy GPUs the sample offers on average: its GPU-seconds
	// of work over the span of its arrivals. 0 keeps the arrival times.
	Load float64
	// Seconds is a job's run time for MaxDuration and Load (nil, or 0
	// from it: its Duration): a caller with throughputs gives jobs listed
	// in steps their time on their fastest model.
	Seconds func(j *Job) float64
}

// Sample returns the jobs opts selects, their arrivals starting at 0. It
// does not change jobs.
func Sample(jobs []Job, opts SampleOptions) ([]Job, error) {
	switch {
	case opts.MaxDuration < 0 || math.IsNaN(opts.MaxDuration):
		return nil, fmt.Errorf("max duration %g: must be 0 (any) or a positive number of seconds", opts.MaxDuration)
	case opts.MaxGPUs < 0:
		return nil, fmt.Errorf("max GPUs %d: must be 0 (any) or a positive number", opts.MaxGPUs)
	case opts.Skip < 0 || opts.Take < 0:
		return nil, fmt.Errorf("skip %d, take %d: must not be negative", opts.Skip, opts.Take)
	case opts.Load < 0 || math.IsNaN(opts.Load) || math.IsInf(opts.Load, 0):
		return nil, fmt.Errorf("load %g: must be a positive number of busy GPUs", opts.Load)
	}
	var out []Job
	for k := range jobs {
		j := &jobs[k]
		if opts.Group != "" && j.Group != opts.Group || opts.MaxGPUs > 0 && j.GPUs > opts.MaxGPUs {
			continue
		}
		if opts.MaxDuration > 0 {
			d := opts.seconds(j)
			if !(d > 0) && j.Steps > 0 {
				return nil, fmt.Errorf("max duration %g: job %s is given in steps, and its run time needs throughputs", opts.MaxDuration, j.ID)
			}
			if d > opts.MaxDuration {
				continue
			}
		}
		out = append(out, *j)
	}
	sort.SliceStable(out, func(a, b int) bool { return out[a].Arrival < out[b].Arrival })
	if opts.Skip >= len(out) {
		return nil, errors.New(selectionSays(opts, len(out)))
	}
	out = out[opts.Skip:]
	if opts.Take > 0 && opts.Take < len(out) {
		out = out[:opts.Take]
	}
	out = append([]Job(nil), out...)
	first := out[0].Arrival
	work := 0.0
	for i := range out {
		out[i].Arrival -= first
		work += float64(max(out[i].GPUs, 1)) * opts.seconds(&out[i])
	}
	if opts.Load > 0 && !(work > 0) {
		return nil, fmt.Errorf("load %g: the sample's jobs have no run time to offer (jobs given in steps need throughputs)", opts.Load)
	}
	if span := out[len(out)-1].Arrival; opts.Load > 0 && span > 0 {
		stretch := work / opts.Load / span
		for i := range out {
			out[i].Arrival *= stretch
		}
	}
	return out, nil
}

// seconds is j's run time: Seconds's, or its Duration where Seconds is nil
// or gives 0.
func (opts SampleOptions) seconds(j *Job) float64 {
	if opts.Seconds != nil {
		if t := opts.Seconds(j); t > 0 {
			return t
		}
	}
	return j.Duration
}

func selectionSays(opts SampleOptions, kept int) string {
	what := "the trace"
	if opts.Group != "" {
		what = fmt.Sprintf("group %q", opts.Group)
	}
	if opts.MaxDuration > 0 {
		what += fmt.Sprintf(" with jobs of at most %g s", opts.MaxDuration)
	}
	if opts.MaxGPUs > 0 {
		what += fmt.Sprintf(" with jobs of at most %d GPUs", opts.MaxGPUs)
	}
	return fmt.Sprintf("%s holds %d jobs: nothing is left after skipping %d", what, kept, opts.Skip)
}
