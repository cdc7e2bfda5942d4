package budget

import (
	"testing"

	"github.com/shoenig/test/must"
)

func TestParseDeviceLimits(t *testing.T) {
	cases := []struct {
		in   string
		want map[int]uint64
		err  string
	}{
		{"", map[int]uint64{}, ""},
		{"0=20480M,1=8000M", map[int]uint64{0: 20480, 1: 8000}, ""},
		{"0=2G, 1=512MB,2=1GB,3=100", map[int]uint64{0: 2048, 1: 512, 2: 1024, 3: 100}, ""},
		{"0=2g", map[int]uint64{0: 2048}, ""},
		{"20480M", nil, "is not ORDINAL=SIZE"},
		{"x=1M", nil, "ordinal must be a number"},
		{"-1=1M", nil, "ordinal must be a number"},
		{"0=1T", nil, "whole number of MiB"},
		{"0=", nil, "whole number of MiB"},
		{"0=1M,0=2M", nil, "ordinal 0 given twice"},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseDeviceLimits(tc.in)
			if tc.err != "" {
				must.ErrorContains(t, err, tc.err)
				return
			}
			must.NoError(t, err)
			must.Eq(t, tc.want, got)
		})
	}
}

func TestLimitForFollowsVisibleDevices(t *testing.T) {
	env := map[string]string{"CUDA_VISIBLE_DEVICES": "GPU-a,GPU-b", PerGPUEnv: "0=40000,1=8000", MPSLimitEnv: "0=40000M,1=8000M"}
	for _, tc := range []struct {
		uuid string
		want uint64
	}{{"GPU-a", 40000}, {"GPU-b", 8000}, {"GPU-c", 0}} {
		for _, name := range []string{PerGPUEnv, MPSLimitEnv} {
			got, err := LimitFor(env, name, tc.uuid)
			must.NoError(t, err)
			must.Eq(t, tc.want, got)
		}
	}
	_, err := LimitFor(map[string]string{MPSLimitEnv: "oops"}, MPSLimitEnv, "GPU-a")
	must.ErrorContains(t, err, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT: \"oops\" is not ORDINAL=SIZE")
}

func FuzzParseDeviceLimits(f *testing.F) {
	for _, s := range []string{"0=20480M,1=8000M", "0=2G", "3=100", "0=1GB, 1=2MB", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		limits, err := ParseDeviceLimits(s)
		if err != nil {
			return
		}
		// What it reads, written back, reads the same.
		again, err := ParseDeviceLimits(FormatDeviceLimits(limits, "M"))
		if err != nil {
			t.Fatalf("%q: round trip: %v", s, err)
		}
		if len(again) != len(limits) {
			t.Fatalf("%q: round trip changed %v to %v", s, limits, again)
		}
		for o, v := range limits {
			if again[o] != v {
				t.Fatalf("%q: round trip changed %v to %v", s, limits, again)
			}
		}
	})
}
