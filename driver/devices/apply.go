package devices

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/opencontainers/cgroups"
	// Sets cgroups.DevicesSetV1 and cgroups.DevicesSetV2.
	_ "github.com/opencontainers/cgroups/devices"
	"github.com/opencontainers/cgroups/devices/config"
	"golang.org/x/sys/unix"
)

// Apply applies rules to the cgroup at dir with ApplyV2 when dir is on a
// cgroup v2 filesystem, else with ApplyV1; a v1 dir that does not exist yet
// is told by its nearest existing parent.
func Apply(dir string, rules []*config.Rule) error {
	magic, err := filesystem(dir)
	if err != nil {
		return err
	}
	if magic == unix.CGROUP2_SUPER_MAGIC {
		return ApplyV2(dir, rules)
	}
	return ApplyV1(dir, rules)
}

// filesystem is the magic number of the cgroup filesystem dir, or its
// nearest existing parent, is on.
func filesystem(dir string) (int64, error) {
	for p := dir; ; p = filepath.Dir(p) {
		var st unix.Statfs_t
		err := unix.Statfs(p, &st)
		if errors.Is(err, unix.ENOENT) && p != filepath.Dir(p) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("devices cgroup %s: %w", dir, err)
		}
		if magic := int64(st.Type); magic == unix.CGROUP2_SUPER_MAGIC || magic == unix.CGROUP_SUPER_MAGIC {
			return magic, nil
		}
		return 0, fmt.Errorf("devices cgroup %s: %s is not on a cgroup filesystem", dir, p)
	}
}

// V1Dir is the cgroup v1 devices cgroup parent/name, under wherever the
// host mounts the devices controller (/sys/fs/cgroup/devices): the driver
// names one per task, parent "caravan" and name "<alloc ID>.<task>" as
// Nomad names the task's other v1 cgroups. It fails where the host has no
// v1 devices controller (cgroup v2, or the controller not mounted).
func V1Dir(parent, name string) (string, error) {
	if parent != "" && (filepath.IsAbs(parent) || !filepath.IsLocal(parent)) {
		return "", fmt.Errorf("devices cgroup parent %q: must be a relative path inside the hierarchy", parent)
	}
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') {
		return "", fmt.Errorf("devices cgroup name %q: must be one path element", name)
	}
	mnt, err := cgroups.FindCgroupMountpoint("", "devices")
	if err != nil {
		return "", fmt.Errorf("no cgroup v1 devices controller: %w", err)
	}
	return filepath.Join(mnt, parent, name), nil
}

// ApplyV1 makes the cgroup v1 devices cgroup at dir, and its parents, when
// missing, and sets rules as its allow list: "a" into devices.deny, then
// each rule into devices.allow (only the changes, where dir had rules
// before). It reads devices.list back and fails unless the kernel holds
// exactly the rules. Processes join it with JoinV1.
func ApplyV1(dir string, rules []*config.Rule) error {
	fail := func(err error) error { return fmt.Errorf("devices cgroup %s: %w", dir, err) }
	if err := validate(rules); err != nil {
		return fail(err)
	}
	// setV1 does nothing at all in a user namespace, where the kernel
	// would refuse the writes.
	if inUserNamespace() {
		return fail(errors.New("the driver runs in a user namespace, where the devices controller cannot be set"))
	}
	if magic, err := filesystem(dir); err != nil {
		return err
	} else if magic != unix.CGROUP_SUPER_MAGIC {
		return fail(errors.New("not in a cgroup v1 hierarchy"))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fail(err)
	}
	if err := checkV1(dir); err != nil {
		return err
	}
	// It fails unless devices.list then lists exactly the rules.
	if err := cgroups.DevicesSetV1(dir, &cgroups.Resources{Devices: rules}); err != nil {
		return fail(err)
	}
	list, err := cgroups.ReadFile(dir, "devices.list")
	if err != nil {
		return fail(err)
	}
	if strings.HasPrefix(list, "a ") || strings.Contains(list, "\na ") {
		return fail(fmt.Errorf("devices.list still allows every device after the rules were written:\n%s", list))
	}
	return nil
}

