package sim

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/caravan-gpu/caravan/gpu"
)

// Fleet is the file that describes a simulated GPU fleet.
type Fleet struct {
	DriverVersion string     `json:"driver_version"`
	CUDAVersion   string     `json:"cuda_version"`
	GPUs          []FleetGPU `json:"gpus"`
}

// FleetGPU describes one GPU, or Count identical GPUs.
type FleetGPU struct {
	// UUID is used as is when Count <= 1, and as a prefix otherwise.
	UUID              string     `json:"uuid"`
	Count             int        `json:"count"`
	Model             string     `json:"model"`
	Architecture      string     `json:"architecture"`
	ComputeCapability string     `json:"compute_capability"`
	MemoryMiB         uint64     `json:"memory_mib"`
	SMCount           int        `json:"sm_count"`
	PCIBusID          string     `json:"pci_bus_id"`
	PCIBandwidthMBps  uint64     `json:"pci_bandwidth_mbps"`
	Unhealthy         string     `json:"unhealthy"`
	MIG               []FleetMIG `json:"mig"`
	// ProcessMemoryNotAvailable makes the GPU (and its MIG instances) report
	// every process's memory as NVML_VALUE_NOT_AVAILABLE, as NVML does on
	// some MIG setups and under Windows WDDM.
	ProcessMemoryNotAvailable bool `json:"process_memory_not_available"`
	// MPSClients lists the GPU's processes only as MPS clients
	// (GetMPSComputeRunningProcesses), as NVML does under an MPS server.
	MPSClients bool `json:"mps_clients"`
	// AccountingOff makes the GPU (and its MIG instances) one whose NVML
	// accounting mode is off and cannot be turned on (a node where the
	// plugin does not run as root): it tells no process's peak and keeps
	// no exited process's statistics.
	AccountingOff bool `json:"accounting_off"`
	// CheckpointTiming makes a checkpoint and a restore on this GPU take as
	// long as on the hardware; by default they take no time.
	CheckpointTiming CheckpointTiming `json:"checkpoint_timing"`
}

// CheckpointTiming is how long a checkpoint and a restore take: a fixed
// cost and a cost per GiB of GPU memory the process holds. Measured on an
// H100 (docs/driver.md, "Measured on an H100"): 410 ms + 515 ms/GiB to
// checkpoint, 255 ms + 200 ms/GiB to restore.
type CheckpointTiming struct {
	CheckpointMs       uint64 `json:"checkpoint_ms"`
	CheckpointMsPerGiB uint64 `json:"checkpoint_ms_per_gib"`
	RestoreMs          uint64 `json:"restore_ms"`
	RestoreMsPerGiB    uint64 `json:"restore_ms_per_gib"`
}

// maxTimingMs bounds each timing field, so that a slip of the pen cannot
// make a simulated checkpoint outlast any test.
const maxTimingMs = 600_000

func (t CheckpointTiming) checkpoint(mib uint64) time.Duration {
	return time.Duration(t.CheckpointMs)*time.Millisecond + time.Duration(mib*t.CheckpointMsPerGiB)*time.Millisecond/1024
}

func (t CheckpointTiming) restore(mib uint64) time.Duration {
	return time.Duration(t.RestoreMs)*time.Millisecond + time.Duration(mib*t.RestoreMsPerGiB)*time.Millisecond/1024
}

// FleetMIG describes one MIG instance of a GPU.
type FleetMIG struct {
	Profile   string `json:"profile"`
	MemoryMiB uint64 `json:"memory_mib"`
	SMCount   int    `json:"sm_count"`
}

// LoadFleet reads and validates a fleet file.
func LoadFleet(path string) (*Fleet, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("sim fleet: %w", err)
	}
	f, err := ParseFleet(data)
	if err != nil {
		return nil, fmt.Errorf("sim fleet %s: %w", path, err)
	}
	return f, nil
}

