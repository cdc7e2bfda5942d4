package workload

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	"github.com/caravan-gpu/caravan/planner/policy"
)

// HostSpeed makes a run as fast as its task's CPU and memory allow, as a
// Synergy sensitivity profile says a model trains: the factor is the
// profile's throughput at the task's cores and memory over that at Share.
// A task holds one GPU, so its resources are per GPU. It reads what Nomad
// gave the task (NOMAD_CPU_LIMIT, NOMAD_MEMORY_LIMIT), not what a planner
// meant to give it.
type HostSpeed struct {
	// CoreMHz is what one profiled core is worth in Nomad's MHz.
	CoreMHz float64 `json:"core_mhz"`
	// Share is the cores and GB per GPU at which the factor is 1.
	Share [2]float64 `json:"share"`
	// Points are the profile: cores and GB per GPU, and the throughput
	// there in any unit.
	Points [][3]float64 `json:"points"`
}

// ParseHostSpeed reads -host-speed's JSON; "" is none.
func ParseHostSpeed(s string) (*HostSpeed, error) {
	if s == "" {
		return nil, nil
	}
	var h HostSpeed
	if err := json.Unmarshal([]byte(s), &h); err != nil {
		return nil, fmt.Errorf("want JSON {\"core_mhz\": MHz, \"share\": [cores, GB], \"points\": [[cores, GB, throughput], ...]}: %w", err)
	}
	if _, err := h.sensitivity(); err != nil {
		return nil, err
	}
	if !(h.CoreMHz > 0) || math.IsInf(h.CoreMHz, 0) {
		return nil, fmt.Errorf("core_mhz: must be a positive number of MHz, got %g", h.CoreMHz)
	}
	if f, err := h.Factor(h.Share[0]*h.CoreMHz, h.Share[1]*1024); err != nil || math.Abs(f-1) > 1e-9 {
		return nil, fmt.Errorf("share: the profile has no throughput at %g cores and %g GB", h.Share[0], h.Share[1])
	}
	return &h, nil
}

func (h *HostSpeed) sensitivity() (*policy.Sensitivity, error) {
	if len(h.Points) == 0 {
		return nil, fmt.Errorf("points: none given")
	}
	rows := make([]policy.SensitivityRow, len(h.Points))
	for i, p := range h.Points {
		for k, v := range p {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return nil, fmt.Errorf("points[%d][%d]: not a finite number", i, k)
			}
		}
		rows[i] = policy.SensitivityRow{Model: "run", GPUs: 1, CPUsPerGPU: p[0], MemGBPerGPU: p[1], Throughput: p[2]}
	}
	s, err := policy.NewSensitivity(rows)
	if err != nil {
		return nil, fmt.Errorf("points: %w", err)
	}
	return s, nil
}

// Factor is how many times faster than at Share the run trains with cpuMHz
// and memoryMB; 0 where it cannot train (no CPU or no memory).
func (h *HostSpeed) Factor(cpuMHz, memoryMB float64) (float64, error) {
	s, err := h.sensitivity()
	if err != nil {
		return 0, err
	}
	base, _ := s.Throughput("run", 1, h.Share[0], h.Share[1])
	if !(base > 0) {
		return 0, nil
	}
	t, _ := s.Throughput("run", 1, cpuMHz/h.CoreMHz, memoryMB/1024)
	return t / base, nil
}

// hostLimits reads the task's CPU (MHz) and memory (MB) from Nomad's env.
func hostLimits(env map[string]string) (cpuMHz, memoryMB float64, err error) {
	for _, f := range []struct {
		name string
		to   *float64
	}{{"NOMAD_CPU_LIMIT", &cpuMHz}, {"NOMAD_MEMORY_LIMIT", &memoryMB}} {
		v := env[f.name]
		if v == "" {
			return 0, 0, fmt.Errorf("host-speed: %s is not set (the task must run under Nomad)", f.name)
		}
		if *f.to, err = strconv.ParseFloat(v, 64); err != nil || *f.to < 0 {
			return 0, 0, fmt.Errorf("host-speed: %s: want a number, got %q", f.name, v)
		}
	}
	return cpuMHz, memoryMB, nil
}
