package cgroup

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shoenig/test/must"
	"github.com/shoenig/test/wait"

	"github.com/caravan-gpu/caravan/driver/proctree"
)

func TestParseEvents(t *testing.T) {
	cases := []struct {
		name    string
		data    string
		want    map[string]bool
		wantErr string
	}{
		{"kernel output", "populated 1\nfrozen 0\n", map[string]bool{"populated": true, "frozen": false}, ""},
		{"no trailing newline", "populated 0\nfrozen 1", map[string]bool{"populated": false, "frozen": true}, ""},
		{"empty", "", map[string]bool{}, ""},
		{"no value", "populated\n", nil, "not a key and a value"},
		{"bad value", "frozen 2\n", nil, "neither 0 nor 1"},
		{"no key", " 1\n", nil, "not a key and a value"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseEvents(c.data)
			if c.wantErr != "" {
				must.ErrorContains(t, err, c.wantErr)
				return
			}
			must.NoError(t, err)
			must.Eq(t, c.want, got)
		})
	}
}

func TestParseFreezerState(t *testing.T) {
	cases := []struct {
		data    string
		want    bool
		wantErr bool
	}{
		{"FROZEN\n", true, false},
		{"FREEZING\n", true, false},
		{"THAWED\n", false, false},
		{"thawed", false, true},
		{"", false, true},
	}
	for _, c := range cases {
		t.Run(strings.TrimSpace(c.data), func(t *testing.T) {
			got, err := ParseFreezerState(c.data)
			if c.wantErr {
				must.ErrorContains(t, err, "freezer.state")
				return
			}
			must.NoError(t, err)
			must.Eq(t, c.want, got)
		})
	}
}

func FuzzParseEvents(f *testing.F) {
	f.Add("populated 1\nfrozen 0\n")
	f.Add("frozen 1")
	f.Add(" \n\n x 0")
	f.Fuzz(func(t *testing.T, data string) {
		events, err := ParseEvents(data)
		if err != nil {
			return
		}
		// Every key parsed is on a line of its own, with 0 or 1.
		for key, v := range events {
			want := key + " 0"
			if v {
				want = key + " 1"
			}
			if !strings.Contains(data, want) {
				t.Fatalf("%q parsed as %s, which it does not hold", data, want)
			}
		}
	})
}

func FuzzParseFreezerState(f *testing.F) {
	f.Add("FROZEN\n")
	f.Add("THAWED")
	f.Fuzz(func(t *testing.T, data string) {
		frozen, err := ParseFreezerState(data)
		if err == nil && frozen != (strings.TrimSpace(data) != "THAWED") {
			t.Fatalf("%q parsed as frozen=%v", data, frozen)
		}
	})
}

func TestOpenRefusesWhatIsNoFreezableCgroup(t *testing.T) {
	plain := t.TempDir()
	must.NoError(t, os.WriteFile(filepath.Join(plain, "cgroup.procs"), nil, 0o644))
	cases := []struct {
		name, dir, want string
	}{
		{"empty", "", "no directory"},
		{"missing", filepath.Join(t.TempDir(), "nope"), "no such file"},
		{"no freezer", plain, "neither cgroup.freeze"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Open(c.dir)
			must.ErrorContains(t, err, c.want)
		})
	}
}

// hierarchy is a mounted cgroup hierarchy in which a test makes its own
// cgroups.
type hierarchy struct {
	name  string
	mount string
}

// hierarchies finds the v2 hierarchy and the v1 freezer hierarchy, where
// mounted (a hybrid host has both).
func hierarchies(t testing.TB) []hierarchy {
	t.Helper()
	f, err := os.Open("/proc/self/mounts")
	if err != nil {
		t.Skipf("no /proc/self/mounts: %v", err)
	}
	defer f.Close()
	var out []hierarchy
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 4 {
			continue
		}
		switch {
		case fields[2] == "cgroup2":
			out = append(out, hierarchy{MethodV2, fields[1]})
		case fields[2] == "cgroup" && slices.Contains(strings.Split(fields[3], ","), "freezer"):
			out = append(out, hierarchy{MethodV1Freeze, fields[1]})
		}
	}
	return out
}

// forEachHierarchy runs test in a fresh cgroup of every hierarchy, and skips
// the hierarchies where this process cannot make one.
func forEachHierarchy(t *testing.T, test func(t *testing.T, g *Group)) {
	hs := hierarchies(t)
	if len(hs) == 0 {
		t.Skip("no cgroup v2 or v1 freezer hierarchy is mounted")
	}
	for _, h := range hs {
		t.Run(h.name, func(t *testing.T) {
			test(t, newGroup(t, h.mount))
		})
	}
}

