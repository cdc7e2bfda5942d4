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
//
// On cgroup v1 the root process also joins the task's devices cgroup
// (CommandWithDevices, driver/devices) before it drops privileges: only
// root may, and the command must already be held to the task's devices
// when it runs, since a device opened before stays open. (On cgroup v2 the
// executor starts the process in the task's cgroup, where the driver has
// attached the device filter already: there is nothing to join.)
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

	"github.com/caravan-gpu/caravan/driver/devices"
)

// SubCommand is the first argument that makes the driver's binary run a
// command as another user.
const SubCommand = "caravan-run-as"

// devicesFlag names the cgroup v1 devices cgroup to join.
const devicesFlag = "--devices-cgroup="

// groupsFlag lists the supplementary groups to keep, for a user of the
// user database; a dynamic workload user has none.
const groupsFlag = "--groups="

// usage is the subcommand's argument forms.
const usage = "usage: " + SubCommand + " [" + devicesFlag + "DIR] [" + groupsFlag + "GID,...] UID GID TASKDIR -- COMMAND [ARGS...]"

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
	return CommandWithDevices(self, uid, gid, taskDir, "", argv)
}

// CommandWithDevices is Command for a task held to the cgroup v1 devices
// cgroup at devicesCgroup (an absolute path; see devices.ApplyV1): the root
// process joins it before it drops to uid:gid, and fails, running nothing,
// where it cannot. An empty devicesCgroup is Command.
func CommandWithDevices(self string, uid, gid int, taskDir, devicesCgroup string, argv []string) []string {
	return CommandAs(self, Credential{UID: uid, GID: gid}, taskDir, devicesCgroup, argv)
}

// Credential is who the command runs as.
type Credential struct {
	UID, GID int
	// Groups are the supplementary groups of a user of the user database,
	// as Nomad's executor would give them; none for a dynamic user.
	Groups []int
}

// CommandAs is CommandWithDevices for a credential with supplementary
// groups.
func CommandAs(self string, cred Credential, taskDir, devicesCgroup string, argv []string) []string {
	out := []string{self, SubCommand}
	if devicesCgroup != "" {
		out = append(out, devicesFlag+devicesCgroup)
	}
	if len(cred.Groups) > 0 {
		ids := make([]string, len(cred.Groups))
		for i, g := range cred.Groups {
			ids[i] = strconv.Itoa(g)
		}
		out = append(out, groupsFlag+strings.Join(ids, ","))
	}
	out = append(out, strconv.Itoa(cred.UID), strconv.Itoa(cred.GID), taskDir, "--")
	return append(out, argv...)
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

// invocation is what the subcommand was asked to do.
type invocation struct {
	uid, gid int
	taskDir  string
	// devicesCgroup is the cgroup v1 devices cgroup to join; empty: none.
	devicesCgroup string
	groups        []int
	argv          []string
}

// parseArgs reads "[--devices-cgroup=DIR] [--groups=GID,...] UID GID
// TASKDIR -- COMMAND [ARGS...]".
func parseArgs(args []string) (inv invocation, err error) {
	if len(args) > 0 {
		if dir, ok := strings.CutPrefix(args[0], devicesFlag); ok {
			if !filepath.IsAbs(dir) || filepath.Clean(dir) != dir {
				return invocation{}, fmt.Errorf("devices cgroup %q: must be an absolute, clean path", dir)
			}
			inv.devicesCgroup, args = dir, args[1:]
		}
	}
	if len(args) > 0 {
		if list, ok := strings.CutPrefix(args[0], groupsFlag); ok {
			for _, f := range strings.Split(list, ",") {
				g, err := strconv.Atoi(f)
				if err != nil || g <= 0 {
					return invocation{}, fmt.Errorf("groups %q: must be numbers above 0, separated by commas", list)
				}
				inv.groups = append(inv.groups, g)
			}
			args = args[1:]
		}
	}
	if len(args) < 5 || args[3] != "--" {
		return invocation{}, errors.New(usage)
	}
	if inv.uid, err = strconv.Atoi(args[0]); err != nil || inv.uid <= 0 {
		return invocation{}, fmt.Errorf("uid %q: must be a number above 0", args[0])
	}
	if inv.gid, err = strconv.Atoi(args[1]); err != nil || inv.gid <= 0 {
		return invocation{}, fmt.Errorf("gid %q: must be a number above 0", args[1])
	}
	inv.taskDir, inv.argv = args[2], args[4:]
	return inv, nil
}

func run(args, environ []string) error {
	inv, err := parseArgs(args)
	if err != nil {
		return err
	}
	uid, gid, taskDir, argv := inv.uid, inv.gid, inv.taskDir, inv.argv
	env := restoreEnv(environ)
	// While still root: the command must start held to its devices.
	if inv.devicesCgroup != "" {
		if err := devices.JoinV1(inv.devicesCgroup); err != nil {
			return err
		}
	}
	// Groups first: once the UID is not root, they can no longer change.
	if err := syscall.Setgroups(inv.groups); err != nil {
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

// Lookup finds the command a task of env (KEY=VALUE entries) would run for
// bin, as the subcommand will, so that a command that is missing fails the
// task's start rather than its run.
func Lookup(taskDir, bin string, env []string) (string, error) {
	return lookup(taskDir, bin, pathOf(env))
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
