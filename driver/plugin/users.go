package plugin

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/hashicorp/nomad/helper/users/dynamic"
	"github.com/hashicorp/nomad/plugins/drivers"

	"github.com/caravan-gpu/caravan/driver/runas"
	"github.com/caravan-gpu/caravan/driver/task"
	"github.com/caravan-gpu/caravan/internal/safefile"
)

// uidRange is uid_range parsed; the zero value is none.
type uidRange struct{ min, max int }

func (r uidRange) set() bool { return r.max > 0 }

func (r uidRange) contains(uid int) bool { return r.set() && uid >= r.min && uid <= r.max }

// maxUIDRange bounds uid_range so that a typo cannot hand out system UIDs
// by the million.
const maxUIDRange = 1 << 20

func parseUIDRange(v string) (uidRange, error) {
	if v == "none" {
		return uidRange{}, nil
	}
	lo, hi, ok := strings.Cut(v, "-")
	min, err1 := strconv.Atoi(strings.TrimSpace(lo))
	max, err2 := strconv.Atoi(strings.TrimSpace(hi))
	switch {
	case !ok || err1 != nil || err2 != nil:
		return uidRange{}, fmt.Errorf(`uid_range: must be "MIN-MAX" (such as %q) or "none", got %q`, DefaultUIDRange, v)
	case min < 1000:
		return uidRange{}, fmt.Errorf("uid_range: must start at 1000 or above, clear of system users, got %d", min)
	case max < min:
		return uidRange{}, fmt.Errorf("uid_range: %d-%d is empty", min, max)
	case max > 1<<31-2:
		return uidRange{}, fmt.Errorf("uid_range: %d is past the largest UID", max)
	case max-min >= maxUIDRange:
		return uidRange{}, fmt.Errorf("uid_range: %d-%d holds more than %d UIDs", min, max, maxUIDRange)
	}
	return uidRange{min, max}, nil
}

// taskUser picks the user a task runs as. A task that names no user and got
// no dynamic workload user from the Nomad client gets a UID of its
// allocation's own from uid_range, so that tasks of different allocations
// cannot signal or inspect each other; else default_user. A jobspec may not
// name a UID of uid_range itself: it could be another allocation's.
func (d *Driver) taskUser(s *settings, cfg *drivers.TaskConfig) (string, error) {
	if cfg.User == "" && s.uids.set() {
		uid, err := d.uids.lease(s.uids, uidLeaseDir(s.StateDir), cfg.AllocID, cfg.AllocDir)
		if err != nil {
			return "", err
		}
		return dynamic.String(dynamic.UGID(uid)), nil
	}
	if ugid, err := dynamic.Parse(cfg.User); err == nil && s.uids.contains(int(ugid)) {
		return "", fmt.Errorf("user: %q is in the driver's uid_range %d-%d, which it gives allocations itself; a job may not name one", cfg.User, s.uids.min, s.uids.max)
	}
	return resolveUser(s, cfg.User)
}

// uidLeases are the UIDs of uid_range that allocations hold on this node.
// In memory they are counted by task: taken at a task's start (or
// recovery), given back at its destruction or failed start. On disk, in
// state_dir/uids, each names its allocation and the allocation's
// directory, and holds the UID for as long as that directory exists: the
// allocation's files, owned by the UID, outlive its tasks until Nomad
// collects them, and a task's restart or a driver restart must not hand
// the UID to another allocation meanwhile.
type uidLeases struct {
	mu      sync.Mutex
	byAlloc map[string]*uidLease
}

type uidLease struct{ uid, tasks int }

// uidLeaseRecord is a lease on disk, state_dir/uids/<uid>.
type uidLeaseRecord struct {
	AllocID  string `json:"alloc_id"`
	AllocDir string `json:"alloc_dir"`
}

func uidLeaseDir(stateDir string) string { return filepath.Join(stateDir, "uids") }

