package harness

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// killLeftovers kills every process whose command line or working directory
// lies under dir: plugins, executors and tasks that outlived their agent
// because they run in process groups of their own.
func killLeftovers(dir string) {
	for round := 0; round < 10; round++ {
		pids := processesUnder(dir)
		if len(pids) == 0 {
			return
		}
		for _, pid := range pids {
			// A task the driver froze for its lane's turn does not die of
			// SIGKILL until its cgroup is thawed, and its agent, which
			// would thaw it, is gone.
			thaw(pid)
			_ = syscall.Kill(pid, syscall.SIGCONT) // a suspended task ignores SIGKILL until woken on some kernels
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// thaw thaws the freezer cgroup pid is in, cgroup v1 or v2, if any.
func thaw(pid int) {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cgroup"))
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(data), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 || parts[2] == "/" || parts[2] == "" {
			continue
		}
		switch {
		case parts[1] == "freezer":
			_ = os.WriteFile(filepath.Join("/sys/fs/cgroup/freezer", parts[2], "freezer.state"), []byte("THAWED"), 0)
		case parts[0] == "0" && parts[1] == "":
			_ = os.WriteFile(filepath.Join("/sys/fs/cgroup", parts[2], "cgroup.freeze"), []byte("0"), 0)
		}
	}
}

func processesUnder(dir string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		cwd, _ := os.Readlink(filepath.Join("/proc", e.Name(), "cwd"))
		if strings.Contains(string(cmdline), dir) || strings.HasPrefix(cwd, dir) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// ProcessesUnder lists live processes tied to dir; tests use it to prove that
// teardown left nothing behind.
func ProcessesUnder(dir string) []int { return processesUnder(dir) }

// unmountUnder detaches every mount below dir: the secrets and private
// tmpfs of allocations that were still running when the client stopped,
// which would otherwise outlive the cluster and keep its directory.
func unmountUnder(dir string) {
	data, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return
	}
	prefix := strings.TrimSuffix(dir, "/") + "/"
	var points []string
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) >= 2 && strings.HasPrefix(fields[1], prefix) {
			points = append(points, fields[1])
		}
	}
	// Deepest first.
	for i := len(points) - 1; i >= 0; i-- {
		_ = syscall.Unmount(points[i], syscall.MNT_DETACH)
	}
}
