package runas

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/caravan-gpu/caravan/driver/devices"
	"github.com/caravan-gpu/caravan/gpu"
	"github.com/caravan-gpu/caravan/gpu/sim"
)

// helperEnv makes TestHelperOpenGPUs the command these tests run.
const helperEnv = "CARAVAN_RUNAS_TEST_HELPER"

// TestHelperOpenGPUs is not a test: it is the command the test below runs
// through the subcommand. Its arguments after "--" are a sim state dir and
// GPU UUIDs; it prints its user and devices cgroup, then each GPU and what
// sim.OpenDevice said.
func TestHelperOpenGPUs(t *testing.T) {
	if os.Getenv(helperEnv) == "" {
		t.Skip("the command of TestRunJoinsTheDevicesCgroup")
	}
	args := flag.Args()
	fmt.Printf("uid %d\n", os.Getuid())
	if data, err := os.ReadFile("/proc/self/cgroup"); err == nil {
		for line := range strings.Lines(string(data)) {
			if _, path, ok := strings.Cut(line, ":devices:"); ok {
				fmt.Printf("devices %s", path)
			}
		}
	}
	for _, uuid := range args[1:] {
		if err := sim.OpenDevice(args[0], uuid); err != nil {
			fmt.Printf("%s %v\n", uuid, err)
		} else {
			fmt.Printf("%s ok\n", uuid)
		}
	}
	os.Exit(0)
}

// copyExecutable copies the test binary where a user other than root can
// run it: t.TempDir's parents are root's alone.
func copyExecutable(t *testing.T, self, dir string) string {
	t.Helper()
	in, err := os.Open(self)
	must.NoError(t, err)
	defer in.Close()
	path := filepath.Join(dir, filepath.Base(self))
	out, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	must.NoError(t, err)
	_, err = io.Copy(out, in)
	must.NoError(t, err)
	must.NoError(t, out.Close())
	return path
}

// TestRunJoinsTheDevicesCgroup runs a command through the subcommand as the
// executor runs it on a cgroup v1 host, with a devices cgroup that allows
// GPU 0 of a simulated fleet and not GPU 1: the root process joins the
// cgroup before it drops to the task's user, and the command can open the
// one GPU and not the other (nor the MIG instance of the other).
func TestRunJoinsTheDevicesCgroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("cgroups, device nodes and dropping to another user need root")
	}
	b := make([]byte, 6)
	_, err := rand.Read(b)
	must.NoError(t, err)
	cg, err := devices.V1Dir("", "caravan-test-"+hex.EncodeToString(b))
	if err != nil {
		t.Skipf("no cgroup v1 devices controller: %v", err)
	}
	base := t.TempDir()
	for _, d := range []string{base, filepath.Dir(base)} {
		must.NoError(t, os.Chmod(d, 0o755))
	}
	state := filepath.Join(base, "state")
	fleet := []gpu.Device{
		{UUID: "GPU-a"},
		{UUID: "GPU-b", MIGEnabled: true},
		{UUID: "MIG-b-0", ParentUUID: "GPU-b"},
	}
	skipped, err := sim.CreateDeviceNodes(state, fleet)
	must.NoError(t, err)
	if skipped != "" {
		t.Skip(skipped)
	}

	minor, err := simMinor(fleet, "GPU-a")
	must.NoError(t, err)
	rules, err := devices.Rules([]int{minor}, 0)
	must.NoError(t, err)
	t.Cleanup(func() { must.NoError(t, devices.RemoveV1(cg)) })
	must.NoError(t, devices.ApplyV1(cg, rules))

	self, err := os.Executable()
	must.NoError(t, err)
	command := copyExecutable(t, self, base)
	run := func(devicesCgroup string) (string, error) {
		argv := CommandWithDevices(self, 80123, 80124, base, devicesCgroup,
			[]string{command, "-test.run=^TestHelperOpenGPUs$", "--", state, "GPU-a", "GPU-b", "MIG-b-0"})
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = Env([]string{"PATH=" + defaultPath, helperEnv + "=1"})
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return out.String(), err
	}

	out, err := run(cg)
	must.NoError(t, err, must.Sprint(out))
	t.Logf("in devices cgroup %s:\n%s", cg, out)
	must.StrContains(t, out, "uid 80123\n")
	must.StrContains(t, out, "devices /"+filepath.Base(cg)+"\n")
	must.StrContains(t, out, "GPU-a ok\n")
	for _, uuid := range []string{"GPU-b", "MIG-b-0"} {
		must.StrContains(t, out, uuid+" CUDA error: no CUDA-capable device is detected: GPU "+uuid)
	}
	must.StrContains(t, out, "may not be opened by this process: operation not permitted\n")

	// Without the cgroup, every GPU opens.
	out, err = run("")
	must.NoError(t, err, must.Sprint(out))
	for _, uuid := range []string{"GPU-a", "GPU-b", "MIG-b-0"} {
		must.StrContains(t, out, uuid+" ok\n")
	}

	// A cgroup it cannot join runs nothing.
	out, err = run(base)
	must.Error(t, err)
	must.StrContains(t, out, "not a cgroup v1 directory")
	must.StrNotContains(t, out, "uid ")
}

func simMinor(fleet []gpu.Device, uuid string) (int, error) {
	minors, err := sim.DeviceMinors(fleet)
	if err != nil {
		return 0, err
	}
	return minors[uuid], nil
}
