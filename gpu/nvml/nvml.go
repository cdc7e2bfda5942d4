// Package nvml is the GPU backend for real NVIDIA GPUs, through go-nvml.
// libnvidia-ml is loaded at run time, so the binary runs on machines without
// the NVIDIA driver and reports its absence as an error instead of crashing.
// Every per-device call goes through nvml.Device methods, so go-nvml's mock
// packages stand in for the hardware in tests.
package nvml

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/caravan-gpu/caravan/gpu"
	log "github.com/hashicorp/go-hclog"
)

// Backend talks to NVML.
type Backend struct {
	lib    nvml.Interface
	logger log.Logger

	mu      sync.Mutex
	handles map[string]nvml.Device // UUID (GPU or MIG) -> handle
	xids    map[string]xidEvent    // UUID -> last critical Xid
	lost    map[string]bool
	// parentOf maps a MIG instance's UUID to its GPU's.
	parentOf map[string]string
	// ckpt checkpoints CUDA processes; nil until EnableCheckpoint finds a
	// way, and ckptWhy then says why not.
	ckpt    gpu.Checkpointer
	ckptWhy string
	// accountingTried holds the devices on which turning accounting mode on
	// was tried, so that a refusal is logged once; accountingWhy says why
	// accounting is off on a device where the try failed.
	accountingTried map[string]bool
	accountingWhy   map[string]string

	stopEvents chan struct{}
	eventsDone chan struct{}
}

var (
	_ gpu.Backend    = (*Backend)(nil)
	_ gpu.Accounting = (*Backend)(nil)
)

// New loads libnvidia-ml and initialises NVML.
func New(logger log.Logger) (*Backend, error) {
	return NewWithLibrary(nvml.New(), logger)
}

// NewWithLibrary initialises the backend on lib, a real library or one of
// go-nvml's mocks.
func NewWithLibrary(lib nvml.Interface, logger log.Logger) (b *Backend, err error) {
	if logger == nil {
		logger = log.NewNullLogger()
	}
	// A broken or partial libnvidia-ml must not take the plugin down.
	defer func() {
		if r := recover(); r != nil {
			b, err = nil, fmt.Errorf("nvml: initialising NVML failed: %v", r)
		}
	}()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		if ret == nvml.ERROR_LIBRARY_NOT_FOUND {
			return nil, errors.New("nvml: libnvidia-ml.so.1 not found: install the NVIDIA driver on this node, or use backend = \"sim\" on machines without a GPU")
		}
		return nil, fmt.Errorf("nvml: initialising NVML failed: %s (is the NVIDIA driver loaded? try nvidia-smi)", errorString(ret))
	}
	b = &Backend{
		lib:             lib,
		logger:          logger.Named("nvml"),
		handles:         map[string]nvml.Device{},
		xids:            map[string]xidEvent{},
		lost:            map[string]bool{},
		parentOf:        map[string]string{},
		accountingTried: map[string]bool{},
		accountingWhy:   map[string]string{},
		stopEvents:      make(chan struct{}),
		eventsDone:      make(chan struct{}),
	}
	go b.watchXids()
	return b, nil
}

func errorString(ret nvml.Return) (s string) {
	defer func() {
		if recover() != nil {
			s = fmt.Sprintf("NVML error %d", int32(ret))
		}
	}()
	return nvml.ErrorString(ret)
}

func (b *Backend) Name() string { return "nvml" }

func (b *Backend) Versions() (string, string, error) {
	drv, ret := b.lib.SystemGetDriverVersion()
	if ret != nvml.SUCCESS {
		return "", "", fmt.Errorf("nvml: driver version: %s", errorString(ret))
	}
	cuda, ret := b.lib.SystemGetCudaDriverVersion()
	if ret != nvml.SUCCESS {
		return "", "", fmt.Errorf("nvml: CUDA version: %s", errorString(ret))
	}
	return drv, fmt.Sprintf("%d.%d", cuda/1000, cuda%1000/10), nil
}

