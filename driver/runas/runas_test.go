package runas

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shoenig/test/must"
)

func TestParseArgs(t *testing.T) {
	cases := []struct {
		name    string
		args    []string
		devices string
		wantErr string
	}{
		{"ok", []string{"80001", "80001", "/task", "--", "sh", "-c", "true"}, "", ""},
		{"devices cgroup", []string{"--devices-cgroup=/sys/fs/cgroup/devices/caravan/a.t", "80001", "80001", "/task", "--", "sh", "-c", "true"},
			"/sys/fs/cgroup/devices/caravan/a.t", ""},
		{"relative devices cgroup", []string{"--devices-cgroup=caravan/a.t", "80001", "80001", "/task", "--", "sh"}, "", "absolute"},
		{"unclean devices cgroup", []string{"--devices-cgroup=/sys/fs/cgroup/devices/../x", "80001", "80001", "/task", "--", "sh"}, "", "clean"},
		{"empty devices cgroup", []string{"--devices-cgroup=", "80001", "80001", "/task", "--", "sh"}, "", "absolute"},
		{"devices cgroup not first", []string{"80001", "--devices-cgroup=/x", "80001", "/task", "--", "sh"}, "", "usage"},
		{"no command", []string{"80001", "80001", "/task", "--"}, "", "usage"},
		{"no separator", []string{"80001", "80001", "/task", "sh", "-c"}, "", "usage"},
		{"root", []string{"0", "80001", "/task", "--", "sh"}, "", "uid"},
		{"root group", []string{"80001", "0", "/task", "--", "sh"}, "", "gid"},
		{"not a number", []string{"nobody", "80001", "/task", "--", "sh"}, "", "uid"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			inv, err := parseArgs(c.args)
			if c.wantErr != "" {
				must.ErrorContains(t, err, c.wantErr)
				return
			}
			must.NoError(t, err)
			must.Eq(t, invocation{uid: 80001, gid: 80001, taskDir: "/task", devicesCgroup: c.devices,
				argv: []string{"sh", "-c", "true"}}, inv)
		})
	}
}

func TestCommandWithDevices(t *testing.T) {
	argv := []string{"train", "--epochs", "3"}
	plain := Command("/bin/driver", 80001, 80002, "/task", argv)
	must.Eq(t, []string{"/bin/driver", SubCommand, "80001", "80002", "/task", "--", "train", "--epochs", "3"}, plain)
	must.Eq(t, plain, CommandWithDevices("/bin/driver", 80001, 80002, "/task", "", argv))
	with := CommandWithDevices("/bin/driver", 80001, 80002, "/task", "/sys/fs/cgroup/devices/caravan/a.t", argv)
	must.Eq(t, []string{"/bin/driver", SubCommand, "--devices-cgroup=/sys/fs/cgroup/devices/caravan/a.t",
		"80001", "80002", "/task", "--", "train", "--epochs", "3"}, with)
	inv, err := parseArgs(with[2:])
	must.NoError(t, err)
	must.Eq(t, "/sys/fs/cgroup/devices/caravan/a.t", inv.devicesCgroup)
	must.Eq(t, argv, inv.argv)
}

func TestEnvRoundTrip(t *testing.T) {
	env := []string{"PATH=/usr/bin:/bin", "LD_PRELOAD=/x.so", "EMPTY=", "EQ=a=b"}
	hidden := Env(env)
	for _, v := range hidden {
		must.StrHasPrefix(t, envPrefix, v)
	}
	// What the root process gets besides is dropped.
	must.Eq(t, env, restoreEnv(append([]string{"HOME=/root"}, hidden...)))
}

func FuzzEnvRoundTrip(f *testing.F) {
	f.Add("A=1", "B=", "=x")
	f.Fuzz(func(t *testing.T, a, b, c string) {
		env := []string{a, b, c}
		got := restoreEnv(Env(env))
		if strings.Join(got, "\x00") != strings.Join(env, "\x00") {
			t.Fatalf("%q came back as %q", env, got)
		}
	})
}

