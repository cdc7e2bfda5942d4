package workload

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoenig/test/must"
	"github.com/shoenig/test/wait"

	"github.com/caravan-gpu/caravan/gpu"
	"github.com/caravan-gpu/caravan/gpu/sim"
)

func progressLines(t *testing.T, out string) []Progress {
	t.Helper()
	var ps []Progress
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var p Progress
		must.NoError(t, json.Unmarshal([]byte(line), &p), must.Sprint(line))
		ps = append(ps, p)
	}
	return ps
}

// A run stopped part way resumes after its last finished iteration, and
// the two runs together do every iteration exactly once.
func TestCheckpointResume(t *testing.T) {
	ckpt := filepath.Join(t.TempDir(), "job.json")
	c := Config{Iterations: 10, IterationTime: 20 * time.Millisecond, Steps: 1, Mode: ModeNormal, Checkpoint: ckpt}

	// First run: stopped after some iterations, as a preempted task is.
	ctx, cancel := context.WithCancel(context.Background())
	var first bytes.Buffer
	go func() {
		for {
			if n, _ := ReadCheckpoint(ckpt, 10); n >= 4 {
				cancel()
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	err := Run(ctx, c, &first)
	must.ErrorIs(t, err, context.Canceled)
	done, err := ReadCheckpoint(ckpt, 10)
	must.NoError(t, err)
	must.Between(t, 4, done, 9)
	ran := progressLines(t, first.String())
	must.Eq(t, done, ran[len(ran)-1].Iteration)

	// Second run: continues after the checkpoint and finishes.
	var second bytes.Buffer
	must.NoError(t, Run(context.Background(), c, &second))
	ps := progressLines(t, second.String())
	must.Eq(t, "resumed from checkpoint", ps[0].Event)
	must.Eq(t, done, ps[0].Iteration)
	var its []int
	for _, p := range ps[1:] {
		its = append(its, p.Iteration)
	}
	must.Len(t, 10-done, its)
	must.Eq(t, done+1, its[0])
	must.True(t, ps[len(ps)-1].Done)
	final, err := ReadCheckpoint(ckpt, 10)
	must.NoError(t, err)
	must.Eq(t, 10, final)
	// Readable by a later run as another user.
	st, err := os.Stat(ckpt)
	must.NoError(t, err)
	must.Eq(t, os.FileMode(0o644), st.Mode().Perm())

	// A third run has nothing left to do and returns at once.
	var third bytes.Buffer
	start := time.Now()
	must.NoError(t, Run(context.Background(), c, &third))
	must.Less(t, 20*time.Millisecond, time.Since(start))
	ps = progressLines(t, third.String())
	must.Len(t, 1, ps)
	must.True(t, ps[0].Done)
}

func TestReadCheckpoint(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		must.NoError(t, os.WriteFile(p, []byte(body), 0o644))
		return p
	}
	cases := []struct {
		name, path string
		want       int
		err        string
	}{
		{"missing file starts from zero", filepath.Join(dir, "none.json"), 0, ""},
		{"resumes after iteration 7", write("ok.json", `{"iteration":7,"iterations":10}`), 7, ""},
		{"another job's checkpoint", write("other.json", `{"iteration":7,"iterations":50}`), 0, "of a run of 50 iterations, this one has 10"},
		{"iteration out of range", write("range.json", `{"iteration":11,"iterations":10}`), 0, "outside 0..10"},
		{"not JSON", write("bad.json", `half a`), 0, "bad.json"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ReadCheckpoint(tc.path, 10)
			if tc.err != "" {
				must.ErrorContains(t, err, tc.err)
				return
			}
			must.NoError(t, err)
			must.Eq(t, tc.want, got)
		})
	}
}

// An unwritable checkpoint stops the run with an error naming it, rather
// than running on with progress that a resume would lose.
func TestCheckpointUnwritable(t *testing.T) {
	c := Config{Iterations: 2, IterationTime: time.Millisecond, Steps: 1, Mode: ModeNormal,
		Checkpoint: filepath.Join(t.TempDir(), "no", "such", "dir", "job.json")}
	err := Run(context.Background(), c, &bytes.Buffer{})
	must.ErrorContains(t, err, "checkpoint")
}

func TestSpeedFactor(t *testing.T) {
	speeds := map[string]float64{"V100": 1, "P100": 0.5, "K80": 0.25}
	cases := []struct {
		name   string
		speeds map[string]float64
		model  string
		want   float64
	}{
		{"no factors", nil, "V100", 1},
		{"named model", speeds, "P100", 0.5},
		{"unnamed model runs at the slowest factor", speeds, "T4", 0.25},
		{"unknown model", speeds, "", 0.25},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			must.Eq(t, tc.want, Config{Speed: tc.speeds, GPUModel: tc.model}.SpeedFactor())
		})
	}
}