// Devices lists every GPU and, on a GPU in MIG mode, its MIG instances.
func (b *Backend) Devices() ([]gpu.Device, error) {
	n, ret := b.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("nvml: device count: %s", errorString(ret))
	}
	handles := map[string]nvml.Device{}
	parents := map[string]string{}
	var out []gpu.Device
	for i := 0; i < n; i++ {
		h, ret := b.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("nvml: device %d: %s", i, errorString(ret))
		}
		d, err := describe(h)
		if err != nil {
			return nil, fmt.Errorf("nvml: device %d: %w", i, err)
		}
		handles[d.UUID] = h
		migs, err := migDevices(h, d)
		if err != nil {
			return nil, fmt.Errorf("nvml: device %d (%s): %w", i, d.UUID, err)
		}
		d.MIGEnabled = migs != nil
		out = append(out, d)
		for _, m := range migs {
			handles[m.dev.UUID] = m.handle
			parents[m.dev.UUID] = d.UUID
			out = append(out, m.dev)
		}
	}
	b.mu.Lock()
	for k, v := range handles {
		b.handles[k] = v
	}
	for k, v := range parents {
		b.parentOf[k] = v
	}
	b.mu.Unlock()
	// Accounting mode keeps statistics only while it is on, so it is turned
	// on as the GPUs are first listed, not when the first process is
	// sampled.
	for _, d := range out {
		if !d.IsMIG() {
			b.accounting(d.UUID, handles[d.UUID])
		}
	}
	return out, nil
}

// describe reads the static facts of a physical GPU.
func describe(h nvml.Device) (gpu.Device, error) {
	var d gpu.Device
	var ret nvml.Return
	if d.UUID, ret = h.GetUUID(); ret != nvml.SUCCESS {
		return d, fmt.Errorf("uuid: %s", errorString(ret))
	}
	if d.Model, ret = h.GetName(); ret != nvml.SUCCESS {
		return d, fmt.Errorf("name: %s", errorString(ret))
	}
	mem, ret := h.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return d, fmt.Errorf("memory: %s", errorString(ret))
	}
	d.MemoryMiB = mem.Total >> 20
	major, minor, ret := h.GetCudaComputeCapability()
	if ret == nvml.SUCCESS {
		d.ComputeCapability = fmt.Sprintf("%d.%d", major, minor)
	}
	if arch, ret := h.GetArchitecture(); ret == nvml.SUCCESS {
		d.Architecture = architectureName(arch)
	}
	if pci, ret := h.GetPciInfo(); ret == nvml.SUCCESS {
		d.PCIBusID = busID(pci)
	}
	d.SMCount = smCount(h, major, minor)
	d.PCIBandwidthMBps = pciBandwidth(h)
	return d, nil
}

type migDevice struct {
	handle nvml.Device
	dev    gpu.Device
}

// migDevices returns the MIG instances of parent, or nil when MIG is off.
func migDevices(h nvml.Device, parent gpu.Device) ([]migDevice, error) {
	current, _, ret := h.GetMigMode()
	if ret == nvml.ERROR_NOT_SUPPORTED || (ret == nvml.SUCCESS && current != nvml.DEVICE_MIG_ENABLE) {
		return nil, nil
	}
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("MIG mode: %s", errorString(ret))
	}
	max, ret := h.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("MIG device count: %s", errorString(ret))
	}
	out := []migDevice{}
	for i := 0; i < max; i++ {
		mh, ret := h.GetMigDeviceHandleByIndex(i)
		if ret == nvml.ERROR_NOT_FOUND || ret == nvml.ERROR_INVALID_ARGUMENT {
			continue // an empty MIG slot
		}
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("MIG device %d: %s", i, errorString(ret))
		}
		uuid, ret := mh.GetUUID()
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("MIG device %d uuid: %s", i, errorString(ret))
		}
		attrs, ret := mh.GetAttributes()
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("MIG device %d attributes: %s", i, errorString(ret))
		}
		mem := attrs.MemorySizeMB
		if info, ret := mh.GetMemoryInfo(); ret == nvml.SUCCESS && info.Total > 0 {
			mem = info.Total >> 20
		}
		profile := fmt.Sprintf("%dg.%dgb", attrs.GpuInstanceSliceCount, (attrs.MemorySizeMB+1023)/1024)
		out = append(out, migDevice{handle: mh, dev: gpu.Device{
			UUID: uuid, Model: parent.Model + " MIG " + profile,
			Architecture: parent.Architecture, ComputeCapability: parent.ComputeCapability,
			MemoryMiB: mem, SMCount: int(attrs.MultiprocessorCount),
			PCIBusID: parent.PCIBusID, PCIBandwidthMBps: parent.PCIBandwidthMBps,
			ParentUUID: parent.UUID, MIGProfile: profile,
		}})
	}
	return out, nil
}

