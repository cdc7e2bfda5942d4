package budget

import "sync"

// Judge decides whether what the watchdog sees of one task is a breach and
// whether it is news to report. It keeps what it has seen: the GPUs the
// task was not granted where it held memory (one report each), each
// process's highest peak (a GPU keeps a process's peak for its life), and
// whether the task is over budget now (one report per episode).
type Judge struct {
	peaks     Peaks
	mu        sync.Mutex
	over      bool
	ungranted map[string]bool
}

// Sample judges one sample of the task's live processes: usage on the GPUs
// of now (the task's budget at this moment: its share of a lane whose tasks
// run concurrently) and ungranted, its memory on GPUs outside granted, its
// whole budget. It returns the breach the task is in, if any, and whether
// to report it:
//   - memory on a GPU it was not granted, the first time on that GPU;
//   - a process's new peak past its share while the task is not over now:
//     a spike that came and went between two samples;
//   - the task over its budget, when it was not at the last sample.
func (j *Judge) Sample(granted, now Budget, usage, ungranted []Usage) (breach *Breach, report bool) {
	if br := CheckUngranted(granted, ungranted); br != nil && j.noteUngranted(br.UUID) {
		return br, true
	}
	if !granted.Enforced() {
		return nil, false
	}
	breach = Check(now, usage)
	// The peaks are recorded on every sample, so that one judged while the
	// task is over budget now is not judged again later.
	peak := j.peaks.Check(now, usage)
	if breach == nil && peak != nil {
		return peak, true
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	news := j.over != (breach != nil)
	j.over = breach != nil
	return breach, news && breach != nil
}

// Exited judges the peaks of the task's processes that exited since they
// were last seen, from the GPU's accounting (usages): any memory on a GPU
// outside granted, or a new peak past its share of a granted GPU's budget.
// Each is reported: an exited process is judged once.
func (j *Judge) Exited(granted Budget, usages []Usage) *Breach {
	var in, out []Usage
	for _, u := range usages {
		if _, ok := granted.For(u.UUID); ok {
			in = append(in, u)
		} else {
			out = append(out, u)
		}
	}
	if breach := CheckUngranted(granted, out); breach != nil {
		return breach
	}
	if !granted.Enforced() {
		return nil
	}
	return j.peaks.Check(granted, in)
}

// noteUngranted records memory on uuid, a GPU the task was not granted,
// and reports whether that is news.
func (j *Judge) noteUngranted(uuid string) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.ungranted[uuid] {
		return false
	}
	if j.ungranted == nil {
		j.ungranted = map[string]bool{}
	}
	j.ungranted[uuid] = true
	return true
}
