package lane

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/caravan-gpu/caravan/driver/switcher"
	"github.com/caravan-gpu/caravan/gpu"
	"github.com/caravan-gpu/caravan/gpu/sim"
	"github.com/shoenig/test/must"
	"github.com/shoenig/test/wait"
)

const simGPU = "GPU-sim-0"

// simGPUBackend is a simulated 16 GiB GPU that checkpoints as the hardware
// does: a checkpointed process leaves the process list and frees its memory.
func simGPUBackend(t testing.TB) (*sim.Backend, string) {
	return simGPUBackendTimed(t, "{}")
}

// simGPUBackendTimed is simGPUBackend with a checkpoint_timing.
func simGPUBackendTimed(t testing.TB, timing string) (*sim.Backend, string) {
	t.Helper()
	dir := t.TempDir()
	fleet := filepath.Join(dir, "fleet.json")
	must.NoError(t, os.WriteFile(fleet, []byte(`{"gpus":[{"uuid": "`+simGPU+`", "model": "Tesla T4", "memory_mib": 16384, "checkpoint_timing": `+timing+`}]}`), 0o644))
	state := filepath.Join(dir, "state")
	b, err := sim.New(fleet, state)
	must.NoError(t, err)
	return b, state
}

// gpuPIDsOf lists pids as the driver does: those the GPU lists now, as
// the watchdog's sample does, each with what it holds there. A
// checkpointed process is not among them.
func gpuPIDsOf(b *sim.Backend, pids ...int) func() []GPUProcess {
	return func() []GPUProcess {
		procs, _ := b.Processes(simGPU)
		var out []GPUProcess
		for _, p := range procs {
			if slices.Contains(pids, p.PID) {
				out = append(out, GPUProcess{PID: p.PID, MiB: map[string]uint64{simGPU: p.UsedMemoryMiB}})
			}
		}
		return out
	}
}

// heldBy is the GPU memory process pid holds on the simulated GPU, as a
// member's GPUMemoryMiB reads it.
func heldBy(b *sim.Backend, pid int) func() uint64 {
	return func() uint64 {
		procs, _ := b.Processes(simGPU)
		for _, p := range procs {
			if p.PID == pid {
				return p.UsedMemoryMiB
			}
		}
		return 0
	}
}

func simCoordinator(t *testing.T, b *sim.Backend, quantum time.Duration, hooks Hooks) (*Coordinator, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	c := New(ctx, Options{Mechanism: switcher.CUDACheckpoint{GPU: b}, Quantum: quantum, MeasureIterations: 2,
		ResumeBackoff: 10 * time.Millisecond, RejoinGrace: time.Second, Hooks: hooks})
	// The lanes write the sim's state directory; it goes only once they stop.
	t.Cleanup(func() {
		cancel()
		c.Wait()
	})
	return c, cancel
}

var big = Profile{PersistentMiB: 5000, EphemeralMiB: 2000, Known: true}

// twoOnTheGPU starts two processes that each hold 6000 MiB of the
// simulated GPU.
func twoOnTheGPU(t *testing.T, state string) (pa, pb *proc, ida, idb int) {
	t.Helper()
	pa, pb = startProc(t), startProc(t)
	ida, idb = pa.cmd.Process.Pid, pb.cmd.Process.Pid
	must.NoError(t, sim.SetProcessMemory(state, simGPU, ida, 6000))
	must.NoError(t, sim.SetProcessMemory(state, simGPU, idb, 6000))
	return pa, pb, ida, idb
}

// Two tasks take turns with cuda-checkpoint on the simulated GPU: the one
// suspended holds no GPU memory, and each resume restores exactly what its
// suspend checkpointed, although the GPU no longer lists those processes.
func TestCheckpointRoundTripThroughTheLane(t *testing.T) {
	b, state := simGPUBackend(t)
	rec := &recorder{}
	var mu sync.Mutex
	resumes := map[string]int{}
	c, _ := simCoordinator(t, b, 50*time.Millisecond, Hooks{Event: func(e Event) {
		rec.add(e)
		if contains(e.Message, "restored PIDs") {
			mu.Lock()
			resumes[e.TaskID]++
			mu.Unlock()
		}
	}})
	pa, pb, ida, idb := twoOnTheGPU(t, state)
	key := Key{GPU: simGPU, Lane: 0}
	c.Join(key, 8000, Member{TaskID: "a", Profile: big, Processes: pa.processes(), GPUProcesses: gpuPIDsOf(b, ida)}, MemberState{})
	c.Join(key, 8000, Member{TaskID: "b", Profile: big, Processes: pb.processes(), GPUProcesses: gpuPIDsOf(b, idb)}, MemberState{})

	must.Wait(t, wait.InitialSuccess(wait.BoolFunc(func() bool {
		mu.Lock()
		defer mu.Unlock()
		return resumes["a"] >= 2 && resumes["b"] >= 2
	}), wait.Timeout(5*time.Second), wait.Gap(10*time.Millisecond)))
	must.Zero(t, rec.count("a", "failed"))
	must.Zero(t, rec.count("b", "failed"))

	// Whoever is suspended now is off the GPU; leaving restores it.
	for _, id := range []string{"a", "b"} {
		c.Leave(id)
	}
	procs, err := b.Processes(simGPU)
	must.NoError(t, err)
	must.Len(t, 2, procs)
	must.False(t, sim.Checkpointed(state, ida))
	must.False(t, sim.Checkpointed(state, idb))
}

// Where a checkpoint and a restore take their time, as they do on the
// hardware (seconds per 10 GiB), a task's quantum stretches so that
// switching takes at most a tenth of the lane's time, rather than most of
// it.
func TestSlowSwitchesStretchTheQuantum(t *testing.T) {
	b, state := simGPUBackendTimed(t, `{"checkpoint_ms": 60, "restore_ms": 40}`)
	rec := &recorder{}
	c, _ := simCoordinator(t, b, 50*time.Millisecond, Hooks{Event: rec.add})
	pa, pb, ida, idb := twoOnTheGPU(t, state)
	key := Key{GPU: simGPU, Lane: 0}
	c.Join(key, 8000, Member{TaskID: "a", Profile: big, Processes: pa.processes(), GPUProcesses: gpuPIDsOf(b, ida)}, MemberState{})
	c.Join(key, 8000, Member{TaskID: "b", Profile: big, Processes: pb.processes(), GPUProcesses: gpuPIDsOf(b, idb)}, MemberState{})
	must.Wait(t, wait.InitialSuccess(wait.BoolFunc(func() bool { return rec.count("a", "stretched from 50ms") > 0 }),
		wait.Timeout(10*time.Second), wait.Gap(10*time.Millisecond)))
	// Each switch takes 100 ms or more: with 50 ms quanta the lane would
	// switch over a dozen times in 2.5 s; stretched to 900 ms or more, a
	// handful.
	before := rec.count("a", "suspended in") + rec.count("b", "suspended in")
	time.Sleep(2500 * time.Millisecond)
	switches := rec.count("a", "suspended in") + rec.count("b", "suspended in") - before
	must.LessEq(t, 3, switches)
	must.Positive(t, switches)
}