func busID(p nvml.PciInfo) string {
	b := make([]byte, 0, len(p.BusId))
	for _, c := range p.BusId {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	if len(b) == 0 {
		return fmt.Sprintf("%08X:%02X:%02X.0", p.Domain, p.Bus, p.Device)
	}
	return string(b)
}

func architectureName(a nvml.DeviceArchitecture) string {
	switch a {
	case nvml.DEVICE_ARCH_KEPLER:
		return "kepler"
	case nvml.DEVICE_ARCH_MAXWELL:
		return "maxwell"
	case nvml.DEVICE_ARCH_PASCAL:
		return "pascal"
	case nvml.DEVICE_ARCH_VOLTA:
		return "volta"
	case nvml.DEVICE_ARCH_TURING:
		return "turing"
	case nvml.DEVICE_ARCH_AMPERE:
		return "ampere"
	case nvml.DEVICE_ARCH_ADA:
		return "ada"
	case nvml.DEVICE_ARCH_HOPPER:
		return "hopper"
	case nvml.DEVICE_ARCH_BLACKWELL:
		return "blackwell"
	case nvml.DEVICE_ARCH_RUBIN:
		return "rubin"
	default:
		return "unknown"
	}
}

// smCount derives the SM count from the CUDA core count, since NVML reports
// SMs only for MIG instances.
func smCount(h nvml.Device, major, minor int) int {
	cores, ret := h.GetNumGpuCores()
	if ret != nvml.SUCCESS || cores <= 0 {
		return 0
	}
	perSM := 128
	switch {
	case major == 6 && minor == 0, major == 7, major == 8 && minor == 0:
		perSM = 64 // GP100, Volta, Turing, GA100
	case major < 6:
		perSM = 192
	}
	return cores / perSM
}

// pciBandwidth is the link's usable one-way bandwidth in MB/s.
func pciBandwidth(h nvml.Device) uint64 {
	gen, ret := h.GetMaxPcieLinkGeneration()
	if ret != nvml.SUCCESS {
		return 0
	}
	width, ret := h.GetMaxPcieLinkWidth()
	if ret != nvml.SUCCESS {
		return 0
	}
	perLane := map[int]float64{1: 250, 2: 500, 3: 984.6, 4: 1969.2, 5: 3938.5, 6: 7563}[gen]
	return uint64(perLane*float64(width) + 0.5)
}

// handle returns the NVML handle of a GPU or MIG instance.
func (b *Backend) handle(uuid string) (nvml.Device, error) {
	b.mu.Lock()
	h, ok := b.handles[uuid]
	b.mu.Unlock()
	if ok {
		return h, nil
	}
	h, ret := b.lib.DeviceGetHandleByUUID(uuid)
	switch ret {
	case nvml.SUCCESS:
		b.mu.Lock()
		b.handles[uuid] = h
		b.mu.Unlock()
		return h, nil
	case nvml.ERROR_NOT_FOUND, nvml.ERROR_INVALID_ARGUMENT:
		return nil, fmt.Errorf("%w %q", gpu.ErrUnknownDevice, uuid)
	default:
		return nil, fmt.Errorf("nvml: %s: %s", uuid, errorString(ret))
	}
}

func (b *Backend) Stats(uuid string) (gpu.Stats, error) {
	h, err := b.handle(uuid)
	if err != nil {
		return gpu.Stats{}, err
	}
	s := gpu.Stats{Timestamp: time.Now()}
	mem, ret := h.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		b.noteLost(uuid, ret)
		return gpu.Stats{}, fmt.Errorf("nvml: %s memory: %s", uuid, errorString(ret))
	}
	s.UsedMemoryMiB, s.TotalMemoryMiB = mem.Used>>20, mem.Total>>20
	// The rest is best effort: MIG instances and some boards do not report it.
	if u, ret := h.GetUtilizationRates(); ret == nvml.SUCCESS {
		s.GPUUtilPercent, s.MemUtilPercent = u.Gpu, u.Memory
	}
	if mw, ret := h.GetPowerUsage(); ret == nvml.SUCCESS {
		s.PowerWatts = mw / 1000
	}
	if t, ret := h.GetTemperature(nvml.TEMPERATURE_GPU); ret == nvml.SUCCESS {
		s.TemperatureC = t
	}
	for loc, dst := range map[nvml.MemoryLocation]*uint64{
		nvml.MEMORY_LOCATION_L1_CACHE:      &s.ECCErrorsL1,
		nvml.MEMORY_LOCATION_L2_CACHE:      &s.ECCErrorsL2,
		nvml.MEMORY_LOCATION_DEVICE_MEMORY: &s.ECCErrorsDev,
	} {
		if n, ret := h.GetMemoryErrorCounter(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC, loc); ret == nvml.SUCCESS {
			*dst = n
		}
	}
	return s, nil
}

