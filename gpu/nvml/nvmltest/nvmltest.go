// Package nvmltest completes go-nvml's mock servers with the calls caravan's
// NVML backend makes that the mocks leave unset (utilisation, power, ECC,
// processes and MPS clients, accounting, events, MIG device handles), so
// tests can run the real backend on a mock fleet and inject faults.
package nvmltest

import (
	"fmt"
	"sort"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// Fleet is a mock server with controllable per-GPU state.
type Fleet struct {
	*server.Server

	mu     sync.Mutex
	state  map[string]*GPUState // by GPU UUID
	events chan nvml.EventData
}

// GPUState is what a test can change on one mocked GPU.
type GPUState struct {
	UsedMiB        uint64
	Util           uint32
	PowerWatts     uint32
	TemperatureC   uint32
	UncorrectedECC uint64
	Lost           bool
	// Processes are listed by GetComputeRunningProcesses, MPSProcesses by
	// GetMPSComputeRunningProcesses, as NVML lists MPS clients.
	Processes    []nvml.ProcessInfo
	MPSProcesses []nvml.ProcessInfo
	// MPSListErr, when set, is what GetMPSComputeRunningProcesses returns.
	MPSListErr nvml.Return
	// Accounting is the GPU's accounting mode; AccountingSetErr, when set, is
	// what SetAccountingMode returns (NO_PERMISSION for a non-root caller).
	Accounting       nvml.EnableState
	AccountingSetErr nvml.Return
	// PeakBytes is each process's maxMemoryUsage in its accounting stats.
	PeakBytes map[uint32]uint64
	// Accounted holds whole accounting stats, terminated processes' among
	// them, of processes the GPU's accounting buffer keeps besides those
	// of PeakBytes, which run.
	Accounted map[uint32]nvml.AccountingStats
	// AfterAccountingPids, when set, changes the state just after
	// GetAccountingPids lists the processes, as the buffer may change
	// between that listing and the stats.
	AfterAccountingPids func(*GPUState)
	// AccountingCalls counts GetAccountingStats calls.
	AccountingCalls int
	// MIG holds the MIG device handles of the GPU, filled by EnableMIG.
	MIG []*mock.Device
	// ComputeMode is the GPU's; ComputeModeSetErr, when set, is what
	// SetComputeMode returns.
	ComputeMode       nvml.ComputeMode
	ComputeModeSetErr nvml.Return
}

// New builds a mock server holding the given GPUs, completed for the backend.
func New(configs ...gpus.Config) *Fleet {
	s, err := server.New(
		server.WithGPUs(configs...),
		server.WithDriverVersion("550.54.15"),
		server.WithNVMLVersion("12.550.54.15"),
		server.WithCUDADriverVersion(12040),
	)
	if err != nil {
		panic(err)
	}
	return Complete(s)
}

// Complete fills in the mock functions the backend needs on s and its devices.
func Complete(s *server.Server) *Fleet {
	f := &Fleet{Server: s, state: map[string]*GPUState{}, events: make(chan nvml.EventData, 16)}
	s.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) {
		return &mock.EventSet{
			WaitFunc: func(timeoutMs uint32) (nvml.EventData, nvml.Return) {
				select {
				case ev := <-f.events:
					return ev, nvml.SUCCESS
				default:
					return nvml.EventData{}, nvml.ERROR_TIMEOUT
				}
			},
			FreeFunc: func() nvml.Return { return nvml.SUCCESS },
		}, nvml.SUCCESS
	}
	for _, h := range s.Devices {
		f.completeDevice(h.(*server.Device))
	}
	return f
}

// State returns the controllable state of the GPU with uuid.
func (f *Fleet) State(uuid string) *GPUState {
	f.mu.Lock()
	defer f.mu.Unlock()
	st, ok := f.state[uuid]
	if !ok {
		st = &GPUState{TemperatureC: 35, PowerWatts: 70}
		f.state[uuid] = st
	}
	return st
}

// Update changes a GPU's state under the fleet's lock.
func (f *Fleet) Update(uuid string, change func(*GPUState)) {
	st := f.State(uuid)
	f.mu.Lock()
	defer f.mu.Unlock()
	change(st)
}

func (f *Fleet) read(uuid string) GPUState {
	st := f.State(uuid)
	f.mu.Lock()
	defer f.mu.Unlock()
	return *st
}

// InjectXid sends a critical Xid event for the GPU at index.
func (f *Fleet) InjectXid(index int, xid uint64) {
	f.events <- nvml.EventData{Device: f.Devices[index], EventType: nvml.EventTypeXidCriticalError, EventData: xid}
}

// coresPerSM lets the mock report CUDA cores from which the backend derives
// SMs, using the SM counts of the real boards.
var smCounts = map[nvml.DeviceArchitecture]struct{ sms, perSM int }{
	nvml.DEVICE_ARCH_AMPERE:    {108, 64},
	nvml.DEVICE_ARCH_HOPPER:    {132, 128},
	nvml.DEVICE_ARCH_BLACKWELL: {144, 128},
}

