package sim

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/shoenig/test/must"
	"golang.org/x/sys/unix"

	"github.com/caravan-gpu/caravan/gpu"
)

func TestDeviceMinorsNumberPhysicalGPUsInFleetOrder(t *testing.T) {
	f, err := ParseFleet([]byte(`{"gpus": [
		{"uuid": "GPU-a", "model": "A100", "memory_mib": 40960, "mig": [{"profile": "1g.5gb", "memory_mib": 4864}, {"profile": "1g.5gb", "memory_mib": 4864}]},
		{"uuid": "GPU-h", "count": 2, "model": "H100", "memory_mib": 81920}
	]}`))
	must.NoError(t, err)
	devs := f.Devices()
	minors, err := DeviceMinors(devs)
	must.NoError(t, err)
	must.Eq(t, map[string]int{
		"GPU-a": 0, "MIG-a-0": 0, "MIG-a-1": 0, // MIG instances open their parent
		"GPU-h-00": 1, "GPU-h-01": 2,
	}, minors)

	_, err = DeviceMinors([]gpu.Device{{UUID: "MIG-x-0", ParentUUID: "GPU-x"}})
	must.ErrorContains(t, err, "no parent GPU GPU-x")
	many := make([]gpu.Device, maxMinor+2)
	for i := range many {
		many[i].UUID = "GPU-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
	}
	_, err = DeviceMinors(many)
	must.ErrorContains(t, err, "more than 254 GPUs")
}

func TestOpenDeviceWithoutNodesOpensEveryGPU(t *testing.T) {
	must.NoError(t, OpenDevice(t.TempDir(), "GPU-any"))
}

func TestCreateDeviceNodes(t *testing.T) {
	state := t.TempDir()
	devs := []gpu.Device{{UUID: "GPU-a"}, {UUID: "GPU-b", MIGEnabled: true}, {UUID: "MIG-b-0", ParentUUID: "GPU-b"}}
	skipped, err := CreateDeviceNodes(state, devs)
	must.NoError(t, err)
	if os.Geteuid() != 0 {
		must.StrContains(t, skipped, "need root")
		_, err := os.Stat(filepath.Join(state, "dev"))
		must.ErrorIs(t, err, os.ErrNotExist)
		return
	}
	if skipped != "" {
		t.Skip(skipped)
	}
	for minor, name := range []string{"nvidia0", "nvidia1"} {
		var st unix.Stat_t
		must.NoError(t, unix.Lstat(filepath.Join(state, "dev", name), &st))
		must.Eq(t, uint32(unix.S_IFCHR|0o666), st.Mode)
		must.Eq(t, unix.Mkdev(NvidiaMajor, uint32(minor)), st.Rdev)
		must.Eq(t, NodePath(state, minor), filepath.Join(state, "dev", name))
	}
	for uuid, node := range map[string]string{"GPU-a": "../nvidia0", "GPU-b": "../nvidia1", "MIG-b-0": "../nvidia1"} {
		got, err := os.Readlink(filepath.Join(state, "dev", "by-uuid", uuid))
		must.NoError(t, err)
		must.Eq(t, node, got)
	}
	// Outside any device cgroup that refuses them, every GPU opens: no
	// kernel driver has the major here (ENXIO), or a real one does.
	for _, d := range devs {
		must.NoError(t, OpenDevice(state, d.UUID))
	}
	err = OpenDevice(state, "GPU-z")
	must.ErrorIs(t, err, ErrNoDevice)
	must.ErrorContains(t, err, "GPU GPU-z has no device node")
	must.ErrorIs(t, OpenDevice(state, "../nvidia0"), ErrNoDevice)

	// The fleet shrinks: what is gone goes.
	skipped, err = CreateDeviceNodes(state, devs[:1])
	must.NoError(t, err)
	must.Eq(t, "", skipped)
	entries, err := os.ReadDir(filepath.Join(state, "dev"))
	must.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	must.Eq(t, []string{"by-uuid", "nvidia0"}, names)
	must.ErrorIs(t, OpenDevice(state, "GPU-b"), ErrNoDevice)

	// A node that is not a GPU's is not opened as one.
	link := filepath.Join(state, "dev", "by-uuid", "GPU-a")
	must.NoError(t, os.Remove(link))
	must.NoError(t, os.Symlink("/dev/null", link))
	must.ErrorContains(t, OpenDevice(state, "GPU-a"), "is not a GPU device node")

	// A dev/ that others may write is refused: they could relink a GPU.
	must.NoError(t, os.Chmod(filepath.Join(state, "dev"), 0o777))
	_, err = CreateDeviceNodes(state, devs)
	must.ErrorContains(t, err, "only root can write")
}

func TestBackendDeviceNodes(t *testing.T) {
	dir := t.TempDir()
	fleet := filepath.Join(dir, "fleet.json")
	must.NoError(t, os.WriteFile(fleet, []byte(`{"gpus": [{"uuid": "GPU-h", "count": 2, "model": "H100", "memory_mib": 81920}]}`), 0o644))
	b, err := New(fleet, filepath.Join(dir, "state"))
	must.NoError(t, err)
	m, err := b.DeviceMinor("GPU-h-01")
	must.NoError(t, err)
	must.Eq(t, 1, m)
	_, err = b.DeviceMinor("GPU-x")
	must.ErrorIs(t, err, gpu.ErrUnknownDevice)
	skipped, err := b.CreateDeviceNodes()
	must.NoError(t, err)
	if skipped == "" {
		_, err := os.Lstat(NodePath(filepath.Join(dir, "state"), 1))
		must.NoError(t, err)
	}
}
