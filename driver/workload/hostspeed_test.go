package workload

import (
	"testing"

	"github.com/shoenig/test/must"
)

// A profile that trains in proportion to its cores up to 6 per GPU, with
// 1,000 MHz a core and the share at 3 cores: a task given 6,000 MHz runs
// twice as fast as at its share, one given 1,500 half as fast, and one
// given 4,500 MHz on a model 2× faster 3× as fast. Memory does not matter
// to it, but a task with none cannot train.
func TestHostSpeedFollowsTheTasksCPU(t *testing.T) {
	h, err := ParseHostSpeed(`{"core_mhz": 1000, "share": [3, 62.5], "points": [[1, 62.5, 1], [3, 62.5, 3], [6, 62.5, 6], [1, 125, 1], [3, 125, 3], [6, 125, 6]]}`)
	must.NoError(t, err)
	for _, tc := range []struct {
		cpu, mem string
		model    string
		want     float64
	}{
		{"6000", "64000", "", 2},
		{"1500", "64000", "", 0.5},
		{"4500", "128000", "fast", 3},
		{"9000", "64000", "", 2}, // past the profile: its best
	} {
		c := Config{HostSpeed: h, Speed: map[string]float64{"fast": 2, "slow": 1}, GPUModel: tc.model}
		if tc.model == "" {
			c.GPUModel = "slow"
		}
		must.NoError(t, c.FromEnv(map[string]string{"NOMAD_CPU_LIMIT": tc.cpu, "NOMAD_MEMORY_LIMIT": tc.mem}))
		must.InDelta(t, tc.want, c.SpeedFactor(), 1e-9, must.Sprintf("%s MHz on %s", tc.cpu, c.GPUModel))
	}
	c := Config{HostSpeed: h}
	must.ErrorContains(t, c.FromEnv(map[string]string{"NOMAD_CPU_LIMIT": "0", "NOMAD_MEMORY_LIMIT": "64000"}), "no training")
	must.ErrorContains(t, c.FromEnv(map[string]string{"NOMAD_MEMORY_LIMIT": "64000"}), "NOMAD_CPU_LIMIT")
	must.ErrorContains(t, c.FromEnv(map[string]string{"NOMAD_CPU_LIMIT": "lots", "NOMAD_MEMORY_LIMIT": "1"}), "NOMAD_CPU_LIMIT")
}

func TestParseHostSpeedNamesWhatIsWrong(t *testing.T) {
	for src, want := range map[string]string{
		`{`: "want JSON",
		`{"core_mhz": 1000, "share": [3, 62.5], "points": []}`:                     "points: none",
		`{"core_mhz": 0, "share": [3, 62.5], "points": [[3, 62.5, 1]]}`:            "core_mhz",
		`{"core_mhz": 1000, "share": [3, 62.5], "points": [[3, -1, 1]]}`:           "points",
		`{"core_mhz": 1000, "share": [3, 62.5], "points": [[3, 62.5, 0]]}`:         "share",
		`{"core_mhz": 1000, "share": [3, 62.5], "points": [[3, 62.5, 1e999]]}`:     "want JSON",
		`{"core_mhz": 1000, "share": [0, 62.5], "points": [[3, 62.5, 1]]}`:         "share",
		`{"core_mhz": 1000, "share": [3, 62.5], "points": [[3, 62.5, 1]], "x": 1}`: "",
	} {
		_, err := ParseHostSpeed(src)
		if want == "" {
			must.NoError(t, err, must.Sprint(src))
			continue
		}
		must.ErrorContains(t, err, want, must.Sprint(src))
	}
	h, err := ParseHostSpeed("")
	must.NoError(t, err)
	must.Nil(t, h)
}

func FuzzParseHostSpeed(f *testing.F) {
	f.Add(`{"core_mhz": 1000, "share": [3, 62.5], "points": [[1, 62.5, 1], [3, 62.5, 3]]}`)
	f.Add(`{"core_mhz": 1e-300, "share": [1e300, 1], "points": [[1e300, 1, 1]]}`)
	f.Fuzz(func(t *testing.T, src string) {
		h, err := ParseHostSpeed(src)
		if err != nil || h == nil {
			return
		}
		for _, cpu := range []float64{0, 1, 1e3, 1e9} {
			if f, err := h.Factor(cpu, 1024); err != nil || f < 0 {
				t.Fatalf("factor at %g MHz: %g, %v", cpu, f, err)
			}
		}
	})
}
