package nvml

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/caravan-gpu/caravan/gpu"
)

var _ gpu.Checkpointer = (*Backend)(nil)

// checkpointTimeout bounds one checkpoint or restore of one process.
const checkpointTimeout = 30 * time.Second

// EnableCheckpoint picks how the backend checkpoints: the CUDA driver API
// (cuCheckpointProcess*, driver 570 or later) through libcuda when the
// driver has it, as it needs no attach per call, else the cuda-checkpoint
// utility at cliPath (found on PATH when empty).
func (b *Backend) EnableCheckpoint(cliPath string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	api, apiErr := openCUDACheckpointAPI()
	if apiErr == nil {
		b.ckpt = api
		return
	}
	bin, err := findCheckpointCLI(cliPath)
	if err != nil {
		b.ckpt, b.ckptWhy = nil, "CUDA driver API: "+apiErr.Error()+"; cuda-checkpoint: "+err.Error()
		return
	}
	b.ckpt = DetectCLI(bin)
}

func (b *Backend) checkpointer() (gpu.Checkpointer, string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ckpt == nil && b.ckptWhy == "" {
		return nil, "checkpointing not enabled"
	}
	return b.ckpt, b.ckptWhy
}

func (b *Backend) CheckpointMechanism() string {
	if c, _ := b.checkpointer(); c != nil {
		return c.CheckpointMechanism()
	}
	return ""
}

func (b *Backend) CheckpointUnavailable() string {
	_, why := b.checkpointer()
	return why
}

func (b *Backend) Checkpoint(ctx context.Context, pid int) error {
	c, why := b.checkpointer()
	if c == nil {
		return fmt.Errorf("checkpoint pid %d: %s", pid, why)
	}
	return c.Checkpoint(ctx, pid)
}

func (b *Backend) Restore(ctx context.Context, pid int) error {
	c, why := b.checkpointer()
	if c == nil {
		return fmt.Errorf("restore pid %d: %s", pid, why)
	}
	return c.Restore(ctx, pid)
}

func (b *Backend) CheckpointState(ctx context.Context, pid int) (gpu.CheckpointState, error) {
	c, why := b.checkpointer()
	if c == nil {
		return 0, fmt.Errorf("checkpoint state of pid %d: %s", pid, why)
	}
	return c.CheckpointState(ctx, pid)
}

// CLI checkpoints with NVIDIA's cuda-checkpoint utility (driver 550 or
// later). Each call attaches to the driver anew, which costs seconds.
type CLI struct {
	Path    string
	Timeout time.Duration
	// Actions is set where the utility takes explicit actions (--action
	// lock, checkpoint, restore, unlock; newer releases), which DetectCLI
	// finds out. Without them only --toggle moves the state, whichever way
	// it is not, so each call asks the state first: a repeated restore
	// must not checkpoint the process again.
	Actions bool
}

var _ gpu.Checkpointer = CLI{}

// DetectCLI is the utility at path, with Actions set where its --help
// lists --action.
func DetectCLI(path string) CLI {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, _ := exec.CommandContext(ctx, path, "--help").CombinedOutput()
	return CLI{Path: path, Actions: strings.Contains(string(out), "--action")}
}

func (CLI) CheckpointMechanism() string { return "cuda-checkpoint-cli" }

func (CLI) CheckpointUnavailable() string { return "" }

// Checkpoint locks the process's CUDA state and checkpoints it (explicit
// actions; a failed checkpoint unlocks again), or toggles a running one.
// A process already checkpointed is left as it is.
func (c CLI) Checkpoint(ctx context.Context, pid int) error {
	if c.Actions {
		if err := c.action(ctx, "lock", pid); err != nil {
			return err
		}
		if err := c.action(ctx, "checkpoint", pid); err != nil {
			return errors.Join(err, c.action(ctx, "unlock", pid))
		}
		return nil
	}
	state, err := c.CheckpointState(ctx, pid)
	if err != nil {
		return err
	}
	switch state {
	case gpu.CheckpointCheckpointed:
		return nil
	case gpu.CheckpointRunning:
		return c.toggle(ctx, pid)
	}
	return fmt.Errorf("checkpoint pid %d: its CUDA state is locked, and this cuda-checkpoint only toggles", pid)
}

// Restore restores the process's CUDA state and unlocks it (explicit
// actions), or toggles a checkpointed one. A process that runs already is
// left as it is, never checkpointed again.
func (c CLI) Restore(ctx context.Context, pid int) error {
	state, err := c.CheckpointState(ctx, pid)
	if err != nil {
		return err
	}
	switch {
	case state == gpu.CheckpointRunning:
		return nil
	case c.Actions && state == gpu.CheckpointCheckpointed:
		if err := c.action(ctx, "restore", pid); err != nil {
			return err
		}
		return c.action(ctx, "unlock", pid)
	case c.Actions && state == gpu.CheckpointLocked:
		return c.action(ctx, "unlock", pid)
	case state == gpu.CheckpointCheckpointed:
		return c.toggle(ctx, pid)
	}
	return fmt.Errorf("restore pid %d: its CUDA state is locked, and this cuda-checkpoint only toggles", pid)
}

func (c CLI) action(ctx context.Context, action string, pid int) error {
	_, err := c.run(ctx, "--action", action, "--pid", strconv.Itoa(pid))
	return err
}

func (c CLI) toggle(ctx context.Context, pid int) error {
	_, err := c.run(ctx, "--toggle", "--pid", strconv.Itoa(pid))
	return err
}

// CheckpointState asks the utility (--get-state), which prints running,
// locked, checkpointed or failed.
func (c CLI) CheckpointState(ctx context.Context, pid int) (gpu.CheckpointState, error) {
	out, err := c.run(ctx, "--get-state", "--pid", strconv.Itoa(pid))
	if err != nil {
		return 0, err
	}
	switch state := strings.TrimSpace(out); state {
	case "running":
		return gpu.CheckpointRunning, nil
	case "locked":
		return gpu.CheckpointLocked, nil
	case "checkpointed":
		return gpu.CheckpointCheckpointed, nil
	default:
		return 0, fmt.Errorf("cuda-checkpoint --get-state --pid %d: the process is in state %q", pid, state)
	}
}

func (c CLI) run(ctx context.Context, args ...string) (string, error) {
	timeout := c.Timeout
	if timeout == 0 {
		timeout = checkpointTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, c.Path, args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("cuda-checkpoint %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

func findCheckpointCLI(path string) (string, error) {
	if path != "" {
		st, err := os.Stat(path)
		if err != nil {
			return "", err
		}
		if st.Mode()&0o111 == 0 {
			return "", fmt.Errorf("%s is not executable", path)
		}
		return path, nil
	}
	return exec.LookPath("cuda-checkpoint")
}
