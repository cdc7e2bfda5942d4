// Package runas starts a task's command as a user that has no entry in the
// host's user database, such as a Nomad dynamic workload user
// ("nomad-<id>"), which Nomad's executor cannot look up. The driver has the
// executor start the driver's own binary with the SubCommand argument; that
// process, still root, drops to the user's UID and GID (no supplementary
// groups) and execs the task's command.
//
// The root process must not run with the task's environment: its dynamic
// loader would honour a job's LD_PRELOAD. So Env hides every variable under
// a prefix the loader ignores, and the subcommand restores them for the
// command only.
package runas

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/hashicorp/nomad/helper/subproc"
)

// SubCommand is the first argument that makes the driver's binary run a
// command as another user.
const SubCommand = "caravan-run-as"

// envPrefix hides a task's variable from the root process:
// CARAVAN_RUN_AS_ENV_<n>=KEY=VALUE.
const envPrefix = "CARAVAN_RUN_AS_ENV_"

// defaultPath is searched for a command when the task's environment has no
// PATH.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

func init() {
	subproc.Do(SubCommand, func() int {
		err := run(os.Args[2:], os.Environ())
		subproc.Print("%s: %v", SubCommand, err)
		return subproc.ExitNotRunnable
	})
}

// Command is the argv that runs argv as uid:gid through self, the driver's
// binary. A relative command is looked up in taskDir/local, taskDir and the
// task's PATH, as Nomad's executor does.
func Command(self string, uid, gid int, taskDir string, argv []string) []string {
	return append([]string{self, SubCommand, strconv.Itoa(uid), strconv.Itoa(gid), taskDir, "--"}, argv...)
}

// Env hides env (KEY=VALUE entries) from the process that runs as root.
func Env(env []string) []string {
	out := make([]string, len(env))
	for i, kv := range env {
		out[i] = envPrefix + strconv.Itoa(i) + "=" + kv
	}
	return out
}

// restoreEnv undoes Env, keeping the order; variables without the prefix
// are dropped.
func restoreEnv(environ []string) []string {
	type entry struct {
		n  int
		kv string
	}
	var entries []entry
	for _, v := range environ {
		rest, ok := strings.CutPrefix(v, envPrefix)
		if !ok {
			continue
		}
		num, kv, ok := strings.Cut(rest, "=")
		n, err := strconv.Atoi(num)
		if !ok || err != nil {
			continue
		}
		entries = append(entries, entry{n, kv})
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].n < entries[j].n })
	out := make([]string, len(entries))
	for i, e := range entries {
		out[i] = e.kv
	}
	return out
}

// parseArgs reads "UID GID TASKDIR -- COMMAND [ARGS...]".
func parseArgs(args []string) (uid, gid int, taskDir string, argv []string, err error) {
	if len(args) < 5 || args[3] != "--" {
		return 0, 0, "", nil, errors.New("usage: " + SubCommand + " UID GID TASKDIR -- COMMAND [ARGS...]")
	}
	if uid, err = strconv.Atoi(args[0]); err != nil || uid <= 0 {
		return 0, 0, "", nil, fmt.Errorf("uid %q: must be a number above 0", args[0])
	}
	if gid, err = strconv.Atoi(args[1]); err != nil || gid <= 0 {
		return 0, 0, "", nil, fmt.Errorf("gid %q: must be a number above 0", args[1])
	}
	return uid, gid, args[2], args[4:], nil
}

func run(args, environ []string) error {
	uid, gid, taskDir, argv, err := parseArgs(args)
	if err != nil {
		return err
	}
	env := restoreEnv(environ)
	// Groups first: once the UID is not root, they can no longer change.
	if err := syscall.Setgroups(nil); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := syscall.Setgid(gid); err != nil {
		return fmt.Errorf("setgid %d: %w", gid, err)
	}
	if err := syscall.Setuid(uid); err != nil {
		return fmt.Errorf("setuid %d: %w", uid, err)
	}
	if syscall.Getuid() != uid || syscall.Geteuid() != uid || syscall.Getgid() != gid {
		return fmt.Errorf("still uid %d gid %d after dropping to %d:%d", syscall.Geteuid(), syscall.Getgid(), uid, gid)
	}
	path, err := lookup(taskDir, argv[0], pathOf(env))
	if err != nil {
		return err
	}
	return syscall.Exec(path, argv, env)
}

func pathOf(env []string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], "PATH="); ok && v != "" {
			return v
		}
	}
	return defaultPath
}

// lookup finds bin as Nomad's executor does: in the task's local dir, in
// the task dir, as an absolute path, then on path.
func lookup(taskDir, bin, path string) (string, error) {
	for _, p := range []string{filepath.Join(taskDir, "local", bin), filepath.Join(taskDir, bin)} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if filepath.IsAbs(bin) {
		if _, err := os.Stat(bin); err != nil {
			return "", err
		}
		return bin, nil
	}
	if strings.Contains(bin, "/") {
		return "", fmt.Errorf("%q is not in the task dir", bin)
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			continue
		}
		p := filepath.Join(dir, bin)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%q: %w", bin, exec.ErrNotFound)
}
