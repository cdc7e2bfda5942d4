package sim

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/caravan-gpu/caravan/gpu"
)

// The simulated GPUs are opened, as real ones are, through character
// device nodes: stateDir/dev/nvidia<N>, with NVIDIA's major and the GPU's
// minor, so that the kernel's device cgroup check (the v1 devices
// controller, or a v2 BPF_CGROUP_DEVICE program), which the driver sets up
// for each task from its grant, decides which simulated GPUs a task may
// use, never the task's environment. No kernel driver has the major where
// the sim runs, so an open the cgroup allows fails with ENXIO (the cgroup
// is checked before the driver is looked up), and one it refuses fails
// with EPERM.

// NvidiaMajor is the major of /dev/nvidia<N>.
const NvidiaMajor = 195

// maxMinor is the highest GPU minor: 254 and 255 are nvidia-modeset and
// nvidiactl.
const maxMinor = 253

// ErrNoDevice is what a process gets for a GPU it may not open, as CUDA
// reports cudaErrorNoDevice when the device cgroup hides every GPU.
var ErrNoDevice = errors.New("CUDA error: no CUDA-capable device is detected")

// devDir holds the nodes, byUUID the links to them by GPU UUID.
func devDir(stateDir string) string { return filepath.Join(stateDir, "dev") }

func byUUIDDir(stateDir string) string { return filepath.Join(devDir(stateDir), "by-uuid") }

// NodePath is the device node of the GPU with minor.
func NodePath(stateDir string, minor int) string {
	return filepath.Join(devDir(stateDir), "nvidia"+strconv.Itoa(minor))
}

// DeviceMinors gives each device its node's minor: the physical GPUs are
// numbered 0, 1, ... in the order the fleet lists them (Fleet.Devices), as
// /dev/nvidia<N> are on a host whose GPUs are numbered in bus order; a MIG
// instance is opened through its parent's node, as on a real host (the
// nvidia-caps that tell MIG instances apart are not simulated).
func DeviceMinors(devs []gpu.Device) (map[string]int, error) {
	minors := map[string]int{}
	next := 0
	for _, d := range devs {
		if d.IsMIG() {
			continue
		}
		if next > maxMinor {
			return nil, fmt.Errorf("sim: GPU %s: more than %d GPUs have no /dev/nvidia<N> minor", d.UUID, maxMinor+1)
		}
		minors[d.UUID] = next
		next++
	}
	for _, d := range devs {
		if !d.IsMIG() {
			continue
		}
		m, ok := minors[d.ParentUUID]
		if !ok {
			return nil, fmt.Errorf("sim: MIG instance %s: no parent GPU %s", d.UUID, d.ParentUUID)
		}
		minors[d.UUID] = m
	}
	return minors, nil
}

// DeviceMinor is the minor of uuid's node (DeviceMinors).
func (b *Backend) DeviceMinor(uuid string) (int, error) {
	devs, err := b.Devices()
	if err != nil {
		return 0, err
	}
	minors, err := DeviceMinors(devs)
	if err != nil {
		return 0, err
	}
	m, ok := minors[uuid]
	if !ok {
		return 0, fmt.Errorf("%w: %s", gpu.ErrUnknownDevice, uuid)
	}
	return m, nil
}

// CreateDeviceNodes makes the fleet's device nodes (CreateDeviceNodes).
func (b *Backend) CreateDeviceNodes() (skipped string, err error) {
	devs, err := b.Devices()
	if err != nil {
		return "", err
	}
	return CreateDeviceNodes(b.stateDir, devs)
}

