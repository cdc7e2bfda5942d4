package nvml_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/caravan-gpu/caravan/gpu"
	"github.com/caravan-gpu/caravan/gpu/nvml"
	"github.com/caravan-gpu/caravan/gpu/nvml/nvmltest"
	"github.com/shoenig/test/must"
)

func open(t *testing.T, lib gonvml.Interface) *nvml.Backend {
	t.Helper()
	b, err := nvml.NewWithLibrary(lib, nil)
	must.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func TestNew_LibraryMissing(t *testing.T) {
	cases := []struct {
		name string
		ret  gonvml.Return
		want string
	}{
		{"library not found", gonvml.ERROR_LIBRARY_NOT_FOUND, "libnvidia-ml.so.1 not found: install the NVIDIA driver"},
		{"driver not loaded", gonvml.ERROR_DRIVER_NOT_LOADED, "initialising NVML failed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			lib := &mock.Interface{InitFunc: func() gonvml.Return { return tc.ret }}
			_, err := nvml.NewWithLibrary(lib, nil)
			must.ErrorContains(t, err, tc.want)
		})
	}
}

func TestNew_RealLibraryAbsentDoesNotCrash(t *testing.T) {
	b, err := nvml.New(nil)
	if err == nil {
		_ = b.Close()
		t.Skip("this machine has NVML")
	}
	must.StrContains(t, err.Error(), "nvml:")
}

func TestDevices_DGXA100(t *testing.T) {
	b := open(t, nvmltest.Complete(dgxa100.New()))
	devs, err := b.Devices()
	must.NoError(t, err)
	must.Len(t, 8, devs)
	for _, d := range devs {
		must.StrHasPrefix(t, "GPU-", d.UUID)
		must.Eq(t, "Mock NVIDIA A100-SXM4-40GB", d.Model)
		must.Eq(t, "ampere", d.Architecture)
		must.Eq(t, "8.0", d.ComputeCapability)
		must.Eq(t, uint64(40960), d.MemoryMiB)
		must.Eq(t, 108, d.SMCount)
		must.Eq(t, uint64(31507), d.PCIBandwidthMBps)
		must.False(t, d.MIGEnabled)
	}
	drv, cuda, err := b.Versions()
	must.NoError(t, err)
	must.Eq(t, "550.54.15", drv)
	must.Eq(t, "12.4", cuda)
}

func TestDevices_MixedFleetWithMIG(t *testing.T) {
	fleet := nvmltest.New(gpus.H100_SXM5_80GB, gpus.H100_SXM5_80GB, gpus.A100_SXM4_40GB, gpus.A30_PCIE_24GB)
	must.NoError(t, fleet.EnableMIG(2, gonvml.GPU_INSTANCE_PROFILE_3_SLICE, gonvml.GPU_INSTANCE_PROFILE_3_SLICE))
	b := open(t, fleet)

	devs, err := b.Devices()
	must.NoError(t, err)
	type row struct {
		model, arch, cc string
		mem             uint64
		sms             int
		mig             bool
		parent          bool
	}
	var got []row
	for _, d := range devs {
		got = append(got, row{d.Model, d.Architecture, d.ComputeCapability, d.MemoryMiB, d.SMCount, d.IsMIG(), d.MIGEnabled})
	}
	a100 := "Mock NVIDIA A100-SXM4-40GB"
	must.Eq(t, []row{
		{"NVIDIA H100 80GB HBM3", "hopper", "9.0", 81920, 132, false, false},
		{"NVIDIA H100 80GB HBM3", "hopper", "9.0", 81920, 132, false, false},
		{a100, "ampere", "8.0", 40960, 108, false, true},
		{a100 + " MIG 3g.20gb", "ampere", "8.0", 19968, 42, true, false},
		{a100 + " MIG 3g.20gb", "ampere", "8.0", 19968, 42, true, false},
		{"NVIDIA A30-PCIE-24GB", "ampere", "8.0", 24576, 56, false, false},
	}, got)
	must.Eq(t, devs[2].UUID, devs[3].ParentUUID)
	must.Eq(t, "3g.20gb", devs[3].MIGProfile)
	must.Eq(t, uint64(63016), devs[0].PCIBandwidthMBps)
	must.NotEq(t, devs[0].PCIBusID, devs[1].PCIBusID)

	// A MIG instance is addressable by its own UUID.
	st, err := b.Stats(devs[3].UUID)
	must.NoError(t, err)
	must.Eq(t, uint64(19968), st.TotalMemoryMiB)
	h, err := b.Health(devs[4].UUID)
	must.NoError(t, err)
	must.True(t, h.Healthy)
}

