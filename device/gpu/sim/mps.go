package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

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

// Prepare makes the directory of the servers' limits, root's alone; a
// directory someone else made there first is an error.
func (d MPSDaemon) Prepare() error {
	for _, dir := range []string{filepath.Join(d.StateDir, "mps"), d.serversDir()} {
		if err := safefile.OwnDir(dir, 0o755); err != nil {
			return fmt.Errorf("sim mps: %w", err)
		}
	}
	return nil
}

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
	// Only root writes in the directory (OwnDir), so a plain rename is safe.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func readServer(path string) (*mpsServer, error) {
	f, err := safefile.OpenRegular(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxRecord+1))
	if err != nil {
		return nil, err
	}
	var srv mpsServer
	if err := json.Unmarshal(data, &srv); err != nil {
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
func ConnectMPS(stateDir, uuid, pipeDir string, clientLimitMiB uint64) (MPSConnection, error) {
	if pipeDir == "" {
		pipeDir = DefaultMPSPipeDir
	}
	path := filepath.Join(MPSDaemon{StateDir: stateDir}.serversDir(), strconv.Itoa(os.Getuid()))
	srv, err := readServer(path)
	if err != nil {
		return MPSConnection{}, err
	}
	if srv != nil && srv.PipeDir == pipeDir {
		c := MPSConnection{Connected: true, Served: true, LimitMiB: srv.LimitsMiB[uuid]}
		c.FromServer = c.LimitMiB > 0
		if clientLimitMiB > 0 && (c.LimitMiB == 0 || clientLimitMiB < c.LimitMiB) {
			c.LimitMiB, c.FromServer = clientLimitMiB, false
		}
		return c, nil
	}
	if servesAt(stateDir, pipeDir) {
		// The simulated daemon, which set no limit for this UID.
		return MPSConnection{Connected: true, Served: true, LimitMiB: clientLimitMiB}, nil
	}
	if _, err := os.Stat(filepath.Join(pipeDir, "control")); err == nil {
		return MPSConnection{Connected: true, LimitMiB: clientLimitMiB}, nil
	}
	return MPSConnection{}, nil
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
