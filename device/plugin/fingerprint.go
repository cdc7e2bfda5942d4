package plugin

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/caravan-gpu/caravan/gpu"
	"github.com/hashicorp/nomad/plugins/device"
	"github.com/hashicorp/nomad/plugins/shared/structs"
)

const (
	vendor     = "nvidia"
	deviceType = device.DeviceTypeGPU
	// laneDeviceType is the type lanes are offered as, so that a job asks
	// for them by name (device "nvidia/lane") and a plain nvidia/gpu
	// request only ever gets whole GPUs.
	laneDeviceType = "lane"
)

// Fingerprint streams the device groups. It sends a new message whenever any
// group, instance, attribute or health changes, checking every
// fingerprint_period.
func (d *Device) Fingerprint(ctx context.Context) (<-chan *device.FingerprintResponse, error) {
	out := make(chan *device.FingerprintResponse)
	go d.fingerprintLoop(ctx, out)
	return out, nil
}

func (d *Device) fingerprintLoop(ctx context.Context, out chan<- *device.FingerprintResponse) {
	defer close(out)
	var last []*device.DeviceGroup
	first := true
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		s, backend, err := d.state()
		if err != nil {
			d.metrics.ObserveFingerprint(0, err)
			// Fatal: Nomad stops this plugin's device manager on an error,
			// so only a problem the operator must fix is sent as one.
			send(ctx, out, device.NewFingerprintError(err))
			return
		}
		timer.Reset(s.fingerprintPeriod)
		start := time.Now()
		groups, err := d.fingerprintGroups(s, backend)
		d.metrics.ObserveFingerprint(time.Since(start), err)
		if err != nil {
			// A passing backend error (a fleet file being rewritten, a
			// busy driver): keep the last fingerprint and try again.
			d.logger.Warn("fingerprint failed; keeping the last one", "error", err)
			continue
		}
		if !first && reflect.DeepEqual(groups, last) {
			continue
		}
		first = false
		last = groups
		if !send(ctx, out, device.NewFingerprint(groups...)) {
			return
		}
	}
}

func send[T any](ctx context.Context, out chan<- T, v T) bool {
	select {
	case out <- v:
		return true
	case <-ctx.Done():
		return false
	}
}

// fingerprintGroups lists the backend's devices, lays them out and groups
// them by model and lane layout.
func (d *Device) fingerprintGroups(s *settings, backend gpu.Backend) ([]*device.DeviceGroup, error) {
	devs, err := backend.Devices()
	if err != nil {
		return nil, err
	}
	driverVersion, cudaVersion, err := backend.Versions()
	if err != nil {
		return nil, err
	}
	insts, problems := layout(devs, s)
	for _, p := range problems {
		d.logger.Warn("partition rule cannot cut GPU; offering it whole", "gpu", p.uuid, "reason", p.reason)
	}
	d.setInstances(insts)
	// MPS is checked once the lanes are known, so that a daemon started now
	// gets its lane defaults now. Its failure degrades MPS only: Nomad drops
	// every device of a plugin that sends a fingerprint error.
	mpsErr := d.mpsReady(s)

	health := map[string]gpu.Health{}
	byGroup := map[string][]instance{}
	var names []string
	for _, in := range insts {
		if _, ok := health[in.device.UUID]; !ok {
			h, err := backend.Health(in.device.UUID)
			if err != nil {
				h = gpu.Health{Reason: fmt.Sprintf("cannot read health: %v", err)}
			}
			health[in.device.UUID] = h
		}
		key := in.typ + "/" + in.group
		if _, ok := byGroup[key]; !ok {
			names = append(names, key)
		}
		byGroup[key] = append(byGroup[key], in)
	}
	sort.Strings(names)
	d.recordOffered(s, backend, insts, health, mpsErr)

	groups := make([]*device.DeviceGroup, 0, len(names))
	for _, name := range names {
		members := byGroup[name]
		g := &device.DeviceGroup{
			Vendor:     vendor,
			Type:       members[0].typ,
			Name:       members[0].group,
			Attributes: groupAttributes(members, driverVersion, cudaVersion),
		}
		if s.mps.Enabled {
			addMPSAttributes(g.Attributes, mpsErr)
		}
		for _, in := range members {
			h := health[in.device.UUID]
			g.Devices = append(g.Devices, &device.Device{
				ID:         in.id,
				Healthy:    h.Healthy,
				HealthDesc: healthDesc(in, h, mpsErr),
				HwLocality: &device.DeviceLocality{PciBusID: in.device.PCIBusID},
			})
		}
		groups = append(groups, g)
	}
	return groups, nil
}