// An MPS client cannot be checkpointed (measured on an H100): its suspend
// falls back to freezing it, with an event, instead of failing until the
// task is evicted; its partner is still checkpointed, and the two take
// turns.
func TestAnMPSClientIsFrozenInstead(t *testing.T) {
	b, state := simGPUBackend(t)
	must.NoError(t, sim.MPSDaemon{StateDir: state, PipeDir: t.TempDir()}.Prepare())
	rec := &recorder{}
	evicted := make(chan string, 2)
	c, _ := simCoordinator(t, b, 50*time.Millisecond, Hooks{Event: rec.add,
		Evict: func(id string, _ error) { evicted <- id }})
	pa, pb, ida, idb := twoOnTheGPU(t, state)
	must.NoError(t, sim.RegisterMPSClient(context.Background(), state, os.Getuid(), idb))
	key := Key{GPU: simGPU, Lane: 0}
	c.Join(key, 8000, Member{TaskID: "a", Profile: big, Processes: pa.processes(), GPUProcesses: gpuPIDsOf(b, ida)}, MemberState{})
	c.Join(key, 8000, Member{TaskID: "b", Profile: big, Processes: pb.processes(), GPUProcesses: gpuPIDsOf(b, idb)}, MemberState{})
	must.Wait(t, wait.InitialSuccess(wait.BoolFunc(func() bool {
		return rec.count("b", "resumed in") >= 2 && rec.count("a", "restored PIDs") >= 2
	}), wait.Timeout(5*time.Second), wait.Gap(10*time.Millisecond)))
	must.Eq(t, 1, rec.count("b", "cannot be checkpointed"))
	must.Zero(t, rec.count("b", "suspend in"))
	must.Positive(t, rec.count("b", "via freeze"))
	must.False(t, sim.Checkpointed(state, idb))
	select {
	case id := <-evicted:
		t.Fatalf("%s was evicted", id)
	default:
	}
}

// A task that can only be frozen (an MPS client) keeps its memory while
// suspended; where that leaves no room for its checkpointed partner's
// restore, it is the one ended, and the partner does not wait for good.
func TestAFrozenOnlyTaskPaysForItsPartnersRestore(t *testing.T) {
	b, state := simGPUBackend(t)
	must.NoError(t, sim.MPSDaemon{StateDir: state, PipeDir: t.TempDir()}.Prepare())
	rec := &recorder{}
	evicted := make(chan string, 4)
	ctx, cancel := context.WithCancel(context.Background())
	c := New(ctx, Options{Mechanism: switcher.CUDACheckpoint{GPU: b}, Quantum: 50 * time.Millisecond, MeasureIterations: 2,
		ResumeBackoff: 10 * time.Millisecond, RejoinGrace: time.Second,
		// The GPU's free memory, as the driver gives it, so that a restore
		// that would not fit is not tried.
		FreeMiB: func(uuid string) (uint64, bool) {
			st, err := b.Stats(uuid)
			if err != nil || st.UsedMemoryMiB > st.TotalMemoryMiB {
				return 0, false
			}
			return st.TotalMemoryMiB - st.UsedMemoryMiB, true
		},
		Hooks: Hooks{Event: rec.add, Evict: func(id string, _ error) {
			select {
			case evicted <- id:
			default:
			}
		}}})
	t.Cleanup(func() {
		cancel()
		c.Wait()
	})
	pa, pb, ida, idb := twoOnTheGPU(t, state)
	must.NoError(t, sim.RegisterMPSClient(context.Background(), state, os.Getuid(), idb))
	key := Key{GPU: simGPU, Lane: 0}
	c.Join(key, 8000, Member{TaskID: "a", Profile: big, Processes: pa.processes(), GPUProcesses: gpuPIDsOf(b, ida), GPUMemoryMiB: heldBy(b, ida)}, MemberState{})
	c.Join(key, 8000, Member{TaskID: "b", Profile: big, Processes: pb.processes(), GPUProcesses: gpuPIDsOf(b, idb), GPUMemoryMiB: heldBy(b, idb)}, MemberState{})
	must.Wait(t, wait.InitialSuccess(wait.BoolFunc(func() bool { return sim.Checkpointed(state, ida) }),
		wait.Timeout(5*time.Second), wait.Gap(time.Millisecond)))
	// Another process takes what b's frozen 6000 MiB leave a's restore.
	other := startProc(t)
	must.NoError(t, sim.SetProcessMemory(state, simGPU, other.cmd.Process.Pid, 5000))
	select {
	case id := <-evicted:
		must.Eq(t, "b", id)
		must.Positive(t, rec.count("b", "cannot be checkpointed, and the 6000 MiB it keeps while frozen"))
	case <-time.After(5 * time.Second):
		t.Fatal("a's restore waited and no one was ended")
	}
}

// A suspend that fails partway restores only what it checkpointed: the
// process that failed, never checkpointed, is left alone.
func TestFailedSuspendRollsBackOnlyWhatItCheckpointed(t *testing.T) {
	b, state := simGPUBackend(t)
	p1, p2 := startProc(t), startProc(t)
	pid1, pid2 := p1.cmd.Process.Pid, p2.cmd.Process.Pid
	must.NoError(t, sim.SetProcessMemory(state, simGPU, pid1, 1000))
	must.NoError(t, sim.SetProcessMemory(state, simGPU, pid2, 1000))
	must.NoError(t, sim.InjectCheckpointFault(state, pid2, "checkpoint", 1))
	// A restore of pid2 would fail: nothing may try one.
	must.NoError(t, sim.InjectCheckpointFault(state, pid2, "restore", -1))

	m := switcher.CUDACheckpoint{GPU: b}
	checkpointed, err := m.Suspend(context.Background(), p1.processes(), []int{pid1, pid2})
	must.ErrorContains(t, err, "injected")
	must.StrNotContains(t, err.Error(), "roll back")
	must.SliceEmpty(t, checkpointed)
	must.False(t, sim.Checkpointed(state, pid1))
	must.False(t, sim.Checkpointed(state, pid2))
	procs, err := b.Processes(simGPU)
	must.NoError(t, err)
	must.Len(t, 2, procs)
	must.False(t, p1.stopped())
}

