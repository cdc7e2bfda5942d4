// Package sim is a GPU backend for machines without a GPU. A fleet file
// describes the GPUs; a state directory, shared between processes, holds
// per-process memory use and injected faults, so that the device plugin, the
// task driver and test workloads all see the same simulated GPUs.
package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/caravan-gpu/caravan/gpu"
	"github.com/caravan-gpu/caravan/internal/safefile"
)

// Backend is the simulated GPU backend.
type Backend struct {
	fleetPath string
	stateDir  string

	mu      sync.Mutex
	fleet   *Fleet
	modTime time.Time
	// Expanded once per fleet load, as every call looks devices up.
	devices   []gpu.Device
	byUUID    map[string]gpu.Device
	unhealthy map[string]string
	listing   map[string]processListing
	// accountingWhy says, by GPU, why the statistics of an exited process
	// could not be kept; accountingBuffer is how many exited processes a
	// GPU keeps, as NVML's accounting buffer does.
	accountingWhy    map[string]string
	accountingBuffer int
}

var _ gpu.Backend = (*Backend)(nil)

// New opens a simulated fleet. stateDir is created when missing.
func New(fleetPath, stateDir string) (*Backend, error) {
	if fleetPath == "" {
		return nil, errors.New("sim: fleet_file is required")
	}
	if stateDir == "" {
		return nil, errors.New("sim: state_dir is required")
	}
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		return nil, fmt.Errorf("sim: state_dir: %w", err)
	}
	b := &Backend{fleetPath: fleetPath, stateDir: stateDir,
		accountingWhy: map[string]string{}, accountingBuffer: accountingBufferSize}
	if _, err := b.current(); err != nil {
		return nil, err
	}
	return b, nil
}

// current returns the fleet, re-reading the file when it has changed so that
// tests can change a running fleet.
func (b *Backend) current() (*Fleet, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	st, err := os.Stat(b.fleetPath)
	if err != nil {
		if b.fleet != nil {
			return b.fleet, nil
		}
		return nil, fmt.Errorf("sim fleet: %w", err)
	}
	if b.fleet != nil && st.ModTime().Equal(b.modTime) {
		return b.fleet, nil
	}
	f, err := LoadFleet(b.fleetPath)
	if err != nil {
		if b.fleet != nil {
			return b.fleet, nil // keep the last good fleet on a bad edit
		}
		return nil, err
	}
	b.fleet, b.modTime = f, st.ModTime()
	b.devices = f.Devices()
	b.byUUID = make(map[string]gpu.Device, len(b.devices))
	for _, d := range b.devices {
		b.byUUID[d.UUID] = d
	}
	b.unhealthy = f.unhealthy()
	b.listing = f.listings()
	return f, nil
}

func (b *Backend) Name() string { return "sim" }

func (b *Backend) Versions() (string, string, error) {
	f, err := b.current()
	if err != nil {
		return "", "", err
	}
	drv, cuda := f.DriverVersion, f.CUDAVersion
	if drv == "" {
		drv = "550.0-sim"
	}
	if cuda == "" {
		cuda = "12.4"
	}
	return drv, cuda, nil
}

func (b *Backend) Devices() ([]gpu.Device, error) {
	if _, err := b.current(); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]gpu.Device(nil), b.devices...), nil
}

// device returns one device and its fleet-file fault, if any.
func (b *Backend) device(uuid string) (gpu.Device, string, error) {
	d, reason, _, err := b.deviceListing(uuid)
	return d, reason, err
}

