package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/caravan-gpu/caravan/internal/safefile"
)

// DefaultMPSPipeDir is where a CUDA client looks for the MPS control
// daemon when CUDA_MPS_PIPE_DIRECTORY is unset.
const DefaultMPSPipeDir = "/tmp/nvidia-mps"

// MPSDaemon models the MPS control daemon at PipeDir for the simulated
// GPUs. The limits it sets on a server are kept in the backend's state
// (mps/servers/<uid>), in a directory only root writes, so that a client
// gets them from the backend and not from its own environment.
type MPSDaemon struct {
	StateDir string
	PipeDir  string
}

type mpsServer struct {
	PipeDir   string            `json:"pipe_dir"`
	LimitsMiB map[string]uint64 `json:"limits_mib"`
}

func (d MPSDaemon) serversDir() string { return filepath.Join(d.StateDir, "mps", "servers") }

// Prepare makes the directory of the servers' limits, root's alone, and
// the one where clients register (sticky, as /tmp: every task's user
// registers its own); a directory someone else made there first is an
// error.
func (d MPSDaemon) Prepare() error {
	for _, dir := range []string{filepath.Join(d.StateDir, "mps"), d.serversDir()} {
		if err := safefile.OwnDir(dir, 0o755); err != nil {
			return fmt.Errorf("sim mps: %w", err)
		}
	}
	clients := clientsDir(d.StateDir)
	if err := os.Mkdir(clients, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("sim mps: %w", err)
	}
	st, err := os.Lstat(clients)
	if err != nil {
		return fmt.Errorf("sim mps: %w", err)
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); !ok || !st.IsDir() || int(sys.Uid) != os.Geteuid() {
		return fmt.Errorf("sim mps: %s is not a directory of this process's user", clients)
	}
	if err := os.Chmod(clients, os.ModeSticky|0o777); err != nil {
		return fmt.Errorf("sim mps: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(clients, ".lock"), os.O_CREATE|os.O_RDONLY|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return fmt.Errorf("sim mps: %w", err)
	}
	return lock.Close()
}

func clientsDir(stateDir string) string { return filepath.Join(stateDir, "mps", "clients") }

// LimitServer records the pinned memory limit of uid's server on each GPU
// of limitsMiB; a GPU it does not name keeps the limit it had, as
// set_device_pinned_mem_limit sets one device at a time.
func (d MPSDaemon) LimitServer(uid uint32, limitsMiB map[string]uint64) error {
	if d.PipeDir == "" {
		d.PipeDir = DefaultMPSPipeDir
	}
	if err := d.Prepare(); err != nil {
		return err
	}
	path := filepath.Join(d.serversDir(), strconv.FormatUint(uint64(uid), 10))
	srv, err := readServer(path)
	if err != nil {
		return err
	}
	if srv == nil || srv.PipeDir != d.PipeDir {
		srv = &mpsServer{PipeDir: d.PipeDir, LimitsMiB: map[string]uint64{}}
	}
	for u, mib := range limitsMiB {
		srv.LimitsMiB[u] = mib
	}
	data, err := json.Marshal(srv)
	if err != nil {
		return err
	}
	return replaceOwnFile(path, data)
}

// replaceOwnFile writes data to path through a temp file and a rename, in
// a directory only this process's user writes (safefile.OwnDir), where a
// plain rename is safe.
func replaceOwnFile(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// fileName reports whether a GPU's UUID can name one file of the state
// directory.
func fileName(uuid string) bool {
	return uuid != "" && uuid != "." && uuid != ".." && !strings.ContainsRune(uuid, '/')
}

func readServer(path string) (*mpsServer, error) {
	data, err := readRecord(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var srv mpsServer
	if err := json.Unmarshal([]byte(data), &srv); err != nil {
		return nil, fmt.Errorf("sim mps: server record %s: %w", path, err)
	}
	if srv.LimitsMiB == nil {
		srv.LimitsMiB = map[string]uint64{}
	}
	return &srv, nil
}

// MPSConnection is what a simulated CUDA client found at its first call.
type MPSConnection struct {
	// Connected is false where no daemon listens at the client's pipe
	// directory: the client runs outside MPS, with no MPS limit at all.
	Connected bool
	// LimitMiB is the client's pinned memory limit on the GPU; 0 for none.
	LimitMiB uint64
	// FromServer is true when the limit is its server's, which the client
	// cannot raise.
	FromServer bool
	// Served is true when the simulated daemon serves the client, rather
	// than a daemon of the task's own: only its servers hold a context on
	// a GPU in exclusive-process mode (CheckContext).
	Served bool
}

// ConnectMPS is what CUDA does at a client's first call on uuid, for a
// process of this process's real uid whose environment names pipeDir
// (empty: the default) and a limit of clientLimitMiB (0: none). The client
// connects to the daemon listening there, if one does: the simulated
// daemon whose servers the driver limited, or any other (a control pipe,
// as a task's own daemon would make). Its limit is its server's, lowered
// by its own where that is lower; a client's own limit never raises it.
//
// The simulated daemon, as nvidia-cuda-mps-control, runs one user's
// server at a time: a client of another UID than the live clients' waits,
// until ctx ends, for them to be gone.
func ConnectMPS(ctx context.Context, stateDir, uuid, pipeDir string, clientLimitMiB uint64) (MPSConnection, error) {
	if pipeDir == "" {
		pipeDir = DefaultMPSPipeDir
	}
	path := filepath.Join(MPSDaemon{StateDir: stateDir}.serversDir(), strconv.Itoa(os.Getuid()))
	srv, err := readServer(path)
	if err != nil {
		return MPSConnection{}, err
	}
	var c MPSConnection
	switch {
	case srv != nil && srv.PipeDir == pipeDir:
		c = MPSConnection{Connected: true, Served: true, LimitMiB: srv.LimitsMiB[uuid]}
		c.FromServer = c.LimitMiB > 0
		if clientLimitMiB > 0 && (c.LimitMiB == 0 || clientLimitMiB < c.LimitMiB) {
			c.LimitMiB, c.FromServer = clientLimitMiB, false
		}
	case servesAt(stateDir, pipeDir):
		// The simulated daemon, which set no limit for this UID.
		c = MPSConnection{Connected: true, Served: true, LimitMiB: clientLimitMiB}
	default:
		if _, err := os.Stat(filepath.Join(pipeDir, "control")); err == nil {
			return MPSConnection{Connected: true, LimitMiB: clientLimitMiB}, nil
		}
		return MPSConnection{}, nil
	}
	if err := register(ctx, stateDir, os.Getuid(), os.Getpid()); err != nil {
		return MPSConnection{}, err
	}
	return c, nil
}

// RegisterMPSClient records process pid of uid as a client of the
// simulated daemon, as ConnectMPS does for the process that calls it.
func RegisterMPSClient(ctx context.Context, stateDir string, uid, pid int) error {
	return register(ctx, stateDir, uid, pid)
}

// register waits until no live client of another UID holds the simulated
// daemon's server, then records pid as a client of uid's.
func register(ctx context.Context, stateDir string, uid, pid int) error {
	dir := clientsDir(stateDir)
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("sim mps: %w", err)
	}
	defer lock.Close()
	for {
		if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
			return fmt.Errorf("sim mps: %w", err)
		}
		other := otherUsersClient(dir, uid)
		if other == "" {
			name := filepath.Join(dir, strconv.Itoa(uid)+"."+strconv.Itoa(pid))
			err := writeStartOf(name, pid)
			_ = syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
			return err
		}
		_ = syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
		select {
		case <-ctx.Done():
			return fmt.Errorf("sim mps: waited for the MPS server of %s to be done: %w", other, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// otherUsersClient names a live client of another UID than uid ("uid N,
// pid P"), or is empty. Records of clients gone are removed.
func otherUsersClient(dir string, uid int) string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return ""
	}
	for _, e := range entries {
		u, p, ok := strings.Cut(e.Name(), ".")
		cuid, err1 := strconv.Atoi(u)
		cpid, err2 := strconv.Atoi(p)
		if !ok || err1 != nil || err2 != nil || !e.Type().IsRegular() {
			continue
		}
		if !holdsStartOf(filepath.Join(dir, e.Name()), cpid) {
			_ = os.Remove(filepath.Join(dir, e.Name()))
			continue
		}
		if cuid != uid {
			return fmt.Sprintf("uid %d (pid %d)", cuid, cpid)
		}
	}
	return ""
}

// writeStartOf records at path the start of process pid, so that
// holdsStartOf can tell it from a later process given the same PID.
func writeStartOf(path string, pid int) error {
	return os.WriteFile(path, []byte(strconv.FormatUint(startTicks(pid), 10)), 0o644)
}

// holdsStartOf reports whether the record at path holds the start of pid,
// which runs.
func holdsStartOf(path string, pid int) bool {
	data, err := readRecord(path)
	if err != nil {
		return false
	}
	ticks, err := strconv.ParseUint(strings.TrimSpace(data), 10, 64)
	live := startTicks(pid)
	return err == nil && live != 0 && live == ticks
}

// mpsClient reports whether pid is a live client of the simulated daemon.
func mpsClient(stateDir string, pid int) bool {
	entries, err := os.ReadDir(clientsDir(stateDir))
	if err != nil {
		return false
	}
	suffix := "." + strconv.Itoa(pid)
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), suffix) || !e.Type().IsRegular() {
			continue
		}
		if holdsStartOf(filepath.Join(clientsDir(stateDir), e.Name()), pid) {
			return true
		}
	}
	return false
}

// servesAt reports whether the simulated daemon listens at pipeDir: a
// server it limited names it.
func servesAt(stateDir, pipeDir string) bool {
	dir := MPSDaemon{StateDir: stateDir}.serversDir()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range entries {
		if srv, err := readServer(filepath.Join(dir, e.Name())); err == nil && srv != nil && srv.PipeDir == pipeDir {
			return true
		}
	}
	return false
}
