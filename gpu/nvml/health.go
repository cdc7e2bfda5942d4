package nvml

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/caravan-gpu/caravan/gpu"
)

// xidEvent is the last critical Xid a GPU reported.
type xidEvent struct {
	code uint64
}

// Application Xids: the fault is in a process, not the GPU, so they do not make
// a GPU unhealthy (the same list NVIDIA's Kubernetes device plugin skips).
var applicationXids = map[uint64]bool{13: true, 31: true, 43: true, 45: true, 68: true, 109: true}

// xidAdvice says what an operator should do about the Xids seen in practice.
var xidAdvice = map[uint64]string{
	48:  "double-bit ECC error: drain the node and reset the GPU (nvidia-smi -r); replace it if errors return",
	63:  "ECC page retirement or row remapping recorded: drain the node and reset the GPU to apply it",
	64:  "ECC page retirement or row remapping failed: drain the node and replace the GPU",
	74:  "NVLink error: drain the node and check the NVLink bridges and cabling",
	79:  "GPU has fallen off the bus: drain the node, check power and seating, then reboot",
	92:  "high single-bit ECC error rate: drain the node and reset the GPU; replace it if the rate stays high",
	94:  "contained ECC error: the affected process was stopped; reset the GPU when it is idle",
	95:  "uncontained ECC error: drain the node and reset the GPU (nvidia-smi -r)",
	119: "GSP firmware timeout: drain the node and reset the GPU; update the driver if it recurs",
	120: "GSP firmware error: drain the node and reset the GPU; update the driver if it recurs",
}

// Health reports a lost GPU, a critical Xid seen since the plugin started,
// and uncorrected volatile ECC errors. A MIG instance shares its GPU's health.
func (b *Backend) Health(uuid string) (gpu.Health, error) {
	h, err := b.handle(uuid)
	if err != nil {
		return gpu.Health{}, err
	}
	b.mu.Lock()
	lost := b.lost[uuid]
	xid, hasXid := b.xids[uuid]
	if parent, ok := b.parentOf[uuid]; ok {
		lost = lost || b.lost[parent]
		if px, ok := b.xids[parent]; ok && !hasXid {
			xid, hasXid = px, true
		}
	}
	b.mu.Unlock()
	if lost {
		return gpu.Health{Reason: "GPU is lost (NVML_ERROR_GPU_IS_LOST): drain the node, check power and seating, then reboot"}, nil
	}
	if _, ret := h.GetMemoryInfo(); ret == nvml.ERROR_GPU_IS_LOST {
		b.noteLost(uuid, ret)
		return gpu.Health{Reason: "GPU is lost (NVML_ERROR_GPU_IS_LOST): drain the node, check power and seating, then reboot"}, nil
	}
	if hasXid {
		advice, ok := xidAdvice[xid.code]
		if !ok {
			advice = "drain the node, check `dmesg | grep -i xid` and NVIDIA's Xid catalogue, and reset the GPU"
		}
		return gpu.Health{Reason: fmt.Sprintf("critical Xid %d: %s", xid.code, advice)}, nil
	}
	if n, ret := h.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC); ret == nvml.SUCCESS && n > 0 {
		return gpu.Health{Reason: fmt.Sprintf("%d uncorrected ECC errors since the driver loaded: drain the node and reset the GPU (nvidia-smi -r); replace it if errors return", n)}, nil
	}
	return gpu.Health{Healthy: true}, nil
}

// watchXids records critical Xid events until Close.
func (b *Backend) watchXids() {
	defer close(b.eventsDone)
	defer func() {
		if r := recover(); r != nil {
			b.logger.Warn("Xid events unavailable; health comes from ECC counters and lost-GPU errors only", "error", r)
		}
	}()
	set, ret := b.lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		b.logger.Warn("Xid events unavailable; health comes from ECC counters and lost-GPU errors only", "error", errorString(ret))
		return
	}
	defer set.Free()
	n, ret := b.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return
	}
	for i := 0; i < n; i++ {
		h, ret := b.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue
		}
		if ret := h.RegisterEvents(nvml.EventTypeXidCriticalError, set); ret != nvml.SUCCESS {
			b.logger.Debug("cannot watch Xid events on a GPU", "index", i, "error", errorString(ret))
		}
	}
	for {
		select {
		case <-b.stopEvents:
			return
		default:
		}
		ev, ret := set.Wait(1000)
		if ret == nvml.ERROR_TIMEOUT {
			continue
		}
		if ret != nvml.SUCCESS {
			if ret == nvml.ERROR_GPU_IS_LOST && ev.Device != nil {
				if uuid, r := ev.Device.GetUUID(); r == nvml.SUCCESS {
					b.noteLost(uuid, ret)
				}
			}
			continue
		}
		if ev.EventType != nvml.EventTypeXidCriticalError || applicationXids[ev.EventData] || ev.Device == nil {
			continue
		}
		uuid, r := ev.Device.GetUUID()
		if r != nvml.SUCCESS {
			continue
		}
		b.logger.Error("critical Xid", "gpu", uuid, "xid", ev.EventData)
		b.mu.Lock()
		b.xids[uuid] = xidEvent{code: ev.EventData}
		b.mu.Unlock()
	}
}