// CreateDeviceNodes makes stateDir/dev/nvidia<N> (character device
// NvidiaMajor:N, mode 0666) for each physical GPU of devs, and
// stateDir/dev/by-uuid/<UUID> a link to the node of each device (a MIG
// instance's to its parent's), removing the nodes and links of devices no
// longer in devs. It needs root, and the device plugin or driver that calls
// it runs as root. dev/ is root's and no one else may write it: a task
// that could change the links could point a GPU it was not granted at
// /dev/null.
//
// Where nodes cannot be made it makes none and skipped says why (not root,
// the state dir's filesystem mounted nodev, mknod refused), and OpenDevice
// then lets every process open every GPU.
func CreateDeviceNodes(stateDir string, devs []gpu.Device) (skipped string, err error) {
	minors, err := DeviceMinors(devs)
	if err != nil {
		return "", err
	}
	if os.Geteuid() != 0 {
		return "device nodes need root (mknod), and this process is uid " + strconv.Itoa(os.Geteuid()), nil
	}
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		return "", fmt.Errorf("sim: state_dir: %w", err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(stateDir, &st); err != nil {
		return "", fmt.Errorf("sim: state_dir: %w", err)
	}
	if st.Flags&unix.ST_NODEV != 0 {
		return "the state dir " + stateDir + " is on a filesystem mounted nodev, where device nodes cannot be opened", nil
	}
	dir, links := devDir(stateDir), byUUIDDir(stateDir)
	for _, d := range []string{dir, links} {
		if err := rootOnlyDir(d); err != nil {
			return "", err
		}
	}
	want := map[string]bool{}
	for _, m := range minors {
		name := filepath.Base(NodePath(stateDir, m))
		if want[name] {
			continue
		}
		want[name] = true
		if err := mknod(NodePath(stateDir, m), m); err != nil {
			if errors.Is(err, unix.EPERM) && len(want) == 1 {
				// None made: leave no dev/ for OpenDevice to hold GPUs to.
				if err := os.RemoveAll(dir); err != nil {
					return "", fmt.Errorf("sim: %w", err)
				}
				return "mknod is refused here (no CAP_MKNOD, or a devices cgroup that denies it): " + err.Error(), nil
			}
			return "", err
		}
	}
	for uuid, m := range minors {
		if strings.ContainsRune(uuid, '/') || uuid == "." || uuid == ".." {
			return "", fmt.Errorf("sim: GPU UUID %q cannot name a file", uuid)
		}
		want["by-uuid/"+uuid] = true
		if err := replaceLink(filepath.Join(links, uuid), "../"+filepath.Base(NodePath(stateDir, m))); err != nil {
			return "", err
		}
	}
	// Nodes and links of GPUs that are gone.
	for _, sub := range []string{"", "by-uuid/"} {
		entries, err := os.ReadDir(filepath.Join(dir, sub))
		if err != nil {
			return "", fmt.Errorf("sim: %w", err)
		}
		for _, e := range entries {
			if e.IsDir() || want[sub+e.Name()] || strings.Contains(e.Name(), tmpSuffix) {
				continue
			}
			if err := os.Remove(filepath.Join(dir, sub, e.Name())); err != nil {
				return "", fmt.Errorf("sim: %w", err)
			}
		}
	}
	return "", nil
}

// rootOnlyDir makes dir (mode 0755, root's), or checks that the one there
// is a directory that only root may change.
func rootOnlyDir(dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("sim: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return fmt.Errorf("sim: %s: %w", dir, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Uid != 0 || st.Mode&0o022 != 0 {
		return fmt.Errorf("sim: %s must be a directory that only root can write (uid %d, mode %#o): remove it", dir, st.Uid, st.Mode)
	}
	return nil
}

// mknod makes path the character device NvidiaMajor:minor, mode 0666,
// keeping a node that already is one (made by the device plugin or the
// driver, whichever came first: both may call CreateDeviceNodes).
func mknod(path string, minor int) error {
	dev := unix.Mkdev(NvidiaMajor, uint32(minor))
	isNode := func() bool {
		var st unix.Stat_t
		return unix.Lstat(path, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == dev &&
			st.Mode&0o7777 == 0o666 && st.Uid == 0
	}
	if isNode() {
		return nil
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("sim: %w", err)
	}
	if err := unix.Mknod(path, unix.S_IFCHR|0o666, int(dev)); errors.Is(err, unix.EEXIST) && isNode() {
		return nil
	} else if err != nil {
		return fmt.Errorf("sim: mknod %s c %d %d: %w", path, NvidiaMajor, minor, err)
	}
	// The umask took the write bits for group and others; chmod does not
	// go through it (changing the umask would, for the whole process).
	if err := os.Chmod(path, 0o666); err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	return nil
}

// tmpSuffix marks a link being made, which CreateDeviceNodes leaves to the
// process that makes it.
const tmpSuffix = ".new-"

// replaceLink points path at target, replacing what was there in one step.
func replaceLink(path, target string) error {
	if cur, err := os.Readlink(path); err == nil && cur == target {
		return nil
	}
	tmp := path + tmpSuffix + strconv.Itoa(os.Getpid())
	_ = os.Remove(tmp)
	if err := os.Symlink(target, tmp); err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("sim: %w", err)
	}
	return nil
}

// OpenDevice opens the GPU uuid, as the CUDA runtime opens /dev/nvidia<N>
// before a process's first allocation: through its device node in
// stateDir, which the calling process's device cgroup may refuse. Refused,
// it is ErrNoDevice wrapping the EPERM and naming the GPU. ENXIO, which
// every allowed open gets where no kernel driver has NvidiaMajor, is
// success, as is an open that succeeds (a host with an NVIDIA driver).
//
// Where CreateDeviceNodes made no nodes (stateDir/dev is missing) every GPU
// opens: device isolation is not simulated there.
func OpenDevice(stateDir, uuid string) error {
	if _, err := os.Lstat(devDir(stateDir)); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if !fileName(uuid) {
		return fmt.Errorf("%w: GPU %q", ErrNoDevice, uuid)
	}
	path := filepath.Join(byUUIDDir(stateDir), uuid)
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	switch {
	case err == nil:
		var st unix.Stat_t
		serr := unix.Fstat(fd, &st)
		unix.Close(fd)
		if serr != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR || unix.Major(st.Rdev) != NvidiaMajor {
			return fmt.Errorf("%w: GPU %s: %s is not a GPU device node", ErrNoDevice, uuid, path)
		}
		return nil
	case errors.Is(err, unix.ENXIO):
		return nil
	case errors.Is(err, unix.EPERM):
		return fmt.Errorf("%w: GPU %s (%s) may not be opened by this process: %w", ErrNoDevice, uuid, path, err)
	case errors.Is(err, unix.ENOENT):
		return fmt.Errorf("%w: GPU %s has no device node in %s: %w", ErrNoDevice, uuid, devDir(stateDir), err)
	}
	return fmt.Errorf("%w: GPU %s: open %s: %w", ErrNoDevice, uuid, path, err)
}
