package plugin

import (
	"testing"

	"github.com/caravan-gpu/caravan/gpu"
	"github.com/caravan-gpu/caravan/gpu/sim"
	"github.com/shoenig/test/must"
)

func fleetDevices(t *testing.T, fleet string) []gpu.Device {
	t.Helper()
	f, err := sim.ParseFleet([]byte(fleet))
	must.NoError(t, err)
	return f.Devices()
}

func TestLayout(t *testing.T) {
	devs := fleetDevices(t, testFleet)
	type want struct {
		instances int
		groups    map[string]int // group name -> instances
		problems  int
	}
	cases := []struct {
		name    string
		rules   []rule
		ignored []string
		want    want
	}{
		{"all whole, MIG instances on their own", nil, nil, want{9, map[string]int{
			"NVIDIA H100 80GB HBM3":             2,
			"NVIDIA A100-SXM4-40GB":             1,
			"NVIDIA A100-SXM4-40GB MIG 3g.20gb": 2,
			"Tesla T4":                          4,
		}, 0}},
		{"H100 in four lanes", []rule{{model: "NVIDIA H100*", lanes: 4, slots: 1}}, nil, want{15, map[string]int{
			"NVIDIA H100 80GB HBM3 [4 lanes x 20389 MiB]": 8,
			"NVIDIA A100-SXM4-40GB":                       1,
			"NVIDIA A100-SXM4-40GB MIG 3g.20gb":           2,
			"Tesla T4":                                    4,
		}, 0}},
		{"lanes by memory with reserve and slots", []rule{{model: "NVIDIA H100*", laneMemoryMiB: 20480, reservedMemoryMiB: 512, slots: 2}}, nil, want{19, map[string]int{
			"NVIDIA H100 80GB HBM3 [3 lanes x 20480 MiB, 2 slots]": 12,
			"NVIDIA A100-SXM4-40GB":                                1,
			"NVIDIA A100-SXM4-40GB MIG 3g.20gb":                    2,
			"Tesla T4":                                             4,
		}, 0}},
		{"one GPU by UUID, first rule wins", []rule{
			{uuid: "GPU-h100-01", lanes: 2, slots: 1},
			{model: "NVIDIA H100*", lanes: 4, slots: 1},
		}, nil, want{13, map[string]int{
			"NVIDIA H100 80GB HBM3 [2 lanes x 40779 MiB]": 2,
			"NVIDIA H100 80GB HBM3 [4 lanes x 20389 MiB]": 4,
			"NVIDIA A100-SXM4-40GB":                       1,
			"NVIDIA A100-SXM4-40GB MIG 3g.20gb":           2,
			"Tesla T4":                                    4,
		}, 0}},
		{"rule that cannot fit keeps the GPU whole", []rule{{model: "Tesla T4", laneMemoryMiB: 20480, slots: 1}}, nil, want{9, map[string]int{
			"NVIDIA H100 80GB HBM3":             2,
			"NVIDIA A100-SXM4-40GB":             1,
			"NVIDIA A100-SXM4-40GB MIG 3g.20gb": 2,
			"Tesla T4":                          4,
		}, 4}},
		{"MIG parents and their instances are never cut", []rule{{model: "NVIDIA A100*", lanes: 2, slots: 1}}, nil, want{10, map[string]int{
			"NVIDIA H100 80GB HBM3":                       2,
			"NVIDIA A100-SXM4-40GB [2 lanes x 20480 MiB]": 2,
			"NVIDIA A100-SXM4-40GB MIG 3g.20gb":           2,
			"Tesla T4":                                    4,
		}, 0}},
		{"ignored GPUs and MIG parents", nil, []string{"GPU-t4-00", "GPU-a100-mig"}, want{6, map[string]int{
			"NVIDIA H100 80GB HBM3": 2,
			"NVIDIA A100-SXM4-40GB": 1,
			"Tesla T4":              3,
		}, 0}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := &settings{rules: tc.rules, ignored: map[string]bool{}}
			for _, id := range tc.ignored {
				s.ignored[id] = true
			}
			insts, problems := layout(devs, s)
			must.Len(t, tc.want.problems, problems)
			must.Len(t, tc.want.instances, insts)
			groups := map[string]int{}
			seen, perGPU := map[string]bool{}, map[string]bool{}
			wholeOrLanes := map[string]string{}
			for _, in := range insts {
				if in.isLane() {
					groups[in.layoutName]++
					// A lane group holds one instance per GPU at most.
					key := in.group + "/" + in.device.UUID
					must.False(t, perGPU[key], must.Sprintf("group %s holds two instances of %s", in.group, in.device.UUID))
					perGPU[key] = true
				} else {
					groups[in.group]++
				}
				must.False(t, seen[in.id], must.Sprintf("duplicate instance %s", in.id))
				seen[in.id] = true
				kind := "whole"
				if in.isLane() {
					kind = "lanes"
				}
				if prev, ok := wholeOrLanes[in.device.UUID]; ok {
					must.Eq(t, prev, kind, must.Sprintf("GPU %s offered both whole and as lanes", in.device.UUID))
				}
				wholeOrLanes[in.device.UUID] = kind
			}
			must.Eq(t, tc.want.groups, groups)
		})
	}
}