// inUserNamespace tells whether the process runs in a user namespace that
// does not map every UID, as github.com/moby/sys/userns does.
func inUserNamespace() bool {
	data, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		return false
	}
	return !slices.Equal(strings.Fields(string(data)), []string{"0", "0", "4294967295"})
}

// checkV1 makes sure dir is a directory of a cgroup v1 devices hierarchy.
func checkV1(dir string) error {
	if err := checkFS(dir, unix.CGROUP_SUPER_MAGIC, "cgroup v1"); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(dir, "devices.list")); err != nil {
		return fmt.Errorf("devices cgroup %s: not a cgroup of the v1 devices controller: %w", dir, err)
	}
	return nil
}

func checkFS(dir string, magic int64, what string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fmt.Errorf("devices cgroup %s: %w", dir, err)
	}
	if int64(st.Type) != magic {
		return fmt.Errorf("devices cgroup %s: not a %s directory (filesystem magic %#x)", dir, what, st.Type)
	}
	return nil
}

// JoinV1 moves the calling process, every thread of it, into the cgroup v1
// devices cgroup at dir, and checks that it is there. The task's root
// process calls it before it drops privileges (driver/runas): only root
// may write cgroup.procs there, and the command it then execs cannot leave.
func JoinV1(dir string) error {
	if !filepath.IsAbs(dir) || filepath.Clean(dir) != dir {
		return fmt.Errorf("devices cgroup %q: must be an absolute, clean path", dir)
	}
	if err := checkV1(dir); err != nil {
		return err
	}
	pid := os.Getpid()
	if err := cgroups.WriteCgroupProc(dir, pid); err != nil {
		return fmt.Errorf("devices cgroup %s: join: %w", dir, err)
	}
	pids, err := cgroups.GetPids(dir)
	if err != nil {
		return fmt.Errorf("devices cgroup %s: %w", dir, err)
	}
	if !slices.Contains(pids, pid) {
		return fmt.Errorf("devices cgroup %s: process %d is not in it after joining", dir, pid)
	}
	return nil
}

// RemoveV1 removes the cgroup v1 devices cgroup at dir that ApplyV1 made,
// once its processes have exited (the kernel refuses while any is left; it
// is retried for a second, as the last may still be exiting). A dir that is
// gone already is no error; its parents are left.
func RemoveV1(dir string) error {
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err := checkV1(dir); err != nil {
		return err
	}
	var err error
	for range 20 {
		if err = unix.Rmdir(dir); err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("devices cgroup %s: remove: %w", dir, err)
}

// memlockMu keeps concurrent ApplyV2 calls from saving each other's raised
// RLIMIT_MEMLOCK as the limit to restore.
var memlockMu sync.Mutex

// ApplyV2 attaches the eBPF program (BPF_CGROUP_DEVICE) that allows only
// rules to the cgroup v2 directory dir, which must exist, and detaches the
// programs attached there before (a restarted task's, say), as runc does.
// The new program is attached before the old ones go, so that dir is never
// without a filter; while both are attached the kernel allows only what
// every one of them allows. Processes already in dir, and any started in
// it later, are held to it from their next open. It fails unless exactly
// the new program is attached afterwards.
//
// Loading the program needs root (CAP_SYS_ADMIN or CAP_BPF) and, on
// kernels before 5.11, a memlock allowance: the limit is raised for the
// load and restored after it, so that the driver's processes started later
// do not inherit an unlimited one.
func ApplyV2(dir string, rules []*config.Rule) error {
	fail := func(err error) error { return fmt.Errorf("devices cgroup %s: %w", dir, err) }
	if err := validate(rules); err != nil {
		return fail(err)
	}
	if err := checkFS(dir, unix.CGROUP2_SUPER_MAGIC, "cgroup v2"); err != nil {
		return err
	}
	fd, err := unix.Open(dir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fail(err)
	}
	defer unix.Close(fd)
	before, err := attachedPrograms(fd)
	if err != nil {
		return fail(err)
	}
	memlockMu.Lock()
	var memlock unix.Rlimit
	limitErr := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &memlock)
	// setV2 ignores a load or attach error when every rule allows rwm or
	// the driver runs in a user namespace, as runc may run a container
	// without the filter then; the check of the attached programs below
	// makes that an error here.
	err = cgroups.DevicesSetV2(dir, &cgroups.Resources{Devices: rules})
	if limitErr == nil {
		_ = unix.Setrlimit(unix.RLIMIT_MEMLOCK, &memlock)
	}
	memlockMu.Unlock()
	if err != nil {
		return fail(err)
	}
	after, err := attachedPrograms(fd)
	if err != nil {
		return fail(err)
	}
	var added []uint32
	for _, id := range after {
		if !slices.Contains(before, id) {
			added = append(added, id)
		}
	}
	if len(added) != 1 {
		return fail(fmt.Errorf("not one new device filter program attached (programs %v before, %v after)", before, after))
	}
	// setV2 leaves the old program attached where there was one: its
	// BPF_F_REPLACE is lost in cilium/ebpf v0.17's RawAttachProgram
	// (cilium/ebpf#1994), and the kernel appends instead.
	for _, id := range before {
		if !slices.Contains(after, id) {
			continue
		}
		if err := detachProgram(fd, id); err != nil {
			return fail(fmt.Errorf("detach the old device filter program %d: %w", id, err))
		}
	}
	now, err := attachedPrograms(fd)
	if err != nil {
		return fail(err)
	}
	if !slices.Equal(now, added) {
		return fail(fmt.Errorf("device filter programs %v attached, want only the new %v", now, added))
	}
	return nil
}

