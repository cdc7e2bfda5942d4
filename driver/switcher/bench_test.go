package switcher

import (
	"context"
	"os/exec"
	"testing"

	"github.com/caravan-gpu/caravan/driver/proctree"
)

// BenchmarkSuspendResumeSIGSTOP measures one suspend and one resume of a
// task reached by signals (the fallback for a task without a cgroup), each
// until the kernel reports the new state. driver/cgroup's
// BenchmarkFreezeThaw measures the cgroup path.
func BenchmarkSuspendResumeSIGSTOP(b *testing.B) {
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	pids := []int{cmd.Process.Pid}
	procs := proctree.Signals{Root: pids[0]}
	m := Freeze{}
	ctx := context.Background()
	until := func(stopped bool) {
		for {
			p, err := proctree.Read(pids[0])
			if err != nil {
				b.Fatal(err)
			}
			if (p.State == 'T') == stopped {
				return
			}
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := m.Suspend(ctx, procs, nil); err != nil {
			b.Fatal(err)
		}
		until(true)
		if _, err := m.Resume(ctx, procs, nil); err != nil {
			b.Fatal(err)
		}
		until(false)
	}
}