func TestStatsAndProcesses(t *testing.T) {
	fleet := nvmltest.New(gpus.H100_SXM5_80GB)
	b := open(t, fleet)
	devs, err := b.Devices()
	must.NoError(t, err)
	uuid := devs[0].UUID
	fleet.Update(uuid, func(s *nvmltest.GPUState) {
		s.UsedMiB, s.Util, s.PowerWatts, s.TemperatureC, s.UncorrectedECC = 30000, 80, 450, 61, 0
		s.Processes = []gonvml.ProcessInfo{{Pid: 42, UsedGpuMemory: 20000 << 20}, {Pid: 43, UsedGpuMemory: 10000 << 20}}
	})
	st, err := b.Stats(uuid)
	must.NoError(t, err)
	must.Eq(t, uint64(30000), st.UsedMemoryMiB)
	must.Eq(t, uint64(81920), st.TotalMemoryMiB)
	must.Eq(t, uint32(80), st.GPUUtilPercent)
	must.Eq(t, uint32(450), st.PowerWatts)
	must.Eq(t, uint32(61), st.TemperatureC)
	procs, err := b.Processes(uuid)
	must.NoError(t, err)
	must.Eq(t, []gpu.Process{{PID: 42, UsedMemoryMiB: 20000}, {PID: 43, UsedMemoryMiB: 10000}}, procs)

	_, err = b.Stats("GPU-unknown")
	must.ErrorIs(t, err, gpu.ErrUnknownDevice)
}

func TestHealth(t *testing.T) {
	cases := []struct {
		name   string
		break_ func(f *nvmltest.Fleet, uuid string)
		want   string
	}{
		{"healthy", func(*nvmltest.Fleet, string) {}, ""},
		{"uncorrected ECC", func(f *nvmltest.Fleet, uuid string) {
			f.Update(uuid, func(s *nvmltest.GPUState) { s.UncorrectedECC = 3 })
		}, "3 uncorrected ECC errors"},
		{"lost", func(f *nvmltest.Fleet, uuid string) {
			f.Update(uuid, func(s *nvmltest.GPUState) { s.Lost = true })
		}, "GPU is lost"},
		{"critical Xid", func(f *nvmltest.Fleet, uuid string) { f.InjectXid(0, 79) }, "critical Xid 79: GPU has fallen off the bus"},
		{"application Xid is not a fault", func(f *nvmltest.Fleet, uuid string) { f.InjectXid(0, 13) }, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fleet := nvmltest.New(gpus.H100_SXM5_80GB)
			b := open(t, fleet)
			devs, err := b.Devices()
			must.NoError(t, err)
			uuid := devs[0].UUID
			tc.break_(fleet, uuid)
			var h gpu.Health
			deadline := time.Now().Add(5 * time.Second)
			for {
				h, err = b.Health(uuid)
				must.NoError(t, err)
				if tc.want == "" || !h.Healthy || time.Now().After(deadline) {
					break
				}
				time.Sleep(10 * time.Millisecond) // Xids arrive on the event goroutine
			}
			if tc.want == "" {
				time.Sleep(50 * time.Millisecond)
				h, err = b.Health(uuid)
				must.NoError(t, err)
				must.True(t, h.Healthy, must.Sprint(h.Reason))
				return
			}
			must.False(t, h.Healthy)
			must.StrContains(t, h.Reason, tc.want)
			must.True(t, strings.Contains(h.Reason, "drain") || strings.Contains(h.Reason, "reset"))
		})
	}
}

