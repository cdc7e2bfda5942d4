package lane

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/caravan-gpu/caravan/driver/switcher"
	"github.com/caravan-gpu/caravan/gpu/sim"
	"github.com/shoenig/test/must"
)

// oneProcess freezes a single process with SIGSTOP and SIGCONT, without
// walking /proc for its tree, so that the benchmarks below measure the
// mechanism rather than the process lookup (driver/cgroup's
// BenchmarkFreezeThaw and driver/switcher's BenchmarkSuspendResumeSIGSTOP
// measure those).
type oneProcess struct{ pid int }

func (oneProcess) Method() string { return "one-process" }

func (o oneProcess) Freeze(context.Context) error { return syscall.Kill(o.pid, syscall.SIGSTOP) }

func (o oneProcess) Thaw(context.Context) error { return syscall.Kill(o.pid, syscall.SIGCONT) }

// BenchmarkCheckpointRestoreSim measures one suspend and one resume with
// cuda-checkpoint on the simulated GPU (checkpoint, SIGSTOP; SIGCONT,
// restore), each until /proc shows the new state: the overhead of the
// switch path itself, without the CUDA driver's copy of the GPU memory.
func BenchmarkCheckpointRestoreSim(b *testing.B) {
	be, state := simGPUBackend(b)
	p := startProc(b)
	pid := p.cmd.Process.Pid
	must.NoError(b, sim.SetProcessMemory(state, simGPU, pid, 6000))
	benchSwitch(b, switcher.CUDACheckpoint{GPU: be}, p, []int{pid})
}

// BenchmarkFreezeThawSignals is the same round trip with the freeze
// mechanism, for comparison.
func BenchmarkFreezeThawSignals(b *testing.B) {
	p := startProc(b)
	benchSwitch(b, switcher.Freeze{}, p, nil)
}

func benchSwitch(b *testing.B, m switcher.Mechanism, p *proc, gpuPIDs []int) {
	ctx := context.Background()
	procs := oneProcess{p.cmd.Process.Pid}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ck, err := m.Suspend(ctx, procs, gpuPIDs)
		if err != nil {
			b.Fatal(err)
		}
		for !p.stopped() {
		}
		if _, err := m.Resume(ctx, procs, ck); err != nil {
			b.Fatal(err)
		}
		for p.stopped() {
		}
	}
}

// BenchmarkLaneSwitchSim measures a whole turn change in a time-sliced
// lane with cuda-checkpoint on the simulated GPU: from the start of one
// task's suspend (its 1ms quantum over) to the end of the other's resume,
// as the Switched hook sees them; it includes the lane's scheduling.
func BenchmarkLaneSwitchSim(b *testing.B) {
	be, state := simGPUBackend(b)
	pa, pb := startProc(b), startProc(b)
	ida, idb := pa.cmd.Process.Pid, pb.cmd.Process.Pid
	must.NoError(b, sim.SetProcessMemory(state, simGPU, ida, 6000))
	must.NoError(b, sim.SetProcessMemory(state, simGPU, idb, 6000))
	resumed := make(chan time.Duration, 1024)
	var suspendAt time.Time
	ctx, cancel := context.WithCancel(context.Background())
	var c *Coordinator
	defer func() {
		cancel()
		c.Wait()
	}()
	c = New(ctx, Options{Mechanism: switcher.CUDACheckpoint{GPU: be}, Quantum: time.Millisecond, Hooks: Hooks{
		Switched: func(op, _ string, d time.Duration, err error) {
			if err != nil {
				return
			}
			if op == "suspend" {
				suspendAt = time.Now().Add(-d)
			} else if !suspendAt.IsZero() {
				select {
				case resumed <- time.Since(suspendAt):
				default:
				}
			}
		}}})
	key := Key{GPU: simGPU, Lane: 9}
	c.Join(key, 8000, Member{TaskID: "a", Profile: big, Processes: oneProcess{ida}, GPUProcesses: gpuPIDsOf(be, ida)}, MemberState{})
	c.Join(key, 8000, Member{TaskID: "b", Profile: big, Processes: oneProcess{idb}, GPUProcesses: gpuPIDsOf(be, idb)}, MemberState{})
	b.ResetTimer()
	var total time.Duration
	for i := 0; i < b.N; i++ {
		total += <-resumed
	}
	b.StopTimer()
	b.ReportMetric(float64(total.Microseconds())/float64(b.N), "µs/switch")
}
