package reservation

import "testing"

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
