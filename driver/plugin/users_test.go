package plugin

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/plugins/drivers"
	dtestutil "github.com/hashicorp/nomad/plugins/drivers/testutils"
	"github.com/shoenig/test/must"
	"github.com/shoenig/test/wait"
)

// dynamicUserTask is a task that runs script as the dynamic workload user
// name, as the Nomad client asks when the driver takes dynamic users.
func dynamicUserTask(t *testing.T, h *dtestutil.DriverHarness, name, user, script string) *drivers.TaskConfig {
	t.Helper()
	cfg := newTask(t, h, name, TaskConfig{Command: "/bin/sh", Args: []string{"-c", script}}, nil)
	cfg.User = user
	cfg.Env["NOMAD_TASK_DIR"] = cfg.TaskDir().LocalDir
	// The harness makes its alloc dir 0700; Nomad's own are traversable.
	must.NoError(t, os.Chmod(filepath.Dir(cfg.AllocDir), 0o755))
	must.NoError(t, os.Chmod(cfg.AllocDir, 0o755))
	return cfg
}

func TestCapabilitiesOfferDynamicUsersOnlyWhenConfigured(t *testing.T) {
	for _, on := range []bool{false, true} {
		h, _ := newHarness(t, Config{DynamicUsers: on})
		caps, err := h.Capabilities()
		must.NoError(t, err)
		must.Eq(t, on, caps.DynamicWorkloadUsers)
	}
}

func TestDynamicUserRunsTaskAndExecAsItsOwnUID(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("running tasks as other users needs root")
	}
	h, _ := newHarness(t, Config{DynamicUsers: true})
	cfg := dynamicUserTask(t, h, "own", "nomad-80101", `id -u; id -g; id -G; echo "$USER $HOME"; touch "$NOMAD_TASK_DIR/mine"; exec sleep 30`)
	_, _, err := h.StartTask(cfg)
	must.NoError(t, err)
	must.NoError(t, h.WaitUntilStarted(cfg.ID, 5*time.Second))
	must.Eq(t, "80101\n80101\n80101\nnomad-80101 /nonexistent\n", waitLog(t, cfg, "stdout", "/nonexistent\n"))

	// An exec session runs as the task's user too, not as root.
	res, err := h.ExecTask(cfg.ID, []string{"id", "-u"}, 5*time.Second)
	must.NoError(t, err)
	must.Eq(t, "80101", strings.TrimSpace(string(res.Stdout)))

	// The script touches the file after its echo; on a loaded machine
	// that can come after the exec session.
	mine := filepath.Join(cfg.TaskDir().LocalDir, "mine")
	var st os.FileInfo
	must.Wait(t, wait.InitialSuccess(wait.ErrorFunc(func() (err error) {
		st, err = os.Stat(mine)
		return err
	}), wait.Timeout(5*time.Second), wait.Gap(20*time.Millisecond)))
	must.Eq(t, uint32(80101), st.Sys().(*syscall.Stat_t).Uid)
	must.NoError(t, h.StopTask(cfg.ID, time.Second, "SIGKILL"))
}

// TestTasksOfDynamicUsersCannotSignalEachOther: each task has a UID of its
// own, so one task's kill(2) of another task's process is refused.
func TestTasksOfDynamicUsersCannotSignalEachOther(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("running tasks as other users needs root")
	}
	h, _ := newHarness(t, Config{DynamicUsers: true})
	victim := dynamicUserTask(t, h, "victim", "nomad-80201", `echo $$ > "$NOMAD_TASK_DIR/pid"; exec sleep 30`)
	_, _, err := h.StartTask(victim)
	must.NoError(t, err)
	pidFile := filepath.Join(victim.TaskDir().LocalDir, "pid")
	deadline := time.Now().Add(5 * time.Second)
	for _, err := os.Stat(pidFile); err != nil && time.Now().Before(deadline); _, err = os.Stat(pidFile) {
		time.Sleep(20 * time.Millisecond)
	}
	attacker := dynamicUserTask(t, h, "attacker", "nomad-80202", `kill -TERM "$(cat "`+pidFile+`")"`)
	_, _, err = h.StartTask(attacker)
	must.NoError(t, err)
	res := waitExit(t, h, attacker.ID, 10*time.Second)
	must.NotEq(t, 0, res.ExitCode)
	must.StrContains(t, readLog(t, attacker, "stderr"), "not permitted")
	status, err := h.InspectTask(victim.ID)
	must.NoError(t, err)
	must.Eq(t, drivers.TaskStateRunning, status.State)
	must.NoError(t, h.StopTask(victim.ID, time.Second, "SIGKILL"))
}

