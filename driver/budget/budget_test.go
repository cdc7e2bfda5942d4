package budget

import (
	"strconv"
	"testing"

	"github.com/caravan-gpu/caravan/gpu"
	"github.com/caravan-gpu/caravan/gpu/reservation"
	"github.com/shoenig/test/must"
)

func TestPlanAndEnv(t *testing.T) {
	grants := []reservation.Grant{
		{InstanceID: "b", GPUUUID: "GPU-b", Lane: 0, Slots: 2, MemoryMiB: 8000, SharePercent: 50},
		{InstanceID: "a", GPUUUID: "GPU-a", Lane: -1, Slots: 1, MemoryMiB: 40000, SharePercent: 100},
	}
	b, err := Plan(grants, 0, PolicyKill)
	must.NoError(t, err)
	must.SliceLen(t, 2, b.GPUs)
	env := Env(grants, b, EnvOptions{MPS: true, FrameworkHints: true, DeviceMemoryMiB: map[string]uint64{"GPU-a": 80000, "GPU-b": 16000},
		DeviceModel: map[string]string{"GPU-a": "NVIDIA H100 80GB HBM3", "GPU-b": "Tesla T4"}})
	must.Eq(t, "GPU-a,GPU-b", env["CUDA_VISIBLE_DEVICES"])
	must.Eq(t, "NVIDIA H100 80GB HBM3", env[ModelEnv])
	must.Eq(t, "0=40000M,1=8000M", env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"])
	// Each GPU's own budget, in the same order; the single figure is the
	// smallest, for scripts that read one.
	must.Eq(t, "0=40000,1=8000", env[PerGPUEnv])
	must.Eq(t, "8000", env["CARAVAN_GPU_MEMORY_MIB"])
	must.Eq(t, "50", env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"])
	must.Eq(t, "0.500", env["XLA_PYTHON_CLIENT_MEM_FRACTION"])

	must.Eq(t, "1", env[ProcessesEnv])

	// Two processes: MPS limits each client to half of each GPU's budget,
	// and a framework's per-process fraction is half too. The task's own
	// budget figures stay whole.
	b.Processes = 2
	env = Env(grants, b, EnvOptions{MPS: true, FrameworkHints: true, DeviceMemoryMiB: map[string]uint64{"GPU-a": 80000, "GPU-b": 16000}})
	must.Eq(t, "0=20000M,1=4000M", env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"])
	must.Eq(t, "0=40000,1=8000", env[PerGPUEnv])
	must.Eq(t, "2", env[ProcessesEnv])
	must.Eq(t, "0.250", env["CARAVAN_GPU_MEMORY_FRACTION"])

	_, err = Plan(grants, 9000, PolicyKill)
	must.ErrorContains(t, err, "gpu_memory: 9000 MiB is more than the 8000 MiB granted on GPU-b")
	lowered, err := Plan(grants, 4000, PolicyWarn)
	must.NoError(t, err)
	must.Eq(t, uint64(4000), lowered.GPUs[0].LimitMiB)

	none, err := Plan(nil, 1024, PolicyKill)
	must.NoError(t, err)
	g, ok := none.For("GPU-anything")
	must.True(t, ok)
	must.Eq(t, uint64(1024), g.LimitMiB)
}

func TestCheckNamesTheLargestProcess(t *testing.T) {
	b := Budget{Policy: PolicyKill, GPUs: []GPU{{UUID: "GPU-a", LimitMiB: 1000}}, Processes: 2}
	u := []Usage{{UUID: "GPU-a", LimitMiB: 1000, UsedMiB: 1500, Procs: []ProcUsage{{PID: 7, Name: "python3", UsedMiB: 1200}, {PID: 8, Name: "worker", UsedMiB: 300}}}}
	br := Check(b, u)
	must.NotNil(t, br)
	must.Eq(t, "GPU memory budget exceeded on GPU-a: task uses 1500 MiB of its 1000 MiB budget; pid 7 (python3) holds 1200 MiB", br.Reason())
	u[0].UsedMiB, u[0].Procs[0].UsedMiB, u[0].Procs[1].UsedMiB = 1000, 500, 500
	must.Nil(t, Check(b, u))
}

// With gpu_processes = N each process may hold a share of the budget, and
// no more than N may hold memory on the GPU: the shares then add up to the
// budget, so that checking each process's own peak against its share keeps
// the sum within the budget between samples too.
func TestCheckHoldsProcessesToTheirShares(t *testing.T) {
	proc := func(pid int, used uint64) ProcUsage { return ProcUsage{PID: pid, Name: "worker", UsedMiB: used} }
	usage := func(procs ...ProcUsage) []Usage {
		u := Usage{UUID: "GPU-a", LimitMiB: 4096, Procs: procs}
		for _, p := range procs {
			u.UsedMiB += p.UsedMiB
		}
		return []Usage{u}
	}
	cases := []struct {
		name      string
		processes int
		usage     []Usage
		breach    string
	}{
		{"one process, the whole budget", 0, usage(proc(7, 4096)), ""},
		{"a second process the task did not declare", 0, usage(proc(7, 1000), proc(8, 10)),
			"GPU memory budget exceeded on GPU-a: 2 processes hold memory there and gpu_processes = 1 allows 1, each with 4096 MiB of the 4096 MiB budget, so together they may hold more than it: pid 7 (worker), pid 8 (worker)"},
		{"two declared, each within its share", 2, usage(proc(7, 2048), proc(8, 2048)), ""},
		{"two declared, one past its share", 2, usage(proc(7, 2500), proc(8, 1000)),
			"GPU memory budget exceeded on GPU-a: pid 7 (worker) holds 2500 MiB of its 2048 MiB share of the 4096 MiB budget (gpu_processes = 2); the task holds 3500 MiB"},
		{"two declared, the sum past the budget is named first", 2, usage(proc(7, 2500), proc(8, 2000)),
			"task uses 4500 MiB of its 4096 MiB budget; pid 7 (worker) holds 2500 MiB"},
		{"three where two are declared", 2, usage(proc(7, 100), proc(8, 100), proc(9, 100)),
			"3 processes hold memory there and gpu_processes = 2 allows 2, each with 2048 MiB"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := Budget{Policy: PolicyKill, GPUs: []GPU{{UUID: "GPU-a", LimitMiB: 4096}}, Processes: tc.processes}
			br := Check(b, tc.usage)
			if tc.breach == "" {
				must.Nil(t, br)
				return
			}
			must.NotNil(t, br)
			must.StrContains(t, br.Reason(), tc.breach)
		})
	}
}

type fakeSampler map[string][]gpu.Process

func (f fakeSampler) Processes(uuid string) ([]gpu.Process, error) { return f[uuid], nil }
func (f fakeSampler) Devices() ([]gpu.Device, error) {
	var out []gpu.Device
	for uuid := range f {
		out = append(out, gpu.Device{UUID: uuid})
	}
	return out, nil
}

// Memory the GPU does not report is neither counted nor guessed: it cannot
// cause a kill, it cannot hide a breach of the known processes, and it is
// reported.
func TestMeasureAndCheckWithUnknownMemory(t *testing.T) {
	unknown := func(pid int) gpu.Process { return gpu.Process{PID: pid, MemoryUnknown: true} }
	known := func(pid int, mib uint64) gpu.Process { return gpu.Process{PID: pid, UsedMemoryMiB: mib} }
	cases := []struct {
		name    string
		procs   []gpu.Process
		used    uint64
		breach  string
		unknown string
	}{
		{"all known, within", []gpu.Process{known(7, 450)}, 450, "", ""},
		{"all known, over", []gpu.Process{known(7, 1200)}, 1200, "pid 7 (python3) holds 1200 MiB", ""},
		{"unknown alone never breaches", []gpu.Process{unknown(7)}, 0, "",
			"the GPU does not report the memory of pid 7 (python3) on GPU-a (NVML_VALUE_NOT_AVAILABLE): the budget of 1000 MiB is checked on the task's other processes only (0 MiB known)"},
		{"unknown beside known within", []gpu.Process{unknown(7), known(8, 400)}, 400, "", "pid 7 (python3)"},
		{"known over beside unknown", []gpu.Process{unknown(7), known(8, 1600)}, 1600,
			"pid 8 (worker) holds 1600 MiB (and 1 process(es) whose memory the GPU does not report)", "pid 7 (python3)"},
		{"other tasks' processes are ignored", []gpu.Process{unknown(99), known(98, 5000)}, 0, "", ""},
	}
	b := Budget{Policy: PolicyKill, GPUs: []GPU{{UUID: "GPU-a", LimitMiB: 1000}}, Processes: 2}
	names := map[int]string{7: "python3", 8: "worker"}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			usage, err := Measure(fakeSampler{"GPU-a": tc.procs}, b, names)
			must.NoError(t, err)
			must.SliceLen(t, 1, usage)
			must.Eq(t, tc.used, usage[0].UsedMiB)
			br := Check(b, usage)
			if tc.breach == "" {
				must.Nil(t, br)
			} else {
				must.NotNil(t, br)
				must.StrContains(t, br.Reason(), tc.breach)
			}
			if tc.unknown == "" {
				must.Eq(t, "", usage[0].UnknownReport())
			} else {
				must.StrContains(t, usage[0].UnknownReport(), tc.unknown)
			}
		})
	}
}

