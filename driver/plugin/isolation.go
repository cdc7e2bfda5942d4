package plugin

import (
	"fmt"
	"os"
	"strings"

	"github.com/hashicorp/nomad/client/lib/cgroupslib"
	"github.com/hashicorp/nomad/plugins/drivers"

	"github.com/caravan-gpu/caravan/driver/budget"
	"github.com/caravan-gpu/caravan/driver/devices"
	"github.com/caravan-gpu/caravan/driver/task"
	"github.com/caravan-gpu/caravan/gpu"
	"github.com/caravan-gpu/caravan/gpu/sim"
)

// devicesCgroupParent is the cgroup v1 devices cgroup under which tasks'
// own are made.
const devicesCgroupParent = "caravan"

// deviceIsolation is how a task is held to the GPUs it was granted.
type deviceIsolation struct {
	// v1Dir is the cgroup v1 devices cgroup that the task's caravan-run-as
	// process joins before it drops to the task's user; empty on cgroup v2,
	// where the filter is attached to the task's own cgroup.
	v1Dir string
	// off says why the task is not held to its GPUs; empty when it is.
	off string
}

// gpuMinors are the device minors of the GPUs a task may open: those it was
// granted, every GPU for a budget on any GPU, none for a task granted none.
// why says where they are not worked out (no backend, a MIG instance, whose
// access also needs nvidia-caps minors); a GPU that cannot be asked is an
// error, and the task does not start unheld.
func gpuMinors(backend gpu.Backend, b budget.Budget) (minors []int, why string, err error) {
	if backend == nil {
		return nil, "no GPU backend to tell the GPUs' device minors", nil
	}
	devs, err := backend.Devices()
	if err != nil {
		return nil, "", fmt.Errorf("device isolation: listing the GPUs: %w", err)
	}
	for _, d := range devs {
		if d.MIGEnabled {
			continue
		}
		if _, granted := b.For(d.UUID); !granted {
			continue
		}
		if d.IsMIG() {
			return nil, fmt.Sprintf("%s is a MIG instance, whose nvidia-caps access minors are not worked out yet", d.UUID), nil
		}
		minor, err := deviceMinor(backend, d)
		if err != nil {
			return nil, "", fmt.Errorf("device isolation: the device minor of %s: %w", d.UUID, err)
		}
		minors = append(minors, minor)
	}
	return minors, "", nil
}

func deviceMinor(backend gpu.Backend, d gpu.Device) (int, error) {
	if s, ok := backend.(*sim.Backend); ok {
		return s.DeviceMinor(d.UUID)
	}
	return devices.GPUMinor(d.PCIBusID)
}

// isolateDevices sets up, before the task's command runs, that it can open
// only the GPUs it was granted (and the devices every process needs): on
// cgroup v2 a BPF device program on its cgroup, on v1 a devices cgroup of
// its own that caravan-run-as joins (canJoin: the task can run through it,
// as any user but root can). A
// task that cannot be held says why in off; a set-up that fails is an
// error, and the task does not start.
func isolateDevices(backend gpu.Backend, spec task.Spec, cfg *drivers.TaskConfig, canJoin bool) (deviceIsolation, error) {
	minors, why, err := gpuMinors(backend, spec.Budget)
	if err != nil {
		return deviceIsolation{}, err
	}
	if why != "" {
		return deviceIsolation{off: why}, nil
	}
	uvm, err := devices.CharMajor(devices.UVMName)
	if err != nil {
		return deviceIsolation{}, fmt.Errorf("device isolation: %w", err)
	}
	rules, err := devices.Rules(minors, uvm)
	if err != nil {
		return deviceIsolation{}, fmt.Errorf("device isolation: %w", err)
	}
	switch cgroupslib.GetMode() {
	case cgroupslib.CG2:
		if err := devices.ApplyV2(taskCgroup(cfg), rules); err != nil {
			return deviceIsolation{}, fmt.Errorf("device isolation: %w", err)
		}
		return deviceIsolation{}, nil
	case cgroupslib.CG1:
		if !canJoin {
			return deviceIsolation{off: fmt.Sprintf("on cgroups v1 a task that runs as %q, root or a user the driver cannot look up, can leave any devices cgroup", spec.User)}, nil
		}
		dir, err := v1DevicesDir(cfg)
		if err != nil {
			return deviceIsolation{}, fmt.Errorf("device isolation: %w", err)
		}
		if err := devices.ApplyV1(dir, rules); err != nil {
			return deviceIsolation{}, fmt.Errorf("device isolation: %w", err)
		}
		return deviceIsolation{v1Dir: dir}, nil
	}
	return deviceIsolation{off: "the host has no cgroups the driver can use"}, nil
}

// v1DevicesDir is the task's own cgroup v1 devices cgroup.
func v1DevicesDir(cfg *drivers.TaskConfig) (string, error) {
	return devices.V1Dir(devicesCgroupParent, cfg.AllocID+"."+strings.ReplaceAll(cfg.Name, "/", "_"))
}

// releaseDevices removes the task's cgroup v1 devices cgroup, if it has one.
func releaseDevices(h *task.Handle) {
	if h.DevicesCgroup == "" {
		return
	}
	if err := devices.RemoveV1(h.DevicesCgroup); err != nil {
		h.Logger.Warn("the task's devices cgroup was not removed", "cgroup", h.DevicesCgroup, "error", err)
	}
}

// describeIsolation says in the task's attributes whether it is held to its
// GPUs, and warns the task when it is not.
func (d *Driver) describeIsolation(h *task.Handle, iso deviceIsolation) {
	if iso.off == "" {
		h.SetAttr("caravan.devices", "held to its granted GPUs")
		return
	}
	h.SetAttr("caravan.devices", "not isolated: "+iso.off)
	if d.unenforced() != "" {
		return // the task has been warned that nothing watches its GPUs
	}
	h.Logger.Warn("task not held to its GPUs by the kernel; the watchdog still judges memory on other GPUs", "reason", iso.off)
	d.emit(h, "warning: the task can open GPUs it was not granted ("+iso.off+"); the watchdog kills it for memory on any", map[string]string{"devices": "not isolated"}, nil)
}

// recoveredDevicesCgroup is a recovered task's cgroup v1 devices cgroup,
// where it has one.
func recoveredDevicesCgroup(cfg *drivers.TaskConfig) string {
	if cgroupslib.GetMode() != cgroupslib.CG1 {
		return ""
	}
	dir, err := v1DevicesDir(cfg)
	if err != nil {
		return ""
	}
	if _, err := os.Stat(dir); err != nil {
		return ""
	}
	return dir
}
