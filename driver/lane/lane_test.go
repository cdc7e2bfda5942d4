package lane

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caravan-gpu/caravan/driver/proctree"
	"github.com/caravan-gpu/caravan/driver/switcher"
	"github.com/shoenig/test/must"
	"github.com/shoenig/test/wait"
)

// Tasks run at once only where their whole profiles fit together: their
// iterations are not synchronised, so their ephemeral peaks may coincide.
// Salus's condition (Safe), which shares one ephemeral among all, holds
// only where one iteration runs at a time.
func TestConcurrentAndSafe(t *testing.T) {
	known := func(p, e uint64) Profile { return Profile{PersistentMiB: p, EphemeralMiB: e, Known: true} }
	cases := []struct {
		name             string
		profiles         []Profile
		lane             uint64
		concurrent, safe bool
	}{
		{"fits exactly", []Profile{known(3000, 2000), known(2000, 1000)}, 8000, true, true},
		{"one MiB over", []Profile{known(3000, 2000), known(2001, 1000)}, 8000, false, true},
		{"Salus's exact fit", []Profile{known(3000, 2000), known(3000, 1000)}, 8000, false, true},
		{"Salus's one MiB over", []Profile{known(3000, 2000), known(3001, 1000)}, 8000, false, false},
		{"ephemeral peaks may coincide", []Profile{known(1000, 5000), known(1000, 5000)}, 7000, false, true},
		{"alone and unknown", []Profile{{}}, 8000, true, true},
		{"unknown next to another", []Profile{{}, known(1, 1)}, 8000, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			concurrent, _ := Concurrent(c.profiles, c.lane)
			must.Eq(t, c.concurrent, concurrent)
			safe, _, _ := Safe(c.profiles, c.lane)
			must.Eq(t, c.safe, safe)
		})
	}
}

func TestIterationCounterCountsCompleteLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "iterations")
	c := NewIterationCounter(path)
	must.Eq(t, 0, c.Count())
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	must.NoError(t, err)
	defer f.Close()
	fmt.Fprint(f, "1\n2\n3")
	must.Eq(t, 2, c.Count())
	fmt.Fprint(f, "\n4\n")
	must.Eq(t, 4, c.Count())
	must.NoError(t, os.Truncate(path, 0))
	must.Eq(t, 0, c.Count())
}

// proc is a real process standing in for a task.
type proc struct {
	cmd *exec.Cmd
}

func startProc(t testing.TB) *proc {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	must.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return &proc{cmd: cmd}
}

// processes reaches the process by signals, as the driver does a task
// without a cgroup.
func (p *proc) processes() proctree.Signals { return proctree.Signals{Root: p.cmd.Process.Pid} }

func (p *proc) stopped() bool {
	st, err := proctree.Read(p.cmd.Process.Pid)
	return err == nil && st.State == 'T'
}

type recorder struct {
	mu     sync.Mutex
	events []Event
}

func (r *recorder) add(e Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recorder) count(taskID, sub string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.events {
		if e.TaskID == taskID && contains(e.Message, sub) {
			n++
		}
	}
	return n
}

func contains(s, sub string) bool {
	return len(sub) == 0 || (len(s) >= len(sub) && indexOf(s, sub) >= 0)
}

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

func newCoordinator(t *testing.T, m switcher.Mechanism, quantum time.Duration, hooks Hooks) *Coordinator {
	ctx, cancel := context.WithCancel(context.Background())
	c := New(ctx, Options{Mechanism: m, Quantum: quantum, IterationGrace: 500 * time.Millisecond, MeasureIterations: 2, Hooks: hooks})
	t.Cleanup(func() {
		cancel()
		c.Wait()
	})
	return c
}

