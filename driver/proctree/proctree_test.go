package proctree

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

func TestParseStat(t *testing.T) {
	cases := []struct {
		name, in string
		want     Proc
		wantErr  bool
	}{
		{"plain", "42 (python3) S 1 42 42 0 -1", Proc{PID: 42, Comm: "python3", State: 'S', PPID: 1, PGID: 42}, false},
		{"spaces and parens", "7 (my (odd) proc) T 3 5 5 0", Proc{PID: 7, Comm: "my (odd) proc", State: 'T', PPID: 3, PGID: 5}, false},
		{"no comm", "7 python S 1 1", Proc{}, true},
		{"short", "7 (x) S", Proc{}, true},
		{"bad ppid", "7 (x) S y 1", Proc{}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseStat(c.in)
			if c.wantErr {
				must.Error(t, err)
				return
			}
			must.NoError(t, err)
			must.Eq(t, c.want, got)
		})
	}
}

func TestTreeOfFollowsChildrenAndProcessGroup(t *testing.T) {
	procs := []Proc{
		{PID: 1, PPID: 0, PGID: 1},
		{PID: 10, PPID: 1, PGID: 10},  // task
		{PID: 11, PPID: 10, PGID: 10}, // child
		{PID: 12, PPID: 11, PGID: 12}, // grandchild in its own group
		{PID: 13, PPID: 1, PGID: 10},  // orphan still in the task's group
		{PID: 14, PPID: 10, PGID: 10, State: 'Z'},
		{PID: 20, PPID: 1, PGID: 20}, // unrelated
	}
	must.Eq(t, []int{10, 11, 12, 13}, PIDs(TreeOf(procs, 10)))
	must.Nil(t, TreeOf(procs, 99))
}

func TestTreeSeesRealChildren(t *testing.T) {
	cmd := exec.Command("/bin/sh", "-c", "sleep 30 & wait")
	must.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var tree []Proc
	for i := 0; i < 200 && len(tree) < 2; i++ {
		tree = Tree(cmd.Process.Pid)
		time.Sleep(10 * time.Millisecond)
	}
	must.SliceLen(t, 2, tree)
	must.Eq(t, cmd.Process.Pid, tree[0].PID)
	must.Eq(t, os.Getpid(), tree[0].PPID)
}

func FuzzParseStat(f *testing.F) {
	f.Add("42 (python3) S 1 42 42 0 -1")
	f.Add("7 (a) b) T 3 5 5")
	f.Add(")(")
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParseStat(s)
		if err == nil && p.State == 0 {
			t.Fatalf("parsed %q without a state", s)
		}
	})
}

func TestSignalsIgnoreExitedProcesses(t *testing.T) {
	cmd := exec.Command("true")
	must.NoError(t, cmd.Run())
	procs := Signals{Root: cmd.Process.Pid}
	must.NoError(t, procs.Freeze(context.Background()))
	pids, err := procs.PIDs()
	must.NoError(t, err)
	must.SliceEmpty(t, pids)
}