// Processes lists the compute processes and the MPS clients of a device:
// under MPS a client may be listed only by GetMPSComputeRunningProcesses.
func (b *Backend) Processes(uuid string) ([]gpu.Process, error) {
	h, err := b.handle(uuid)
	if err != nil {
		return nil, err
	}
	compute, ret := h.GetComputeRunningProcesses()
	if ret != nvml.SUCCESS {
		b.noteLost(uuid, ret)
		return nil, fmt.Errorf("nvml: %s processes: %s", uuid, errorString(ret))
	}
	mps, ret := h.GetMPSComputeRunningProcesses()
	switch ret {
	case nvml.SUCCESS:
	case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_FUNCTION_NOT_FOUND:
		mps = nil // no MPS on this device or driver
	default:
		b.noteLost(uuid, ret)
		return nil, fmt.Errorf("nvml: %s MPS client processes: %s", uuid, errorString(ret))
	}
	procs := gpu.MergeProcesses(processes(compute), processes(mps))
	if len(procs) > 0 && b.accounting(uuid, h) {
		for i := range procs {
			// maxMemoryUsage is the process's peak since it started, which
			// catches a spike that came and went between two samples.
			st, ret := h.GetAccountingStats(uint32(procs[i].PID))
			if ret == nvml.SUCCESS && st.MaxMemoryUsage != gpu.MemoryNotAvailable {
				procs[i].PeakMemoryMiB = st.MaxMemoryUsage >> 20
			}
		}
	}
	return procs, nil
}

func processes(infos []nvml.ProcessInfo) []gpu.Process {
	out := make([]gpu.Process, 0, len(infos))
	for _, p := range infos {
		out = append(out, gpu.ProcessUsing(int(p.Pid), p.UsedGpuMemory))
	}
	return out
}

func (b *Backend) noteLost(uuid string, ret nvml.Return) {
	if ret == nvml.ERROR_GPU_IS_LOST {
		b.mu.Lock()
		b.lost[uuid] = true
		b.mu.Unlock()
	}
}

func (b *Backend) Close() error {
	select {
	case <-b.stopEvents:
	default:
		close(b.stopEvents)
		<-b.eventsDone
	}
	if ret := b.lib.Shutdown(); ret != nvml.SUCCESS {
		return fmt.Errorf("nvml: shutdown: %s", errorString(ret))
	}
	return nil
}