// A resume that fails is retried; one that keeps failing is reported and
// handed back so that the task is ended rather than left frozen. Until it
// leaves, the turns pass it by: with another partner, they go on between
// the two others and no restore of it is tried again; with none, its
// partner keeps the GPU at its quantum's end instead of being suspended
// only to be resumed.
func TestFailedResumeIsRetriedThenHandedBack(t *testing.T) {
	cases := []struct {
		name       string
		failures   int
		handedBack bool
		third      bool // c joins the lane too
	}{
		{"recovers on retry", 1, false, false},
		{"keeps failing", -1, true, false},
		{"keeps failing beside two partners", -1, true, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, state := simGPUBackend(t)
			failed := make(chan string, 4)
			var handedBack atomic.Int32
			rec := &recorder{}
			c, _ := simCoordinator(t, b, 50*time.Millisecond, Hooks{Event: rec.add,
				ResumeFailed: func(id string, err error) {
					handedBack.Add(1)
					select {
					case failed <- id:
					default:
					}
				}})
			pa, pb, ida, idb := twoOnTheGPU(t, state)
			// b's first turn ends after a's; each restore of b fails as asked.
			must.NoError(t, sim.InjectCheckpointFault(state, idb, "restore", tc.failures))
			key := Key{GPU: simGPU, Lane: 1}
			c.Join(key, 8000, Member{TaskID: "a", Profile: big, Processes: pa.processes(), GPUProcesses: gpuPIDsOf(b, ida)}, MemberState{})
			c.Join(key, 8000, Member{TaskID: "b", Profile: big, Processes: pb.processes(), GPUProcesses: gpuPIDsOf(b, idb)}, MemberState{})
			if tc.third {
				pc := startProc(t)
				idc := pc.cmd.Process.Pid
				must.NoError(t, sim.SetProcessMemory(state, simGPU, idc, 6000))
				c.Join(key, 8000, Member{TaskID: "c", Profile: big, Processes: pc.processes(), GPUProcesses: gpuPIDsOf(b, idc)}, MemberState{})
			}
			if !tc.handedBack {
				must.Wait(t, wait.InitialSuccess(wait.BoolFunc(func() bool { return rec.count("b", "restored PIDs") > 0 }),
					wait.Timeout(5*time.Second), wait.Gap(10*time.Millisecond)))
				must.Eq(t, 1, rec.count("b", "retrying"))
				select {
				case <-failed:
					t.Fatal("a resume that succeeded on retry was handed back")
				default:
				}
				return
			}
			select {
			case id := <-failed:
				must.Eq(t, "b", id)
				must.Positive(t, rec.count("b", "failed after 3 attempt(s)"))
			case <-time.After(5 * time.Second):
				t.Fatal("a failed resume was never handed back")
			}
			if tc.third {
				// a and c take three more turns between them; b's are
				// passed by.
				turns := rec.count("a", "resumed in") + rec.count("c", "resumed in")
				must.Wait(t, wait.InitialSuccess(wait.BoolFunc(func() bool {
					return rec.count("a", "resumed in")+rec.count("c", "resumed in") >= turns+3
				}), wait.Timeout(5*time.Second), wait.Gap(5*time.Millisecond)))
			} else {
				// a keeps the GPU for four of its quanta (stretched by its
				// switches) without a suspend.
				suspends := rec.count("a", "suspended in")
				time.Sleep(4 * max(longestQuantum(rec, "a"), 50*time.Millisecond))
				must.Eq(t, suspends, rec.count("a", "suspended in"))
			}
			must.Eq(t, 2, rec.count("b", "retrying"))
			must.Eq(t, 1, handedBack.Load())
		})
	}
}

// longestQuantum is the longest quantum a task's turns ended on, from its
// suspend events ("quantum of Q used"), stretched or not.
func longestQuantum(r *recorder, taskID string) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	var q time.Duration
	for _, e := range r.events {
		if e.TaskID != taskID {
			continue
		}
		if i := indexOf(e.Message, "quantum of "); i >= 0 {
			var s string
			if _, err := fmt.Sscan(e.Message[i+len("quantum of "):], &s); err == nil {
				if d, err := time.ParseDuration(s); err == nil {
					q = max(q, d)
				}
			}
		}
	}
	return q
}

// A restore that runs out of memory loses the process, on the hardware as
// on the simulated GPU: the task is handed back at once with the reason,
// not retried. Here a process outside the lane takes the memory while b is
// checkpointed, and no FreeMiB check stands in the way.
func TestLostRestoreEndsTheTaskAtOnce(t *testing.T) {
	b, state := simGPUBackend(t)
	failed := make(chan error, 1)
	var handedBack atomic.Int32
	rec := &recorder{}
	c, _ := simCoordinator(t, b, 50*time.Millisecond, Hooks{Event: rec.add,
		ResumeFailed: func(id string, err error) {
			if id == "b" && handedBack.Add(1) == 1 {
				failed <- err
			}
		}})
	pa, pb, ida, idb := twoOnTheGPU(t, state)
	key := Key{GPU: simGPU, Lane: 1}
	c.Join(key, 8000, Member{TaskID: "a", Profile: big, Processes: pa.processes(), GPUProcesses: gpuPIDsOf(b, ida)}, MemberState{})
	c.Join(key, 8000, Member{TaskID: "b", Profile: big, Processes: pb.processes(), GPUProcesses: gpuPIDsOf(b, idb)}, MemberState{})
	must.Wait(t, wait.InitialSuccess(wait.BoolFunc(func() bool { return sim.Checkpointed(state, idb) }),
		wait.Timeout(5*time.Second), wait.Gap(time.Millisecond)))
	other := startProc(t)
	must.NoError(t, sim.SetProcessMemory(state, simGPU, other.cmd.Process.Pid, 10500))
	select {
	case err := <-failed:
		must.ErrorIs(t, err, gpu.ErrRestoreLost)
		must.Positive(t, rec.count("b", "its GPU state cannot be restored"))
		must.Eq(t, 0, rec.count("b", "retrying"))
	case <-time.After(5 * time.Second):
		t.Fatal("a lost restore was never handed back")
	}
	// Handed back once: its turns pass it by until it leaves.
	time.Sleep(300 * time.Millisecond)
	must.Eq(t, int32(1), handedBack.Load())
}

