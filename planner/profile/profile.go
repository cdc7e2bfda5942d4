// Package profile holds job profiles: a network's throughput on each GPU
// model (for speedup matching) and its sensitivity to CPU and host memory
// (for Synergy sizing). Jobs name their profile with job meta
// caravan.profile; the planner keeps profiles in Consul KV.
package profile

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
)

// Profile is one network's measured behaviour.
type Profile struct {
	Name string `json:"name"`
	// Throughput is work per second on each GPU model (any unit, the same
	// for all models of one profile).
	Throughput map[string]float64 `json:"throughput"`
	// Sensitivity is Synergy's profile: throughput relative to the
	// GPU-proportional share at given CPUs and host memory per GPU; optional.
	Sensitivity []SensitivityPoint `json:"sensitivity,omitempty"`
}

// SensitivityPoint is one measured point of a sensitivity profile.
type SensitivityPoint struct {
	GPUs        int     `json:"gpus"`
	CPUsPerGPU  float64 `json:"cpus_per_gpu"`
	MemGBPerGPU float64 `json:"mem_gb_per_gpu"`
	Throughput  float64 `json:"throughput"`
}

// File is the import format: {"profiles": [...]}.
type File struct {
	Profiles []Profile `json:"profiles"`
}

// Parse reads profiles from JSON ({"profiles": [...]}) or from CSV with the
// header profile,gpu_model,throughput. Errors name the line and field.
func Parse(name string, data []byte) ([]Profile, error) {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) > 0 && trimmed[0] == '{' {
		return parseJSON(name, trimmed)
	}
	return parseCSV(name, data)
}

func parseJSON(name string, data []byte) ([]Profile, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var f File
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	for i, p := range f.Profiles {
		if err := p.Validate(); err != nil {
			return nil, fmt.Errorf("%s: profiles[%d]: %w", name, i, err)
		}
	}
	return f.Profiles, nil
}

func parseCSV(name string, data []byte) ([]Profile, error) {
	r := csv.NewReader(bytes.NewReader(data))
	r.FieldsPerRecord = 3
	header, err := r.Read()
	if err != nil {
		return nil, fmt.Errorf("%s: line 1: %w", name, err)
	}
	want := []string{"profile", "gpu_model", "throughput"}
	for i, h := range header {
		if strings.TrimSpace(h) != want[i] {
			return nil, fmt.Errorf("%s: line 1: column %d is %q, want header %s", name, i+1, h, strings.Join(want, ","))
		}
	}
	byName := map[string]*Profile{}
	var order []string
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		line, _ := r.FieldPos(0) // only for a record read without error
		v, err := strconv.ParseFloat(strings.TrimSpace(rec[2]), 64)
		if err != nil || v <= 0 || math.IsInf(v, 0) {
			return nil, fmt.Errorf("%s: line %d: throughput: want a positive number, got %q", name, line, rec[2])
		}
		pn, model := strings.TrimSpace(rec[0]), strings.TrimSpace(rec[1])
		if pn == "" || model == "" {
			return nil, fmt.Errorf("%s: line %d: profile and gpu_model must not be empty", name, line)
		}
		p := byName[pn]
		if p == nil {
			p = &Profile{Name: pn, Throughput: map[string]float64{}}
			byName[pn] = p
			order = append(order, pn)
		}
		p.Throughput[model] = v
	}
	var out []Profile
	for _, n := range order {
		if err := byName[n].Validate(); err != nil {
			return nil, fmt.Errorf("%s: profile %q: %w", name, n, err)
		}
		out = append(out, *byName[n])
	}
	return out, nil
}

// Validate checks one profile.
func (p Profile) Validate() error {
	if strings.TrimSpace(p.Name) == "" || strings.Contains(p.Name, "/") {
		return fmt.Errorf("name: must be non-empty and contain no '/', got %q", p.Name)
	}
	if len(p.Throughput) == 0 {
		return fmt.Errorf("throughput: profile %q needs at least one GPU model", p.Name)
	}
	for m, v := range p.Throughput {
		if v <= 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("throughput[%q]: must be a positive number, got %g", m, v)
		}
	}
	for i, pt := range p.Sensitivity {
		// A throughput of 0 is a point where the model cannot train (its
		// memory runs out there), as Synergy's table has them.
		if pt.GPUs <= 0 || pt.CPUsPerGPU <= 0 || pt.MemGBPerGPU <= 0 || !(pt.Throughput >= 0) || math.IsInf(pt.Throughput, 0) ||
			math.IsInf(pt.CPUsPerGPU, 0) || math.IsInf(pt.MemGBPerGPU, 0) {
			return fmt.Errorf("sensitivity[%d]: gpus, cpus_per_gpu and mem_gb_per_gpu must be positive and throughput at least 0", i)
		}
	}
	return nil
}

// Models lists the profile's GPU models, fastest first.
func (p Profile) Models() []string {
	var ms []string
	for m := range p.Throughput {
		ms = append(ms, m)
	}
	sort.Slice(ms, func(i, j int) bool {
		if p.Throughput[ms[i]] != p.Throughput[ms[j]] {
			return p.Throughput[ms[i]] > p.Throughput[ms[j]]
		}
		return ms[i] < ms[j]
	})
	return ms
}