// A task is told the policy only when the watchdog acts on it.
func TestEnvPolicyOnlyWhenWatched(t *testing.T) {
	grants := []reservation.Grant{{InstanceID: "a", GPUUUID: "GPU-a", Lane: -1, Slots: 1, MemoryMiB: 4000, SharePercent: 100}}
	b, err := Plan(grants, 0, PolicyKill)
	must.NoError(t, err)
	for _, tc := range []struct {
		watchdog bool
		policy   string
	}{{true, "kill"}, {false, ""}} {
		env := Env(grants, b, EnvOptions{Watchdog: tc.watchdog})
		must.Eq(t, tc.policy, env["CARAVAN_BUDGET_POLICY"])
		must.Eq(t, "4000", env["CARAVAN_GPU_MEMORY_MIB"])
	}
}

// A peak past a process's share of the budget between two samples is a
// breach once, when it is first seen; the current figures stay the first
// thing checked. With one process the share is the whole budget.
func TestPeaksCatchWhatSamplesMiss(t *testing.T) {
	proc := func(pid int, used, peak uint64) gpu.Process {
		return gpu.Process{PID: pid, UsedMemoryMiB: used, PeakMemoryMiB: peak}
	}
	type sample struct {
		name   string
		procs  []gpu.Process
		breach string
	}
	names := map[int]string{7: "caravan-workload", 8: "worker"}
	for _, tc := range []struct {
		budget  Budget
		samples []sample
	}{
		{Budget{Policy: PolicyKill, GPUs: []GPU{{UUID: "GPU-a", LimitMiB: 2048}}}, []sample{
			{"within, no peak known", []gpu.Process{proc(7, 1024, 0)}, ""},
			{"within, peak within", []gpu.Process{proc(7, 1536, 1536)}, ""},
			{"a spike came and went", []gpu.Process{proc(7, 1024, 2561)},
				"GPU memory budget exceeded on GPU-a: pid 7 (caravan-workload) peaked at 2561 MiB of its 2048 MiB budget between two samples; the task holds 1024 MiB now"},
			{"the same peak again is not news", []gpu.Process{proc(7, 1024, 2561)}, ""},
			{"a higher one is", []gpu.Process{proc(7, 1024, 3000)}, "peaked at 3000 MiB"},
			{"other tasks' peaks are ignored", []gpu.Process{proc(7, 1024, 3000), proc(99, 10, 9000)}, ""},
		}},
		// Two processes whose spikes, each within the budget, add up past it.
		{Budget{Policy: PolicyKill, GPUs: []GPU{{UUID: "GPU-a", LimitMiB: 4096}}, Processes: 2}, []sample{
			{"both within their shares", []gpu.Process{proc(7, 1024, 2048), proc(8, 1024, 2000)}, ""},
			{"one spiked past its share", []gpu.Process{proc(7, 1024, 2561), proc(8, 1024, 2000)},
				"GPU memory budget exceeded on GPU-a: pid 7 (caravan-workload) peaked at 2561 MiB of its 2048 MiB share of the 4096 MiB budget (gpu_processes = 2) between two samples; the task holds 2048 MiB now"},
			{"the other's own peak", []gpu.Process{proc(7, 1024, 2561), proc(8, 1024, 2100)}, "pid 8 (worker) peaked at 2100 MiB"},
		}},
	} {
		var peaks Peaks
		for _, s := range tc.samples {
			usage, err := Measure(fakeSampler{"GPU-a": s.procs}, tc.budget, names)
			must.NoError(t, err)
			must.Nil(t, Check(tc.budget, usage), must.Sprint(s.name))
			br := peaks.Check(tc.budget, usage)
			if s.breach == "" {
				must.Nil(t, br, must.Sprint(s.name))
				continue
			}
			must.NotNil(t, br, must.Sprint(s.name))
			must.StrContains(t, br.Reason(), s.breach, must.Sprint(s.name))
		}
	}
}