// Iterations on a model with factor 0.5 take twice as long.
func TestSpeedSlowsIterations(t *testing.T) {
	c := Config{Iterations: 4, IterationTime: 20 * time.Millisecond, Steps: 1, Mode: ModeNormal,
		Speed: map[string]float64{"fast": 1, "slow": 0.5}, GPUModel: "slow"}
	start := time.Now()
	must.NoError(t, Run(context.Background(), c, &bytes.Buffer{}))
	must.GreaterEq(t, 160*time.Millisecond, time.Since(start))
}

// Beside another process on its simulated GPU, a run with shared speed
// 0.5 takes twice as long per iteration; alone, or given no shared speed,
// it keeps its pace. Only lower bounds are checked: a sleep never ends
// early, while a busy machine may make any run slower.
func TestSharedSpeedSlowsIterationsBesideAnotherProcess(t *testing.T) {
	_, state := simBackend(t)
	c := Config{Iterations: 4, IterationTime: 20 * time.Millisecond, Steps: 1, Mode: ModeNormal,
		GPU: "GPU-a", SimStateDir: state, SharedSpeed: 0.5}
	must.Eq(t, 1.0, c.sharedFactor(os.Getpid()), must.Sprint("alone on the GPU"))

	partner := exec.Command("sleep", "30")
	must.NoError(t, partner.Start())
	t.Cleanup(func() { _ = partner.Process.Kill(); _ = partner.Wait() })
	must.NoError(t, sim.SetProcessMemory(state, "GPU-a", partner.Process.Pid, 100))
	must.Eq(t, 0.5, c.sharedFactor(os.Getpid()))
	start := time.Now()
	must.NoError(t, Run(context.Background(), c, &bytes.Buffer{}))
	must.GreaterEq(t, 160*time.Millisecond, time.Since(start))

	c.SharedSpeed = 1
	must.Eq(t, 1.0, c.sharedFactor(os.Getpid()), must.Sprint("no shared speed given"))
	c.SharedSpeed, c.SimStateDir = 0.5, ""
	must.Eq(t, 1.0, c.sharedFactor(os.Getpid()), must.Sprint("no simulated GPU to read"))
	c.SharedSpeed, c.SimStateDir = 1.5, state
	must.ErrorContains(t, c.Validate(), "shared-speed")
}

func TestParseSpeeds(t *testing.T) {
	cases := []struct {
		in   string
		want map[string]float64
		err  string
	}{
		{"", map[string]float64{}, ""},
		{"V100=1,P100=0.42", map[string]float64{"V100": 1, "P100": 0.42}, ""},
		{"Tesla T4=0.3, NVIDIA H100 80GB HBM3=2", map[string]float64{"Tesla T4": 0.3, "NVIDIA H100 80GB HBM3": 2}, ""},
		{"a=b=2", map[string]float64{"a=b": 2}, ""},
		{"V100", nil, "not MODEL=FACTOR"},
		{"=1", nil, "no model"},
		{"V100=0", nil, "positive"},
		{"V100=-1", nil, "positive"},
		{"V100=NaN", nil, "positive"},
		{"V100=fast", nil, "positive"},
		{"V100=1,V100=2", nil, "twice"},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseSpeeds(tc.in)
			if tc.err != "" {
				must.ErrorContains(t, err, tc.err)
				return
			}
			must.NoError(t, err)
			must.Eq(t, tc.want, got)
			again, err := ParseSpeeds(FormatSpeeds(got))
			must.NoError(t, err)
			must.Eq(t, got, again)
		})
	}
}

// ParseSpeeds never panics, and what it accepts survives a round trip
// through FormatSpeeds.
func FuzzParseSpeeds(f *testing.F) {
	for _, s := range []string{"", "V100=1,P100=0.5", "Tesla T4=0.3", "a=b=2", "=", ",,", "x=1e308"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseSpeeds(s)
		if err != nil {
			return
		}
		for m, v := range got {
			if m == "" || !(v > 0) {
				t.Fatalf("ParseSpeeds(%q) accepted %q=%g", s, m, v)
			}
		}
		again, err := ParseSpeeds(FormatSpeeds(got))
		if err != nil {
			t.Fatalf("round trip of %q: %v", s, err)
		}
		if len(again) != len(got) {
			t.Fatalf("round trip of %q: %v != %v", s, again, got)
		}
		for m, v := range got {
			if again[m] != v {
				t.Fatalf("round trip of %q: %v != %v", s, again, got)
			}
		}
	})
}

