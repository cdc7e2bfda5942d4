package plugin

import (
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/hashicorp/nomad/helper/users/dynamic"
	"github.com/hashicorp/nomad/plugins/drivers"

	"github.com/caravan-gpu/caravan/driver/task"
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
		uid, err := d.uids.lease(s.uids, cfg.AllocID)
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

// uidLeases are the UIDs of uid_range that allocations hold on this node,
// counted by task: taken at a task's start (or recovery), given back at its
// destruction or failed start, so that an allocation's UID stays its own
// while any of its tasks starts or runs.
type uidLeases struct {
	mu      sync.Mutex
	byAlloc map[string]*uidLease
}

type uidLease struct{ uid, tasks int }

// lease takes allocID's UID for one more task: the one it holds, else the
// first free one from a point that allocID hashes to, so that allocations
// spread over the range.
func (l *uidLeases) lease(r uidRange, allocID string) (int, error) {
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
	size := r.max - r.min + 1
	hash := fnv.New32a()
	hash.Write([]byte(allocID))
	start := int(hash.Sum32() % uint32(size))
	for i := range size {
		uid := r.min + (start+i)%size
		if !used[uid] {
			l.hold(allocID, uid)
			return uid, nil
		}
	}
	return 0, fmt.Errorf("user: every UID of uid_range %d-%d is held by an allocation on this node", r.min, r.max)
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

// recover counts a recovered task's UID, if it is one of uid_range.
func (l *uidLeases) recover(r uidRange, allocID, user string) {
	if ugid, err := dynamic.Parse(user); err == nil && r.contains(int(ugid)) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.hold(allocID, int(ugid))
	}
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