// newGroup makes a cgroup under parent that is removed after the test, or
// skips the test when cgroups cannot be written here (not root, a read-only
// /sys/fs/cgroup in a container).
func newGroup(t testing.TB, parent string) *Group {
	t.Helper()
	dir, err := os.MkdirTemp(parent, "caravan-test-")
	if err != nil {
		t.Skipf("cgroups are not writable here: %v", err)
	}
	t.Cleanup(func() { removeGroup(dir) })
	g, err := Open(dir)
	if err != nil {
		t.Skipf("cgroup %s cannot be frozen: %v", dir, err)
	}
	return g
}

// removeGroup kills what is left in dir and removes it and the cgroups
// below it, deepest first.
func removeGroup(dir string) {
	if g, err := Open(dir); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = g.Kill(ctx)
		_ = g.Thaw(ctx)
	}
	var dirs []string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		_ = os.Remove(dirs[i])
	}
}

// startIn starts sh -c script with its process in the cgroup at dir before
// the script runs: sh waits for a line on stdin, which comes once it has
// been moved.
func startIn(t testing.TB, dir, script string, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sh", "-c", "read _; "+script)
	cmd.Env = append(os.Environ(), env...)
	stdin, err := cmd.StdinPipe()
	must.NoError(t, err)
	must.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		t.Skipf("cannot move a process into cgroup %s: %v", dir, err)
	}
	_, err = io.WriteString(stdin, "go\n")
	must.NoError(t, err)
	return cmd
}

// counterScript counts in a file as fast as its sleeps let it, so that a
// test sees whether it runs.
const counterScript = `echo $$ > "$DIR/pid"; i=0; while :; do i=$((i+1)); echo $i > "$DIR/count.tmp"; mv "$DIR/count.tmp" "$DIR/count"; sleep 0.01; done`

// escapeScript starts counterScript in a new session from a child that
// exits at once, so that the counter leaves the main process's tree and
// process group (re-parented to init), then waits.
const escapeScript = `sh -c 'setsid sh "$DIR/counter.sh" &'; exec sleep 300`

// escaped starts a task whose counter escapes its process tree in the
// cgroup g and returns the task's main process and the counter's PID.
func escaped(t *testing.T, g *Group) (*exec.Cmd, int, string) {
	t.Helper()
	dir := t.TempDir()
	must.NoError(t, os.WriteFile(filepath.Join(dir, "counter.sh"), []byte(counterScript), 0o755))
	main := startIn(t, g.Dir(), escapeScript, "DIR="+dir)
	var pid int
	must.Wait(t, waitFor(func() bool {
		data, err := os.ReadFile(filepath.Join(dir, "pid"))
		pid, _ = strconv.Atoi(strings.TrimSpace(string(data)))
		return err == nil && pid > 0 && count(t, dir) > 0
	}))
	t.Cleanup(func() { kill(pid) })
	return main, pid, dir
}

func count(t testing.TB, dir string) int {
	data, err := os.ReadFile(filepath.Join(dir, "count"))
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	return n
}

func TestSetsidEscapeIsListedFrozenAndKilled(t *testing.T) {
	forEachHierarchy(t, func(t *testing.T, g *Group) {
		ctx := context.Background()
		main, pid, dir := escaped(t, g)

		// The counter really left: not in the main process's tree, another
		// session and process group.
		mainProc, err := proctree.Read(main.Process.Pid)
		must.NoError(t, err)
		counter, err := proctree.Read(pid)
		must.NoError(t, err)
		must.SliceNotContains(t, proctree.PIDs(proctree.Tree(main.Process.Pid)), pid)
		must.NotEq(t, mainProc.PGID, counter.PGID)
		must.NotEq(t, main.Process.Pid, counter.PPID)

		pids, err := g.PIDs()
		must.NoError(t, err)
		must.SliceContains(t, pids, main.Process.Pid)
		must.SliceContains(t, pids, pid)

		must.NoError(t, g.Freeze(ctx))
		frozen, err := g.Frozen()
		must.NoError(t, err)
		must.True(t, frozen)
		if g.Method() == MethodV1Freeze {
			// The v1 freezer parks its processes uninterruptibly.
			p, err := proctree.Read(pid)
			must.NoError(t, err)
			must.Eq(t, byte('D'), p.State)
		}
		before := count(t, dir)
		time.Sleep(300 * time.Millisecond)
		must.Eq(t, before, count(t, dir), must.Sprint("the escaped counter ran while its cgroup was frozen"))

		must.NoError(t, g.Thaw(ctx))
		frozen, err = g.Frozen()
		must.NoError(t, err)
		must.False(t, frozen)
		must.Wait(t, waitFor(func() bool { return count(t, dir) > before+3 }))

		killCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		must.NoError(t, g.Kill(killCtx))
		pids, err = g.PIDs()
		must.NoError(t, err)
		must.SliceEmpty(t, pids)
		// An exiting process leaves cgroup.procs before it is a zombie.
		must.Wait(t, waitFor(func() bool { return !alive(pid) }), must.Sprintf("escaped pid %d outlived the kill", pid))
		_ = main.Wait()
		must.Eq(t, -1, main.ProcessState.ExitCode()) // killed by a signal
	})
}