func TestDynamicUserRefusedUnlessConfiguredAndNeverRoot(t *testing.T) {
	cases := []struct {
		dynamic bool
		user    string
		want    string
	}{
		{false, "nomad-80101", "dynamic_users = false"},
		{true, "nomad-0", "would be root"},
		{true, "nomad-x", "not a user on this node"},
		{true, "nomad-80101", ""},
	}
	for _, c := range cases {
		t.Run(c.user, func(t *testing.T) {
			s, err := Config{DynamicUsers: c.dynamic}.parse()
			must.NoError(t, err)
			got, err := resolveUser(s, c.user)
			if c.want != "" {
				must.ErrorContains(t, err, c.want)
				return
			}
			must.NoError(t, err)
			must.Eq(t, c.user, got)
		})
	}
}

func TestUIDLeasesGiveEachAllocationItsOwnUID(t *testing.T) {
	r := uidRange{70000, 70002}
	var l uidLeases
	a, err := l.lease(r, "", "alloc-a", "")
	must.NoError(t, err)
	again, err := l.lease(r, "", "alloc-a", "")
	must.NoError(t, err)
	must.Eq(t, a, again) // tasks of one allocation share its UID
	b, err := l.lease(r, "", "alloc-b", "")
	must.NoError(t, err)
	c, err := l.lease(r, "", "alloc-c", "")
	must.NoError(t, err)
	must.NotEq(t, a, b)
	must.NotEq(t, b, c)
	must.NotEq(t, a, c)
	for _, uid := range []int{a, b, c} {
		must.Between(t, 70000, uid, 70002)
	}
	_, err = l.lease(r, "", "alloc-d", "")
	must.ErrorContains(t, err, "every UID of uid_range 70000-70002 is held")

	// A UID comes back only when no task of its allocation holds it.
	b2, err := l.lease(r, "", "alloc-b", "")
	must.NoError(t, err)
	must.Eq(t, b, b2)
	user := func(uid int) string { return "nomad-" + strconv.Itoa(uid) }
	l.release(r, "alloc-b", user(b))
	_, err = l.lease(r, "", "alloc-d", "")
	must.Error(t, err)                     // one task of alloc-b still holds it
	l.release(r, "alloc-b", "nomad-80001") // not a UID of the range: no hold
	l.release(r, "alloc-b", user(b))
	d, err := l.lease(r, "", "alloc-d", "")
	must.NoError(t, err)
	must.Eq(t, b, d)

	// A recovered task holds its UID again.
	var fresh uidLeases
	must.NoError(t, fresh.recover(r, "", "alloc-a", "", "nomad-70001"))
	must.NoError(t, fresh.recover(r, "", "alloc-x", "", "nomad-80001")) // not the driver's
	got, err := fresh.lease(r, "", "alloc-a", "")
	must.NoError(t, err)
	must.Eq(t, 70001, got)
	must.MapLen(t, 1, fresh.byAlloc)
	must.Eq(t, 2, fresh.byAlloc["alloc-a"].tasks) // recovered, then leased again
}

func TestAJobMayNotNameAUIDOfTheRange(t *testing.T) {
	s, err := Config{DynamicUsers: true, UIDRange: "70000-79999", StateDir: t.TempDir()}.parse()
	must.NoError(t, err)
	d := New(context.Background(), hclog.NewNullLogger())
	_, err = d.taskUser(s, &drivers.TaskConfig{AllocID: "a", User: "nomad-70005"})
	must.ErrorContains(t, err, "uid_range")
	got, err := d.taskUser(s, &drivers.TaskConfig{AllocID: "a", User: "nomad-80005"})
	must.NoError(t, err)
	must.Eq(t, "nomad-80005", got)
	got, err = d.taskUser(s, &drivers.TaskConfig{AllocID: "a"})
	must.NoError(t, err)
	must.StrHasPrefix(t, "nomad-7", got)
}

