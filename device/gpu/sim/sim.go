// Package sim is a GPU backend for machines without a GPU. A fleet file
// describes the GPUs; a state directory, shared between processes, holds
// per-process memory use and injected faults, so that the device plugin, the
// task driver and test workloads all see the same simulated GPUs.
package sim

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/caravan-gpu/caravan/device/gpu"
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
	b := &Backend{fleetPath: fleetPath, stateDir: stateDir}
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
	if _, err := b.current(); err != nil {
		return gpu.Device{}, "", err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	d, ok := b.byUUID[uuid]
	if !ok {
		return gpu.Device{}, "", fmt.Errorf("%w %q", gpu.ErrUnknownDevice, uuid)
	}
	return d, b.unhealthy[uuid], nil
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
	d, _, err := b.device(uuid)
	if err != nil {
		return gpu.Stats{}, err
	}
	procs, err := b.Processes(uuid)
	if err != nil {
		return gpu.Stats{}, err
	}
	var used uint64
	for _, p := range procs {
		used += p.UsedMemoryMiB
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

func (b *Backend) Processes(uuid string) ([]gpu.Process, error) {
	if _, _, err := b.device(uuid); err != nil {
		return nil, err
	}
	dir := filepath.Join(b.stateDir, "procs", uuid)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []gpu.Process
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue // temp files
		}
		if !alive(pid) {
			_ = os.Remove(filepath.Join(dir, e.Name())) // the process is gone, so is its memory
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		mib, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
		if err != nil {
			continue
		}
		out = append(out, gpu.Process{PID: pid, UsedMemoryMiB: mib})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PID < out[j].PID })
	return out, nil
}

func (b *Backend) Close() error { return nil }

// SetProcessMemory records that pid holds mib MiB on the simulated GPU uuid.
// Simulated workloads call it as they allocate and free.
func SetProcessMemory(stateDir, uuid string, pid int, mib uint64) error {
	dir := filepath.Join(stateDir, "procs", uuid)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".tmp-")
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(tmp, "%d\n", mib); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), filepath.Join(dir, strconv.Itoa(pid)))
}

// ReleaseProcess forgets pid's memory on uuid.
func ReleaseProcess(stateDir, uuid string, pid int) error {
	err := os.Remove(filepath.Join(stateDir, "procs", uuid, strconv.Itoa(pid)))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
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