func simBackend(t *testing.T) (*sim.Backend, string) {
	t.Helper()
	dir := t.TempDir()
	fleet := filepath.Join(dir, "fleet.json")
	must.NoError(t, os.WriteFile(fleet, []byte(`{"gpus":[{"uuid":"GPU-a","model":"Tesla T4","memory_mib":15360}]}`), 0o644))
	state := filepath.Join(dir, "state")
	b, err := sim.New(fleet, state)
	must.NoError(t, err)
	return b, state
}

// With -spike-time the excess lasts milliseconds: the GPU's record of the
// process's peak keeps it after it is gone.
func TestSpikeStaysInThePeak(t *testing.T) {
	b, state := simBackend(t)
	c := Config{Iterations: 50, IterationTime: 40 * time.Millisecond, Steps: 2, PersistentMiB: 1024, EphemeralMiB: 512,
		Mode: ModeExceed, ExceedAfter: 1, SpikeTime: 2 * time.Millisecond, GPU: "GPU-a", BudgetMiB: 2048, SimStateDir: state}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, c, io.Discard) }()
	var peak gpu.Process
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && peak.PeakMemoryMiB == 0 {
		procs, err := b.Processes("GPU-a")
		must.NoError(t, err)
		for _, p := range procs {
			if p.PeakMemoryMiB > c.BudgetMiB {
				peak = p
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	must.ErrorIs(t, <-done, context.Canceled)
	must.Eq(t, uint64(2561), peak.PeakMemoryMiB)
}

// Under its MPS server's limit the excess is refused at allocation: the
// run ends with CUDA's out-of-memory error, reported, and nothing past the
// limit is ever counted, whatever limit the process's own environment asks
// for. A process that looks for MPS where no daemon listens runs outside
// it, with no MPS limit at all.
func TestMPSServerLimitRefusesTheExcess(t *testing.T) {
	cases := []struct {
		name      string
		clientMiB uint64
		elsewhere bool // the process looks for the daemon in another directory
		refused   bool
	}{
		{"server limit", 0, false, true},
		{"client raises its limit", 1 << 20, false, true},
		{"client leaves MPS", 1 << 20, true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, state := simBackend(t)
			pipe := t.TempDir()
			must.NoError(t, sim.MPSDaemon{StateDir: state, PipeDir: pipe}.LimitServer(uint32(os.Getuid()), map[string]uint64{"GPU-a": 2048}))
			if tc.elsewhere {
				pipe = t.TempDir()
			}
			var out bytes.Buffer
			c := Config{Iterations: 5, IterationTime: 10 * time.Millisecond, Steps: 1, PersistentMiB: 1024, EphemeralMiB: 512,
				Mode: ModeExceed, ExceedAfter: 2, GPU: "GPU-a", BudgetMiB: 2048, MPSLimitMiB: tc.clientMiB, MPSPipeDir: pipe, SimStateDir: state}
			err := Run(context.Background(), c, &out)
			ps := progressLines(t, out.String())
			if !tc.refused {
				must.NoError(t, err)
				must.Eq(t, uint64(2561), maxMemory(ps))
				return
			}
			must.ErrorIs(t, err, sim.ErrOutOfMemory)
			last := ps[len(ps)-1]
			must.Eq(t, 2, last.Iteration)
			must.StrContains(t, last.Event, "CUDA error: out of memory: 2561 MiB is past the MPS pinned device memory limit of 2048 MiB")
			must.LessEq(t, uint64(2048), maxMemory(ps))
		})
	}
}

func maxMemory(ps []Progress) uint64 {
	var peak uint64
	for _, p := range ps {
		peak = max(peak, p.GPUMemory)
	}
	return peak
}

// A task on several GPUs reads its own GPU's budget and MPS limit.
func TestFromEnvReadsItsGPUsBudget(t *testing.T) {
	env := map[string]string{
		"CUDA_VISIBLE_DEVICES": "GPU-a,GPU-b", "CARAVAN_GPU_MEMORY_MIB": "8000",
		"CARAVAN_GPU_MEMORY_MIB_PER_GPU": "0=40000,1=8000", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=40000M,1=8000M",
	}
	for _, tc := range []struct {
		gpu  string
		want uint64
	}{{"GPU-a", 40000}, {"GPU-b", 8000}} {
		c := Config{GPU: tc.gpu}
		must.NoError(t, c.FromEnv(env))
		must.Eq(t, tc.want, c.BudgetMiB)
		must.Eq(t, tc.want, c.MPSLimitMiB)
	}
	c := Config{}
	must.ErrorContains(t, c.FromEnv(map[string]string{"CUDA_VISIBLE_DEVICES": "GPU-a", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "bad"}),
		"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT")

	// One of two processes keeps to half the budget.
	env["CARAVAN_GPU_PROCESSES"] = "2"
	c = Config{GPU: "GPU-b"}
	must.NoError(t, c.FromEnv(env))
	must.Eq(t, uint64(4000), c.BudgetMiB)
	env["CARAVAN_GPU_PROCESSES"] = "0"
	must.ErrorContains(t, c.FromEnv(env), "CARAVAN_GPU_PROCESSES: want a whole number of at least 1")
}

// lockedLines counts the lines written to it, safe to read while Run writes.
type lockedLines struct {
	mu sync.Mutex
	n  int
}

func (l *lockedLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n += bytes.Count(p, []byte("\n"))
	return len(p), nil
}

func (l *lockedLines) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}

