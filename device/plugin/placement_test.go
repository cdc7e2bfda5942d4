package plugin

import (
	"flag"
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/nomad/mock"
	"github.com/hashicorp/nomad/nomad/structs"
	"github.com/hashicorp/nomad/plugins/device"
	"github.com/hashicorp/nomad/scheduler/feasible"
	"github.com/shoenig/test/must"
)

var pickTries = flag.Int("pick-tries", 500, "placements per cell of TestNomadPicksNDistinctGPUs")

// nodeDevices turns caravan-device's fingerprint into the device groups a
// Nomad node carries, as the client's device manager does. merged puts
// every lane of a layout in one group, as caravan-device did before it
// offered a group per lane index, for comparison.
func nodeDevices(groups []*device.DeviceGroup, merged bool) []*structs.NodeDeviceResource {
	byName := map[string]*structs.NodeDeviceResource{}
	var out []*structs.NodeDeviceResource
	for _, g := range groups {
		name := g.Name
		if merged {
			name = layoutOf(name)
		}
		r := byName[g.Type+"/"+name]
		if r == nil {
			r = &structs.NodeDeviceResource{Vendor: g.Vendor, Type: g.Type, Name: name, Attributes: g.Attributes}
			byName[g.Type+"/"+name] = r
			out = append(out, r)
		}
		for _, d := range g.Devices {
			r.Instances = append(r.Instances, &structs.NodeDevice{ID: d.ID, Healthy: d.Healthy,
				Locality: &structs.NodeDeviceLocality{PciBusID: d.HwLocality.PciBusID}})
		}
	}
	return out
}

// refusals places a task asking for count lanes on node tries times with
// Nomad's own scheduler code (the bin-packing iterator and its device
// allocator), and counts the placements caravan-device's Reserve refuses.
func refusals(t *testing.T, d *Device, node *structs.Node, count, tries int) int {
	t.Helper()
	_, ctx := feasible.MockContext(t)
	tg := &structs.TaskGroup{Name: "train", EphemeralDisk: &structs.EphemeralDisk{}, Tasks: []*structs.Task{{
		Name: "train",
		Resources: &structs.Resources{CPU: 100, MemoryMB: 64, Devices: []*structs.RequestedDevice{
			{Name: "nvidia/lane", Count: uint64(count)}}},
	}}}
	tg.Tasks[0].Resources.Canonicalize()
	refused := 0
	for range tries {
		static := feasible.NewStaticRankIterator(ctx, []*feasible.RankedNode{{Node: node}})
		binp := feasible.NewBinPackIterator(ctx, static, false, 0)
		binp.SetTaskGroup(tg)
		binp.SetSchedulerConfiguration(&structs.SchedulerConfiguration{SchedulerAlgorithm: structs.SchedulerAlgorithmBinpack})
		out := binp.Next()
		must.NotNil(t, out, must.Sprintf("Nomad placed no %d lanes", count))
		var ids []string
		for _, dev := range out.TaskResources["train"].Devices {
			ids = append(ids, dev.DeviceIDs...)
		}
		must.Len(t, count, ids)
		if _, err := d.Reserve(ids); err != nil {
			must.StrContains(t, err.Error(), "needs N distinct GPUs")
			refused++
		}
	}
	return refused
}

// TestNomadPicksNDistinctGPUs: with a device group per lane index, every
// request for N lanes that Nomad's scheduler places is N distinct GPUs,
// which Reserve accepts. The merged groups of before are measured beside
// them, in the same run, to show what the grouping changes. -v prints the
// table; -pick-tries sets the placements per cell.
func TestNomadPicksNDistinctGPUs(t *testing.T) {
	var table strings.Builder
	table.WriteString("| node | slots | request | refused, a group per lane index | refused, one group per layout |\n|---|---|---|---|---|\n")
	for _, gpus := range []int{2, 4, 8} {
		for _, slots := range []int{1, 2} {
			fleet := fmt.Sprintf(`{"gpus": [{"uuid": "GPU-h100", "count": %d, "model": "NVIDIA H100 80GB HBM3", "memory_mib": 81559}]}`, gpus)
			d, _ := newSimDevice(t, fleet, fmt.Sprintf("partition {\n  model = \"NVIDIA H100*\"\n  lanes = 4\n  slots = %d\n}", slots))
			groups := firstFingerprint(t, d)
			for count := 2; count <= min(4, gpus); count++ {
				node := mock.Node()
				node.NodeResources.Devices = nodeDevices(groups, false)
				now := refusals(t, d, node, count, *pickTries)
				node = mock.Node()
				node.NodeResources.Devices = nodeDevices(groups, true)
				before := refusals(t, d, node, count, *pickTries)
				fmt.Fprintf(&table, "| %d GPUs × 4 lanes | %d | count = %d | %.1f%% | %.1f%% |\n", gpus, slots, count,
					100*float64(now)/float64(*pickTries), 100*float64(before)/float64(*pickTries))
				must.Zero(t, now, must.Sprintf("%d GPUs, %d slots, count = %d: %d of %d placements refused", gpus, slots, count, now, *pickTries))
			}
		}
	}
	t.Logf("%d placements per cell:\n%s", *pickTries, table.String())
}