// A coordinator that ends (the driver restarts) leaves a suspended task
// frozen and checkpointed; a new one rebuilt from the persisted states keeps
// it so while its peer rejoins, then carries on with the turns.
func TestRestoredLaneStaysFrozenThenResumesOnSchedule(t *testing.T) {
	b, state := simGPUBackend(t)
	var mu sync.Mutex
	states := map[string]MemberState{}
	persist := func(id string, _ Key, st MemberState) {
		mu.Lock()
		defer mu.Unlock()
		states[id] = st
	}
	c1, stop := simCoordinator(t, b, 200*time.Millisecond, Hooks{Persist: persist})
	pa, pb, ida, idb := twoOnTheGPU(t, state)
	key := Key{GPU: simGPU, Lane: 2}
	join := func(c *Coordinator, id string, p *proc, pid int, st MemberState) {
		c.Join(key, 8000, Member{TaskID: id, Profile: big, Processes: p.processes(), GPUProcesses: gpuPIDsOf(b, pid)}, st)
	}
	join(c1, "a", pa, ida, MemberState{})
	join(c1, "b", pb, idb, MemberState{})
	// Wait for b to be suspended with its process checkpointed.
	must.Wait(t, wait.InitialSuccess(wait.BoolFunc(func() bool {
		mu.Lock()
		defer mu.Unlock()
		return states["b"].Suspended && len(states["b"].Checkpointed) == 1
	}), wait.Timeout(5*time.Second), wait.Gap(5*time.Millisecond)))
	stop()
	c1.Wait() // no step of c1 persists after this
	mu.Lock()
	saved := map[string]MemberState{"a": states["a"], "b": states["b"]}
	mu.Unlock()
	must.True(t, saved["a"].Turn)
	must.Eq(t, "time-sliced", saved["b"].Mode)
	must.Eq(t, []string{"a"}, saved["b"].Peers)

	// A new coordinator; b comes back first, alone in its lane.
	rec := &recorder{}
	c2, _ := simCoordinator(t, b, 200*time.Millisecond, Hooks{Event: rec.add, Persist: persist})
	join(c2, "b", pb, idb, saved["b"])
	time.Sleep(300 * time.Millisecond)
	must.True(t, pb.stopped())
	must.True(t, sim.Checkpointed(state, idb))
	st, _ := c2.Status("b")
	must.True(t, st.Suspended)

	join(c2, "a", pa, ida, saved["a"])
	must.Wait(t, wait.InitialSuccess(wait.BoolFunc(func() bool { return rec.count("b", "restored PIDs") > 0 }),
		wait.Timeout(5*time.Second), wait.Gap(10*time.Millisecond)))
	must.Zero(t, rec.count("b", "failed"))
	must.Positive(t, rec.count("a", "checkpointed PIDs"))
}

// A task on lanes of two GPUs is one set of processes: whichever lane
// resumes it last restores what the first one to suspend it checkpointed.
func TestCheckpointOfATaskOnTwoLanes(t *testing.T) {
	b, state := twoGPUBackend(t)
	pidsOn := func(pids ...int) func() []GPUProcess { return processesOn(b, []string{"GPU-a", "GPU-b"}, pids...) }
	rec := &recorder{}
	c, _ := simCoordinator(t, b, 40*time.Millisecond, Hooks{Event: rec.add})
	x, y, z := startProc(t), startProc(t), startProc(t)
	idx, idy, idz := x.cmd.Process.Pid, y.cmd.Process.Pid, z.cmd.Process.Pid
	must.NoError(t, sim.SetProcessMemory(state, "GPU-a", idx, 6000))
	must.NoError(t, sim.SetProcessMemory(state, "GPU-b", idx, 6000))
	must.NoError(t, sim.SetProcessMemory(state, "GPU-a", idy, 6000))
	must.NoError(t, sim.SetProcessMemory(state, "GPU-b", idz, 6000))
	la, lb := Key{GPU: "GPU-a", Lane: 0}, Key{GPU: "GPU-b", Lane: 0}
	c.Join(la, 8000, Member{TaskID: "x", Profile: big, Processes: x.processes(), GPUProcesses: pidsOn(idx)}, MemberState{})
	c.Join(lb, 8000, Member{TaskID: "x", Profile: big, Processes: x.processes(), GPUProcesses: pidsOn(idx)}, MemberState{})
	c.Join(la, 8000, Member{TaskID: "y", Profile: big, Processes: y.processes(), GPUProcesses: pidsOn(idy)}, MemberState{})
	c.Join(lb, 8000, Member{TaskID: "z", Profile: big, Processes: z.processes(), GPUProcesses: pidsOn(idz)}, MemberState{})

	must.Wait(t, wait.InitialSuccess(wait.BoolFunc(func() bool { return rec.count("x", "restored PIDs") >= 2 }),
		wait.Timeout(10*time.Second), wait.Gap(10*time.Millisecond)))
	for _, id := range []string{"x", "y", "z"} {
		must.Zero(t, rec.count(id, "failed"), must.Sprint(id))
	}
	for _, id := range []string{"x", "y", "z"} {
		c.Leave(id)
	}
	for _, pid := range []int{idx, idy, idz} {
		must.False(t, sim.Checkpointed(state, pid))
	}
	procs, err := b.Processes("GPU-b")
	must.NoError(t, err)
	must.Len(t, 2, procs)
}

// intentRecorder wraps the checkpoint mechanism and notes, as each suspend
// starts, what the lane state already says of the task being suspended.
type intentRecorder struct {
	switcher.CUDACheckpoint
	mu      *sync.Mutex
	states  map[string]MemberState
	pidTask map[int]string
	seen    []MemberState
}

func (r *intentRecorder) Suspend(ctx context.Context, procs switcher.Freezer, gpuPIDs []int) ([]int, error) {
	r.mu.Lock()
	if len(gpuPIDs) > 0 {
		r.seen = append(r.seen, r.states[r.pidTask[gpuPIDs[0]]])
	}
	r.mu.Unlock()
	return r.CUDACheckpoint.Suspend(ctx, procs, gpuPIDs)
}

// The processes a suspend checkpoints are in the lane state before the
// first checkpoint call, so that a driver that dies inside it leaves a
// record for the next one to ask the GPU about; once the suspend is done
// the record is what it checkpointed.
func TestSuspendWritesItsProcessesAhead(t *testing.T) {
	b, state := simGPUBackend(t)
	var mu sync.Mutex
	states := map[string]MemberState{}
	pa, pb := startProc(t), startProc(t)
	ida, idb := pa.cmd.Process.Pid, pb.cmd.Process.Pid
	mech := &intentRecorder{CUDACheckpoint: switcher.CUDACheckpoint{GPU: b}, mu: &mu, states: states, pidTask: map[int]string{ida: "a", idb: "b"}}
	ctx, cancel := context.WithCancel(context.Background())
	c := New(ctx, Options{Mechanism: mech, Quantum: 50 * time.Millisecond, MeasureIterations: 2, RejoinGrace: time.Second,
		Hooks: Hooks{Persist: func(id string, _ Key, st MemberState) {
			mu.Lock()
			defer mu.Unlock()
			states[id] = st
		}}})
	t.Cleanup(func() {
		cancel()
		c.Wait()
	})
	must.NoError(t, sim.SetProcessMemory(state, simGPU, ida, 6000))
	must.NoError(t, sim.SetProcessMemory(state, simGPU, idb, 6000))
	key := Key{GPU: simGPU, Lane: 3}
	c.Join(key, 8000, Member{TaskID: "a", Profile: big, Processes: pa.processes(), GPUProcesses: gpuPIDsOf(b, ida)}, MemberState{})
	c.Join(key, 8000, Member{TaskID: "b", Profile: big, Processes: pb.processes(), GPUProcesses: gpuPIDsOf(b, idb)}, MemberState{})
	must.Wait(t, wait.InitialSuccess(wait.BoolFunc(func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(mech.seen) >= 3
	}), wait.Timeout(5*time.Second), wait.Gap(10*time.Millisecond)))
	mu.Lock()
	defer mu.Unlock()
	for _, st := range mech.seen {
		must.SliceLen(t, 1, st.Suspending, must.Sprintf("%+v", st))
		must.False(t, st.Suspended)
	}
	for id, st := range states {
		if st.Suspended {
			must.SliceEmpty(t, st.Suspending, must.Sprint(id))
			must.SliceLen(t, 1, st.Checkpointed, must.Sprint(id))
		}
	}
}