func TestProfilesThatFitRunConcurrently(t *testing.T) {
	rec := &recorder{}
	c := newCoordinator(t, switcher.Freeze{}, 50*time.Millisecond, Hooks{Event: rec.add})
	a, b := startProc(t), startProc(t)
	key := Key{GPU: "GPU-0", Lane: 0}
	c.Join(key, 8000, Member{TaskID: "a", Profile: Profile{PersistentMiB: 3000, EphemeralMiB: 2000, Known: true}, Processes: a.processes()}, MemberState{})
	c.Join(key, 8000, Member{TaskID: "b", Profile: Profile{PersistentMiB: 2000, EphemeralMiB: 1000, Known: true}, Processes: b.processes()}, MemberState{})
	// The mode is set before the event is told.
	must.Wait(t, wait.InitialSuccess(wait.BoolFunc(func() bool { return rec.count("b", "run concurrently") > 0 }),
		wait.Timeout(5*time.Second), wait.Gap(5*time.Millisecond)))
	st, ok := c.Status("a")
	must.True(t, ok)
	must.Eq(t, "concurrent", st.Mode)
	// Several quanta later, neither has been stopped.
	time.Sleep(300 * time.Millisecond)
	must.False(t, a.stopped())
	must.False(t, b.stopped())
}

func TestProfilesThatDoNotFitTakeTurns(t *testing.T) {
	rec := &recorder{}
	var switches atomic.Int64
	c := newCoordinator(t, switcher.Freeze{}, 100*time.Millisecond, Hooks{Event: rec.add,
		Switched: func(op, mech string, d time.Duration, err error) {
			if err == nil && op == "resume" {
				switches.Add(1)
			}
		}})
	a, b := startProc(t), startProc(t)
	key := Key{GPU: "GPU-0", Lane: 1}
	big := Profile{PersistentMiB: 5000, EphemeralMiB: 2000, Known: true}
	c.Join(key, 8000, Member{TaskID: "a", Profile: big, Processes: a.processes()}, MemberState{})
	c.Join(key, 8000, Member{TaskID: "b", Profile: big, Processes: b.processes()}, MemberState{})

	// Never both running; each gets turns.
	// Two reads of /proc are not atomic and signal delivery is
	// asynchronous, so one sample may straddle a switch; two in a row may not.
	sawA, sawB, bothBefore := false, false, false
	deadline := time.Now().Add(1500 * time.Millisecond)
	for time.Now().Before(deadline) {
		as, bs := a.stopped(), b.stopped()
		both := !as && !bs && switches.Load() > 1
		must.False(t, both && bothBefore, must.Sprint("both tasks ran at once in a time-sliced lane"))
		bothBefore = both
		sawA = sawA || (!as && bs)
		sawB = sawB || (as && !bs)
		time.Sleep(10 * time.Millisecond)
	}
	must.True(t, sawA && sawB, must.Sprintf("a ran alone: %v, b ran alone: %v", sawA, sawB))
	must.Greater(t, 4, switches.Load())
	st, _ := c.Status("a")
	must.Eq(t, "time-sliced", st.Mode)
	must.Positive(t, st.LastSuspend)
	must.Positive(t, rec.count("a", "suspended in GPU-0/lane1 via freeze (signals)"))
	// Frozen, b keeps its 5000 MiB while a runs with up to 7000 MiB.
	must.Positive(t, rec.count("a", "with freeze, suspended tasks keep their memory, and Σ persistent 10000 MiB + max ephemeral 2000 MiB does not fit"))

	// Leaving resumes a suspended task so that it can be stopped.
	c.Leave("a")
	c.Leave("b")
	time.Sleep(20 * time.Millisecond)
	must.False(t, a.stopped())
	must.False(t, b.stopped())
}