func (b *Backend) deviceListing(uuid string) (gpu.Device, string, processListing, error) {
	if _, err := b.current(); err != nil {
		return gpu.Device{}, "", processListing{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	d, ok := b.byUUID[uuid]
	if !ok {
		return gpu.Device{}, "", processListing{}, fmt.Errorf("%w %q", gpu.ErrUnknownDevice, uuid)
	}
	return d, b.unhealthy[uuid], b.listing[uuid], nil
}

func (b *Backend) Health(uuid string) (gpu.Health, error) {
	_, reason, err := b.device(uuid)
	if err != nil {
		return gpu.Health{}, err
	}
	if reason != "" {
		return gpu.Health{Reason: reason}, nil
	}
	if data, err := os.ReadFile(filepath.Join(b.stateDir, "faults", uuid)); err == nil {
		return gpu.Health{Reason: strings.TrimSpace(string(data))}, nil
	}
	return gpu.Health{Healthy: true}, nil
}

func (b *Backend) Stats(uuid string) (gpu.Stats, error) {
	d, _, _, err := b.deviceListing(uuid)
	if err != nil {
		return gpu.Stats{}, err
	}
	procs, err := b.held(uuid)
	if err != nil {
		return gpu.Stats{}, err
	}
	// The GPU knows what it holds in all, even when it cannot tell per
	// process.
	var used uint64
	for _, p := range procs {
		used += p.mib
	}
	util := uint32(0)
	if len(procs) > 0 {
		util = 100
	}
	return gpu.Stats{
		UsedMemoryMiB: used, TotalMemoryMiB: d.MemoryMiB,
		GPUUtilPercent: util, MemUtilPercent: uint32(used * 100 / d.MemoryMiB),
		PowerWatts: 60 + util*3, TemperatureC: 35 + util/4,
		Timestamp: time.Now(),
	}, nil
}

// Processes reports the processes as NVML would: as compute processes or,
// on a GPU with mps_clients, as MPS clients, with their memory in bytes or
// NVML_VALUE_NOT_AVAILABLE, through the same conversion and merge as the
// nvml backend.
func (b *Backend) Processes(uuid string) ([]gpu.Process, error) {
	_, _, listing, err := b.deviceListing(uuid)
	if err != nil {
		return nil, err
	}
	procs, err := b.held(uuid)
	if err != nil || procs == nil {
		return nil, err
	}
	var compute, mps []gpu.Process
	for _, p := range procs {
		bytes := p.mib << 20
		if !p.known || listing.memoryNotAvailable {
			bytes = gpu.MemoryNotAvailable
		}
		proc := gpu.ProcessUsing(p.pid, bytes)
		if !proc.MemoryUnknown && !listing.accountingOff {
			// A GPU that cannot tell a process's memory cannot tell its
			// peak either, nor one that does no accounting.
			proc.PeakMemoryMiB = p.peak
		}
		if listing.mpsClients {
			mps = append(mps, proc)
		} else {
			compute = append(compute, proc)
		}
	}
	return gpu.MergeProcesses(compute, mps), nil
}

// heldMemory is one process's record in the state directory.
type heldMemory struct {
	pid   int
	mib   uint64
	known bool // false for an entry of notAvailable
	// peak is the most the process has held since it started, kept as
	// NVML's accounting mode keeps maxMemoryUsage.
	peak uint64
	// startTicks is when the process started, in the kernel's clock ticks
	// since boot (gpu.ProcessStartTicks): exact, so that a later process
	// with the same PID is told apart; 0 in a record written before starts
	// were kept, or for a process whose start could not be read.
	startTicks uint64
}

// String is the record as its file holds it: the current memory in MiB
// (or notAvailable), the peak and, where known, the start.
func (h heldMemory) String() string {
	text := formatFigure(h.mib, h.known) + " " + strconv.FormatUint(h.peak, 10)
	if h.startTicks != 0 {
		text += " " + strconv.FormatUint(h.startTicks, 10)
	}
	return text
}

// notAvailable in a process's state file stands for memory the GPU cannot
// tell per process.
const notAvailable = "N/A"

// held reads the live processes on uuid from the state directory,
// accounting for those that have exited; nil when none ever held memory
// there.
func (b *Backend) held(uuid string) ([]heldMemory, error) {
	r, err := b.sweep(uuid)
	if err != nil || !r.exists {
		return nil, err
	}
	return r.onGPU, nil
}

// parseHeld reads a process's state file: its current memory in MiB (or
// notAvailable), after a space its peak, and after another its start in
// clock ticks since boot. A file without a peak was written before
// peaks were kept, and its peak is its current memory; one without a start
// was written before starts were kept.
func parseHeld(text string) (heldMemory, bool) {
	fields := strings.Fields(text)
	if len(fields) == 0 || len(fields) > 3 {
		return heldMemory{}, false
	}
	mib, known, ok := parseFigure(fields[0])
	if !ok {
		return heldMemory{}, false
	}
	h := heldMemory{mib: mib, known: known, peak: mib}
	if len(fields) >= 2 {
		peak, ok := parseMiB(fields[1])
		if !ok {
			return heldMemory{}, false
		}
		h.peak = max(h.peak, peak)
	}
	if len(fields) == 3 {
		ticks, err := strconv.ParseUint(fields[2], 10, 64)
		if err != nil || ticks >= 1<<50 {
			return heldMemory{}, false
		}
		h.startTicks = ticks
	}
	return h, true
}

// parseMiB reads a memory figure of a state file.
func parseMiB(field string) (uint64, bool) {
	mib, err := strconv.ParseUint(field, 10, 64)
	return mib, err == nil && mib < 1<<40
}

// parseFigure reads a memory figure of a state file that may be
// notAvailable; known is false then.
func parseFigure(field string) (mib uint64, known, ok bool) {
	if field == notAvailable {
		return 0, false, true
	}
	mib, ok = parseMiB(field)
	return mib, ok, ok
}

// formatFigure writes a figure as parseFigure reads it.
func formatFigure(mib uint64, known bool) string {
	if !known {
		return notAvailable
	}
	return strconv.FormatUint(mib, 10)
}

func (b *Backend) Close() error { return nil }

// SetProcessMemory records that pid holds mib MiB on the simulated GPU uuid,
// and raises its recorded peak when mib is above it. Simulated workloads call
// it as they allocate and free; a spike that is freed again within
// milliseconds stays in the peak, as it does in NVML's accounting.
func SetProcessMemory(stateDir, uuid string, pid int, mib uint64) error {
	return writeProcess(stateDir, uuid, pid, heldMemory{mib: mib, known: true, peak: mib})
}

// ErrOutOfMemory is what an allocation past a process's MPS pinned-memory
// limit gets, as CUDA returns cudaErrorMemoryAllocation to an MPS client.
var ErrOutOfMemory = errors.New("CUDA error: out of memory")

// AllocateProcessMemory is SetProcessMemory through an MPS client limit of
// limitMiB (0: none): past the limit the allocation fails with
// ErrOutOfMemory and nothing is recorded, so pid keeps what it held before.
func AllocateProcessMemory(stateDir, uuid string, pid int, mib, limitMiB uint64) error {
	if limitMiB > 0 && mib > limitMiB {
		return fmt.Errorf("%w: %d MiB is past the MPS pinned device memory limit of %d MiB on %s", ErrOutOfMemory, mib, limitMiB, uuid)
	}
	return SetProcessMemory(stateDir, uuid, pid, mib)
}

// WaitRestored blocks while pid is checkpointed on uuid, as a CUDA call of
// a checkpointed process blocks until its state is restored: a process
// left checkpointed makes no progress, on the simulated GPU as on a real
// one.
func WaitRestored(ctx context.Context, stateDir, uuid string, pid int) error {
	path := filepath.Join(stateDir, "checkpointed", uuid, strconv.Itoa(pid))
	for {
		if _, err := os.Stat(path); err != nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// SetProcessMemoryNotAvailable records that pid holds memory on uuid that the
// GPU cannot tell, so that Processes reports it as NVML_VALUE_NOT_AVAILABLE.
func SetProcessMemoryNotAvailable(stateDir, uuid string, pid int) error {
	return writeProcess(stateDir, uuid, pid, heldMemory{})
}

// writeProcess records now, what pid holds on uuid, under pid's lock. The
// peak goes on from the process's record, and the record keeps the
// process's start, read from /proc while it runs, so that it is accounted
// as the process it is when it exits. A record left by an earlier process
// with the same PID, which nobody has seen exit yet, is set aside for the
// accounting.
func writeProcess(stateDir, uuid string, pid int, now heldMemory) error {
	dir := filepath.Join(stateDir, "procs", uuid)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	unlock, err := lockProcess(stateDir, uuid, pid)
	if err != nil {
		return err
	}
	defer unlock()
	// A checkpointed process's memory lives in host memory until restored.
	if _, err := os.Stat(filepath.Join(stateDir, "checkpointed", uuid, strconv.Itoa(pid))); err == nil {
		dir = filepath.Join(stateDir, "checkpointed", uuid)
	}
	path := filepath.Join(dir, strconv.Itoa(pid))
	now.pid, now.startTicks = pid, startTicks(pid)
	if prev, ok := readHeld(path); ok {
		prev.pid = pid
		if sameStart(prev.startTicks, now.startTicks) {
			now.peak = max(now.peak, prev.peak)
			if now.startTicks == 0 {
				now.startTicks = prev.startTicks
			}
		} else if err := setAside(stateDir, uuid, prev); err != nil {
			return err
		}
	}
	return replaceFile(dir, path, now.String(), 0o600)
}

// replaceFile writes content and a newline to path, a file in dir, through
// a new file beside it, so that a reader sees the old content or the new
// and a link planted at path is replaced, not followed.
func replaceFile(dir, path, content string, perm os.FileMode) error {
	tmp, err := os.CreateTemp(dir, ".tmp-") // O_EXCL: never through a link
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(tmp, content)
	if err == nil && perm != 0o600 {
		err = tmp.Chmod(perm)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}

// readHeld reads a process's record; false when there is none, or it is
// not one.
func readHeld(path string) (heldMemory, bool) {
	text, err := readRecord(path)
	if err != nil {
		return heldMemory{}, false
	}
	return parseHeld(text)
}

// maxRecord is more than any state file holds.
const maxRecord = 256

// readRecord reads a state file without following a link and only when it
// is a regular file: the per-GPU directories are writable by every task,
// and the reader may be root.
func readRecord(path string) (string, error) {
	f, err := safefile.OpenRegular(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxRecord+1))
	if err != nil {
		return "", err
	}
	if len(data) > maxRecord {
		return "", fmt.Errorf("%s is too long for a record", path)
	}
	return string(data), nil
}

// startTicks is when pid started, in clock ticks since boot; 0 when /proc
// does not tell.
func startTicks(pid int) uint64 {
	ticks, err := gpu.ProcessStartTicks(pid)
	if err != nil {
		return 0
	}
	return ticks
}

// sameStart reports whether two starts can be one process's; an unknown
// start (0) can be any.
func sameStart(a, b uint64) bool {
	return a == 0 || b == 0 || a == b
}

// running reports whether the process h is the record of still runs: its
// PID is alive and, where the record has a start, with that start, not a
// later process that got the same PID.
func running(h heldMemory) bool {
	if !alive(h.pid) {
		return false
	}
	return h.startTicks == 0 || sameStart(h.startTicks, startTicks(h.pid))
}

// lockProcess holds pid's record on uuid against the other changes to it:
// the workload recording an allocation, and a checkpoint or a restore
// moving the record. CUDA's checkpoint waits for a process's calls in
// flight in the same way; without it an allocation decided before a
// checkpoint and written after it left the process both on the GPU and
// checkpointed. The lock is one process's alone: a task frozen while its
// workload holds it (the freeze follows the checkpoint, and the workload
// may record an allocation in between) then holds up only its own restore,
// which comes after the thaw, and never another task on the GPU. A lock
// over the whole GPU deadlocked a lane: the next switch's checkpoint
// waited for the frozen task. The lock is a file beside the records
// (procs/<uuid>, which the driver makes writable by every task's user); a
// read-only open is enough to lock it.
func lockProcess(stateDir, uuid string, pid int) (unlock func(), err error) {
	// Never through a link planted in the shared directory: the driver
	// takes the lock as root.
	f, err := os.OpenFile(lockPath(stateDir, uuid, pid), os.O_RDONLY|os.O_CREATE|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock the record of pid %d on %s: %w", pid, uuid, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock the record of pid %d on %s: %w", pid, uuid, err)
	}
	return func() { f.Close() }, nil
}

const lockPrefix = ".lock-"

func lockPath(stateDir, uuid string, pid int) string {
	return filepath.Join(stateDir, "procs", uuid, lockPrefix+strconv.Itoa(pid))
}

// ReleaseProcess forgets pid's memory on uuid: the process has freed it
// all and left the GPU, and is listed no more. Its peak is set aside,
// beside the records, so that the accounting keeps it: while the process
// runs it is accounted running, and once it exits, exited, as NVML keeps a
// process's statistics for its whole lifetime.
func ReleaseProcess(stateDir, uuid string, pid int) error {
	return releaseProcess(context.Background(), stateDir, uuid, pid, false)
}

// ReleaseOwnProcess is ReleaseProcess called by the process itself as it
// leaves the GPU: like a CUDA call it waits while the process is
// checkpointed, until its restore or until ctx ends, so that a process
// checkpointed just as it finished does not take its checkpoint with it
// and leave its restore nothing to bring back. The wait and the release
// are one step under the process's lock, so no checkpoint falls between.
func ReleaseOwnProcess(ctx context.Context, stateDir, uuid string, pid int) error {
	return releaseProcess(ctx, stateDir, uuid, pid, true)
}

func releaseProcess(ctx context.Context, stateDir, uuid string, pid int, waitRestored bool) error {
	if _, err := os.Stat(filepath.Join(stateDir, "procs", uuid)); errors.Is(err, os.ErrNotExist) {
		return nil // it never held memory here
	}
	checkpointed := filepath.Join(stateDir, "checkpointed", uuid, strconv.Itoa(pid))
	for {
		if waitRestored {
			_ = WaitRestored(ctx, stateDir, uuid, pid) // an ended ctx releases at once
		}
		unlock, err := lockProcess(stateDir, uuid, pid)
		if err != nil {
			return err
		}
		if waitRestored && ctx.Err() == nil {
			// Checkpointed again between the wait and the lock.
			if _, err := os.Stat(checkpointed); err == nil {
				unlock()
				continue
			}
		}
		err = release(stateDir, uuid, pid)
		unlock()
		if err != nil {
			return err
		}
		break
	}
	if err := os.Remove(lockPath(stateDir, uuid, pid)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

func release(stateDir, uuid string, pid int) error {
	var paths []string
	for _, dir := range []string{"procs", "checkpointed"} {
		paths = append(paths, filepath.Join(stateDir, dir, uuid, strconv.Itoa(pid)))
	}
	var ended heldMemory
	found := false
	for _, path := range paths {
		if h, ok := readHeld(path); ok {
			h.pid = pid
			if found {
				h = merge(h, ended)
			}
			ended, found = h, true
		}
	}
	if found {
		if err := setAside(stateDir, uuid, ended); err != nil {
			return err
		}
	}
	for _, path := range paths {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// InjectFault marks uuid unhealthy with reason; an empty reason clears it.
func InjectFault(stateDir, uuid, reason string) error {
	dir := filepath.Join(stateDir, "faults")
	if reason == "" {
		err := os.Remove(filepath.Join(dir, uuid))
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, uuid), []byte(reason+"\n"), 0o644)
}

func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