// A task whose checkpoint always fails cannot hold its partner off the
// GPU: after SuspendAttempts tries, spaced out, it is handed to
// SuspendFailed (the driver ends it), and once it has left the partner
// runs. The lane does not spin on the failing suspend meanwhile.
func TestFailedSuspendEndsTheTaskNotItsPartner(t *testing.T) {
	b, state := simGPUBackend(t)
	rec := &recorder{}
	var c *Coordinator
	evicted := make(chan string, 4)
	c, _ = simCoordinator(t, b, 50*time.Millisecond, Hooks{Event: rec.add,
		Evict: func(id string, err error) {
			evicted <- id
			c.Leave(id) // as the driver's kill and DestroyTask do
		}})
	pa, pb, ida, idb := twoOnTheGPU(t, state)
	must.NoError(t, sim.InjectCheckpointFault(state, ida, "checkpoint", -1))
	key := Key{GPU: simGPU, Lane: 4}
	c.Join(key, 8000, Member{TaskID: "a", Profile: big, Processes: pa.processes(), GPUProcesses: gpuPIDsOf(b, ida)}, MemberState{})
	c.Join(key, 8000, Member{TaskID: "b", Profile: big, Processes: pb.processes(), GPUProcesses: gpuPIDsOf(b, idb)}, MemberState{})
	select {
	case id := <-evicted:
		must.Eq(t, "a", id)
	case <-time.After(10 * time.Second):
		t.Fatalf("a task that cannot be suspended was never ended; failed suspends: %d", rec.count("a", "suspend in"))
	}
	must.Eq(t, 3, rec.count("a", "failed, task keeps running"))
	must.Positive(t, rec.count("a", "failed 3 times in a row"))
	must.Wait(t, wait.InitialSuccess(wait.BoolFunc(func() bool {
		st, ok := c.Status("b")
		return ok && !st.Suspended && rec.count("b", "resumed in") > 0
	}), wait.Timeout(5*time.Second), wait.Gap(10*time.Millisecond)))
	must.False(t, pb.stopped())
}

// A task that leaves its lane while suspended is resumed first; a resume
// that fails is returned and told, not dropped, so that the driver ends the
// task by force rather than wait on a frozen one.
func TestLeaveReportsAFailedResume(t *testing.T) {
	b, state := simGPUBackend(t)
	rec := &recorder{}
	// a's turn outlasts the test: b stays suspended until it leaves.
	c, _ := simCoordinator(t, b, time.Minute, Hooks{Event: rec.add})
	pa, pb, ida, idb := twoOnTheGPU(t, state)
	key := Key{GPU: simGPU, Lane: 5}
	c.Join(key, 8000, Member{TaskID: "a", Profile: big, Processes: pa.processes(), GPUProcesses: gpuPIDsOf(b, ida)}, MemberState{})
	c.Join(key, 8000, Member{TaskID: "b", Profile: big, Processes: pb.processes(), GPUProcesses: gpuPIDsOf(b, idb)}, MemberState{})
	must.Wait(t, wait.InitialSuccess(wait.BoolFunc(func() bool {
		st, ok := c.Status("b")
		return ok && st.Suspended
	}), wait.Timeout(5*time.Second), wait.Gap(5*time.Millisecond)))
	must.NoError(t, sim.InjectCheckpointFault(state, idb, "restore", -1))
	err := c.Leave("b")
	must.ErrorContains(t, err, "as the task leaves it")
	must.Positive(t, rec.count("b", "is ended by force"))
	_, ok := c.Status("b")
	must.False(t, ok)
}

// spawningTask is a task's processes as signals reach them, and a process
// the task starts on the GPU during its first suspend, between the
// checkpoints and the freeze, as a data loader might.
type spawningTask struct {
	t       *testing.T
	state   string
	mu      sync.Mutex
	pids    []int
	spawned int
}

func (s *spawningTask) Method() string { return "signals" }

func (s *spawningTask) signal(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, pid := range s.pids {
		if err := syscall.Kill(pid, sig); err != nil {
			return err
		}
	}
	return nil
}

func (s *spawningTask) Freeze(context.Context) error {
	s.mu.Lock()
	if s.spawned == 0 {
		late := startProc(s.t)
		s.spawned = late.cmd.Process.Pid
		s.pids = append(s.pids, s.spawned)
		s.mu.Unlock()
		if err := sim.SetProcessMemory(s.state, simGPU, s.spawned, 1500); err != nil {
			return err
		}
	} else {
		s.mu.Unlock()
	}
	return s.signal(syscall.SIGSTOP)
}

func (s *spawningTask) Thaw(context.Context) error { return s.signal(syscall.SIGCONT) }

func (s *spawningTask) gpuPIDs(b *sim.Backend) func() []GPUProcess {
	return func() []GPUProcess {
		s.mu.Lock()
		pids := append([]int(nil), s.pids...)
		s.mu.Unlock()
		return gpuPIDsOf(b, pids...)()
	}
}

// A process the task starts while its others are checkpointed is frozen
// with them and checkpointed too: the suspended task holds nothing on the
// GPU, so its partner's memory fits, and a resume restores every process.
func TestProcessStartedDuringASuspendIsCheckpointedToo(t *testing.T) {
	b, state := simGPUBackend(t)
	rec := &recorder{}
	// a's turn is long enough for the checks of b while suspended, short
	// enough for b's next turn to come within the test.
	c, _ := simCoordinator(t, b, time.Second, Hooks{Event: rec.add})
	pa, _, ida, idb := twoOnTheGPU(t, state)
	spawner := &spawningTask{t: t, state: state, pids: []int{idb}}
	key := Key{GPU: simGPU, Lane: 6}
	c.Join(key, 8000, Member{TaskID: "a", Profile: big, Processes: pa.processes(), GPUProcesses: gpuPIDsOf(b, ida)}, MemberState{})
	c.Join(key, 8000, Member{TaskID: "b", Profile: big, Processes: spawner, GPUProcesses: spawner.gpuPIDs(b)}, MemberState{})
	// b is suspended first, for a's turn; its new process must go too.
	must.Wait(t, wait.InitialSuccess(wait.BoolFunc(func() bool {
		st, ok := c.Status("b")
		return ok && st.Suspended
	}), wait.Timeout(5*time.Second), wait.Gap(5*time.Millisecond)))
	spawner.mu.Lock()
	late := spawner.spawned
	spawner.mu.Unlock()
	must.Positive(t, late)
	must.SliceEmpty(t, spawner.gpuPIDs(b)(), must.Sprint("a process of the suspended task still holds GPU memory"))
	must.Positive(t, rec.count("b", fmt.Sprintf("processes [%d] started on the GPU during the suspend", late)))
	// Its next turn restores both.
	must.Wait(t, wait.InitialSuccess(wait.BoolFunc(func() bool {
		return rec.count("b", fmt.Sprintf("restored PIDs [%d %d]", idb, late)) > 0
	}), wait.Timeout(5*time.Second), wait.Gap(10*time.Millisecond)))
}