// ParseFleet decodes and validates a fleet description.
func ParseFleet(data []byte) (*Fleet, error) {
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	var f Fleet
	if err := dec.Decode(&f); err != nil {
		return nil, err
	}
	if len(f.GPUs) == 0 {
		return nil, fmt.Errorf("gpus: at least one GPU is required")
	}
	seen := map[string]bool{}
	for i, g := range f.GPUs {
		field := func(name string) string { return fmt.Sprintf("gpus[%d].%s", i, name) }
		switch {
		case g.Model == "":
			return nil, fmt.Errorf("%s: is required", field("model"))
		case g.MemoryMiB == 0:
			return nil, fmt.Errorf("%s: must be > 0", field("memory_mib"))
		case g.Count < 0 || g.Count > 1024:
			return nil, fmt.Errorf("%s: must be between 0 and 1024, got %d", field("count"), g.Count)
		case g.SMCount < 0:
			return nil, fmt.Errorf("%s: must be >= 0", field("sm_count"))
		}
		ct := g.CheckpointTiming
		for _, t := range []struct {
			name string
			ms   uint64
		}{{"checkpoint_ms", ct.CheckpointMs}, {"checkpoint_ms_per_gib", ct.CheckpointMsPerGiB}, {"restore_ms", ct.RestoreMs}, {"restore_ms_per_gib", ct.RestoreMsPerGiB}} {
			if t.ms > maxTimingMs {
				return nil, fmt.Errorf("%s: must be at most %d ms, got %d", field("checkpoint_timing."+t.name), maxTimingMs, t.ms)
			}
		}
		var migTotal uint64
		for j, m := range g.MIG {
			if m.MemoryMiB == 0 {
				return nil, fmt.Errorf("%s: must be > 0", field(fmt.Sprintf("mig[%d].memory_mib", j)))
			}
			migTotal += m.MemoryMiB
		}
		if migTotal > g.MemoryMiB {
			return nil, fmt.Errorf("%s: MIG instances need %d MiB but the GPU has %d MiB", field("mig"), migTotal, g.MemoryMiB)
		}
		for _, d := range g.expand(i) {
			if seen[d.UUID] {
				return nil, fmt.Errorf("%s: duplicate UUID %q", field("uuid"), d.UUID)
			}
			seen[d.UUID] = true
		}
	}
	return &f, nil
}

// expand returns the physical GPUs and MIG instances this entry stands for.
func (g FleetGPU) expand(index int) []gpu.Device {
	n := g.Count
	if n == 0 {
		n = 1
	}
	var out []gpu.Device
	for k := 0; k < n; k++ {
		uuid := g.UUID
		if uuid == "" {
			uuid = fmt.Sprintf("GPU-sim-%02d", index)
		}
		if n > 1 || g.UUID == "" {
			uuid = fmt.Sprintf("%s-%02d", uuid, k)
		}
		bus := g.PCIBusID
		if bus == "" || n > 1 {
			bus = fmt.Sprintf("00000000:%02X:%02X.0", 0x10+index, k)
		}
		dev := gpu.Device{
			UUID: uuid, Model: g.Model, Architecture: g.Architecture,
			ComputeCapability: g.ComputeCapability, MemoryMiB: g.MemoryMiB,
			SMCount: g.SMCount, PCIBusID: bus, PCIBandwidthMBps: g.PCIBandwidthMBps,
			MIGEnabled: len(g.MIG) > 0,
		}
		out = append(out, dev)
		for j, m := range g.MIG {
			out = append(out, gpu.Device{
				UUID:  fmt.Sprintf("MIG-%s-%d", strings.TrimPrefix(uuid, "GPU-"), j),
				Model: g.Model + " MIG " + m.Profile, Architecture: g.Architecture,
				ComputeCapability: g.ComputeCapability, MemoryMiB: m.MemoryMiB,
				SMCount: m.SMCount, PCIBusID: bus, PCIBandwidthMBps: g.PCIBandwidthMBps,
				ParentUUID: uuid, MIGProfile: m.Profile,
			})
		}
	}
	return out
}

// Devices expands the fleet into devices.
func (f *Fleet) Devices() []gpu.Device {
	var out []gpu.Device
	for i, g := range f.GPUs {
		out = append(out, g.expand(i)...)
	}
	return out
}

// processListing is how a GPU lists its processes, and how long it takes
// to checkpoint and restore them.
type processListing struct {
	memoryNotAvailable, mpsClients, accountingOff bool
	timing                                        CheckpointTiming
}

// listings maps device UUIDs (physical and MIG) to how they list processes.
func (f *Fleet) listings() map[string]processListing {
	m := map[string]processListing{}
	for i, g := range f.GPUs {
		l := processListing{memoryNotAvailable: g.ProcessMemoryNotAvailable, mpsClients: g.MPSClients, accountingOff: g.AccountingOff,
			timing: g.CheckpointTiming}
		if l == (processListing{}) {
			continue
		}
		for _, d := range g.expand(i) {
			m[d.UUID] = l
		}
	}
	return m
}

// unhealthy maps device UUIDs (physical and MIG) to their fleet-file fault.
func (f *Fleet) unhealthy() map[string]string {
	m := map[string]string{}
	for i, g := range f.GPUs {
		if g.Unhealthy == "" {
			continue
		}
		for _, d := range g.expand(i) {
			m[d.UUID] = g.Unhealthy
		}
	}
	return m
}