// BenchmarkWatchdogSample is the budget side of one watchdog sample: one
// GPU, 8 task processes among 32, with peaks to compare.
func BenchmarkWatchdogSample(b *testing.B) {
	bud := Budget{Policy: PolicyKill, GPUs: []GPU{{UUID: "GPU-a", LimitMiB: 80000}}, Processes: 8}
	var procs []gpu.Process
	names := map[int]string{}
	for pid := 100; pid < 132; pid++ {
		procs = append(procs, gpu.Process{PID: pid, UsedMemoryMiB: 1024, PeakMemoryMiB: 2048})
		if pid%4 == 0 {
			names[pid] = "python3"
		}
	}
	s := fakeSampler{"GPU-a": procs}
	var peaks Peaks
	for b.Loop() {
		usage, err := Measure(s, bud, names)
		if err != nil {
			b.Fatal(err)
		}
		if Check(bud, usage) != nil || peaks.Check(bud, usage) != nil {
			b.Fatal("unexpected breach")
		}
	}
}

// Two instances on one GPU (two device blocks that landed there) are
// refused, naming the instances.
func TestPlanRefusesTwoInstancesOnOneGPU(t *testing.T) {
	cases := []struct {
		name   string
		grants []reservation.Grant
		err    string
	}{
		{"two GPUs", []reservation.Grant{
			{InstanceID: "GPU-a/lane0", GPUUUID: "GPU-a", Lane: 0, Slots: 1, MemoryMiB: 8000},
			{InstanceID: "GPU-b/lane1", GPUUUID: "GPU-b", Lane: 1, Slots: 1, MemoryMiB: 8000}}, ""},
		{"two lanes of one GPU", []reservation.Grant{
			{InstanceID: "GPU-a/lane1", GPUUUID: "GPU-a", Lane: 1, Slots: 1, MemoryMiB: 8000},
			{InstanceID: "GPU-b/lane0", GPUUUID: "GPU-b", Lane: 0, Slots: 1, MemoryMiB: 8000},
			{InstanceID: "GPU-a/lane0", GPUUUID: "GPU-a", Lane: 0, Slots: 1, MemoryMiB: 8000}},
			"device request: instances GPU-a/lane0, GPU-a/lane1 are all on GPU GPU-a; a task may hold one instance per GPU"},
		{"a lane and its whole GPU", []reservation.Grant{
			{InstanceID: "GPU-a", GPUUUID: "GPU-a", Lane: -1, Slots: 1, MemoryMiB: 80000},
			{InstanceID: "GPU-a/lane0", GPUUUID: "GPU-a", Lane: 0, Slots: 1, MemoryMiB: 8000}},
			"instances GPU-a, GPU-a/lane0 are all on GPU GPU-a"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, err := Plan(tc.grants, 0, PolicyKill)
			if tc.err != "" {
				must.ErrorContains(t, err, tc.err)
				return
			}
			must.NoError(t, err)
			must.SliceLen(t, len(tc.grants), b.GPUs)
		})
	}
}