// Tasks of two allocations that name no user, on a client that gives no
// dynamic users, run as two UIDs of uid_range: one's kill -9 -1 leaves the
// other running, and cannot read its environment.
func TestAllocationsOfTheUIDRangeCannotSignalOrReadEachOther(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("running tasks as other users needs root")
	}
	h, _ := newHarness(t, Config{UIDRange: "70000-79999"})
	victim := dynamicUserTask(t, h, "victim", "", `echo $$ > "$NOMAD_TASK_DIR/pid"; exec sleep 30`)
	victim.Env["SECRET"] = "victims-secret"
	_, _, err := h.StartTask(victim)
	must.NoError(t, err)
	pidFile := filepath.Join(victim.TaskDir().LocalDir, "pid")
	must.Wait(t, wait.InitialSuccess(wait.ErrorFunc(func() error { _, err := os.Stat(pidFile); return err }),
		wait.Timeout(5*time.Second), wait.Gap(20*time.Millisecond)))
	attacker := dynamicUserTask(t, h, "attacker", "",
		`id -u; if grep -q victims-secret "/proc/$(cat "`+pidFile+`")/environ"; then echo read-it; fi; kill -9 -1; exit 0`)
	_, _, err = h.StartTask(attacker)
	must.NoError(t, err)
	waitExit(t, h, attacker.ID, 10*time.Second)
	out := readLog(t, attacker, "stdout")
	must.StrNotContains(t, out, "read-it")
	uid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(out, "\n", 2)[0]))
	must.NoError(t, err, must.Sprint(out))
	must.Between(t, 70000, uid, 79999)
	time.Sleep(200 * time.Millisecond)
	status, err := h.InspectTask(victim.ID)
	must.NoError(t, err)
	must.Eq(t, drivers.TaskStateRunning, status.State, must.Sprint(readLog(t, victim, "stderr")))
	must.NoError(t, h.StopTask(victim.ID, time.Second, "SIGKILL"))
}

// A UID stays its allocation's while the allocation's directory exists,
// across the end of its tasks and a driver restart; once Nomad has
// collected the directory, the UID goes to another allocation.
func TestUIDLeasesOutliveTasksAndRestartsUntilTheAllocIsCollected(t *testing.T) {
	r := uidRange{70000, 70001}
	dir := filepath.Join(t.TempDir(), "uids")
	must.NoError(t, os.Mkdir(dir, 0o700))
	allocA, allocB := t.TempDir(), t.TempDir()

	var before uidLeases
	a, err := before.lease(r, dir, "alloc-a", allocA)
	must.NoError(t, err)
	before.release(r, "alloc-a", "nomad-"+strconv.Itoa(a)) // its last task ends

	var after uidLeases // the driver restarted
	b, err := after.lease(r, dir, "alloc-b", allocB)
	must.NoError(t, err)
	must.NotEq(t, a, b)
	_, err = after.lease(r, dir, "alloc-c", t.TempDir())
	must.ErrorContains(t, err, "not collected yet")
	again, err := after.lease(r, dir, "alloc-a", allocA) // a's task restarts
	must.NoError(t, err)
	must.Eq(t, a, again)
	after.release(r, "alloc-a", "nomad-"+strconv.Itoa(a))

	must.NoError(t, os.RemoveAll(allocA)) // Nomad collects alloc-a
	c, err := after.lease(r, dir, "alloc-c", t.TempDir())
	must.NoError(t, err)
	must.Eq(t, a, c)
	data, err := os.ReadFile(filepath.Join(dir, strconv.Itoa(c)))
	must.NoError(t, err)
	must.StrContains(t, string(data), `"alloc_id":"alloc-c"`)
}