func TestSwitchWaitsForIterationBoundary(t *testing.T) {
	rec := &recorder{}
	c := newCoordinator(t, switcher.Freeze{}, 150*time.Millisecond, Hooks{Event: rec.add})
	a, b := startProc(t), startProc(t)
	path := filepath.Join(t.TempDir(), "iterations")
	must.NoError(t, os.WriteFile(path, []byte("1\n"), 0o644))
	big := Profile{PersistentMiB: 5000, EphemeralMiB: 2000, Known: true}
	key := Key{GPU: "GPU-0", Lane: 2}
	c.Join(key, 8000, Member{TaskID: "a", Profile: big, Processes: a.processes(), Iterations: NewIterationCounter(path)}, MemberState{})
	c.Join(key, 8000, Member{TaskID: "b", Profile: big, Processes: b.processes()}, MemberState{})

	// a runs first and marks iterations; it must not be suspended until the
	// next mark even though its quantum (50 ms) is long over.
	waitUntil(t, 5*time.Second, "b waits for its turn", b.stopped)
	time.Sleep(200 * time.Millisecond)
	must.False(t, a.stopped())
	must.True(t, b.stopped())
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	must.NoError(t, err)
	fmt.Fprintln(f, "2")
	f.Close()
	// a is suspended well before b's quantum gives it its turn back (the
	// suspension lasts that quantum); the wait leaves room for a slow /proc
	// walk under the race detector.
	waitUntil(t, 5*time.Second, "a is suspended at its iteration boundary", a.stopped)
	// The event follows the freeze.
	must.Wait(t, wait.InitialSuccess(wait.BoolFunc(func() bool { return rec.count("a", "at an iteration boundary") == 1 }),
		wait.Timeout(5*time.Second), wait.Gap(time.Millisecond)))
}

func TestMeasuresUnknownProfile(t *testing.T) {
	rec := &recorder{}
	c := newCoordinator(t, switcher.Freeze{}, 50*time.Millisecond, Hooks{Event: rec.add})
	a := startProc(t)
	path := filepath.Join(t.TempDir(), "iterations")
	must.NoError(t, os.WriteFile(path, []byte("1\n"), 0o644))
	var n atomic.Int64
	usage := func() uint64 { // 2000 persistent, 0..1500 ephemeral in a cycle
		return 2000 + uint64(n.Add(1)%4)*500
	}
	c.Join(Key{GPU: "GPU-0", Lane: 3}, 8000, Member{TaskID: "a", Processes: a.processes(), GPUMemoryMiB: usage, Iterations: NewIterationCounter(path)}, MemberState{})
	// Two of the usage's cycles sampled before the marks.
	must.Wait(t, wait.InitialSuccess(wait.BoolFunc(func() bool { return n.Load() >= 8 }),
		wait.Timeout(5*time.Second), wait.Gap(5*time.Millisecond)))
	must.NoError(t, os.WriteFile(path, []byte("1\n2\n3\n4\n"), 0o644))
	must.Wait(t, wait.InitialSuccess(wait.BoolFunc(func() bool { return rec.count("a", "measured memory profile") > 0 }),
		wait.Timeout(5*time.Second), wait.Gap(10*time.Millisecond)))
	st, _ := c.Status("a")
	must.True(t, st.Profile.Measured)
	must.Eq(t, 2000, st.Profile.PersistentMiB)
	must.Eq(t, 1500, st.Profile.EphemeralMiB)
}

func TestMembersHookFollowsJoinsAndLeaves(t *testing.T) {
	type change struct {
		key Key
		n   int
	}
	var mu sync.Mutex
	var got []change
	c := newCoordinator(t, switcher.Freeze{}, time.Second, Hooks{Members: func(k Key, n int) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, change{k, n})
	}})
	a, b := startProc(t), startProc(t)
	k0, k1 := Key{GPU: "GPU-0", Lane: 0}, Key{GPU: "GPU-0", Lane: 1}
	small := Profile{PersistentMiB: 100, EphemeralMiB: 100, Known: true}
	c.Join(k0, 8000, Member{TaskID: "a", Profile: small, Processes: a.processes()}, MemberState{})
	c.Join(k0, 8000, Member{TaskID: "b", Profile: small, Processes: b.processes()}, MemberState{})
	c.Join(k1, 8000, Member{TaskID: "c", Profile: small, Processes: b.processes()}, MemberState{})
	c.Leave("a")
	c.Leave("a") // twice: no change
	c.Leave("b")
	c.Leave("c")
	mu.Lock()
	defer mu.Unlock()
	must.Eq(t, []change{{k0, 1}, {k0, 2}, {k1, 1}, {k0, 1}, {k0, 0}, {k1, 0}}, got)
}