// Memory on a GPU the task was not granted is a breach whatever its size,
// and names that GPU; a budget over every GPU has no such GPU.
func TestMeasureUngrantedAndCheck(t *testing.T) {
	gpus := fakeSampler{
		"GPU-a": {{PID: 7, UsedMemoryMiB: 900}},
		"GPU-b": {{PID: 7, UsedMemoryMiB: 1}, {PID: 99, UsedMemoryMiB: 5000}},
		"GPU-c": {{PID: 99, UsedMemoryMiB: 5000}},
	}
	names := map[int]string{7: "python3"}
	cases := []struct {
		name   string
		budget Budget
		want   string
	}{
		{"granted a, touches b", Budget{Policy: PolicyKill, GPUs: []GPU{{UUID: "GPU-a", LimitMiB: 1000}}},
			"GPU memory on GPU-b, a GPU the task was not granted (granted: GPU-a): pid 7 (python3) holds 1 MiB"},
		{"granted nothing", Budget{Policy: PolicyWarn},
			"a GPU the task was not granted (granted: none)"},
		{"granted a and b", Budget{Policy: PolicyKill, GPUs: []GPU{{UUID: "GPU-a", LimitMiB: 1000}, {UUID: "GPU-b", LimitMiB: 1000}}}, ""},
		{"a budget on any GPU", Budget{Policy: PolicyKill, GPUs: []GPU{{UUID: AnyGPU, LimitMiB: 1000}}}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			usage, err := MeasureUngranted(gpus, tc.budget, names)
			must.NoError(t, err)
			br := CheckUngranted(tc.budget, usage)
			if tc.want == "" {
				must.Nil(t, br)
				return
			}
			must.NotNil(t, br)
			must.True(t, br.Ungranted)
			must.Eq(t, tc.budget.Policy, br.Policy)
			must.StrContains(t, br.Reason(), tc.want)
			for _, u := range usage {
				must.NotEq(t, "GPU-c", u.UUID) // another task's GPU alone
			}
		})
	}
}