// lease takes allocID's UID for one more task: the one it holds, in memory
// or on disk in dir (empty: in memory only), else the first free one from
// a point that allocID hashes to, so that allocations spread over the
// range. A UID is free when no task holds it and no allocation directory
// that a lease on disk names exists.
func (l *uidLeases) lease(r uidRange, dir, allocID, allocDir string) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if have, ok := l.byAlloc[allocID]; ok {
		have.tasks++
		return have.uid, nil
	}
	used := map[int]bool{}
	for _, have := range l.byAlloc {
		used[have.uid] = true
	}
	onDisk, err := readUIDLeases(r, dir)
	if err != nil {
		return 0, err
	}
	for uid, rec := range onDisk {
		switch {
		case rec.AllocID == allocID:
			l.hold(allocID, uid)
			return uid, nil
		case used[uid]:
		case rec.AllocDir != "" && exists(rec.AllocDir):
			used[uid] = true
		default:
			// Its allocation's files are gone: the UID is free again.
			_ = os.Remove(filepath.Join(dir, strconv.Itoa(uid)))
		}
	}
	size := r.max - r.min + 1
	hash := fnv.New32a()
	hash.Write([]byte(allocID))
	start := int(hash.Sum32() % uint32(size))
	for i := range size {
		uid := r.min + (start+i)%size
		if !used[uid] {
			if err := writeUIDLease(dir, uid, uidLeaseRecord{AllocID: allocID, AllocDir: allocDir}); err != nil {
				return 0, err
			}
			l.hold(allocID, uid)
			return uid, nil
		}
	}
	return 0, fmt.Errorf("user: every UID of uid_range %d-%d is held by an allocation on this node, or by the files of one that Nomad has not collected yet", r.min, r.max)
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// readUIDLeases reads the leases on disk of UIDs in r; a file that is not
// one (another name, or not JSON) is skipped, as the directory is the
// driver's alone (safefile.PrivateDir) and only a crash mid-write leaves
// one.
func readUIDLeases(r uidRange, dir string) (map[int]uidLeaseRecord, error) {
	out := map[int]uidLeaseRecord{}
	if dir == "" {
		return out, nil
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("user: UID leases: %w", err)
	}
	for _, e := range entries {
		uid, err := strconv.Atoi(e.Name())
		if err != nil || !r.contains(uid) || !e.Type().IsRegular() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		var rec uidLeaseRecord
		if json.Unmarshal(data, &rec) == nil && rec.AllocID != "" {
			out[uid] = rec
		}
	}
	return out, nil
}

func writeUIDLease(dir string, uid int, rec uidLeaseRecord) error {
	if dir == "" {
		return nil
	}
	if err := safefile.PrivateDir(dir); err != nil {
		return fmt.Errorf("user: UID leases: %w", err)
	}
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	path := filepath.Join(dir, strconv.Itoa(uid))
	if err := os.WriteFile(path+".tmp", data, 0o600); err != nil {
		return fmt.Errorf("user: UID lease: %w", err)
	}
	return os.Rename(path+".tmp", path)
}

// hold counts one more task of allocID running as uid.
func (l *uidLeases) hold(allocID string, uid int) {
	if l.byAlloc == nil {
		l.byAlloc = map[string]*uidLease{}
	}
	if have, ok := l.byAlloc[allocID]; ok && have.uid == uid {
		have.tasks++
		return
	}
	l.byAlloc[allocID] = &uidLease{uid: uid, tasks: 1}
}