// AttachedPrograms lists the IDs of the BPF_CGROUP_DEVICE programs attached
// to the cgroup v2 directory dir itself (not those of its parents).
func AttachedPrograms(dir string) ([]uint32, error) {
	fd, err := unix.Open(dir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	return attachedPrograms(fd)
}

// bpf calls bpf(2) with attr, one of union bpf_attr's members.
func bpf[T any](cmd int, attr *T) (uintptr, error) {
	r, _, errno := unix.Syscall(unix.SYS_BPF, uintptr(cmd), uintptr(unsafe.Pointer(attr)), unsafe.Sizeof(*attr))
	if errno != 0 {
		return 0, errno
	}
	return r, nil
}

func attachedPrograms(dirFD int) ([]uint32, error) {
	// The head of BPF_PROG_QUERY's member; the kernel leaves what follows
	// (each program's flags and links) alone.
	type progQuery struct {
		targetFD    uint32
		attachType  uint32
		queryFlags  uint32
		attachFlags uint32
		progIDs     uint64
		progCount   uint32
		_           uint32
	}
	// 64 is the most programs the kernel attaches to one cgroup and hook.
	ids := make([]uint32, 64)
	q := progQuery{
		targetFD:   uint32(dirFD),
		attachType: unix.BPF_CGROUP_DEVICE,
		progIDs:    uint64(uintptr(unsafe.Pointer(&ids[0]))),
		progCount:  uint32(len(ids)),
	}
	_, err := bpf(unix.BPF_PROG_QUERY, &q)
	runtime.KeepAlive(ids)
	if err != nil {
		return nil, fmt.Errorf("bpf(BPF_PROG_QUERY, BPF_CGROUP_DEVICE): %w", err)
	}
	return ids[:q.progCount], nil
}

// detachProgram detaches the BPF_CGROUP_DEVICE program id from the cgroup
// dirFD.
func detachProgram(dirFD int, id uint32) error {
	byID := struct{ id, nextID, openFlags uint32 }{id: id}
	prog, err := bpf(unix.BPF_PROG_GET_FD_BY_ID, &byID)
	if err != nil {
		return fmt.Errorf("bpf(BPF_PROG_GET_FD_BY_ID, %d): %w", id, err)
	}
	defer unix.Close(int(prog))
	detach := struct{ targetFD, attachFD, attachType, attachFlags uint32 }{
		targetFD: uint32(dirFD), attachFD: uint32(prog), attachType: unix.BPF_CGROUP_DEVICE,
	}
	if _, err := bpf(unix.BPF_PROG_DETACH, &detach); err != nil {
		return fmt.Errorf("bpf(BPF_PROG_DETACH, %d): %w", id, err)
	}
	return nil
}