// While the process is checkpointed its next allocation waits for the
// restore, as a CUDA call does, so a run left checkpointed stops making
// progress; it goes on once restored.
func TestCheckpointedRunWaitsForItsRestore(t *testing.T) {
	b, state := simBackend(t)
	c := Config{Iterations: 10000, IterationTime: 2 * time.Millisecond, Steps: 1, PersistentMiB: 1024, EphemeralMiB: 256, Mode: ModeNormal,
		GPU: "GPU-a", SimStateDir: state}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lines := &lockedLines{}
	done := make(chan error, 1)
	go func() { done <- Run(ctx, c, lines) }()
	must.Wait(t, wait.InitialSuccess(wait.BoolFunc(func() bool { return lines.count() > 3 }),
		wait.Timeout(5*time.Second), wait.Gap(5*time.Millisecond)))

	must.NoError(t, b.Checkpoint(context.Background(), os.Getpid()))
	// An iteration under way when it came ends; then the run stops.
	held := lines.count()
	must.Wait(t, wait.InitialSuccess(wait.BoolFunc(func() bool {
		was := held
		time.Sleep(60 * time.Millisecond)
		held = lines.count()
		return held == was
	}), wait.Timeout(5*time.Second), wait.Gap(time.Millisecond)), must.Sprint("the run went on while checkpointed"))
	time.Sleep(200 * time.Millisecond)
	must.Eq(t, held, lines.count(), must.Sprint("the run went on while checkpointed"))

	must.NoError(t, b.Restore(context.Background(), os.Getpid()))
	must.Wait(t, wait.InitialSuccess(wait.BoolFunc(func() bool { return lines.count() > held+3 }),
		wait.Timeout(5*time.Second), wait.Gap(5*time.Millisecond)))
	cancel()
	must.ErrorIs(t, <-done, context.Canceled)
}

// With -act-when, crash mode waits for the file, however far past -after
// the run is, and acts at the first iteration that finds it.
func TestActWhenWaitsForTheFile(t *testing.T) {
	dir := t.TempDir()
	trigger, progress := filepath.Join(dir, "act"), filepath.Join(dir, "progress.json")
	c := Config{Iterations: 1000, IterationTime: 5 * time.Millisecond, Steps: 1, PersistentMiB: 64, EphemeralMiB: 32,
		Mode: ModeCrash, ExceedAfter: 2, ActWhen: trigger, ProgressFile: progress}
	latest := func() Progress {
		var p Progress
		if data, err := os.ReadFile(progress); err == nil {
			must.NoError(t, json.Unmarshal(data, &p), must.Sprint(string(data)))
		}
		return p
	}
	done := make(chan error, 1)
	go func() { done <- Run(context.Background(), c, io.Discard) }()
	must.Wait(t, wait.InitialSuccess(wait.BoolFunc(func() bool { return latest().Iteration >= 10 }),
		wait.Timeout(10*time.Second), wait.Gap(5*time.Millisecond)))
	select {
	case err := <-done:
		t.Fatalf("the run acted before the file existed: %v", err)
	default:
	}
	must.NoError(t, os.WriteFile(trigger, nil, 0o644))
	err := <-done
	must.ErrorContains(t, err, "crash mode: failing at iteration")
	must.Less(t, 1000, latest().Iteration)
}