func TestProcesses_MPSClientsAndUnknownMemory(t *testing.T) {
	notAvailable := uint64(gpu.MemoryNotAvailable)
	cases := []struct {
		name    string
		compute []gonvml.ProcessInfo
		mps     []gonvml.ProcessInfo
		mpsErr  gonvml.Return
		want    []gpu.Process
		err     string
	}{
		{"MPS clients listed only as such",
			[]gonvml.ProcessInfo{{Pid: 10, UsedGpuMemory: 500 << 20}},
			[]gonvml.ProcessInfo{{Pid: 21, UsedGpuMemory: 4000 << 20}, {Pid: 22, UsedGpuMemory: 1000 << 20}},
			gonvml.SUCCESS,
			[]gpu.Process{{PID: 10, UsedMemoryMiB: 500}, {PID: 21, UsedMemoryMiB: 4000}, {PID: 22, UsedMemoryMiB: 1000}}, ""},
		{"a process in both lists counts once",
			[]gonvml.ProcessInfo{{Pid: 21, UsedGpuMemory: 4000 << 20}},
			[]gonvml.ProcessInfo{{Pid: 21, UsedGpuMemory: 4000 << 20}},
			gonvml.SUCCESS,
			[]gpu.Process{{PID: 21, UsedMemoryMiB: 4000}}, ""},
		{"memory not available is unknown, not 16 EiB",
			[]gonvml.ProcessInfo{{Pid: 30, UsedGpuMemory: notAvailable}},
			[]gonvml.ProcessInfo{{Pid: 31, UsedGpuMemory: notAvailable}},
			gonvml.SUCCESS,
			[]gpu.Process{{PID: 30, MemoryUnknown: true}, {PID: 31, MemoryUnknown: true}}, ""},
		{"no MPS on the device",
			[]gonvml.ProcessInfo{{Pid: 10, UsedGpuMemory: 500 << 20}}, nil,
			gonvml.ERROR_NOT_SUPPORTED,
			[]gpu.Process{{PID: 10, UsedMemoryMiB: 500}}, ""},
		{"a failing MPS list is an error, not a shorter list",
			[]gonvml.ProcessInfo{{Pid: 10, UsedGpuMemory: 500 << 20}}, nil,
			gonvml.ERROR_UNKNOWN,
			nil, "MPS client processes"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fleet := nvmltest.New(gpus.H100_SXM5_80GB)
			b := open(t, fleet)
			devs, err := b.Devices()
			must.NoError(t, err)
			uuid := devs[0].UUID
			fleet.Update(uuid, func(s *nvmltest.GPUState) {
				s.Processes, s.MPSProcesses, s.MPSListErr = tc.compute, tc.mps, tc.mpsErr
			})
			procs, err := b.Processes(uuid)
			if tc.err != "" {
				must.ErrorContains(t, err, tc.err)
				return
			}
			must.NoError(t, err)
			must.Eq(t, tc.want, procs)
		})
	}
}

// Peaks come from the accounting stats: where the mode is on, where the
// backend may turn it on as it opens, and not where it may not.
func TestProcessPeaksFromAccounting(t *testing.T) {
	cases := []struct {
		name      string
		mode      gonvml.EnableState
		setErr    gonvml.Return
		wantPeak  uint64
		wantMode  gonvml.EnableState
		wantCalls int
	}{
		{"accounting already on", gonvml.FEATURE_ENABLED, gonvml.SUCCESS, 2561, gonvml.FEATURE_ENABLED, 2},
		{"accounting turned on", gonvml.FEATURE_DISABLED, gonvml.SUCCESS, 2561, gonvml.FEATURE_ENABLED, 2},
		{"no permission to turn it on", gonvml.FEATURE_DISABLED, gonvml.ERROR_NO_PERMISSION, 0, gonvml.FEATURE_DISABLED, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fleet := nvmltest.New(gpus.H100_SXM5_80GB)
			uuid, _ := fleet.Devices[0].GetUUID()
			fleet.Update(uuid, func(s *nvmltest.GPUState) {
				s.Accounting, s.AccountingSetErr = tc.mode, tc.setErr
				s.Processes = []gonvml.ProcessInfo{{Pid: 42, UsedGpuMemory: 1536 << 20}}
				s.PeakBytes = map[uint32]uint64{42: 2561 << 20}
			})
			b := open(t, fleet)
			_, err := b.Devices()
			must.NoError(t, err)
			for range 2 {
				procs, err := b.Processes(uuid)
				must.NoError(t, err)
				must.Eq(t, []gpu.Process{{PID: 42, UsedMemoryMiB: 1536, PeakMemoryMiB: tc.wantPeak}}, procs)
			}
			st := fleet.State(uuid)
			must.Eq(t, tc.wantMode, st.Accounting)
			must.Eq(t, tc.wantCalls, st.AccountingCalls)
		})
	}
}

