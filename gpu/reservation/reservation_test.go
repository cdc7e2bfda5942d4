package reservation

import "testing"

func TestLaneGPU(t *testing.T) {
	for _, tc := range []struct {
		id, uuid string
		ok       bool
	}{
		{LaneInstanceID("GPU-1234", 3, 1), "GPU-1234", true},
		{"GPU-1234:lane2", "GPU-1234", true},
		{"GPU-1234", "", false},
		{"MIG-abcd", "", false},
		{":lane1:slot0", "", false},
		{"GPU-1234:lanex:slot0", "", false},
	} {
		uuid, ok := LaneGPU(tc.id)
		if uuid != tc.uuid || ok != tc.ok {
			t.Errorf("LaneGPU(%q) = %q, %v; want %q, %v", tc.id, uuid, ok, tc.uuid, tc.ok)
		}
	}
}

func TestLaneOf(t *testing.T) {
	for _, tc := range []struct {
		id   string
		lane int
		ok   bool
	}{
		{LaneInstanceID("GPU-1234", 3, 1), 3, true},
		{"GPU-1234:lane2", 2, true},
		{"GPU-1234:lane10:slot0", 10, true},
		{"GPU-1234", 0, false},
		{"MIG-abcd", 0, false},
		{"GPU-1234:lane:slot0", 0, false},
		{"GPU-1234:lanex:slot0", 0, false},
		{"GPU-1234:lane-1:slot0", 0, false},
		{"GPU-1234:lane+1:slot0", 0, false},
	} {
		lane, ok := LaneOf(tc.id)
		if lane != tc.lane || ok != tc.ok {
			t.Errorf("LaneOf(%q) = %d, %v; want %d, %v", tc.id, lane, ok, tc.lane, tc.ok)
		}
	}
}