func TestKillFrozenCgroup(t *testing.T) {
	forEachHierarchy(t, func(t *testing.T, g *Group) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, pid, _ := escaped(t, g)
		must.NoError(t, g.Freeze(ctx))
		must.NoError(t, g.Kill(ctx))
		must.Wait(t, waitFor(func() bool { return !alive(pid) }))
	})
}

// TestKillWithoutCgroupKill takes the freeze, kill, thaw path that v1 and v2
// kernels before 5.14 need, on v2 too.
func TestKillWithoutCgroupKill(t *testing.T) {
	forEachHierarchy(t, func(t *testing.T, g *Group) {
		g.noKillFile = true
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		// A fork bomb of sorts: each process starts another before dying.
		startIn(t, g.Dir(), `while :; do sleep 0.001 & wait; done & while :; do (sleep 300 &) ; sleep 0.005; done`)
		time.Sleep(100 * time.Millisecond)
		must.NoError(t, g.Kill(ctx))
		pids, err := g.PIDs()
		must.NoError(t, err)
		must.SliceEmpty(t, pids)
	})
}

func TestPIDsListsChildCgroups(t *testing.T) {
	forEachHierarchy(t, func(t *testing.T, g *Group) {
		child := filepath.Join(g.Dir(), "inner")
		must.NoError(t, os.Mkdir(child, 0o755))
		outer := startIn(t, g.Dir(), "exec sleep 300")
		inner := startIn(t, child, "exec sleep 300")
		pids, err := g.PIDs()
		must.NoError(t, err)
		must.Eq(t, sorted(outer.Process.Pid, inner.Process.Pid), pids)
	})
}

func TestFreezeAnEmptyCgroup(t *testing.T) {
	forEachHierarchy(t, func(t *testing.T, g *Group) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		must.NoError(t, g.Freeze(ctx))
		frozen, err := g.Frozen()
		must.NoError(t, err)
		must.True(t, frozen)
		must.NoError(t, g.Thaw(ctx))
		must.NoError(t, g.Kill(ctx))
	})
}

func sorted(pids ...int) []int {
	slices.Sort(pids)
	return pids
}

// alive reports whether pid runs: a zombie, which init has not reaped yet,
// does not.
func alive(pid int) bool {
	p, err := proctree.Read(pid)
	return err == nil && p.State != 'Z'
}

func waitFor(ok func() bool) *wait.Constraint {
	return wait.InitialSuccess(wait.BoolFunc(ok), wait.Timeout(10*time.Second), wait.Gap(10*time.Millisecond))
}

func kill(pid int) {
	if p, err := os.FindProcess(pid); err == nil {
		_ = p.Kill()
	}
}

// BenchmarkFreezeThaw measures one freeze, until the kernel reports the
// cgroup frozen, and one thaw, of a cgroup of N sleeping processes.
func BenchmarkFreezeThaw(b *testing.B) {
	hs := hierarchies(b)
	if len(hs) == 0 {
		b.Skip("no cgroup v2 or v1 freezer hierarchy is mounted")
	}
	for _, h := range hs {
		for _, n := range []int{1, 10, 100} {
			b.Run(fmt.Sprintf("%s/procs=%d", h.name, n), func(b *testing.B) {
				g := newGroup(b, h.mount)
				startIn(b, g.Dir(), fmt.Sprintf("i=1; while [ $i -lt %d ]; do sleep 600 & i=$((i+1)); done; exec sleep 600", n))
				must.Wait(b, waitFor(func() bool {
					pids, err := g.PIDs()
					return err == nil && len(pids) == n
				}))
				ctx := context.Background()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if err := g.Freeze(ctx); err != nil {
						b.Fatal(err)
					}
					if err := g.Thaw(ctx); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
