package devices

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/shoenig/test/must"
	"golang.org/x/sys/unix"
)

// helperEnv makes TestHelperOpen the child these tests start; helperJoin
// has it join a v1 devices cgroup first, as driver/runas does.
const (
	helperEnv  = "CARAVAN_DEVICES_TEST_HELPER"
	helperJoin = "CARAVAN_DEVICES_TEST_JOIN"
)

// TestHelperOpen is not a test: it is the child process of the tests
// below. It opens each path after "--" read-write and prints the path and
// "ok" or the errno's name.
func TestHelperOpen(t *testing.T) {
	if os.Getenv(helperEnv) == "" {
		t.Skip("the child process of the cgroup tests")
	}
	if dir := os.Getenv(helperJoin); dir != "" {
		if err := JoinV1(dir); err != nil {
			fmt.Println("join:", err)
			os.Exit(2)
		}
	}
	for _, p := range flag.Args() {
		fd, err := unix.Open(p, unix.O_RDWR|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
		var errno syscall.Errno
		switch {
		case err == nil:
			unix.Close(fd)
			fmt.Println(p, "ok")
		case errors.As(err, &errno):
			fmt.Println(p, unix.ErrnoName(errno))
		default:
			fmt.Println(p, err)
		}
	}
	os.Exit(0)
}

// openIn runs TestHelperOpen on paths, set up by setup, and returns what
// each open gave.
func openIn(t *testing.T, setup func(*exec.Cmd), paths ...string) map[string]string {
	t.Helper()
	self, err := os.Executable()
	must.NoError(t, err)
	cmd := exec.Command(self, append([]string{"-test.run=^TestHelperOpen$", "--"}, paths...)...)
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	setup(cmd)
	out, err := cmd.CombinedOutput()
	must.NoError(t, err, must.Sprint(string(out)))
	got := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		if p, res, ok := strings.Cut(sc.Text(), " "); ok && strings.HasPrefix(p, "/") {
			got[p] = res
		}
	}
	return got
}

// gpuNodes makes dir/nvidia<minor> for each minor: c 195:minor.
func gpuNodes(t *testing.T, minors ...int) []string {
	t.Helper()
	dir := t.TempDir()
	var paths []string
	for _, m := range minors {
		p := filepath.Join(dir, fmt.Sprintf("nvidia%d", m))
		if err := unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(NvidiaMajor, uint32(m)))); err != nil {
			t.Skipf("cannot make device nodes here: %v", err)
		}
		paths = append(paths, p)
	}
	return paths
}

func testName(t *testing.T) string {
	b := make([]byte, 6)
	_, err := rand.Read(b)
	must.NoError(t, err)
	return "caravan-test-" + hex.EncodeToString(b)
}

// TestApplyV1HoldsAProcessThatJoins sets a v1 devices cgroup that allows
// GPU 0 and not GPU 1, and has a child join it before it opens both:
// without a kernel driver for major 195, the allowed open gets ENXIO from
// the driver lookup, the refused one EPERM from the cgroup check before it.
func TestApplyV1HoldsAProcessThatJoins(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("cgroups and device nodes need root")
	}
	dir, err := V1Dir("", testName(t))
	if err != nil {
		t.Skipf("no cgroup v1 devices controller: %v", err)
	}
	t.Cleanup(func() { must.NoError(t, RemoveV1(dir)) })
	nodes := gpuNodes(t, 0, 1)

	rules, err := Rules([]int{0}, 0)
	must.NoError(t, err)
	must.NoError(t, ApplyV1(dir, rules))
	list, err := os.ReadFile(filepath.Join(dir, "devices.list"))
	must.NoError(t, err)
	must.StrContains(t, string(list), "c 195:0 rw\n")
	must.StrNotContains(t, string(list), "c 195:1 ")
	// Applied again (a restarted task), nothing changes.
	must.NoError(t, Apply(dir, rules))

	got := openIn(t, func(cmd *exec.Cmd) { cmd.Env = append(cmd.Env, helperJoin+"="+dir) }, nodes[0], nodes[1], "/dev/null")
	must.Eq(t, map[string]string{nodes[0]: "ENXIO", nodes[1]: "EPERM", "/dev/null": "ok"}, got)
	// Outside the cgroup both reach the (missing) driver.
	got = openIn(t, func(*exec.Cmd) {}, nodes[0], nodes[1])
	must.Eq(t, map[string]string{nodes[0]: "ENXIO", nodes[1]: "ENXIO"}, got)
	// Its only process has exited.
	must.NoError(t, RemoveV1(dir))
	_, err = os.Stat(dir)
	must.ErrorIs(t, err, os.ErrNotExist)
}