// Accounting mode is turned on as the backend first lists the GPUs; where
// it cannot be, the backend says why, and lists no accounted processes.
func TestAccountingTurnedOnAtOpen(t *testing.T) {
	cases := []struct {
		name     string
		mode     gonvml.EnableState
		setErr   gonvml.Return
		wantMode gonvml.EnableState
		why      string
	}{
		{"already on", gonvml.FEATURE_ENABLED, gonvml.SUCCESS, gonvml.FEATURE_ENABLED, ""},
		{"turned on", gonvml.FEATURE_DISABLED, gonvml.SUCCESS, gonvml.FEATURE_ENABLED, ""},
		{"enabling fails", gonvml.FEATURE_DISABLED, gonvml.ERROR_NO_PERMISSION, gonvml.FEATURE_DISABLED,
			// "Insufficient Permissions" where libnvidia-ml is loaded
			"NVML accounting mode is off on %s and could not be enabled: " + gonvml.ERROR_NO_PERMISSION.Error()},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fleet := nvmltest.New(gpus.H100_SXM5_80GB)
			uuid, _ := fleet.Devices[0].GetUUID()
			fleet.Update(uuid, func(s *nvmltest.GPUState) { s.Accounting, s.AccountingSetErr = tc.mode, tc.setErr })
			b := open(t, fleet)
			_, err := b.Devices()
			must.NoError(t, err)
			must.Eq(t, tc.wantMode, fleet.State(uuid).Accounting)
			why := b.AccountingUnavailable(uuid)
			procs, err := b.AccountedProcesses(uuid)
			if tc.why == "" {
				must.Eq(t, "", why)
				must.NoError(t, err)
				must.SliceEmpty(t, procs)
				return
			}
			must.StrContains(t, why, fmt.Sprintf(tc.why, uuid))
			must.ErrorContains(t, err, "could not be enabled")
		})
	}
}

// The accounting buffer keeps a process that has exited with its peak
// and start; one whose stats leave the buffer between the listing and the
// stats is left out.
func TestAccountedProcesses(t *testing.T) {
	start := time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)
	usec := func(t time.Time) uint64 { return uint64(t.UnixMicro()) }
	cases := []struct {
		name  string
		after func(*nvmltest.GPUState)
		want  []gpu.AccountedProcess
	}{
		{"running and exited", nil, []gpu.AccountedProcess{
			{PID: 42, PeakMemoryMiB: 2561, Running: true},
			{PID: 43, PeakMemoryMiB: 900, StartTime: start, Running: false},
			{PID: 44, StartTime: start.Add(time.Second), Running: false},
		}},
		{"stats gone since the listing", func(s *nvmltest.GPUState) { delete(s.Accounted, 43) }, []gpu.AccountedProcess{
			{PID: 42, PeakMemoryMiB: 2561, Running: true},
			{PID: 44, StartTime: start.Add(time.Second), Running: false},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fleet := nvmltest.New(gpus.H100_SXM5_80GB)
			uuid, _ := fleet.Devices[0].GetUUID()
			fleet.Update(uuid, func(s *nvmltest.GPUState) {
				s.Accounting = gonvml.FEATURE_ENABLED
				s.PeakBytes = map[uint32]uint64{42: 2561 << 20}
				s.Accounted = map[uint32]gonvml.AccountingStats{
					// Went to 900 MiB, freed down to 100, exited.
					43: {MaxMemoryUsage: 900<<20 + 12345, StartTime: usec(start), Time: 5000},
					// A peak NVML cannot tell.
					44: {MaxMemoryUsage: gpu.MemoryNotAvailable, StartTime: usec(start.Add(time.Second))},
				}
				s.AfterAccountingPids = tc.after
			})
			b := open(t, fleet)
			procs, err := b.AccountedProcesses(uuid)
			must.NoError(t, err)
			must.Eq(t, tc.want, procs)
		})
	}
}

