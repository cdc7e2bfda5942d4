package budget

import (
	"testing"

	"github.com/caravan-gpu/caravan/gpu"
	"github.com/shoenig/test/must"
)

// One judge over a task's samples: an episode over budget is reported
// once, at its start; a spike between samples is reported on its own;
// memory on a GPU the task was not granted is reported once per GPU; and a
// process that exited is judged by its accounted peak.
func TestJudgeReportsEachBreachOnce(t *testing.T) {
	bud := Budget{Policy: PolicyWarn, GPUs: []GPU{{UUID: "GPU-a", LimitMiB: 2048}}}
	names := map[int]string{7: "python3"}
	proc := func(used, peak uint64) []gpu.Process {
		return []gpu.Process{{PID: 7, UsedMemoryMiB: used, PeakMemoryMiB: peak}}
	}
	var j Judge
	type step struct {
		name      string
		procs     []gpu.Process
		ungranted []Usage
		breach    bool // the task is in a breach
		report    bool // and it is news
	}
	other := []Usage{{UUID: "GPU-b", Procs: []ProcUsage{{PID: 7, UsedMiB: 10}}}}
	for _, s := range []step{
		{name: "within", procs: proc(1024, 1024)},
		{name: "over: a new episode", procs: proc(3000, 3000), breach: true, report: true},
		{name: "still over: the same episode", procs: proc(3100, 3100), breach: true},
		{name: "back within", procs: proc(1024, 3100)},
		{name: "a spike that came and went", procs: proc(1024, 4000), breach: true, report: true},
		{name: "the same peak again", procs: proc(1024, 4000)},
		{name: "over again: a second episode", procs: proc(2500, 4000), breach: true, report: true},
		{name: "memory on a GPU not granted", procs: proc(2500, 4000), ungranted: other, breach: true, report: true},
		{name: "on it still: told already; the episode goes on", procs: proc(2500, 4000), ungranted: other, breach: true},
	} {
		usage, err := Measure(fakeSampler{"GPU-a": s.procs}, bud, names)
		must.NoError(t, err)
		br, report := j.Sample(bud, bud, usage, s.ungranted)
		must.Eq(t, s.breach, br != nil, must.Sprint(s.name))
		must.Eq(t, s.report, report, must.Sprint(s.name))
	}

	exited := []Usage{{UUID: "GPU-a", LimitMiB: 2048, Procs: []ProcUsage{{PID: 9, PeakMiB: 2100, Exited: true}}}}
	must.NotNil(t, j.Exited(bud, exited))
	must.Nil(t, j.Exited(bud, exited), must.Sprint("a peak judged already"))
	elsewhere := []Usage{{UUID: "GPU-c", Procs: []ProcUsage{{PID: 9, PeakMiB: 5, Exited: true}}}}
	br := j.Exited(bud, elsewhere)
	must.NotNil(t, br)
	must.True(t, br.Ungranted)

	// With no budget to enforce, only a GPU not granted is a breach.
	var free Judge
	usage, err := Measure(fakeSampler{"GPU-a": proc(9000, 9000)}, Budget{GPUs: []GPU{{UUID: AnyGPU}}}, names)
	must.NoError(t, err)
	br, report := free.Sample(Budget{}, Budget{GPUs: []GPU{{UUID: AnyGPU}}}, usage, nil)
	must.Nil(t, br)
	must.False(t, report)
}
