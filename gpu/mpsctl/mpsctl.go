// Package mpsctl talks to an NVIDIA MPS control daemon through
// nvidia-cuda-mps-control, the only interface the daemon has: one command
// per run, on standard input.
package mpsctl

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// DefaultControlBin is the control program looked up on PATH.
const DefaultControlBin = "nvidia-cuda-mps-control"

// Daemon is the control daemon that listens in PipeDir.
type Daemon struct {
	// Bin is the control program; DefaultControlBin when empty.
	Bin     string
	PipeDir string
	// LogDir is passed on when set.
	LogDir string
	// Timeout bounds each command and the wait for a server to start;
	// 5 s when zero.
	Timeout time.Duration
	// ProcDir is where a server's owner is read; /proc when empty.
	ProcDir string
}

func (d Daemon) timeout() time.Duration {
	if d.Timeout > 0 {
		return d.Timeout
	}
	return 5 * time.Second
}

// Env is the environment the control program runs in.
func (d Daemon) Env() []string {
	env := append(os.Environ(), "CUDA_MPS_PIPE_DIRECTORY="+d.PipeDir)
	if d.LogDir != "" {
		env = append(env, "CUDA_MPS_LOG_DIRECTORY="+d.LogDir)
	}
	return env
}

// Start runs the control daemon ("-d"). The daemon may keep the standard
// output it inherited, so the wait for it is bounded by WaitDelay rather
// than by the daemon's life.
func (d Daemon) Start(ctx context.Context) error {
	bin := d.Bin
	if bin == "" {
		bin = DefaultControlBin
	}
	ctx, cancel := context.WithTimeout(ctx, 2*d.timeout())
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-d")
	cmd.Env = d.Env()
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	if err != nil && !errors.Is(err, exec.ErrWaitDelay) {
		return fmt.Errorf("%s -d: %v: %s", bin, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Command sends one line to the daemon and returns what it answered.
func (d Daemon) Command(line string) (string, error) {
	bin := d.Bin
	if bin == "" {
		bin = DefaultControlBin
	}
	ctx, cancel := context.WithTimeout(context.Background(), d.timeout())
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = d.Env()
	cmd.Stdin = strings.NewReader(line + "\n")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("mps control %q: %v: %s", line, err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// LimitServer finds the server of uid, starting it when none runs, and
// sets its pinned device memory limit on each GPU: the cap of every client
// it serves from then on, whatever the client's environment says.
func (d Daemon) LimitServer(uid uint32, limitsMiB map[string]uint64) error {
	pid, err := d.serverOf(uid)
	if err != nil {
		return err
	}
	if pid == 0 {
		if _, err := d.Command(fmt.Sprintf("start_server -uid %d", uid)); err != nil {
			return err
		}
		deadline := time.Now().Add(d.timeout())
		for pid == 0 {
			if time.Now().After(deadline) {
				return fmt.Errorf("mps: no server of uid %d within %s of start_server (MPS before v3 runs one user's server at a time: another user's clients may hold it)", uid, d.timeout())
			}
			time.Sleep(50 * time.Millisecond)
			if pid, err = d.serverOf(uid); err != nil {
				return err
			}
		}
	}
	uuids := make([]string, 0, len(limitsMiB))
	for u := range limitsMiB {
		uuids = append(uuids, u)
	}
	sort.Strings(uuids)
	for _, u := range uuids {
		if _, err := d.Command(fmt.Sprintf("set_device_pinned_mem_limit %d %s %dM", pid, u, limitsMiB[u])); err != nil {
			return err
		}
	}
	return nil
}

// serverOf is the PID of the running server of uid; 0 when there is none.
// The owner comes from the kernel (/proc/<pid>), not from the daemon.
func (d Daemon) serverOf(uid uint32) (int, error) {
	out, err := d.Command("get_server_list")
	if err != nil {
		return 0, err
	}
	procDir := d.ProcDir
	if procDir == "" {
		procDir = "/proc"
	}
	for _, field := range strings.Fields(out) {
		pid, err := strconv.Atoi(field)
		if err != nil || pid <= 0 {
			return 0, fmt.Errorf("mps control get_server_list: %q is not a PID", field)
		}
		st, err := os.Stat(filepath.Join(procDir, strconv.Itoa(pid)))
		if err != nil {
			continue // gone since the list
		}
		if sys, ok := st.Sys().(*syscall.Stat_t); ok && sys.Uid == uid {
			return pid, nil
		}
	}
	return 0, nil
}