// cgroup2Mount is where a cgroup v2 hierarchy is mounted: /sys/fs/cgroup on
// a v2 host, /sys/fs/cgroup/unified on a hybrid one.
func cgroup2Mount() string {
	data, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return ""
	}
	for line := range strings.Lines(string(data)) {
		if f := strings.Fields(line); len(f) > 2 && f[2] == "cgroup2" {
			return f[1]
		}
	}
	return ""
}

// TestApplyV2HoldsAProcessStartedInTheCgroup attaches the device filter to
// a cgroup v2 directory and starts a child in it as Nomad's executor does
// (clone3 with CLONE_INTO_CGROUP). A hybrid host's /sys/fs/cgroup/unified
// runs the program as a v2 host does: the kernel runs the cgroup's BPF
// programs before the v1 controller's check.
func TestApplyV2HoldsAProcessStartedInTheCgroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("cgroups, eBPF and device nodes need root")
	}
	mnt := cgroup2Mount()
	if mnt == "" {
		t.Skip("no cgroup v2 hierarchy is mounted")
	}
	dir := filepath.Join(mnt, testName(t))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("cannot make a cgroup v2 directory: %v", err)
	}
	// The programs go with the cgroup.
	t.Cleanup(func() { must.NoError(t, unix.Rmdir(dir)) })
	nodes := gpuNodes(t, 0, 1)
	rules, err := Rules([]int{1}, 0)
	must.NoError(t, err)
	if err := ApplyV2(dir, rules); err != nil {
		if strings.Contains(err.Error(), "BPF_PROG_QUERY") || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EINVAL) {
			t.Skipf("this kernel cannot attach cgroup device programs: %v", err)
		}
		must.NoError(t, err)
	}
	first, err := AttachedPrograms(dir)
	must.NoError(t, err)
	must.SliceLen(t, 1, first)

	fd, err := unix.Open(dir, unix.O_PATH|unix.O_CLOEXEC, 0)
	must.NoError(t, err)
	defer unix.Close(fd)
	inCgroup := func(cmd *exec.Cmd) {
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	}
	got := openIn(t, inCgroup, nodes[0], nodes[1], "/dev/null")
	must.Eq(t, map[string]string{nodes[0]: "EPERM", nodes[1]: "ENXIO", "/dev/null": "ok"}, got)

	// Applied again (a restarted task, another grant), the program is
	// replaced: one is attached, and it allows the new grant.
	rules, err = Rules([]int{0}, 0)
	must.NoError(t, err)
	must.NoError(t, Apply(dir, rules))
	second, err := AttachedPrograms(dir)
	must.NoError(t, err)
	must.SliceLen(t, 1, second)
	must.NotEq(t, first[0], second[0])
	got = openIn(t, inCgroup, nodes[0], nodes[1])
	must.Eq(t, map[string]string{nodes[0]: "ENXIO", nodes[1]: "EPERM"}, got)
}

// BenchmarkApply is what holding a task to its GPUs adds to its start: a
// fresh v1 devices cgroup made, set and removed, and a BPF device program
// loaded and attached to a fresh v2 cgroup, each allowing 2 GPUs of 8.
func BenchmarkApply(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("cgroups and eBPF need root")
	}
	rules, err := Rules([]int{2, 5}, 0)
	if err != nil {
		b.Fatal(err)
	}
	name := func() string {
		r := make([]byte, 6)
		_, _ = rand.Read(r)
		return "caravan-bench-" + hex.EncodeToString(r)
	}
	b.Run("v1", func(b *testing.B) {
		if _, err := V1Dir("", "probe"); err != nil {
			b.Skipf("no cgroup v1 devices controller: %v", err)
		}
		for b.Loop() {
			dir, _ := V1Dir("", name())
			if err := ApplyV1(dir, rules); err != nil {
				b.Fatal(err)
			}
			if err := RemoveV1(dir); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("v2", func(b *testing.B) {
		mnt := cgroup2Mount()
		if mnt == "" {
			b.Skip("no cgroup v2 hierarchy is mounted")
		}
		for b.Loop() {
			dir := filepath.Join(mnt, name())
			if err := os.Mkdir(dir, 0o755); err != nil {
				b.Skipf("cannot make a cgroup v2 directory: %v", err)
			}
			err := ApplyV2(dir, rules)
			_ = unix.Rmdir(dir)
			if err != nil {
				b.Skipf("cannot attach a device program here: %v", err)
			}
		}
	})
}
