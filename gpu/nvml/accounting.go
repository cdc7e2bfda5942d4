package nvml

// This file reads and sets the GPU's accounting of processes and its compute mode.

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/caravan-gpu/caravan/gpu"
)

// accounting reports whether the device keeps per-process accounting,
// turning it on the first time it finds it off (which needs root; a refusal
// is logged once, kept for AccountingUnavailable, and peaks stay unknown on
// that device).
func (b *Backend) accounting(uuid string, h nvml.Device) bool {
	mode, ret := h.GetAccountingMode()
	if ret == nvml.SUCCESS && mode == nvml.FEATURE_ENABLED {
		return true
	}
	b.mu.Lock()
	tried := b.accountingTried[uuid]
	b.accountingTried[uuid] = true
	b.mu.Unlock()
	if tried {
		return false
	}
	var why string
	switch {
	case ret != nvml.SUCCESS:
		why = fmt.Sprintf("NVML cannot tell the accounting mode of %s: %s", uuid, errorString(ret))
		b.logger.Warn("GPU does not tell whether accounting mode is on; process memory peaks are not watched", "gpu", uuid, "error", errorString(ret))
	default:
		ret := h.SetAccountingMode(nvml.FEATURE_ENABLED)
		if ret == nvml.SUCCESS {
			b.logger.Info("turned on accounting mode to watch process memory peaks", "gpu", uuid)
			return true
		}
		why = fmt.Sprintf("NVML accounting mode is off on %s and could not be enabled: %s (nvidia-smi -am 1 as root turns it on)", uuid, errorString(ret))
		b.logger.Warn("cannot turn on accounting mode (nvidia-smi -am 1 as root does); process memory peaks are not watched, only the samples", "gpu", uuid, "error", errorString(ret))
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.parentOf[uuid] != "" {
		why += " (NVML keeps accounting mode disabled on MIG-enabled GPUs)"
	}
	b.accountingWhy[uuid] = why
	return false
}

var computeModes = map[gpu.ComputeMode]nvml.ComputeMode{
	gpu.ComputeDefault:          nvml.COMPUTEMODE_DEFAULT,
	gpu.ComputeExclusiveProcess: nvml.COMPUTEMODE_EXCLUSIVE_PROCESS,
	gpu.ComputeProhibited:       nvml.COMPUTEMODE_PROHIBITED,
}

// ComputeMode is the GPU's compute mode; exclusive-thread mode, which
// CUDA no longer offers, reads as exclusive-process.
func (b *Backend) ComputeMode(uuid string) (gpu.ComputeMode, error) {
	h, err := b.handle(uuid)
	if err != nil {
		return "", err
	}
	m, ret := h.GetComputeMode()
	if ret != nvml.SUCCESS {
		return "", fmt.Errorf("nvml: compute mode of %s: %s", uuid, errorString(ret))
	}
	for name, v := range computeModes {
		if v == m {
			return name, nil
		}
	}
	return gpu.ComputeExclusiveProcess, nil
}

// AccountingMode reports whether the GPU keeps per-process accounting.
func (b *Backend) AccountingMode(uuid string) (bool, error) {
	h, err := b.handle(uuid)
	if err != nil {
		return false, err
	}
	mode, ret := h.GetAccountingMode()
	if ret != nvml.SUCCESS {
		return false, fmt.Errorf("accounting mode of %s: %s", uuid, errorString(ret))
	}
	return mode == nvml.FEATURE_ENABLED, nil
}

// SetAccountingMode turns per-process accounting on or off, which needs
// root.
func (b *Backend) SetAccountingMode(uuid string, on bool) error {
	h, err := b.handle(uuid)
	if err != nil {
		return err
	}
	mode := nvml.FEATURE_DISABLED
	if on {
		mode = nvml.FEATURE_ENABLED
	}
	if ret := h.SetAccountingMode(mode); ret != nvml.SUCCESS {
		return fmt.Errorf("set accounting mode of %s: %s", uuid, errorString(ret))
	}
	return nil
}

// SetComputeMode sets the GPU's compute mode, which needs root.
func (b *Backend) SetComputeMode(uuid string, m gpu.ComputeMode) error {
	v, ok := computeModes[m]
	if !ok {
		return fmt.Errorf("nvml: unknown compute mode %q", m)
	}
	h, err := b.handle(uuid)
	if err != nil {
		return err
	}
	if ret := h.SetComputeMode(v); ret != nvml.SUCCESS {
		return fmt.Errorf("nvml: set the compute mode of %s to %s: %s", uuid, m, errorString(ret))
	}
	return nil
}

// AccountingUnavailable says why NVML does not account the processes on
// uuid: accounting mode is off and the backend could not turn it on, or
// the device does not tell. It tries to turn the mode on where it has not
// yet.
func (b *Backend) AccountingUnavailable(uuid string) string {
	h, err := b.handle(uuid)
	if err != nil {
		return err.Error()
	}
	if b.accounting(uuid, h) {
		return ""
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if why := b.accountingWhy[uuid]; why != "" {
		return why
	}
	return fmt.Sprintf("NVML accounting mode is off on %s (it was turned off after caravan found it on)", uuid)
}

// AccountedProcesses lists the processes in the GPU's accounting buffer,
// running and terminated, with their peaks. A process that leaves the
// buffer between the listing and its statistics is left out.
func (b *Backend) AccountedProcesses(uuid string) ([]gpu.AccountedProcess, error) {
	h, err := b.handle(uuid)
	if err != nil {
		return nil, err
	}
	if why := b.AccountingUnavailable(uuid); why != "" {
		return nil, errors.New(why)
	}
	pids, ret := h.GetAccountingPids()
	if ret != nvml.SUCCESS {
		b.noteLost(uuid, ret)
		return nil, fmt.Errorf("nvml: %s accounted processes: %s", uuid, errorString(ret))
	}
	out := make([]gpu.AccountedProcess, 0, len(pids))
	seen := make(map[int]bool, len(pids))
	for _, pid := range pids {
		if seen[pid] {
			continue // NVML tells only the latest process with a PID
		}
		seen[pid] = true
		st, ret := h.GetAccountingStats(uint32(pid))
		switch ret {
		case nvml.SUCCESS:
		case nvml.ERROR_NOT_FOUND:
			continue // overwritten in the circular buffer since the listing
		default:
			b.noteLost(uuid, ret)
			return nil, fmt.Errorf("nvml: %s accounting stats of pid %d: %s", uuid, pid, errorString(ret))
		}
		out = append(out, accounted(pid, st))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PID < out[j].PID })
	return out, nil
}

// accounted turns NVML's statistics of pid into the backend's: bytes into
// MiB (an unknown peak into 0), microseconds since the epoch into a time.
func accounted(pid int, st nvml.AccountingStats) gpu.AccountedProcess {
	p := gpu.AccountedProcess{PID: pid, Running: st.IsRunning != 0}
	if st.MaxMemoryUsage != gpu.MemoryNotAvailable {
		p.PeakMemoryMiB = st.MaxMemoryUsage >> 20
	}
	if st.StartTime != 0 && st.StartTime < 1<<62 {
		p.StartTime = time.UnixMicro(int64(st.StartTime))
	}
	return p
}