// groupAttributes are the attributes shared by every member of a group. The
// PCI bus IDs differ per GPU, so pci_bus_id lists those of the group's GPUs;
// each instance also carries its own in its locality.
func groupAttributes(members []instance, driverVersion, cudaVersion string) map[string]*structs.Attribute {
	in := members[0]
	dev := in.device
	var buses []string
	seen := map[string]bool{}
	for _, m := range members {
		if !seen[m.device.PCIBusID] {
			seen[m.device.PCIBusID] = true
			buses = append(buses, m.device.PCIBusID)
		}
	}
	sort.Strings(buses)
	gpuMemory := dev.MemoryMiB
	attrs := map[string]*structs.Attribute{
		"memory":             structs.NewIntAttribute(int64(in.memoryMiB), structs.UnitMiB),
		"gpu_memory":         structs.NewIntAttribute(int64(gpuMemory), structs.UnitMiB),
		"model":              structs.NewStringAttribute(modelOf(dev)),
		"sm_count":           structs.NewIntAttribute(int64(dev.SMCount), ""),
		"pci_bus_id":         structs.NewStringAttribute(strings.Join(buses, ",")),
		"driver_version":     structs.NewStringAttribute(driverVersion),
		"cuda_version":       structs.NewStringAttribute(cudaVersion),
		"mig":                structs.NewBoolAttribute(dev.IsMIG()),
		"lanes_per_gpu":      structs.NewIntAttribute(int64(in.lanes), ""),
		"lane_share":         structs.NewIntAttribute(int64(in.sharePercent), ""),
		"slots":              structs.NewIntAttribute(int64(in.slots), ""),
		"compute_capability": structs.NewStringAttribute(dev.ComputeCapability),
		"architecture":       structs.NewStringAttribute(dev.Architecture),
	}
	if dev.PCIBandwidthMBps > 0 {
		attrs["pci_bandwidth"] = structs.NewIntAttribute(int64(dev.PCIBandwidthMBps), structs.UnitMBPerS)
	}
	if dev.IsMIG() {
		attrs["mig_profile"] = structs.NewStringAttribute(dev.MIGProfile)
	}
	if in.isLane() {
		// The group is one lane index (and slot) of the layout's GPUs.
		attrs["layout"] = structs.NewStringAttribute(in.layoutName)
		attrs["lane"] = structs.NewIntAttribute(int64(in.lane), "")
		attrs["slot"] = structs.NewIntAttribute(int64(in.slot), "")
	}
	return attrs
}

// addMPSAttributes says whether MPS serves the group's lanes: mps is
// "ready" or "down", and mps_error says why it is down.
func addMPSAttributes(attrs map[string]*structs.Attribute, down error) {
	if down != nil {
		attrs["mps"] = structs.NewStringAttribute("down")
		attrs["mps_error"] = structs.NewStringAttribute(down.Error())
		return
	}
	attrs["mps"] = structs.NewStringAttribute("ready")
}

// modelOf is the GPU model without a MIG suffix, so an affinity on model
// matches MIG instances of that model too.
func modelOf(d gpu.Device) string {
	if d.IsMIG() {
		if base, _, ok := strings.Cut(d.Model, " MIG "); ok {
			return base
		}
	}
	return d.Model
}

// healthDesc tells an operator what is wrong and where. A healthy device
// whose MPS is down stays healthy, and says that it runs without MPS.
func healthDesc(in instance, h gpu.Health, mpsDown error) string {
	if h.Healthy {
		if mpsDown != nil {
			return "healthy, without MPS (tasks get no MPS limits): " + mpsDown.Error()
		}
		return ""
	}
	what := "GPU " + in.device.UUID
	if in.device.IsMIG() {
		what = fmt.Sprintf("MIG instance %s of GPU %s", in.device.UUID, in.device.ParentUUID)
	} else if in.isLane() {
		what = fmt.Sprintf("lane %d of GPU %s", in.lane, in.device.UUID)
	}
	reason := h.Reason
	if reason == "" {
		reason = "reported unhealthy"
	}
	return fmt.Sprintf("%s (%s, bus %s): %s", what, in.device.Model, in.device.PCIBusID, reason)
}
