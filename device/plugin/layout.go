package plugin

import (
	"fmt"
	"sort"
	"strings"

	"github.com/caravan-gpu/caravan/gpu"
	"github.com/caravan-gpu/caravan/gpu/reservation"
)

// instance is one device instance offered to Nomad: a whole GPU, a MIG
// instance, or one slot of one lane of a GPU.
type instance struct {
	id     string
	device gpu.Device // the physical GPU or MIG instance behind it
	// lane is -1 for a whole GPU or MIG instance.
	lane, slot   int
	lanes, slots int
	memoryMiB    uint64
	sharePercent int
	// group is the device group Nomad sees the instance in; layoutName
	// names every lane of GPUs of one model cut the same way.
	group, layoutName string
	typ               string // the device type Nomad sees: "gpu", or lanes' type
}

func (in instance) isLane() bool { return in.lane >= 0 }

func (in instance) grant() reservation.Grant {
	return reservation.Grant{
		InstanceID: in.id, GPUUUID: in.device.UUID, Lane: in.lane, Slot: in.slot,
		Slots: in.slots, MemoryMiB: in.memoryMiB, SharePercent: in.sharePercent,
	}
}

// layoutProblem is a GPU that a rule could not cut; it is offered whole.
type layoutProblem struct {
	uuid, reason string
}

// layout turns the backend's devices into the instances offered to Nomad.
// MIG parents are never offered (their instances are); ignored IDs are
// dropped, and ignoring a parent drops its MIG instances too. A GPU matched
// by a rule is offered only as lanes, never also whole.
func layout(devs []gpu.Device, s *settings) ([]instance, []layoutProblem) {
	var out []instance
	var problems []layoutProblem
	for _, d := range devs {
		if s.ignored[d.UUID] || (d.IsMIG() && s.ignored[d.ParentUUID]) || d.MIGEnabled {
			continue
		}
		if d.IsMIG() {
			out = append(out, instance{
				id: d.UUID, device: d, lane: -1, lanes: 1, slots: 1,
				memoryMiB: d.MemoryMiB, sharePercent: 100, group: d.Model, typ: deviceType,
			})
			continue
		}
		r, ok := matchRule(s.rules, d)
		if !ok {
			out = append(out, wholeGPU(d))
			continue
		}
		lanes, laneMiB, err := r.cut(d.MemoryMiB)
		if err != nil {
			problems = append(problems, layoutProblem{uuid: d.UUID, reason: err.Error()})
			out = append(out, wholeGPU(d))
			continue
		}
		share := 100 / lanes
		name := laneGroupName(d.Model, lanes, laneMiB, r.slots)
		for l := 0; l < lanes; l++ {
			for k := 0; k < r.slots; k++ {
				out = append(out, instance{
					id: reservation.LaneInstanceID(d.UUID, l, k), device: d, lane: l, slot: k,
					lanes: lanes, slots: r.slots, memoryMiB: laneMiB, sharePercent: share,
					group: laneSlotGroupName(name, l, k, r.slots), layoutName: name, typ: s.laneType,
				})
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out, problems
}

func wholeGPU(d gpu.Device) instance {
	return instance{
		id: d.UUID, device: d, lane: -1, lanes: 1, slots: 1,
		memoryMiB: d.MemoryMiB, sharePercent: 100, group: d.Model, typ: deviceType,
	}
}

func matchRule(rules []rule, d gpu.Device) (rule, bool) {
	for _, r := range rules {
		if r.matches(d.Model, d.UUID) {
			return r, true
		}
	}
	return rule{}, false
}

// cut returns how many lanes of how much memory a GPU of gpuMiB holds.
// reserved_memory is kept back from every lane for its CUDA context.
func (r rule) cut(gpuMiB uint64) (lanes int, laneMiB uint64, err error) {
	if r.lanes > 0 {
		per := gpuMiB / uint64(r.lanes)
		if per <= r.reservedMemoryMiB {
			return 0, 0, fmt.Errorf("%d lanes of %d MiB leave nothing after reserved_memory of %d MiB", r.lanes, per, r.reservedMemoryMiB)
		}
		return r.lanes, per - r.reservedMemoryMiB, nil
	}
	n := gpuMiB / (r.laneMemoryMiB + r.reservedMemoryMiB)
	if n < 1 {
		return 0, 0, fmt.Errorf("lane_memory %d MiB plus reserved_memory %d MiB does not fit in %d MiB", r.laneMemoryMiB, r.reservedMemoryMiB, gpuMiB)
	}
	if n > maxLanes {
		n = maxLanes
	}
	return int(n), r.laneMemoryMiB, nil
}

// laneSlotGroupName is the device group of one lane index and slot across
// the GPUs of one layout. Nomad takes all the instances of one request
// from one group, so a group that holds at most one instance per GPU makes
// every request for N lanes N distinct GPUs (Reserve refuses two lanes of
// one GPU). Free lanes at different indexes cannot be combined in one
// request; docs/device.md says how the planner places around it.
func laneSlotGroupName(layout string, lane, slot, slots int) string {
	if slots > 1 {
		return fmt.Sprintf("%s lane %d slot %d", layout, lane, slot)
	}
	return fmt.Sprintf("%s lane %d", layout, lane)
}

// laneGroupName names a lane layout by model and cut, so GPUs cut
// differently never share a group (a group has one set of attributes).
func laneGroupName(model string, lanes int, laneMiB uint64, slots int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s [%d lanes x %d MiB", model, lanes, laneMiB)
	if slots > 1 {
		fmt.Fprintf(&b, ", %d slots", slots)
	}
	b.WriteString("]")
	return b.String()
}