// A MIG instance does no accounting; the backend says so.
func TestAccountingOnAMIGInstance(t *testing.T) {
	fleet := nvmltest.New(gpus.A100_SXM4_40GB)
	must.NoError(t, fleet.EnableMIG(0, gonvml.GPU_INSTANCE_PROFILE_3_SLICE))
	b := open(t, fleet)
	devs, err := b.Devices()
	must.NoError(t, err)
	must.True(t, devs[1].IsMIG())
	notSupported := gonvml.ERROR_NOT_SUPPORTED.Error()
	must.StrContains(t, b.AccountingUnavailable(devs[1].UUID), notSupported)
	must.StrContains(t, b.AccountingUnavailable(devs[1].UUID), "disabled on MIG-enabled GPUs")
	_, err = b.AccountedProcesses(devs[1].UUID)
	must.ErrorContains(t, err, notSupported)
	must.StrContains(t, b.AccountingUnavailable("GPU-unknown"), "unknown GPU")
}

// BenchmarkProcesses is the backend's share of one watchdog sample on one
// GPU with 8 processes, with and without accounting stats (go-nvml mocks:
// the calls' overhead in the backend, not the driver's).
func BenchmarkProcesses(b *testing.B) {
	for _, mode := range []gonvml.EnableState{gonvml.FEATURE_DISABLED, gonvml.FEATURE_ENABLED} {
		name := map[gonvml.EnableState]string{gonvml.FEATURE_DISABLED: "accounting=off", gonvml.FEATURE_ENABLED: "accounting=on"}[mode]
		b.Run(name, func(b *testing.B) {
			fleet := nvmltest.New(gpus.H100_SXM5_80GB)
			be, err := nvml.NewWithLibrary(fleet, nil)
			must.NoError(b, err)
			defer be.Close()
			devs, _ := be.Devices()
			uuid := devs[0].UUID
			fleet.Update(uuid, func(s *nvmltest.GPUState) {
				s.Accounting, s.AccountingSetErr = mode, gonvml.ERROR_NO_PERMISSION
				s.PeakBytes = map[uint32]uint64{}
				for pid := uint32(100); pid < 108; pid++ {
					s.Processes = append(s.Processes, gonvml.ProcessInfo{Pid: pid, UsedGpuMemory: 1 << 30})
					s.PeakBytes[pid] = 2 << 30
				}
			})
			b.ResetTimer()
			for b.Loop() {
				if _, err := be.Processes(uuid); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// The compute mode reads and sets through NVML; a refusal (not root) is an
// error that names the GPU and the mode.
func TestComputeMode(t *testing.T) {
	fleet := nvmltest.New(gpus.H100_SXM5_80GB)
	uuid, _ := fleet.Devices[0].GetUUID()
	b := open(t, fleet)
	m, err := b.ComputeMode(uuid)
	must.NoError(t, err)
	must.Eq(t, gpu.ComputeDefault, m)
	must.NoError(t, b.SetComputeMode(uuid, gpu.ComputeExclusiveProcess))
	must.Eq(t, gonvml.COMPUTEMODE_EXCLUSIVE_PROCESS, fleet.State(uuid).ComputeMode)
	m, err = b.ComputeMode(uuid)
	must.NoError(t, err)
	must.Eq(t, gpu.ComputeExclusiveProcess, m)

	fleet.Update(uuid, func(s *nvmltest.GPUState) { s.ComputeModeSetErr = gonvml.ERROR_NO_PERMISSION })
	err = b.SetComputeMode(uuid, gpu.ComputeDefault)
	must.ErrorContains(t, err, "set the compute mode of "+uuid+" to default")
	must.ErrorContains(t, b.SetComputeMode(uuid, "shared"), `unknown compute mode "shared"`)
}
