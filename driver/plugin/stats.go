package plugin

import (
	"time"

	"github.com/hashicorp/nomad/plugins/device"
	"github.com/hashicorp/nomad/plugins/drivers"
	pstructs "github.com/hashicorp/nomad/plugins/shared/structs"

	"github.com/caravan-gpu/caravan/driver/task"
)

// addGPUStats adds the task's GPU memory per GPU, its budget and its lane's
// switch latencies to a stats sample, as device stats Nomad shows with
// `nomad alloc status -stats`.
func (d *Driver) addGPUStats(h *task.Handle, usage *drivers.TaskResourceUsage) {
	if usage == nil || usage.ResourceUsage == nil {
		return
	}
	samples := h.GPUUsage()
	if len(samples) == 0 {
		return
	}
	group := &device.DeviceGroupStats{Vendor: "nvidia", Type: "gpu", Name: "caravan task", InstanceStats: map[string]*device.DeviceStats{}}
	var laneAttrs map[string]*pstructs.StatValue
	if d.coord != nil {
		if st, ok := d.coord.Status(h.Config.ID); ok {
			laneAttrs = map[string]*pstructs.StatValue{
				"lane":                 str(st.Lane.String(), "lane shared with co-located tasks"),
				"lane_mode":            str(st.Mode, "alone, concurrent or time-sliced"),
				"suspended":            {BoolVal: &st.Suspended, Desc: "suspended for another task's turn"},
				"switches":             intStat(int64(st.Switches), "", "times suspended"),
				"last_suspend_latency": floatStat(ms(st.LastSuspend), "ms", "latency of the last suspend"),
				"last_resume_latency":  floatStat(ms(st.LastResume), "ms", "latency of the last resume"),
				"iterations":           intStat(st.Iterations, "", "iteration boundaries marked"),
			}
		}
	}
	for _, u := range samples {
		attrs := map[string]*pstructs.StatValue{
			"memory_used":   intStat(int64(u.UsedMiB), "MiB", "GPU memory held by the task's processes"),
			"memory_budget": intStat(int64(u.LimitMiB), "MiB", "the task's GPU memory budget"),
		}
		for k, v := range laneAttrs {
			attrs[k] = v
		}
		group.InstanceStats[u.UUID] = &device.DeviceStats{
			Summary:   intStat(int64(u.UsedMiB), "MiB", "GPU memory held by the task"),
			Stats:     &pstructs.StatObject{Attributes: attrs},
			Timestamp: time.Now(),
		}
	}
	usage.ResourceUsage.DeviceStats = append(usage.ResourceUsage.DeviceStats, group)
}

func intStat(v int64, unit, desc string) *pstructs.StatValue {
	return &pstructs.StatValue{IntNumeratorVal: &v, Unit: unit, Desc: desc}
}

func floatStat(v float64, unit, desc string) *pstructs.StatValue {
	return &pstructs.StatValue{FloatNumeratorVal: &v, Unit: unit, Desc: desc}
}

func str(v, desc string) *pstructs.StatValue { return &pstructs.StatValue{StringVal: &v, Desc: desc} }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