// A task on two GPUs is in a lane of each and runs only while neither has
// it suspended: it never runs beside the other task of either lane.
func TestTaskInTwoLanesRunsOnlyWithBothTurns(t *testing.T) {
	rec := &recorder{}
	c := newCoordinator(t, switcher.Freeze{}, 100*time.Millisecond, Hooks{Event: rec.add})
	x, y, z := startProc(t), startProc(t), startProc(t)
	big := Profile{PersistentMiB: 5000, EphemeralMiB: 2000, Known: true}
	laneA, laneB := Key{GPU: "GPU-0", Lane: 0}, Key{GPU: "GPU-1", Lane: 0}
	c.Join(laneA, 8000, Member{TaskID: "x", Profile: big, Processes: x.processes()}, MemberState{})
	c.Join(laneB, 8000, Member{TaskID: "x", Profile: big, Processes: x.processes()}, MemberState{})
	c.Join(laneA, 8000, Member{TaskID: "y", Profile: big, Processes: y.processes()}, MemberState{})
	c.Join(laneB, 8000, Member{TaskID: "z", Profile: big, Processes: z.processes()}, MemberState{})
	must.Eq(t, []string{"x", "y"}, c.Members(laneA))
	must.Eq(t, []string{"x", "z"}, c.Members(laneB))

	// The lanes settle on their first turns at once; after that a sample
	// may catch a switch halfway (one process stopped, the other not yet
	// resumed), but x never runs beside y or z for longer than a switch
	// takes, however slow the machine (a quantum is 100 ms).
	time.Sleep(50 * time.Millisecond)
	longestSwitch := 80 * time.Millisecond
	if raceEnabled {
		longestSwitch = time.Second
	}
	sawX, sawYZ := false, false
	var clashSince time.Time
	deadline := time.Now().Add(1500 * time.Millisecond)
	for time.Now().Before(deadline) {
		xs, ys, zs := x.stopped(), y.stopped(), z.stopped()
		switch clash := !xs && (!ys || !zs); {
		case !clash:
			clashSince = time.Time{}
		case clashSince.IsZero():
			clashSince = time.Now()
		default:
			must.Less(t, longestSwitch, time.Since(clashSince), must.Sprintf("x ran beside y (%v) or z (%v)", !ys, !zs))
		}
		sawX = sawX || (!xs && ys && zs)
		sawYZ = sawYZ || (xs && !ys && !zs)
		time.Sleep(5 * time.Millisecond)
	}
	must.True(t, sawX, must.Sprint("x never ran alone on its two GPUs"))
	must.True(t, sawYZ, must.Sprint("y and z never ran while x waited"))

	// x has a status in each of its lanes, for its metrics.
	var lanes []Key
	for _, st := range c.Statuses("x") {
		lanes = append(lanes, st.Lane)
		must.Positive(t, st.Switches, must.Sprint(st.Lane))
	}
	must.Eq(t, []Key{laneA, laneB}, lanes)

	// Leaving resumes x once, however many lanes had it suspended.
	c.Leave("x")
	waitUntil(t, 5*time.Second, "x resumed", func() bool { return !x.stopped() })
	must.Eq(t, []string{"y"}, c.Members(laneA))
	must.Eq(t, []string{"z"}, c.Members(laneB))
}