func (f *Fleet) completeDevice(d *server.Device) {
	uuid := d.UUID
	d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
		p := nvml.PciInfo{PciDeviceId: d.Config.PciDeviceId, Bus: uint32(d.Index)}
		for i, c := range []byte(fmt.Sprintf("00000000:%02X:00.0", d.Index+0x10)) {
			p.BusId[i] = int8(c)
		}
		return p, nvml.SUCCESS
	}
	d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
		st := f.read(uuid)
		if st.Lost {
			return nvml.Memory{}, nvml.ERROR_GPU_IS_LOST
		}
		total := d.MemoryInfo.Total
		used := st.UsedMiB << 20
		return nvml.Memory{Total: total, Used: used, Free: total - used}, nvml.SUCCESS
	}
	d.GetNumGpuCoresFunc = func() (int, nvml.Return) {
		sc, ok := smCounts[d.Config.Architecture]
		if !ok {
			return 0, nvml.ERROR_NOT_SUPPORTED
		}
		sms := sc.sms
		if d.Config.MemoryMB < 30000 { // A30
			sms = 56
		}
		return sms * sc.perSM, nvml.SUCCESS
	}
	d.GetMaxPcieLinkGenerationFunc = func() (int, nvml.Return) {
		if d.Config.Architecture >= nvml.DEVICE_ARCH_HOPPER {
			return 5, nvml.SUCCESS
		}
		return 4, nvml.SUCCESS
	}
	d.GetMaxPcieLinkWidthFunc = func() (int, nvml.Return) { return 16, nvml.SUCCESS }
	d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
		st := f.read(uuid)
		return nvml.Utilization{Gpu: st.Util, Memory: st.Util / 2}, nvml.SUCCESS
	}
	d.GetPowerUsageFunc = func() (uint32, nvml.Return) { return f.read(uuid).PowerWatts * 1000, nvml.SUCCESS }
	d.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) {
		return f.read(uuid).TemperatureC, nvml.SUCCESS
	}
	d.GetMemoryErrorCounterFunc = func(_ nvml.MemoryErrorType, _ nvml.EccCounterType, loc nvml.MemoryLocation) (uint64, nvml.Return) {
		if loc == nvml.MEMORY_LOCATION_DEVICE_MEMORY {
			return f.read(uuid).UncorrectedECC, nvml.SUCCESS
		}
		return 0, nvml.SUCCESS
	}
	d.GetTotalEccErrorsFunc = func(nvml.MemoryErrorType, nvml.EccCounterType) (uint64, nvml.Return) {
		return f.read(uuid).UncorrectedECC, nvml.SUCCESS
	}
	d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		st := f.read(uuid)
		if st.Lost {
			return nil, nvml.ERROR_GPU_IS_LOST
		}
		return st.Processes, nvml.SUCCESS
	}
	d.GetMPSComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		st := f.read(uuid)
		switch {
		case st.Lost:
			return nil, nvml.ERROR_GPU_IS_LOST
		case st.MPSListErr != nvml.SUCCESS:
			return nil, st.MPSListErr
		}
		return st.MPSProcesses, nvml.SUCCESS
	}
	f.completeAccounting(uuid, &d.Device)
	f.completeComputeMode(uuid, &d.Device)
	d.RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.SUCCESS }
	d.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return 7, nvml.SUCCESS }
	d.GetMigDeviceHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		st := f.read(uuid)
		if i < 0 || i >= len(st.MIG) {
			return nil, nvml.ERROR_NOT_FOUND
		}
		return st.MIG[i], nvml.SUCCESS
	}
}

// completeComputeMode mocks the GPU's compute mode.
func (f *Fleet) completeComputeMode(uuid string, d *mock.Device) {
	d.GetComputeModeFunc = func() (nvml.ComputeMode, nvml.Return) { return f.read(uuid).ComputeMode, nvml.SUCCESS }
	d.SetComputeModeFunc = func(m nvml.ComputeMode) nvml.Return {
		if err := f.read(uuid).ComputeModeSetErr; err != nvml.SUCCESS {
			return err
		}
		f.Update(uuid, func(st *GPUState) { st.ComputeMode = m })
		return nvml.SUCCESS
	}
}