// An exited process's peak, from the GPU's accounting, says that it exited.
func TestReasonOfAnExitedProcessPeak(t *testing.T) {
	b := Budget{Policy: PolicyKill, GPUs: []GPU{{UUID: "GPU-a", LimitMiB: 2048}}}
	var p Peaks
	br := p.Check(b, []Usage{{UUID: "GPU-a", LimitMiB: 2048, Procs: []ProcUsage{{PID: 7, Name: "python3", PeakMiB: 2561, Exited: true}}}})
	must.NotNil(t, br)
	must.Eq(t, "GPU memory budget exceeded on GPU-a: pid 7 (python3) peaked at 2561 MiB of its 2048 MiB budget and exited before a sample saw it (the GPU's accounting of exited processes)", br.Reason())
	// The same peak is judged once.
	must.Nil(t, p.Check(b, []Usage{{UUID: "GPU-a", LimitMiB: 2048, Procs: []ProcUsage{{PID: 7, Name: "python3", PeakMiB: 2561, Exited: true}}}}))
}

// BenchmarkWatchdogSampleEightGPUs is a sample of a task granted one GPU of
// an 8-GPU node: its own GPU alone (granted), then with the other seven
// searched for its processes as well (all), as every sample now does.
func BenchmarkWatchdogSampleEightGPUs(b *testing.B) {
	bud := Budget{Policy: PolicyKill, GPUs: []GPU{{UUID: "GPU-0", LimitMiB: 80000}}, Processes: 8}
	s := fakeSampler{}
	names := map[int]string{}
	for g := range 8 {
		var procs []gpu.Process
		for pid := 100 + 32*g; pid < 132+32*g; pid++ {
			procs = append(procs, gpu.Process{PID: pid, UsedMemoryMiB: 1024, PeakMemoryMiB: 2048})
			if g == 0 && pid%4 == 0 {
				names[pid] = "python3"
			}
		}
		s["GPU-"+strconv.Itoa(g)] = procs
	}
	for _, all := range []bool{false, true} {
		name := "granted"
		if all {
			name = "all"
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if _, err := Measure(s, bud, names); err != nil {
					b.Fatal(err)
				}
				if all {
					other, err := MeasureUngranted(s, bud, names)
					if err != nil || CheckUngranted(bud, other) != nil {
						b.Fatal("unexpected breach", err)
					}
				}
			}
		})
	}
}