// A restore checks first that the memory it needs is free: where a running
// partner grew past its profile meanwhile, the partner is ended, not the
// task waiting to be restored, which is restored once the memory is back.
// Here three tasks take turns; when one leaves, the two left fit at once,
// and the checkpointed one is resumed beside the one running, which grew.
func TestRestoreWaitsForMemoryAndTheTaskThatGrewPays(t *testing.T) {
	b, state := simGPUBackend(t)
	rec := &recorder{}
	evicted := make(chan string, 4)
	ctx, cancel := context.WithCancel(context.Background())
	var c *Coordinator
	pids := map[string]int{}
	c = New(ctx, Options{Mechanism: switcher.CUDACheckpoint{GPU: b}, Quantum: time.Minute, MeasureIterations: 2,
		ResumeBackoff: 10 * time.Millisecond, RejoinGrace: time.Second,
		FreeMiB: func(gpu string) (uint64, bool) {
			st, err := b.Stats(gpu)
			return st.TotalMemoryMiB - st.UsedMemoryMiB, err == nil
		},
		Hooks: Hooks{Event: rec.add, Evict: func(id string, err error) {
			evicted <- id
			// As the driver's kill does: the process and its memory go.
			must.NoError(t, sim.SetProcessMemory(state, simGPU, pids[id], 0))
			c.Leave(id)
		}}})
	t.Cleanup(func() {
		cancel()
		c.Wait()
	})
	small := Profile{PersistentMiB: 3000, EphemeralMiB: 1000, Known: true}
	key := Key{GPU: simGPU, Lane: 7}
	for _, id := range []string{"a", "b", "c"} {
		p := startProc(t)
		pid := p.cmd.Process.Pid
		pids[id] = pid
		must.NoError(t, sim.SetProcessMemory(state, simGPU, pid, 3000))
		c.Join(key, 8000, Member{TaskID: id, Profile: small, Processes: p.processes(), GPUProcesses: gpuPIDsOf(b, pid),
			GPUMemoryMiB: func() uint64 {
				procs, _ := b.Processes(simGPU)
				for _, q := range procs {
					if q.PID == pid {
						return q.UsedMemoryMiB
					}
				}
				return 0
			}}, MemberState{})
	}
	// Three take turns (9000 MiB persistent in an 8000 MiB lane): a runs,
	// b and c are checkpointed.
	must.Wait(t, wait.InitialSuccess(wait.BoolFunc(func() bool {
		sb, okb := c.Status("b")
		sc, okc := c.Status("c")
		return okb && okc && sb.Suspended && sc.Suspended && rec.count("b", "checkpointed PIDs") > 0 && rec.count("c", "checkpointed PIDs") > 0
	}), wait.Timeout(5*time.Second), wait.Gap(5*time.Millisecond)))
	// a grows far past its profile of 4000 MiB; then c leaves, and a and b
	// fit the lane at once by their profiles. b's 3000 MiB do not fit
	// beside a's 14000 on the 16384 MiB GPU.
	must.NoError(t, sim.SetProcessMemory(state, simGPU, pids["a"], 14000))
	must.NoError(t, c.Leave("c"))
	select {
	case id := <-evicted:
		must.Eq(t, "a", id)
	case <-time.After(10 * time.Second):
		t.Fatal("the task that grew was never ended")
	}
	must.Positive(t, rec.count("a", "grew to 14000 MiB"))
	must.Positive(t, rec.count("b", "restore in "+key.String()+" waits for 3000 MiB"))
	must.Wait(t, wait.InitialSuccess(wait.BoolFunc(func() bool {
		return rec.count("b", fmt.Sprintf("restored PIDs [%d]", pids["b"])) > 0
	}), wait.Timeout(5*time.Second), wait.Gap(10*time.Millisecond)))
	must.Zero(t, rec.count("b", "failed"), must.Sprint("b's restore was tried without the memory"))
}

// A process the listing misses at the start of a suspend, while its
// memory is already counted, is checkpointed as one started late: its
// memory is what the restore needs, counted once. Counted twice, the
// restore would wait for more than the GPU can free, for good.
func TestAProcessListedLateIsCountedOnceForItsRestore(t *testing.T) {
	b, state := simGPUBackend(t)
	need := &persistedNeeds{}
	c, _ := simCoordinator(t, b, 50*time.Millisecond, Hooks{Persist: need.persist})
	pa, pb, ida, idb := twoOnTheGPU(t, state)
	// The first listing misses b's process.
	lagging, listed := laggingListing(func() []GPUProcess { return nil }, gpuPIDsOf(b, idb))
	key := Key{GPU: simGPU, Lane: 6}
	c.Join(key, 8000, Member{TaskID: "a", Profile: big, Processes: pa.processes(), GPUProcesses: gpuPIDsOf(b, ida), GPUMemoryMiB: heldBy(b, ida)}, MemberState{})
	c.Join(key, 8000, Member{TaskID: "b", Profile: big, Processes: pb.processes(), GPUProcesses: lagging, GPUMemoryMiB: heldBy(b, idb)}, MemberState{})
	must.Eq(t, uint64(6000), need.of(t, "b"), must.Sprint("what b's one process held, once"))
	must.True(t, listed.Load())
}