func TestLayout_LaneInstanceIDsAreStable(t *testing.T) {
	devs := fleetDevices(t, testFleet)
	s := &settings{rules: []rule{{model: "NVIDIA H100*", lanes: 2, slots: 2}}, ignored: map[string]bool{}}
	first, _ := layout(devs, s)
	// The same GPUs listed in another order get the same IDs.
	reversed := make([]gpu.Device, len(devs))
	for i, d := range devs {
		reversed[len(devs)-1-i] = d
	}
	second, _ := layout(reversed, s)
	must.Eq(t, len(first), len(second))
	var ids []string
	for i := range first {
		must.Eq(t, first[i].id, second[i].id)
		if first[i].isLane() && first[i].device.UUID == "GPU-h100-00" {
			ids = append(ids, first[i].id)
		}
	}
	must.Eq(t, []string{
		"GPU-h100-00:lane0:slot0", "GPU-h100-00:lane0:slot1",
		"GPU-h100-00:lane1:slot0", "GPU-h100-00:lane1:slot1",
	}, ids)
}

func TestRuleCut(t *testing.T) {
	cases := []struct {
		name    string
		r       rule
		gpuMiB  uint64
		lanes   int
		laneMiB uint64
		err     string
	}{
		{"even lanes", rule{lanes: 4}, 81920, 4, 20480, ""},
		{"lanes minus reserve", rule{lanes: 4, reservedMemoryMiB: 480}, 81920, 4, 20000, ""},
		{"lane memory", rule{laneMemoryMiB: 20480}, 81920, 4, 20480, ""},
		{"lane memory with reserve", rule{laneMemoryMiB: 20480, reservedMemoryMiB: 1}, 81920, 3, 20480, ""},
		{"reserve eats the lane", rule{lanes: 64, reservedMemoryMiB: 2048}, 81920, 0, 0, "leave nothing"},
		{"lane bigger than GPU", rule{laneMemoryMiB: 100000}, 81920, 0, 0, "does not fit"},
		{"many tiny lanes capped", rule{laneMemoryMiB: 1}, 81920, maxLanes, 1, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			lanes, laneMiB, err := tc.r.cut(tc.gpuMiB)
			if tc.err != "" {
				must.ErrorContains(t, err, tc.err)
				return
			}
			must.NoError(t, err)
			must.Eq(t, tc.lanes, lanes)
			must.Eq(t, tc.laneMiB, laneMiB)
			must.LessEq(t, tc.gpuMiB, uint64(lanes)*(laneMiB+tc.r.reservedMemoryMiB))
		})
	}
}