func TestLookupFollowsTheExecutor(t *testing.T) {
	dir := t.TempDir()
	must.NoError(t, os.MkdirAll(filepath.Join(dir, "local"), 0o755))
	must.NoError(t, os.WriteFile(filepath.Join(dir, "local", "train"), []byte("#!/bin/sh\n"), 0o755))
	must.NoError(t, os.WriteFile(filepath.Join(dir, "top"), []byte("#!/bin/sh\n"), 0o755))
	cases := []struct {
		bin, want, wantErr string
	}{
		{"train", filepath.Join(dir, "local", "train"), ""},
		{"top", filepath.Join(dir, "top"), ""},
		{"/bin/sh", "/bin/sh", ""},
		{"sh", "", ""}, // from PATH, wherever the host has it
		{"no-such-binary", "", "executable file not found"},
		{"../escape", "", "not in the task dir"},
	}
	for _, c := range cases {
		t.Run(c.bin, func(t *testing.T) {
			got, err := lookup(dir, c.bin, defaultPath)
			if c.wantErr != "" {
				must.ErrorContains(t, err, c.wantErr)
				return
			}
			must.NoError(t, err)
			if c.want != "" {
				must.Eq(t, c.want, got)
			}
		})
	}
}

// TestRunDropsToTheUserAndHidesTheEnvFromRoot runs the test binary as the
// subcommand, as the executor runs the driver's binary.
func TestRunDropsToTheUserAndHidesTheEnvFromRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("dropping to another user needs root")
	}
	self, err := os.Executable()
	must.NoError(t, err)
	dir := t.TempDir()
	// A preload that cannot be loaded makes the loader complain once per
	// program it starts with it: only the command may get it, never the
	// root process before it.
	env := Env([]string{"PATH=" + defaultPath, "FOO=bar baz", "LD_PRELOAD=/nonexistent/caravan-preload.so"})
	run := func(argv ...string) (string, string) {
		cmd := exec.Command(self, Command(self, 80123, 80124, dir, argv)[1:]...)
		cmd.Env = env
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		must.NoError(t, cmd.Run(), must.Sprint(stderr.String()))
		return stdout.String(), stderr.String()
	}
	out, errs := run("id")
	must.Eq(t, "uid=80123 gid=80124 groups=80124\n", out)
	must.Eq(t, 1, strings.Count(errs, "caravan-preload.so"), must.Sprint(errs))
	out, _ = run("env")
	must.StrContains(t, out, "FOO=bar baz\n")
	must.StrNotContains(t, out, envPrefix)
}

func TestRunRefusesRoot(t *testing.T) {
	self, err := os.Executable()
	must.NoError(t, err)
	cmd := exec.Command(self, SubCommand, "0", "0", t.TempDir(), "--", "id")
	out, err := cmd.CombinedOutput()
	must.Error(t, err)
	must.StrContains(t, string(out), "must be a number above 0")
}

// A user of the user database keeps its supplementary groups, as Nomad's
// executor would give them; a list that is not group IDs is refused.
func TestRunKeepsTheGroupsItIsGiven(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("dropping to another user needs root")
	}
	self, err := os.Executable()
	must.NoError(t, err)
	argv := CommandAs(self, Credential{UID: 80123, GID: 80124, Groups: []int{80124, 80200}}, t.TempDir(), "", []string{"id"})
	must.SliceContains(t, argv, "--groups=80124,80200")
	cmd := exec.Command(self, argv[1:]...)
	cmd.Env = Env([]string{"PATH=" + defaultPath})
	out, err := cmd.CombinedOutput()
	must.NoError(t, err, must.Sprint(string(out)))
	must.Eq(t, "uid=80123 gid=80124 groups=80124,80200\n", string(out))

	for _, bad := range []string{"--groups=", "--groups=0", "--groups=1,x"} {
		_, err := parseArgs([]string{bad, "80001", "80001", "/task", "--", "sh"})
		must.ErrorContains(t, err, "groups", must.Sprint(bad))
	}
	inv, err := parseArgs([]string{"--devices-cgroup=/sys/fs/cgroup/devices/caravan/a.t", "--groups=7,8", "80001", "80001", "/task", "--", "sh"})
	must.NoError(t, err)
	must.Eq(t, []int{7, 8}, inv.groups)
	must.Eq(t, "/sys/fs/cgroup/devices/caravan/a.t", inv.devicesCgroup)
}
