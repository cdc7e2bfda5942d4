package plugin

import (
	"context"
	"sort"
	"time"

	"github.com/caravan-gpu/caravan/device/metrics"
	"github.com/caravan-gpu/caravan/gpu"
	"github.com/hashicorp/nomad/helper/pointer"
	"github.com/hashicorp/nomad/plugins/device"
	"github.com/hashicorp/nomad/plugins/shared/structs"
)

// Stat names are snake_case with the unit kept out of the name, so they map
// onto Prometheus metric names as they are.
const (
	statMemoryUsed     = "memory_used"
	statMemoryTotal    = "memory_total"
	statGPUMemoryUsed  = "gpu_memory_used"
	statGPUUtil        = "gpu_utilization"
	statMemUtil        = "memory_utilization"
	statPower          = "power_usage"
	statTemperature    = "temperature"
	statECCL1          = "ecc_errors_l1_cache"
	statECCL2          = "ecc_errors_l2_cache"
	statECCDevice      = "ecc_errors_device_memory"
	statProcesses      = "processes"
	statLaneShare      = "lane_share"
	statSummaryMemDesc = "memory used by the instance's processes out of its budget"
)

// Stats streams statistics for every instance every interval.
func (d *Device) Stats(ctx context.Context, interval time.Duration) (<-chan *device.StatsResponse, error) {
	if interval <= 0 {
		interval = time.Second
	}
	out := make(chan *device.StatsResponse)
	go func() {
		defer close(out)
		timer := time.NewTimer(0)
		defer timer.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
				timer.Reset(interval)
			}
			start := time.Now()
			groups, err := d.collectStats()
			d.metrics.ObserveStats(time.Since(start), err)
			resp := &device.StatsResponse{Groups: groups}
			if err != nil {
				resp = device.NewStatsError(err)
			}
			if !send(ctx, out, resp) {
				return
			}
		}
	}()
	return out, nil
}

// collectStats samples each GPU once and derives every instance's stats from
// it. A lane's memory is what the processes granted that lane hold, found
// from each process's CARAVAN_DEV_ environment.
func (d *Device) collectStats() ([]*device.DeviceGroupStats, error) {
	insts, _, err := d.currentInstances()
	if err != nil {
		return nil, err
	}
	_, backend, err := d.state()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	type sample struct {
		stats gpu.Stats
		// byInstance is the memory of the GPU's processes per granted instance.
		byInstance map[string]uint64
		procs      map[string]int
		err        error
	}
	samples := map[string]*sample{}
	// Series are rebuilt each round, so that GPUs and lanes that are gone
	// leave none behind.
	m := d.metrics
	var gpuTotal, gpuUsed, laneUsed, laneSize []metrics.Series
	grants := newProcessGrants()
	groups := map[string]*device.DeviceGroupStats{}
	ids := make([]string, 0, len(insts))
	for id := range insts {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		in := insts[id]
		uuid := in.device.UUID
		s, ok := samples[uuid]
		if !ok {
			s = &sample{byInstance: map[string]uint64{}, procs: map[string]int{}}
			s.stats, s.err = backend.Stats(uuid)
			if s.err == nil && in.isLane() {
				procs, err := backend.Processes(uuid)
				if err != nil {
					s.err = err
				}
				for _, p := range procs {
					for _, owner := range grants.instancesOn(p.PID, uuid) {
						s.byInstance[owner] += p.UsedMemoryMiB
						s.procs[owner]++
					}
				}
			}
			samples[uuid] = s
			if s.err == nil {
				model := modelOf(in.device)
				gpuTotal = append(gpuTotal, metrics.Series{Labels: []string{uuid, model}, Value: float64(s.stats.TotalMemoryMiB)})
				gpuUsed = append(gpuUsed, metrics.Series{Labels: []string{uuid, model}, Value: float64(s.stats.UsedMemoryMiB)})
			}
		}
		if s.err != nil {
			d.logger.Debug("stats unavailable", "instance", id, "error", s.err)
			continue
		}
		key := in.typ + "/" + in.group
		g, ok := groups[key]
		if !ok {
			g = &device.DeviceGroupStats{Vendor: vendor, Type: in.typ, Name: in.group,
				InstanceStats: map[string]*device.DeviceStats{}}
			groups[key] = g
		}
		used, total := s.stats.UsedMemoryMiB, s.stats.TotalMemoryMiB
		procCount := -1
		if in.isLane() {
			used, total = s.byInstance[id], in.memoryMiB
			procCount = s.procs[id]
			laneUsed = append(laneUsed, metrics.Series{Labels: []string{uuid, id}, Value: float64(used)})
			laneSize = append(laneSize, metrics.Series{Labels: []string{uuid, id}, Value: float64(total)})
		}
		g.InstanceStats[id] = instanceStats(in, s.stats, used, total, procCount, now)
	}
	m.Rebuild(m.GPUMemoryTotal, gpuTotal)
	m.Rebuild(m.GPUMemoryUsed, gpuUsed)
	m.Rebuild(m.LaneMemoryUsed, laneUsed)
	m.Rebuild(m.LaneMemorySize, laneSize)
	names := make([]string, 0, len(groups))
	for n := range groups {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]*device.DeviceGroupStats, 0, len(names))
	for _, n := range names {
		out = append(out, groups[n])
	}
	return out, nil
}

func instanceStats(in instance, s gpu.Stats, used, total uint64, procs int, now time.Time) *device.DeviceStats {
	attrs := map[string]*structs.StatValue{
		statMemoryUsed:  intStat(int64(used), structs.UnitMiB, "memory in use"),
		statMemoryTotal: intStat(int64(total), structs.UnitMiB, "memory budget"),
		statGPUUtil:     intStat(int64(s.GPUUtilPercent), "%", "GPU utilisation of the whole GPU"),
		statMemUtil:     intStat(int64(s.MemUtilPercent), "%", "memory bandwidth utilisation of the whole GPU"),
		statPower:       intStat(int64(s.PowerWatts), structs.UnitW, "power draw of the whole GPU"),
		statTemperature: intStat(int64(s.TemperatureC), "C", "GPU temperature"),
		statECCL1:       intStat(int64(s.ECCErrorsL1), "", "uncorrected L1 cache ECC errors"),
		statECCL2:       intStat(int64(s.ECCErrorsL2), "", "uncorrected L2 cache ECC errors"),
		statECCDevice:   intStat(int64(s.ECCErrorsDev), "", "uncorrected device memory ECC errors"),
	}
	if in.isLane() {
		attrs[statGPUMemoryUsed] = intStat(int64(s.UsedMemoryMiB), structs.UnitMiB, "memory in use on the whole GPU")
		attrs[statProcesses] = intStat(int64(procs), "", "processes running in this lane slot")
		attrs[statLaneShare] = intStat(int64(in.sharePercent), "%", "the lane's share of the GPU")
	}
	ts := s.Timestamp
	if ts.IsZero() {
		ts = now
	}
	return &device.DeviceStats{
		Summary: &structs.StatValue{
			IntNumeratorVal:   pointer.Of(int64(used)),
			IntDenominatorVal: pointer.Of(int64(total)),
			Unit:              structs.UnitMiB,
			Desc:              statSummaryMemDesc,
		},
		Stats:     &structs.StatObject{Attributes: attrs},
		Timestamp: ts,
	}
}

func intStat(v int64, unit, desc string) *structs.StatValue {
	return &structs.StatValue{IntNumeratorVal: pointer.Of(v), Unit: unit, Desc: desc}
}

func ptr[T any](v T) *T { return &v }