// Two lanes whose turns for a shared task fall out of step: lane A gives x
// its first turn while lane B gives it to z. Were a turn counted in wall
// time, each lane would spend x's turn while the other held x, and x would
// never run. A turn counts the time x really ran, so lane A keeps x's turn
// until lane B gives x its own, and from then on the two lanes' turns for x
// coincide: x runs about half the time, as it would on one lane.
func TestTaskInTwoLanesOutOfStepStillRuns(t *testing.T) {
	quantum := 100 * time.Millisecond
	c := newCoordinator(t, switcher.Freeze{}, quantum, Hooks{})
	x, y, z := startProc(t), startProc(t), startProc(t)
	big := Profile{PersistentMiB: 5000, EphemeralMiB: 2000, Known: true}
	laneA, laneB := Key{GPU: "GPU-0", Lane: 0}, Key{GPU: "GPU-1", Lane: 0}
	c.Join(laneA, 8000, Member{TaskID: "x", Profile: big, Processes: x.processes()}, MemberState{})
	c.Join(laneB, 8000, Member{TaskID: "z", Profile: big, Processes: z.processes()}, MemberState{})
	c.Join(laneA, 8000, Member{TaskID: "y", Profile: big, Processes: y.processes()}, MemberState{})
	c.Join(laneB, 8000, Member{TaskID: "x", Profile: big, Processes: x.processes()}, MemberState{})

	samples, ran := 0, 0
	for deadline := time.Now().Add(20 * quantum); time.Now().Before(deadline); samples++ {
		if !x.stopped() {
			ran++
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("x ran in %d of %d samples", ran, samples)
	must.Greater(t, 0.25, float64(ran)/float64(samples), must.Sprintf("x ran in %d of %d samples", ran, samples))
}

// Two tasks on the same two lanes, each given its first turn on a
// different lane: each waits for the lane the other holds. A turn held
// too long ends, after a drawn two to three quanta so that the two lanes do
// not give up together and cross again, and from then on both run.
func TestTwoTasksCrossedOnTwoLanesBothRun(t *testing.T) {
	quantum := 50 * time.Millisecond
	c := newCoordinator(t, switcher.Freeze{}, quantum, Hooks{})
	x, w := startProc(t), startProc(t)
	big := Profile{PersistentMiB: 5000, EphemeralMiB: 2000, Known: true}
	laneA, laneB := Key{GPU: "GPU-0", Lane: 0}, Key{GPU: "GPU-1", Lane: 0}
	c.Join(laneA, 8000, Member{TaskID: "x", Profile: big, Processes: x.processes()}, MemberState{})
	c.Join(laneB, 8000, Member{TaskID: "w", Profile: big, Processes: w.processes()}, MemberState{})
	c.Join(laneA, 8000, Member{TaskID: "w", Profile: big, Processes: w.processes()}, MemberState{})
	c.Join(laneB, 8000, Member{TaskID: "x", Profile: big, Processes: x.processes()}, MemberState{})

	// Crossed for good, neither would run; starved, one would not. Each
	// must run in a tenth of the samples, and in turns that begin at
	// least three times: a fair share is near half, but on a loaded
	// machine the coordinator's timers slip and a sample sees less of it.
	samples, ranX, ranW, turnsX, turnsW := 0, 0, 0, 0, 0
	wasX, wasW := false, false
	for deadline := time.Now().Add(40 * quantum); time.Now().Before(deadline); samples++ {
		isX, isW := !x.stopped(), !w.stopped()
		if isX {
			ranX++
			if !wasX {
				turnsX++
			}
		}
		if isW {
			ranW++
			if !wasW {
				turnsW++
			}
		}
		wasX, wasW = isX, isW
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("x ran in %d samples in %d turns, w in %d in %d, of %d samples", ranX, turnsX, ranW, turnsW, samples)
	must.Greater(t, 0.1, float64(ranX)/float64(samples), must.Sprintf("x ran in %d of %d samples", ranX, samples))
	must.Greater(t, 0.1, float64(ranW)/float64(samples), must.Sprintf("w ran in %d of %d samples", ranW, samples))
	must.GreaterEq(t, 3, turnsX, must.Sprintf("x began %d turns", turnsX))
	must.GreaterEq(t, 3, turnsW, must.Sprintf("w began %d turns", turnsW))
}

// While a lane runs its tasks concurrently each has a share of it, in
// proportion to its profile, at least its own and adding up to the lane;
// once they take turns, none has a share (the lane is the running task's).
func TestConcurrentMembersGetTheirShares(t *testing.T) {
	rec := &recorder{}
	c := newCoordinator(t, switcher.Freeze{}, 100*time.Millisecond, Hooks{Event: rec.add})
	a, b := startProc(t), startProc(t)
	var held atomic.Uint64
	held.Store(2000)
	key := Key{GPU: "GPU-0", Lane: 2}
	_, ok := c.Share("a", key)
	must.False(t, ok, must.Sprint("no lane yet"))
	c.Join(key, 9000, Member{TaskID: "a", Profile: Profile{PersistentMiB: 3000, EphemeralMiB: 1000, Known: true}, Processes: a.processes(),
		GPUMemoryMiB: func() uint64 { return 3000 }}, MemberState{})
	c.Join(key, 9000, Member{TaskID: "b", Profile: Profile{PersistentMiB: 1000, EphemeralMiB: 1000, Known: true}, Processes: b.processes(),
		GPUMemoryMiB: held.Load}, MemberState{})
	must.Wait(t, wait.InitialSuccess(wait.BoolFunc(func() bool { return rec.count("a", "run concurrently") > 0 }),
		wait.Timeout(5*time.Second), wait.Gap(10*time.Millisecond)))
	shareA, okA := c.Share("a", key)
	shareB, okB := c.Share("b", key)
	must.True(t, okA && okB)
	must.Eq(t, uint64(6000), shareA) // 9000 × 4000 / 6000
	must.Eq(t, uint64(3000), shareB) // 9000 × 2000 / 6000
	_, ok = c.Share("c", key)
	must.False(t, ok)

	held.Store(7000) // past b's profile: re-profiled, the two take turns
	must.Wait(t, wait.InitialSuccess(wait.BoolFunc(func() bool { return rec.count("b", "take turns") > 0 }),
		wait.Timeout(5*time.Second), wait.Gap(10*time.Millisecond)))
	_, ok = c.Share("a", key)
	must.False(t, ok)
	_, ok = c.Share("b", key)
	must.False(t, ok)
}

// waitUntil polls ok until it holds, failing after timeout.
func waitUntil(t *testing.T, timeout time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting until %s", timeout, what)
		}
		time.Sleep(time.Millisecond)
	}
}

// A declared profile is held against what the task holds: two tasks that
// fit the lane at once by what they declared run concurrently until one
// holds more than it declared; then it is re-profiled, told so, and the
// two take turns.
func TestADeclaredProfileIsCheckedAgainstUse(t *testing.T) {
	rec := &recorder{}
	c := newCoordinator(t, switcher.Freeze{}, 100*time.Millisecond, Hooks{Event: rec.add})
	a, b := startProc(t), startProc(t)
	var held atomic.Uint64
	held.Store(4000)
	key := Key{GPU: "GPU-0", Lane: 6}
	c.Join(key, 8000, Member{TaskID: "a", Profile: Profile{PersistentMiB: 3000, EphemeralMiB: 1000, Known: true}, Processes: a.processes(),
		GPUMemoryMiB: held.Load}, MemberState{})
	c.Join(key, 8000, Member{TaskID: "b", Profile: Profile{PersistentMiB: 3000, EphemeralMiB: 1000, Known: true}, Processes: b.processes(),
		GPUMemoryMiB: func() uint64 { return 3500 }}, MemberState{})
	must.Wait(t, wait.InitialSuccess(wait.BoolFunc(func() bool { return rec.count("a", "run concurrently") > 0 }),
		wait.Timeout(5*time.Second), wait.Gap(10*time.Millisecond)))
	time.Sleep(700 * time.Millisecond) // a check or more: within its profile
	must.Zero(t, rec.count("a", "past its memory profile"))

	held.Store(5500) // 1500 MiB past its declaration
	must.Wait(t, wait.InitialSuccess(wait.BoolFunc(func() bool { return rec.count("a", "take turns") > 0 }),
		wait.Timeout(5*time.Second), wait.Gap(10*time.Millisecond)))
	must.Positive(t, rec.count("a", "holds 5500 MiB in GPU-0/lane6, past its memory profile (persistent 3000 MiB + ephemeral 1000 MiB (declared))"))
	st, ok := c.Status("a")
	must.True(t, ok)
	must.Eq(t, uint64(2500), st.Profile.EphemeralMiB)
	must.Eq(t, "time-sliced", st.Mode)
}