// A task of two processes, one of which the listing misses at the start
// of a suspend while it already holds memory: the first pass checkpoints
// the other, the second the one listed late, and the restore's need is
// what the two held, each counted once. Counted from the task's total at
// the start and again when listed, the late one's memory came twice, past
// the lane, and the restore would have waited for it forever.
func TestATaskWithAProcessListedLateNeedsWhatEachHeldOnce(t *testing.T) {
	b, state := simGPUBackend(t)
	need := &persistedNeeds{}
	c, _ := simCoordinator(t, b, 50*time.Millisecond, Hooks{Persist: need.persist})
	pa := startProc(t)
	ida := pa.cmd.Process.Pid
	first, second := startProc(t), startProc(t)
	idb1, idb2 := first.cmd.Process.Pid, second.cmd.Process.Pid
	must.NoError(t, sim.SetProcessMemory(state, simGPU, ida, 6000))
	must.NoError(t, sim.SetProcessMemory(state, simGPU, idb1, 4000))
	must.NoError(t, sim.SetProcessMemory(state, simGPU, idb2, 3000))
	task := &spawningTask{t: t, state: state, pids: []int{idb1, idb2}, spawned: -1} // starts nothing
	// The first listing misses the second process.
	lagging, listed := laggingListing(gpuPIDsOf(b, idb1), gpuPIDsOf(b, idb1, idb2))
	key := Key{GPU: simGPU, Lane: 6}
	c.Join(key, 8000, Member{TaskID: "a", Profile: big, Processes: pa.processes(), GPUProcesses: gpuPIDsOf(b, ida)}, MemberState{})
	c.Join(key, 8000, Member{TaskID: "b", Profile: big, Processes: task, GPUProcesses: lagging}, MemberState{})
	must.Eq(t, uint64(7000), need.of(t, "b"), must.Sprint("what b's two processes held, each once"))
	must.True(t, listed.Load())
}

// A listing from before a checkpoint (the watchdog's last sample, where a
// fresh one failed) still names the process checkpointed: the suspend
// neither checkpoints it again nor counts it twice, and it does not take
// it for a process that keeps starting.
func TestAStaleListingNamesNoProcessTwice(t *testing.T) {
	b, state := simGPUBackend(t)
	need := &persistedNeeds{}
	c, _ := simCoordinator(t, b, 50*time.Millisecond, Hooks{Persist: need.persist})
	pa, pb, ida, idb := twoOnTheGPU(t, state)
	stale := func() []GPUProcess { return []GPUProcess{{PID: idb, MiB: map[string]uint64{simGPU: 6000}}} }
	key := Key{GPU: simGPU, Lane: 6}
	c.Join(key, 8000, Member{TaskID: "a", Profile: big, Processes: pa.processes(), GPUProcesses: gpuPIDsOf(b, ida)}, MemberState{})
	c.Join(key, 8000, Member{TaskID: "b", Profile: big, Processes: pb.processes(), GPUProcesses: stale}, MemberState{})
	must.Eq(t, uint64(6000), need.of(t, "b"), must.Sprint("what b's one process held, once"))
}

// A task on lanes of two GPUs is checkpointed whole by the first lane to
// suspend it, and each lane records what its processes held on that
// lane's GPU, so that a restart finds each share where it kept it.
func TestATaskOnTwoGPUsRecordsWhatItHeldOnEach(t *testing.T) {
	b, state := twoGPUBackend(t)
	var mu sync.Mutex
	need := map[Key]uint64{}
	all := map[Key]map[string]uint64{}
	c, _ := simCoordinator(t, b, 40*time.Millisecond, Hooks{Persist: func(taskID string, key Key, st MemberState) {
		mu.Lock()
		defer mu.Unlock()
		if taskID == "x" && len(st.Checkpointed) > 0 {
			need[key], all[key] = st.CheckpointedMiB, st.NeedMiB
		}
	}})
	x, y, z := startProc(t), startProc(t), startProc(t)
	idx, idy, idz := x.cmd.Process.Pid, y.cmd.Process.Pid, z.cmd.Process.Pid
	must.NoError(t, sim.SetProcessMemory(state, "GPU-a", idx, 6000))
	must.NoError(t, sim.SetProcessMemory(state, "GPU-b", idx, 4000))
	must.NoError(t, sim.SetProcessMemory(state, "GPU-a", idy, 6000))
	must.NoError(t, sim.SetProcessMemory(state, "GPU-b", idz, 6000))
	onBoth := func(pids ...int) func() []GPUProcess { return processesOn(b, []string{"GPU-a", "GPU-b"}, pids...) }
	la, lb := Key{GPU: "GPU-a", Lane: 0}, Key{GPU: "GPU-b", Lane: 0}
	c.Join(la, 8000, Member{TaskID: "x", Profile: big, Processes: x.processes(), GPUProcesses: onBoth(idx)}, MemberState{})
	c.Join(lb, 8000, Member{TaskID: "x", Profile: big, Processes: x.processes(), GPUProcesses: onBoth(idx)}, MemberState{})
	c.Join(la, 8000, Member{TaskID: "y", Profile: big, Processes: y.processes(), GPUProcesses: onBoth(idy)}, MemberState{})
	c.Join(lb, 8000, Member{TaskID: "z", Profile: big, Processes: z.processes(), GPUProcesses: onBoth(idz)}, MemberState{})
	must.Wait(t, wait.InitialSuccess(wait.BoolFunc(func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(need) == 2
	}), wait.Timeout(10*time.Second), wait.Gap(5*time.Millisecond)))
	mu.Lock()
	defer mu.Unlock()
	must.Eq(t, map[Key]uint64{la: 6000, lb: 4000}, need, must.Sprint("what x held on each lane's GPU"))
	both := map[string]uint64{"GPU-a": 6000, "GPU-b": 4000}
	must.Eq(t, map[Key]map[string]uint64{la: both, lb: both}, all, must.Sprint("every lane keeps the need on both GPUs"))
}

// The lane that restores a task of two GPUs waits while either GPU lacks
// what the task's processes held there, not only its own.
func TestARestoreFitsOnlyWhereEveryGPUHasRoom(t *testing.T) {
	free := map[string]uint64{"GPU-a": 10000, "GPU-b": 2000}
	c := New(context.Background(), Options{Mechanism: switcher.Freeze{}, FreeMiB: func(gpu string) (uint64, bool) {
		f, ok := free[gpu]
		return f, ok
	}})
	h := &hold{}
	h.setCheckpointedNeed([]int{42}, map[string]uint64{"GPU-a": 6000, "GPU-b": 4000})
	m := &member{hold: h}
	la, lb := &laneState{key: Key{GPU: "GPU-a"}}, &laneState{key: Key{GPU: "GPU-b"}}
	for _, l := range []*laneState{la, lb} {
		gpu, need, short, ok := c.fits(l, m)
		must.False(t, ok, must.Sprint(l.key))
		must.Eq(t, "GPU-b", gpu)
		must.Eq(t, uint64(4000), need)
		must.Eq(t, uint64(2000), short)
	}
	free["GPU-b"] = 4000
	_, _, _, ok := c.fits(la, m)
	must.True(t, ok)
	free["GPU-a"] = 5999
	gpu, need, _, ok := c.fits(lb, m)
	must.False(t, ok)
	must.Eq(t, "GPU-a", gpu)
	must.Eq(t, uint64(6000), need)
}

