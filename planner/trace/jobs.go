package trace

import (
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ParseTiresias reads the Tiresias trace CSV
// (job_id,num_gpu,submit_time,iterations,model_name,duration,interval).
// Only job_id, num_gpu, submit_time and duration are required; jobs are
// returned sorted by submit time (stable, like the reference).
func ParseTiresias(r io.Reader, file string) ([]Job, error) {
	var jobs []Job
	var idx map[string]int
	err := lines(r, file, func(n int, line string) error {
		cols := strings.Split(line, ",")
		if idx == nil {
			var err error
			idx, err = header(file, n, cols, "job_id", "num_gpu", "submit_time", "duration")
			return err
		}
		get := func(name string) (string, error) { return field(file, n, cols, idx, name) }
		id, err := get("job_id")
		if err != nil {
			return err
		}
		gs, err := get("num_gpu")
		if err != nil {
			return err
		}
		g, err := parseInt(file, n, "num_gpu", gs, 1)
		if err != nil {
			return err
		}
		ss, err := get("submit_time")
		if err != nil {
			return err
		}
		sub, err := parseFloat(file, n, "submit_time", ss, 0)
		if err != nil {
			return err
		}
		ds, err := get("duration")
		if err != nil {
			return err
		}
		d, err := parseFloat(file, n, "duration", ds, 0)
		if err != nil {
			return err
		}
		j := Job{ID: id, Arrival: sub, GPUs: g, Duration: d, Weight: 1}
		if _, ok := idx["model_name"]; ok {
			j.Model, _ = get("model_name")
		}
		jobs = append(jobs, j)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if idx == nil || len(jobs) == 0 {
		return nil, &ParseError{File: file, Line: 1, Err: ErrEmpty}
	}
	slices.SortStableFunc(jobs, byArrival)
	return jobs, nil
}

func byArrival(a, b Job) int {
	switch {
	case a.Arrival < b.Arrival:
		return -1
	case a.Arrival > b.Arrival:
		return 1
	}
	return 0
}

const phillyTime = "2006-01-02 15:04:05"

// ParsePhilly reads the Philly-derived CSV
// (timestamp,duration,num_gpus,gpu_time,cluster). Arrivals are seconds
// after the earliest timestamp; jobs come back sorted by arrival.
func ParsePhilly(r io.Reader, file string) ([]Job, error) {
	type row struct {
		t    time.Time
		line int
		job  Job
	}
	var rows []row
	var idx map[string]int
	err := lines(r, file, func(n int, line string) error {
		cols := strings.Split(line, ",")
		if idx == nil {
			var err error
			idx, err = header(file, n, cols, "timestamp", "duration", "num_gpus")
			return err
		}
		ts, err := field(file, n, cols, idx, "timestamp")
		if err != nil {
			return err
		}
		t, err := time.Parse(phillyTime, ts)
		if err != nil {
			return perr(file, n, "timestamp", "want YYYY-MM-DD HH:MM:SS, got %q", ts)
		}
		ds, err := field(file, n, cols, idx, "duration")
		if err != nil {
			return err
		}
		d, err := parseFloat(file, n, "duration", ds, 0)
		if err != nil {
			return err
		}
		gs, err := field(file, n, cols, idx, "num_gpus")
		if err != nil {
			return err
		}
		g, err := parseInt(file, n, "num_gpus", gs, 1)
		if err != nil {
			return err
		}
		j := Job{ID: strconv.Itoa(len(rows)), GPUs: g, Duration: d, Weight: 1}
		if _, ok := idx["cluster"]; ok {
			j.Group, _ = field(file, n, cols, idx, "cluster")
		}
		rows = append(rows, row{t: t, line: n, job: j})
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, &ParseError{File: file, Line: 1, Err: ErrEmpty}
	}
	start := rows[0].t
	for _, r := range rows {
		if r.t.Before(start) {
			start = r.t
		}
	}
	jobs := make([]Job, len(rows))
	for i, r := range rows {
		jobs[i] = r.job
		jobs[i].Arrival = r.t.Sub(start).Seconds()
	}
	slices.SortStableFunc(jobs, byArrival)
	return jobs, nil
}

// ParseGavel reads a Gavel trace, tab-separated, in either layout:
// 7 fields (job_type, command, num_steps_arg, needs_data_dir, total_steps,
// arrival_time, scale_factor) as in traces/msr-seed0, or 10 fields
// (job_type, command, working_directory, num_steps_arg, needs_data_dir,
// total_steps, scale_factor, priority_weight, SLO, arrival_time) as in
// traces/physical_cluster.
func ParseGavel(r io.Reader, file string) ([]Job, error) {
	var jobs []Job
	err := lines(r, file, func(n int, line string) error {
		cols := strings.Split(line, "\t")
		var steps, arrival, scale, weight string
		switch len(cols) {
		case 7:
			steps, arrival, scale, weight = cols[4], cols[5], cols[6], "1"
		case 10:
			steps, scale, weight, arrival = cols[5], cols[6], cols[7], cols[9]
		default:
			return perr(file, n, "", "want 7 or 10 tab-separated fields, got %d", len(cols))
		}
		jt := strings.TrimSpace(cols[0])
		if jt == "" {
			return perr(file, n, "job_type", "empty")
		}
		st, err := parseFloat(file, n, "total_steps", strings.TrimSpace(steps), 1)
		if err != nil {
			return err
		}
		at, err := parseFloat(file, n, "arrival_time", strings.TrimSpace(arrival), 0)
		if err != nil {
			return err
		}
		sf, err := parseInt(file, n, "scale_factor", strings.TrimSpace(scale), 1)
		if err != nil {
			return err
		}
		w, err := parseFloat(file, n, "priority_weight", strings.TrimSpace(weight), 0)
		if err != nil {
			return err
		}
		if w == 0 {
			w = 1
		}
		jobs = append(jobs, Job{ID: strconv.Itoa(len(jobs)), Arrival: at, GPUs: sf, Steps: st,
			JobType: jt, Model: gavelModel(jt), Weight: w})
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(jobs) == 0 {
		return nil, &ParseError{File: file, Line: 1, Err: ErrEmpty}
	}
	slices.SortStableFunc(jobs, byArrival)
	return jobs, nil
}

// gavelModel is the network name of a Gavel job type ("ResNet-50 (batch
// size 64)" -> "ResNet-50").
func gavelModel(jobType string) string {
	if i := strings.Index(jobType, " ("); i > 0 {
		return jobType[:i]
	}
	return jobType
}

// LoadJobs reads a trace file in the given format: tiresias, philly or
// gavel; "" guesses from the file's first line.
func LoadJobs(path, format string) ([]Job, error) {
	if format == "" {
		format = guessFormat(path)
	}
	switch format {
	case "tiresias":
		return openWith(path, ParseTiresias)
	case "philly":
		return openWith(path, ParsePhilly)
	case "gavel":
		return openWith(path, ParseGavel)
	}
	return nil, &ParseError{File: path, Line: 1, Field: "format", Err: errUnknownFormat(format)}
}

type errUnknownFormat string

func (e errUnknownFormat) Error() string {
	return "unknown trace format " + strconv.Quote(string(e)) + " (want tiresias, philly, gavel or synthetic)"
}