// A worker of a gang makes no progress until every worker is up, and the
// workers resume from the least advanced checkpoint, the state they share.
func TestGangStartsTogetherFromTheLeastAdvanced(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "job-0.json"), filepath.Join(dir, "job-1.json")
	must.NoError(t, writeAtomic(a, Progress{Iteration: 7, Iterations: 10}))
	must.NoError(t, writeAtomic(b, Progress{Iteration: 3, Iterations: 10}))
	worker := func(own string) Config {
		return Config{Iterations: 10, IterationTime: 10 * time.Millisecond, Steps: 1, Mode: ModeNormal,
			Checkpoint: own, GangCheckpoints: []string{a, b}}
	}

	var outA bytes.Buffer
	errA := make(chan error, 1)
	go func() { errA <- Run(context.Background(), worker(a), &outA) }()
	must.Wait(t, wait.InitialSuccess(wait.BoolFunc(func() bool {
		_, err := os.Stat(upFile(a))
		return err == nil
	}), wait.Timeout(5*time.Second), wait.Gap(5*time.Millisecond)))
	// Alone, it waits: many iterations' time passes without one.
	time.Sleep(20 * gangPoll)
	n, err := ReadCheckpoint(a, 10)
	must.NoError(t, err)
	must.Eq(t, 7, n, must.Sprint("the worker ran before its gang was up"))

	var outB bytes.Buffer
	must.NoError(t, Run(context.Background(), worker(b), &outB))
	must.NoError(t, <-errA)
	for _, out := range []string{outA.String(), outB.String()} {
		ps := progressLines(t, out)
		must.Eq(t, "resumed from checkpoint", ps[0].Event)
		must.Eq(t, 3, ps[0].Iteration, must.Sprint("the least advanced worker's state"))
		must.Eq(t, "gang of 2 up", ps[1].Event)
		must.Eq(t, 4, ps[2].Iteration)
		must.True(t, ps[len(ps)-1].Done)
	}
	for _, p := range []string{a, b} {
		_, err := os.Stat(upFile(p))
		must.True(t, os.IsNotExist(err), must.Sprint("a finished worker removes its mark"))
	}
}

// A mark left by a worker that was killed goes stale and does not count.
func TestGangIgnoresAStaleMark(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "job-0.json"), filepath.Join(dir, "job-1.json")
	must.NoError(t, os.WriteFile(upFile(b), []byte("1 1\n"), 0o644))
	old := time.Now().Add(-time.Minute)
	must.NoError(t, os.Chtimes(upFile(b), old, old))
	ctx, cancel := context.WithTimeout(context.Background(), 20*gangPoll)
	defer cancel()
	c := Config{Iterations: 10, IterationTime: 10 * time.Millisecond, Steps: 1, Mode: ModeNormal,
		Checkpoint: a, GangCheckpoints: []string{a, b}}
	must.ErrorIs(t, Run(ctx, c, io.Discard), context.DeadlineExceeded)
	n, err := ReadCheckpoint(a, 10)
	must.NoError(t, err)
	must.Eq(t, 0, n)
	_, err = os.Stat(upFile(a))
	must.True(t, os.IsNotExist(err), must.Sprint("a stopped worker removes its mark"))
}

func TestGangCheckpointsValidate(t *testing.T) {
	base := Config{Iterations: 10, IterationTime: time.Millisecond, Steps: 1, Mode: ModeNormal}
	for _, tc := range []struct {
		own   string
		gang  []string
		wants string
	}{
		{"", []string{"a", "b"}, "needs -checkpoint"},
		{"c", []string{"a", "b"}, "own checkpoint"},
		{"a", []string{"a", "a"}, "listed twice"},
		{"a", []string{"a", ""}, "entry 2 is empty"},
	} {
		c := base
		c.Checkpoint, c.GangCheckpoints = tc.own, tc.gang
		err := c.Validate()
		must.ErrorContains(t, err, "gang-checkpoints")
		must.ErrorContains(t, err, tc.wants)
	}
	base.Checkpoint, base.GangCheckpoints = "b", []string{"a", "b"}
	must.NoError(t, base.Validate())
}