// What a GPU does not tell of a process's memory counts as the task's
// lanes there, once for the GPU, not once per process: two such processes
// on a lane of 8000 MiB need 8000, and told memory above that counts as
// told.
func TestANeedCountsUntoldMemoryOnceAGPU(t *testing.T) {
	untold := func(pid int, mib map[string]uint64) GPUProcess {
		return GPUProcess{PID: pid, MiB: mib, Untold: map[string]uint64{"GPU-a": 8000}}
	}
	var n needCount
	n.add([]GPUProcess{untold(1, nil), untold(2, nil), {PID: 3, MiB: map[string]uint64{"GPU-a": 3000, "GPU-b": 500}}}, []int{1, 2, 3})
	must.Eq(t, map[string]uint64{"GPU-a": 8000, "GPU-b": 500}, n.total())
	n.add([]GPUProcess{{PID: 4, MiB: map[string]uint64{"GPU-a": 6000}}, {PID: 5, MiB: map[string]uint64{"GPU-a": 7000}}}, []int{4})
	must.Eq(t, map[string]uint64{"GPU-a": 9000, "GPU-b": 500}, n.total(), must.Sprint("3000 + 6000 told; 5 was not checkpointed"))
	var none needCount
	must.Nil(t, none.total())
}

// After a driver restart a task on two GPUs rejoins its lanes with what
// they persisted, and its restore waits while either GPU lacks room for
// what its processes held there, though only one lane's state kept the
// other GPU's share.
func TestARestartedTaskOnTwoGPUsWaitsForRoomOnBoth(t *testing.T) {
	b, state := twoGPUBackend(t)
	x := startProc(t)
	idx := x.cmd.Process.Pid
	must.NoError(t, sim.SetProcessMemory(state, "GPU-a", idx, 6000))
	must.NoError(t, sim.SetProcessMemory(state, "GPU-b", idx, 4000))
	// As the driver left it: checkpointed, then frozen.
	must.NoError(t, b.Checkpoint(context.Background(), idx))
	must.NoError(t, syscall.Kill(idx, syscall.SIGSTOP))
	var mu sync.Mutex
	free := map[string]uint64{"GPU-a": 16384, "GPU-b": 2000}
	rec := &recorder{}
	ctx, cancel := context.WithCancel(context.Background())
	c := New(ctx, Options{Mechanism: switcher.CUDACheckpoint{GPU: b}, Quantum: 40 * time.Millisecond, MeasureIterations: 2,
		ResumeBackoff: 10 * time.Millisecond, RejoinGrace: time.Second, Hooks: Hooks{Event: rec.add},
		FreeMiB: func(gpu string) (uint64, bool) {
			mu.Lock()
			defer mu.Unlock()
			return free[gpu], true
		}})
	t.Cleanup(func() {
		cancel()
		c.Wait()
	})
	la, lb := Key{GPU: "GPU-a", Lane: 0}, Key{GPU: "GPU-b", Lane: 0}
	// Lane a's state is of this driver (the need on both GPUs); lane b's
	// of one before it, which kept its own share alone, and 0 at that.
	c.Join(la, 8000, Member{TaskID: "x", Profile: big, Processes: x.processes()},
		MemberState{Profile: big, Suspended: true, Checkpointed: []int{idx}, CheckpointedMiB: 6000, NeedMiB: map[string]uint64{"GPU-a": 6000, "GPU-b": 4000}})
	c.Join(lb, 8000, Member{TaskID: "x", Profile: big, Processes: x.processes()},
		MemberState{Profile: big, Suspended: true, Checkpointed: []int{idx}})
	must.Wait(t, wait.InitialSuccess(wait.BoolFunc(func() bool { return rec.count("x", "waits for 4000 MiB") > 0 }),
		wait.Timeout(5*time.Second), wait.Gap(10*time.Millisecond)))
	must.Zero(t, rec.count("x", "restored PIDs"), must.Sprint("restored with 2000 MiB free on GPU-b"))
	must.True(t, sim.Checkpointed(state, idx))
	mu.Lock()
	free["GPU-b"] = 16384
	mu.Unlock()
	must.Wait(t, wait.InitialSuccess(wait.BoolFunc(func() bool { return rec.count("x", "restored PIDs") > 0 }),
		wait.Timeout(5*time.Second), wait.Gap(10*time.Millisecond)))
	must.Zero(t, rec.count("x", "failed"))
}

// persistedNeeds keeps, per task, the need its lane state persisted last
// while something of it was checkpointed.
type persistedNeeds struct {
	mu   sync.Mutex
	need map[string]uint64
}

func (n *persistedNeeds) persist(taskID string, _ Key, st MemberState) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(st.Checkpointed) > 0 {
		if n.need == nil {
			n.need = map[string]uint64{}
		}
		n.need[taskID] = st.CheckpointedMiB
	}
}

// of waits for a need of taskID to be persisted, and returns it.
func (n *persistedNeeds) of(t *testing.T, taskID string) uint64 {
	t.Helper()
	var got uint64
	must.Wait(t, wait.InitialSuccess(wait.BoolFunc(func() bool {
		n.mu.Lock()
		defer n.mu.Unlock()
		var ok bool
		got, ok = n.need[taskID]
		return ok
	}), wait.Timeout(5*time.Second), wait.Gap(5*time.Millisecond)))
	return got
}

// processesOn lists pids as the driver does for a task on lanes of gpus:
// those the GPUs list now, each with what it holds on each.
func processesOn(b *sim.Backend, gpus []string, pids ...int) func() []GPUProcess {
	return func() []GPUProcess {
		var out []GPUProcess
		for _, uuid := range gpus {
			procs, _ := b.Processes(uuid)
			for _, p := range procs {
				if !slices.Contains(pids, p.PID) {
					continue
				}
				k := slices.IndexFunc(out, func(q GPUProcess) bool { return q.PID == p.PID })
				if k < 0 {
					k = len(out)
					out = append(out, GPUProcess{PID: p.PID, MiB: map[string]uint64{}})
				}
				out[k].MiB[uuid] += p.UsedMemoryMiB
			}
		}
		return out
	}
}

// twoGPUBackend is a simulated GPU backend of two T4s, GPU-a and GPU-b.
func twoGPUBackend(t *testing.T) (*sim.Backend, string) {
	t.Helper()
	dir := t.TempDir()
	fleet := filepath.Join(dir, "fleet.json")
	must.NoError(t, os.WriteFile(fleet, []byte(`{"gpus":[{"uuid": "GPU-a", "model": "Tesla T4", "memory_mib": 16384},
		{"uuid": "GPU-b", "model": "Tesla T4", "memory_mib": 16384}]}`), 0o644))
	state := filepath.Join(dir, "state")
	b, err := sim.New(fleet, state)
	must.NoError(t, err)
	return b, state
}

// laggingListing lists as first the first time, as after from then on;
// listed says whether the first listing was taken.
func laggingListing(first, after func() []GPUProcess) (func() []GPUProcess, *atomic.Bool) {
	listed := &atomic.Bool{}
	return func() []GPUProcess {
		if !listed.Swap(true) {
			return first()
		}
		return after()
	}, listed
}
