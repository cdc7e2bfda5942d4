package plugin

import (
	"context"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/caravan-gpu/caravan/gpu/reservation"
	"github.com/hashicorp/nomad/plugins/device"
	"github.com/shoenig/test/must"
)

// firstFingerprint reads the first fingerprint message.
func firstFingerprint(t *testing.T, d device.DevicePlugin) []*device.DeviceGroup {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ch, err := d.Fingerprint(ctx)
	must.NoError(t, err)
	select {
	case resp := <-ch:
		must.NotNil(t, resp)
		must.NoError(t, resp.Error)
		return resp.Devices
	case <-time.After(10 * time.Second):
		t.Fatal("no fingerprint within 10s")
		return nil
	}
}

func groupNamed(groups []*device.DeviceGroup, prefix string) *device.DeviceGroup {
	for _, g := range groups {
		if strings.HasPrefix(g.Name, prefix) {
			return g
		}
	}
	return nil
}

// layoutDevices are the devices of every group whose name starts with
// prefix, by ID: the lanes of one layout, which lie in a group per lane
// index.
func layoutDevices(groups []*device.DeviceGroup, prefix string) []*device.Device {
	var out []*device.Device
	for _, g := range groups {
		if strings.HasPrefix(g.Name, prefix) {
			out = append(out, g.Devices...)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// layoutOf is a group's name without its lane index and slot.
func layoutOf(group string) string { return laneSuffix.ReplaceAllString(group, "") }

var laneSuffix = regexp.MustCompile(` lane \d+( slot \d+)?$`)

func TestReserve_Lane(t *testing.T) {
	d, _ := newSimDevice(t, testFleet, `
partition {
  model = "NVIDIA H100*"
  lanes = 4
}`)
	groups := firstFingerprint(t, d)
	lanes := groupNamed(groups, "NVIDIA H100 80GB HBM3 [4 lanes x 20389 MiB] lane 2")
	must.NotNil(t, lanes)
	must.Len(t, 2, lanes.Devices) // one per GPU

	res, err := d.Reserve([]string{"GPU-h100-01:lane2:slot0"})
	must.NoError(t, err)
	must.Eq(t, "GPU-h100-01", res.Envs["CUDA_VISIBLE_DEVICES"])
	must.Eq(t, "GPU-h100-01", res.Envs["NVIDIA_VISIBLE_DEVICES"])
	grants, err := reservation.FromEnv(res.Envs)
	must.NoError(t, err)
	must.Len(t, 1, grants)
	must.Eq(t, reservation.Grant{
		InstanceID: "GPU-h100-01:lane2:slot0", GPUUUID: "GPU-h100-01",
		Lane: 2, Slot: 0, Slots: 1, MemoryMiB: 81559 / 4, SharePercent: 25,
	}, grants[0])

	_, err = d.Reserve([]string{"GPU-nope"})
	must.ErrorContains(t, err, `unknown device instance "GPU-nope"`)
}
