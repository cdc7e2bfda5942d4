package sim

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/caravan-gpu/caravan/gpu"
	"github.com/caravan-gpu/caravan/internal/safefile"
)

var _ gpu.Checkpointer = (*Backend)(nil)

// CheckpointMechanism is "sim": checkpointing moves a process's entry in the
// state directory aside, as the CUDA driver moves its state to host memory.
func (b *Backend) CheckpointMechanism() string { return "sim" }

func (b *Backend) CheckpointUnavailable() string { return "" }

// CheckpointState is checkpointed while pid's memory is set aside, else
// running. The sim's checkpoint and restore are one step each, so it never
// shows a process locked.
func (b *Backend) CheckpointState(_ context.Context, pid int) (gpu.CheckpointState, error) {
	held, err := b.holding(filepath.Join(b.stateDir, "checkpointed"), pid)
	if err != nil {
		return 0, err
	}
	if len(held) > 0 {
		return gpu.CheckpointCheckpointed, nil
	}
	return gpu.CheckpointRunning, nil
}

// Checkpoint moves pid's GPU memory to host memory on every simulated GPU it
// uses: the process leaves Processes and its memory is freed, as with
// cuCheckpointProcessCheckpoint. As on the hardware it fails for a process
// that is stopped or frozen (the CUDA driver must lock it), that is an MPS
// client (gpu.ErrCheckpointUnsupported), or that is already checkpointed;
// and for one that holds no GPU memory.
func (b *Backend) Checkpoint(ctx context.Context, pid int) error {
	if err := b.checkpointable(pid, "checkpoint"); err != nil {
		return err
	}
	if mpsClient(b.stateDir, pid) {
		return fmt.Errorf("checkpoint pid %d: the process is an MPS client (CUDA_ERROR_NOT_SUPPORTED): %w", pid, gpu.ErrCheckpointUnsupported)
	}
	uuids, err := b.holding(filepath.Join(b.stateDir, "procs"), pid)
	if err != nil {
		return err
	}
	if len(uuids) == 0 {
		if held, _ := b.holding(filepath.Join(b.stateDir, "checkpointed"), pid); len(held) > 0 {
			return fmt.Errorf("checkpoint pid %d: already checkpointed (CUDA_ERROR_ILLEGAL_STATE)", pid)
		}
		return fmt.Errorf("checkpoint pid %d: the process holds no CUDA state", pid)
	}
	// The copy to host memory takes its time while the memory is still
	// held, as on the hardware.
	var took time.Duration
	for _, uuid := range uuids {
		d, _, l, err := b.deviceListing(uuid)
		if err != nil {
			return err
		}
		// What a task wrote, at most what the GPU has.
		h, _ := readHeld(filepath.Join(b.stateDir, "procs", uuid, strconv.Itoa(pid)))
		took += l.timing.checkpoint(min(h.mib, d.MemoryMiB))
	}
	takeTime(ctx, took)
	for _, uuid := range uuids {
		if err := move(b.stateDir, "procs", "checkpointed", uuid, pid); err != nil {
			return fmt.Errorf("checkpoint pid %d on %s: %w", pid, uuid, err)
		}
	}
	// A process checkpointed now holds GPU state: a mark left by an earlier
	// process of the same PID no longer applies.
	_ = os.Remove(lostPath(b.stateDir, pid))
	return nil
}

// lostPath marks a process whose restore ran out of memory: as on the
// hardware, it stays checkpointed and no later restore brings it back.
func lostPath(stateDir string, pid int) string {
	return filepath.Join(stateDir, "unrestorable", strconv.Itoa(pid))
}

// lost reports whether pid is the process its mark was made for: the mark
// holds the process's start time, so that one that reuses the PID is not
// taken for it.
func lost(stateDir string, pid int) bool {
	if !holdsStartOf(lostPath(stateDir, pid), pid) {
		_ = os.Remove(lostPath(stateDir, pid))
		return false
	}
	return true
}

// Restore brings a checkpointed process's GPU memory back. As on the
// hardware it fails when the process is not checkpointed, is stopped, or
// its memory no longer fits on the GPU; a restore that did not fit leaves
// the process checkpointed for good (gpu.ErrRestoreLost).
func (b *Backend) Restore(ctx context.Context, pid int) error {
	if err := b.checkpointable(pid, "restore"); err != nil {
		return err
	}
	uuids, err := b.holding(filepath.Join(b.stateDir, "checkpointed"), pid)
	if err != nil {
		return err
	}
	if len(uuids) == 0 {
		return fmt.Errorf("restore pid %d: the process is not checkpointed (CUDA_ERROR_ILLEGAL_STATE)", pid)
	}
	if lost(b.stateDir, pid) {
		return fmt.Errorf("restore pid %d: an earlier restore ran out of GPU memory (CUDA_ERROR_OPERATING_SYSTEM): %w", pid, gpu.ErrRestoreLost)
	}
	for _, uuid := range uuids {
		d, _, _, err := b.deviceListing(uuid)
		if err != nil {
			return err
		}
		need := checkpointedMiB(b.stateDir, uuid, pid)
		procs, err := b.held(uuid)
		if err != nil {
			return err
		}
		var used uint64
		for _, p := range procs {
			used += p.mib
		}
		if used+need > d.MemoryMiB {
			// Root's alone, so that no task can mark a neighbour lost.
			if err := safefile.OwnDir(filepath.Dir(lostPath(b.stateDir, pid)), 0o755); err == nil {
				_ = writeStartOf(lostPath(b.stateDir, pid), pid)
			}
			return fmt.Errorf("restore pid %d on %s: %d MiB do not fit beside %d MiB in use of %d MiB (CUDA_ERROR_OUT_OF_MEMORY): %w",
				pid, uuid, need, used, d.MemoryMiB, gpu.ErrRestoreLost)
		}
	}
	// The memory is taken at once and filled for as long as the copy takes.
	var took time.Duration
	for _, uuid := range uuids {
		d, _, l, err := b.deviceListing(uuid)
		if err != nil {
			return err
		}
		took += l.timing.restore(min(checkpointedMiB(b.stateDir, uuid, pid), d.MemoryMiB))
		if err := move(b.stateDir, "checkpointed", "procs", uuid, pid); err != nil {
			return fmt.Errorf("restore pid %d on %s: %w", pid, uuid, err)
		}
	}
	takeTime(ctx, took)
	return nil
}