// completeAccounting mocks NVML's accounting mode as the driver keeps it:
// stats exist only while the mode is on, for processes it has seen.
func (f *Fleet) completeAccounting(uuid string, d *mock.Device) {
	d.GetAccountingModeFunc = func() (nvml.EnableState, nvml.Return) {
		return f.read(uuid).Accounting, nvml.SUCCESS
	}
	d.SetAccountingModeFunc = func(mode nvml.EnableState) nvml.Return {
		if err := f.read(uuid).AccountingSetErr; err != nvml.SUCCESS {
			return err
		}
		f.Update(uuid, func(st *GPUState) { st.Accounting = mode })
		return nvml.SUCCESS
	}
	d.GetAccountingStatsFunc = func(pid uint32) (nvml.AccountingStats, nvml.Return) {
		var st GPUState
		f.Update(uuid, func(s *GPUState) { s.AccountingCalls++; st = *s })
		if st.Accounting != nvml.FEATURE_ENABLED {
			return nvml.AccountingStats{}, nvml.ERROR_NOT_SUPPORTED
		}
		if stats, ok := st.Accounted[pid]; ok {
			return stats, nvml.SUCCESS
		}
		peak, ok := st.PeakBytes[pid]
		if !ok {
			return nvml.AccountingStats{}, nvml.ERROR_NOT_FOUND
		}
		return nvml.AccountingStats{MaxMemoryUsage: peak, IsRunning: 1}, nvml.SUCCESS
	}
	d.GetAccountingPidsFunc = func() ([]int, nvml.Return) {
		var pids []int
		var ret nvml.Return
		f.Update(uuid, func(st *GPUState) {
			if st.Accounting != nvml.FEATURE_ENABLED {
				ret = nvml.ERROR_NOT_SUPPORTED
				return
			}
			for pid := range st.PeakBytes {
				pids = append(pids, int(pid))
			}
			for pid := range st.Accounted {
				if _, ok := st.PeakBytes[pid]; !ok {
					pids = append(pids, int(pid))
				}
			}
			if st.AfterAccountingPids != nil {
				st.AfterAccountingPids(st)
			}
		})
		sort.Ints(pids)
		return pids, ret
	}
}

// noAccounting is how a MIG device handle answers for accounting.
func noAccounting(d *mock.Device) {
	d.GetAccountingModeFunc = func() (nvml.EnableState, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
	d.GetAccountingPidsFunc = func() ([]int, nvml.Return) { return nil, nvml.ERROR_NOT_SUPPORTED }
	d.GetAccountingStatsFunc = func(uint32) (nvml.AccountingStats, nvml.Return) {
		return nvml.AccountingStats{}, nvml.ERROR_NOT_SUPPORTED
	}
}

// EnableMIG switches the GPU at index into MIG mode and creates one GPU
// instance per profile ID through the mock's own MIG profiles, each exposed
// as a MIG device handle.
func (f *Fleet) EnableMIG(index int, profileIDs ...int) error {
	d := f.Devices[index].(*server.Device)
	if ret, _ := d.SetMigMode(nvml.DEVICE_MIG_ENABLE); ret != nvml.SUCCESS {
		return fmt.Errorf("set MIG mode: %v", ret)
	}
	var handles []*mock.Device
	for n, id := range profileIDs {
		info, ret := d.GetGpuInstanceProfileInfo(id)
		if ret != nvml.SUCCESS {
			return fmt.Errorf("profile %d: %v", id, ret)
		}
		if _, ret := d.CreateGpuInstance(&info); ret != nvml.SUCCESS {
			return fmt.Errorf("create GPU instance %d: %v", id, ret)
		}
		migUUID := fmt.Sprintf("MIG-%s-%d", d.UUID[len("GPU-"):], n)
		attrs := nvml.DeviceAttributes{
			MultiprocessorCount:   info.MultiprocessorCount,
			GpuInstanceSliceCount: info.SliceCount,
			MemorySizeMB:          info.MemorySizeMB,
		}
		mig := &mock.Device{
			GetUUIDFunc:       func() (string, nvml.Return) { return migUUID, nvml.SUCCESS },
			GetAttributesFunc: func() (nvml.DeviceAttributes, nvml.Return) { return attrs, nvml.SUCCESS },
			GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) {
				return nvml.Memory{Total: info.MemorySizeMB << 20, Free: info.MemorySizeMB << 20}, nvml.SUCCESS
			},
			GetComputeRunningProcessesFunc:    func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS },
			GetMPSComputeRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS },
			GetUtilizationRatesFunc: func() (nvml.Utilization, nvml.Return) {
				return nvml.Utilization{}, nvml.ERROR_NOT_SUPPORTED
			},
			GetPowerUsageFunc: func() (uint32, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED },
			GetTemperatureFunc: func(nvml.TemperatureSensors) (uint32, nvml.Return) {
				return 0, nvml.ERROR_NOT_SUPPORTED
			},
			GetMemoryErrorCounterFunc: func(nvml.MemoryErrorType, nvml.EccCounterType, nvml.MemoryLocation) (uint64, nvml.Return) {
				return 0, nvml.ERROR_NOT_SUPPORTED
			},
			GetTotalEccErrorsFunc: func(nvml.MemoryErrorType, nvml.EccCounterType) (uint64, nvml.Return) {
				return 0, nvml.ERROR_NOT_SUPPORTED
			},
		}
		noAccounting(mig)
		handles = append(handles, mig)
	}
	f.Update(d.UUID, func(st *GPUState) { st.MIG = handles })
	return nil
}
