package nvml_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/caravan-gpu/caravan/gpu"
	"github.com/caravan-gpu/caravan/gpu/nvml"
	"github.com/shoenig/test/must"
)

// TestRealGPU runs only where libnvidia-ml loads and a GPU is present; it
// checks the backend against the hardware and logs what it found and how
// long a full read of each GPU takes.
func TestRealGPU(t *testing.T) {
	b, err := nvml.New(nil)
	if err != nil {
		t.Skipf("no NVML on this machine: %v", err)
	}
	defer b.Close()
	drv, cuda, err := b.Versions()
	must.NoError(t, err)
	start := time.Now()
	devs, err := b.Devices()
	must.NoError(t, err)
	if len(devs) == 0 {
		t.Skip("NVML loaded but found no GPU")
	}
	t.Logf("driver %s, CUDA %s, %d devices listed in %s", drv, cuda, len(devs), time.Since(start))
	for _, d := range devs {
		t.Logf("%s %q arch=%s cc=%s mem=%dMiB sms=%d bus=%s pcie=%dMB/s mig=%v parent=%s",
			d.UUID, d.Model, d.Architecture, d.ComputeCapability, d.MemoryMiB, d.SMCount,
			d.PCIBusID, d.PCIBandwidthMBps, d.MIGEnabled, d.ParentUUID)
		if !d.IsMIG() {
			must.StrHasPrefix(t, "GPU-", d.UUID)
		}
		must.Positive(t, d.MemoryMiB)
		if d.MIGEnabled {
			continue
		}
		start := time.Now()
		h, err := b.Health(d.UUID)
		must.NoError(t, err)
		s, err := b.Stats(d.UUID)
		must.NoError(t, err)
		procs, err := b.Processes(d.UUID)
		must.NoError(t, err)
		t.Logf("  health=%v %q, %d/%d MiB used, util %d%%, %d W, %d C, %d processes (read in %s)",
			h.Healthy, h.Reason, s.UsedMemoryMiB, s.TotalMemoryMiB, s.GPUUtilPercent, s.PowerWatts,
			s.TemperatureC, len(procs), time.Since(start))
		must.Eq(t, d.MemoryMiB, s.TotalMemoryMiB)
		if why := b.AccountingUnavailable(d.UUID); why != "" {
			t.Logf("  no accounting: %s", why)
			continue
		}
		accounted, err := b.AccountedProcesses(d.UUID)
		must.NoError(t, err)
		for _, p := range accounted {
			since := ""
			if start, err := gpu.ProcessStartTime(p.PID); err == nil {
				since = fmt.Sprintf(" (%s after the process's start in /proc)", p.StartTime.Sub(start))
			}
			t.Logf("  accounted pid %d: peak %d MiB, running %v, started %s%s", p.PID, p.PeakMemoryMiB, p.Running, p.StartTime, since)
		}
	}
}