// takeTime sleeps for d, or until ctx ends: the operation it stands for is
// finished either way.
func takeTime(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// Checkpointed reports whether pid's GPU state is checkpointed.
func Checkpointed(stateDir string, pid int) bool {
	entries, _ := os.ReadDir(filepath.Join(stateDir, "checkpointed"))
	for _, e := range entries {
		if _, err := os.Stat(filepath.Join(stateDir, "checkpointed", e.Name(), strconv.Itoa(pid))); err == nil {
			return true
		}
	}
	return false
}

// InjectCheckpointFault makes the next times calls of op ("checkpoint" or
// "restore") for pid fail; times < 0 makes every call fail, 0 clears it.
func InjectCheckpointFault(stateDir string, pid int, op string, times int) error {
	if op != "checkpoint" && op != "restore" {
		return fmt.Errorf("sim: checkpoint fault op %q: want checkpoint or restore", op)
	}
	path := faultPath(stateDir, op, pid)
	if times == 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(strconv.Itoa(times)+"\n"), 0o644)
}

func faultPath(stateDir, op string, pid int) string {
	return filepath.Join(stateDir, "checkpoint-faults", op+"-"+strconv.Itoa(pid))
}

// checkpointable fails for an injected fault, a process that is gone, or
// one that is stopped or frozen.
func (b *Backend) checkpointable(pid int, op string) error {
	path := faultPath(b.stateDir, op, pid)
	if data, err := os.ReadFile(path); err == nil {
		n, _ := strconv.Atoi(strings.TrimSpace(string(data)))
		switch {
		case n > 1:
			_ = os.WriteFile(path, []byte(strconv.Itoa(n-1)+"\n"), 0o644)
		case n == 1:
			_ = os.Remove(path)
		}
		if n != 0 {
			return fmt.Errorf("%s pid %d: injected fault (CUDA_ERROR_UNKNOWN)", op, pid)
		}
	}
	if !alive(pid) {
		return fmt.Errorf("%s pid %d: no such process", op, pid)
	}
	if why := stoppedWhy(pid); why != "" {
		return fmt.Errorf("%s pid %d: the process is %s and cannot be locked (CUDA_ERROR_NOT_READY)", op, pid, why)
	}
	return nil
}

// holding lists the GPUs under dir (procs or checkpointed) with an entry for pid.
func (b *Backend) holding(dir string, pid int) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if _, err := os.Stat(filepath.Join(dir, e.Name(), strconv.Itoa(pid))); err == nil {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

func move(stateDir, from, to, uuid string, pid int) error {
	dst := filepath.Join(stateDir, to, uuid)
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(stateDir, "procs", uuid), 0o755); err != nil {
		return err
	}
	unlock, err := lockProcess(stateDir, uuid, pid)
	if err != nil {
		return err
	}
	defer unlock()
	return os.Rename(filepath.Join(stateDir, from, uuid, strconv.Itoa(pid)), filepath.Join(dst, strconv.Itoa(pid)))
}

func checkpointedMiB(stateDir, uuid string, pid int) uint64 {
	h, _ := readHeld(filepath.Join(stateDir, "checkpointed", uuid, strconv.Itoa(pid)))
	return h.mib
}

// stoppedWhy says whether pid is stopped by a signal or in a frozen cgroup;
// empty when it runs.
func stoppedWhy(pid int) string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err == nil {
		if i := strings.LastIndexByte(string(data), ')'); i > 0 && i+2 < len(data) {
			if st := data[i+2]; st == 'T' || st == 't' {
				return "stopped"
			}
		}
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			if events, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", parts[2], "cgroup.events")); err == nil &&
				strings.Contains(string(events), "frozen 1") {
				return "frozen"
			}
		case strings.Contains(parts[1], "freezer"):
			if st, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/freezer", parts[2], "freezer.state")); err == nil &&
				strings.TrimSpace(string(st)) != "THAWED" {
				return "frozen"
			}
		}
	}
	return ""
}
