// Package reservation is the contract between caravan-device and the caravan
// task driver. Nomad hands an external driver nothing about the devices it
// allocated except the environment that the device plugin's Reserve returned,
// so every granted instance is described by one environment variable whose
// name is unique to the instance. Two device blocks in one task therefore never
// overwrite each other when Nomad merges their environments.
package reservation

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Version is the contract version carried in every value.
const Version = "v1"

// EnvPrefix starts the name of every per-instance variable.
const EnvPrefix = "CARAVAN_DEV_"

// Grant is one device instance granted to a task: a whole GPU, a MIG instance,
// or a lane (slot) of a GPU.
type Grant struct {
	InstanceID string
	GPUUUID    string // the CUDA-visible UUID (the MIG UUID for a MIG instance)
	Lane       int    // -1 for a whole GPU or MIG instance
	Slot       int
	MemoryMiB  uint64 // the memory budget of the instance
	// SharePercent is the instance's share of the GPU's compute.
	SharePercent int
	// Slots is how many time-slice slots share the lane.
	Slots int
}

// EnvName is the variable that carries g.
func (g Grant) EnvName() string {
	var b strings.Builder
	b.WriteString(EnvPrefix)
	for _, r := range strings.ToUpper(g.InstanceID) {
		if (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

// EnvValue encodes g.
func (g Grant) EnvValue() string {
	return strings.Join([]string{
		Version,
		"id=" + g.InstanceID,
		"gpu=" + g.GPUUUID,
		"lane=" + strconv.Itoa(g.Lane),
		"slot=" + strconv.Itoa(g.Slot),
		"slots=" + strconv.Itoa(g.Slots),
		"memory_mib=" + strconv.FormatUint(g.MemoryMiB, 10),
		"share=" + strconv.Itoa(g.SharePercent),
	}, ";")
}

// Parse decodes one value written by EnvValue.
func Parse(value string) (Grant, error) {
	parts := strings.Split(value, ";")
	if parts[0] != Version {
		return Grant{}, fmt.Errorf("reservation: unsupported contract version %q (want %s)", parts[0], Version)
	}
	g := Grant{Lane: -1, Slots: 1}
	seen := map[string]bool{}
	for _, p := range parts[1:] {
		k, v, ok := strings.Cut(p, "=")
		if !ok {
			return Grant{}, fmt.Errorf("reservation: field %q is not key=value", p)
		}
		if seen[k] {
			return Grant{}, fmt.Errorf("reservation: field %q given twice", k)
		}
		seen[k] = true
		var err error
		switch k {
		case "id":
			g.InstanceID = v
		case "gpu":
			g.GPUUUID = v
		case "lane":
			g.Lane, err = strconv.Atoi(v)
		case "slot":
			g.Slot, err = strconv.Atoi(v)
		case "slots":
			g.Slots, err = strconv.Atoi(v)
		case "memory_mib":
			g.MemoryMiB, err = strconv.ParseUint(v, 10, 64)
		case "share":
			g.SharePercent, err = strconv.Atoi(v)
		default:
			// Unknown fields come from a newer plugin of the same version; skip them.
		}
		if err != nil {
			return Grant{}, fmt.Errorf("reservation: field %s: %w", k, err)
		}
	}
	if g.InstanceID == "" || g.GPUUUID == "" {
		return Grant{}, fmt.Errorf("reservation: id and gpu are required in %q", value)
	}
	if g.SharePercent < 0 || g.SharePercent > 100 {
		return Grant{}, fmt.Errorf("reservation: share %d is outside 0..100", g.SharePercent)
	}
	return g, nil
}

// FromEnv returns every grant found in env, sorted by instance ID.
func FromEnv(env map[string]string) ([]Grant, error) {
	var out []Grant
	for k, v := range env {
		if !strings.HasPrefix(k, EnvPrefix) {
			continue
		}
		g, err := Parse(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		out = append(out, g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].InstanceID < out[j].InstanceID })
	return out, nil
}

// VisibleDevices is the CUDA_VISIBLE_DEVICES value for grants: each GPU once,
// in a stable order.
func VisibleDevices(grants []Grant) string {
	var uuids []string
	seen := map[string]bool{}
	for _, g := range grants {
		if !seen[g.GPUUUID] {
			seen[g.GPUUUID] = true
			uuids = append(uuids, g.GPUUUID)
		}
	}
	sort.Strings(uuids)
	return strings.Join(uuids, ",")
}

// LaneInstanceID is the device instance ID of a slot of a lane: GPU, lane
// and slot, so an ID stays the same across restarts as long as the GPU and
// the partition rule do. Whole GPUs and MIG instances keep their UUID.
func LaneInstanceID(uuid string, lane, slot int) string {
	return uuid + ":lane" + strconv.Itoa(lane) + ":slot" + strconv.Itoa(slot)
}

// LaneGPU reads the physical GPU's UUID from an instance ID made by
// LaneInstanceID; ok is false for any other ID.
func LaneGPU(id string) (uuid string, ok bool) {
	if _, isLane := LaneOf(id); !isLane {
		return "", false
	}
	uuid, _, _ = strings.Cut(id, ":lane")
	return uuid, uuid != ""
}

// LaneOf reads the lane from an instance ID made by LaneInstanceID (the
// slot part may be missing); ok is false for any other ID.
func LaneOf(id string) (lane int, ok bool) {
	_, rest, found := strings.Cut(id, ":lane")
	if !found {
		return 0, false
	}
	digits, _, _ := strings.Cut(rest, ":")
	if digits == "" || strings.Trim(digits, "0123456789") != "" {
		return 0, false
	}
	lane, err := strconv.Atoi(digits)
	return lane, err == nil
}