// recover counts a recovered task's UID, if it is one of uid_range, and
// puts its lease on disk where a driver before state_dir/uids left none.
func (l *uidLeases) recover(r uidRange, dir, allocID, allocDir, user string) error {
	ugid, err := dynamic.Parse(user)
	if err != nil || !r.contains(int(ugid)) {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.hold(allocID, int(ugid))
	if dir == "" || exists(filepath.Join(dir, strconv.Itoa(int(ugid)))) {
		return nil
	}
	return writeUIDLease(dir, int(ugid), uidLeaseRecord{AllocID: allocID, AllocDir: allocDir})
}

// release gives back one task's hold on allocID's UID, if user (the
// task's) is one of uid_range; the UID is free once no task holds it.
func (l *uidLeases) release(r uidRange, allocID, user string) {
	ugid, err := dynamic.Parse(user)
	if err != nil || !r.contains(int(ugid)) {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	have, ok := l.byAlloc[allocID]
	if !ok || have.uid != int(ugid) {
		return
	}
	if have.tasks--; have.tasks <= 0 {
		delete(l.byAlloc, allocID)
	}
}

// warnMPSServesOneUID tells a task of a UID of its own that MPS will make
// it wait for other users' MPS clients: the control daemon runs one MPS
// server at a time, for one UID, and starts the next user's only when the
// running server's clients are done (nvidia-cuda-mps-control(1)).
func (d *Driver) warnMPSServesOneUID(h *task.Handle, cfg *drivers.TaskConfig, runsAs bool) {
	if !runsAs || cfg.DeviceEnv["CUDA_MPS_PIPE_DIRECTORY"] == "" {
		return
	}
	d.emit(h, "warning: this task's MPS client runs as "+h.Spec.User+", a UID of its own; MPS serves one UID at a time, so its CUDA calls wait while another user's MPS clients run on this node, and it shares no lane with them at once (name one user in jobs that must)",
		map[string]string{"mps": "one UID at a time", "user": h.Spec.User}, nil)
}

// checkLogFIFOs refuses a task whose stdout or stderr FIFO is not one: the
// shared alloc/logs directory is writable by every task of the allocation,
// and the executor opens these paths as root, following symlinks, to
// write the task's output. A task that replaced its FIFO with a symlink
// before a restart would have the executor write into the link's target.
func checkLogFIFOs(cfg *drivers.TaskConfig) error {
	for _, path := range []string{cfg.StdoutPath, cfg.StderrPath} {
		if path == "" || path == os.DevNull {
			continue
		}
		st, err := os.Lstat(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue // the executor's open fails with its own error
		}
		if err != nil {
			return fmt.Errorf("task log FIFO: %w", err)
		}
		if st.Mode().Type() != fs.ModeNamedPipe {
			return fmt.Errorf("task log FIFO %s is a %s, not the FIFO Nomad made (something in the allocation replaced it); refusing to have the executor open it as root", path, describeMode(st.Mode()))
		}
	}
	return nil
}

func describeMode(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "symlink"
	case m.IsRegular():
		return "regular file"
	case m.IsDir():
		return "directory"
	}
	return m.Type().String()
}

// resolveUser picks the user a task runs as and refuses root unless the
// plugin config allows it. A Nomad dynamic workload user ("nomad-<id>",
// in no user database) is taken only with dynamic_users.
func resolveUser(s *settings, requested string) (string, error) {
	name := requested
	if name == "" {
		name = s.DefaultUser
	}
	u, err := user.Lookup(name)
	if err != nil {
		if u, err = user.LookupId(name); err != nil {
			ugid, perr := dynamic.Parse(name)
			switch {
			case perr != nil:
				return "", fmt.Errorf("user: %q is not a user on this node: %v", name, err)
			case !s.DynamicUsers:
				return "", fmt.Errorf("user: %q is a Nomad dynamic workload user, which the caravan-driver plugin config does not take (dynamic_users = false)", name)
			case ugid == 0:
				return "", fmt.Errorf("user: %q would be root", name)
			}
			return name, nil
		}
	}
	if u.Uid == "0" && !s.AllowRoot {
		return "", fmt.Errorf("user: tasks may not run as root (%q) unless the caravan-driver plugin config sets allow_root = true", name)
	}
	return name, nil
}

// dynamicUser returns the UID and GID of a Nomad dynamic workload user, which
// the executor cannot look up; ok is false for a user of the user database.
func dynamicUser(name string) (uid, gid int, ok bool) {
	if _, err := user.Lookup(name); err == nil {
		return 0, 0, false
	}
	ugid, err := dynamic.Parse(name)
	if err != nil || ugid == 0 {
		return 0, 0, false
	}
	return int(ugid), int(ugid), true
}

// runAsCommand wraps argv so that the executor, which runs it as root,
// drops to a dynamic workload user before argv runs (driver/runas).
func runAsCommand(cred runas.Credential, taskDir, devicesCgroup string, argv []string) ([]string, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find the driver's binary: %w", err)
	}
	return runas.CommandAs(self, cred, taskDir, devicesCgroup, argv), nil
}

// taskCredential is who a task of user runs as, numerically, and whether
// caravan-run-as can start it (any user but root: a dynamic workload user,
// or a user of the user database with its supplementary groups).
func taskCredential(name string) (runas.Credential, bool) {
	if uid, gid, ok := dynamicUser(name); ok {
		return runas.Credential{UID: uid, GID: gid}, true
	}
	u, err := user.Lookup(name)
	if err != nil {
		return runas.Credential{}, false
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err1 != nil || err2 != nil || uid <= 0 || gid <= 0 {
		return runas.Credential{}, false
	}
	cred := runas.Credential{UID: uid, GID: gid}
	ids, _ := u.GroupIds()
	for _, id := range ids {
		if g, err := strconv.Atoi(id); err == nil && g > 0 {
			cred.Groups = append(cred.Groups, g)
		}
	}
	return cred, true
}
