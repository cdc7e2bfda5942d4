package trace

import (
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/caravan-gpu/caravan/planner/policy"
)

// Throughputs is Gavel's measured throughput in steps/s per GPU model,
// job type and scale factor, alone and co-located.
type Throughputs struct {
	solo  map[string]map[tputKey]float64
	pairs []policy.ColocationSample
}

type tputKey struct {
	jobType string
	scale   int
}

var gavelKeyRe = regexp.MustCompile(`^\('(.*)', (\d+)\)$`)

// ParseThroughputs reads Gavel's simulation_throughputs.json. Lines are
// not meaningful in JSON, so errors name the GPU model and key instead.
func ParseThroughputs(r io.Reader, file string) (*Throughputs, error) {
	var raw map[string]map[string]map[string]json.RawMessage
	dec := json.NewDecoder(r)
	if err := dec.Decode(&raw); err != nil {
		line := 1
		if se, ok := err.(*json.SyntaxError); ok {
			line = int(se.Offset) // byte offset: JSON has no useful lines
			return nil, &ParseError{File: file, Line: 1, Field: "json", Err: fmt.Errorf("at byte %d: %v", line, err)}
		}
		return nil, &ParseError{File: file, Line: line, Field: "json", Err: err}
	}
	t := &Throughputs{solo: map[string]map[tputKey]float64{}}
	gpus := make([]string, 0, len(raw))
	for g := range raw {
		gpus = append(gpus, g)
	}
	sort.Strings(gpus)
	for _, gpu := range gpus {
		if strings.Contains(gpu, "_") {
			continue // *_unconsolidated: we model consolidated placement
		}
		t.solo[gpu] = map[tputKey]float64{}
		keys := make([]string, 0, len(raw[gpu]))
		for k := range raw[gpu] {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			self, err := parseGavelKey(file, gpu, k)
			if err != nil {
				return nil, err
			}
			entries := raw[gpu][k]
			nullRaw, ok := entries["null"]
			if !ok {
				return nil, &ParseError{File: file, Line: 1, Field: gpu + "/" + k, Err: fmt.Errorf("no \"null\" (solo) throughput")}
			}
			var solo float64
			if err := json.Unmarshal(nullRaw, &solo); err != nil || solo < 0 {
				return nil, &ParseError{File: file, Line: 1, Field: gpu + "/" + k + "/null", Err: fmt.Errorf("want a non-negative number")}
			}
			t.solo[gpu][self] = solo
			if self.scale != 1 || solo <= 0 {
				continue
			}
			for pk, pv := range entries {
				if pk == "null" {
					continue
				}
				partner, err := parseGavelKey(file, gpu, pk)
				if err != nil {
					return nil, err
				}
				var pair [2]float64
				if err := json.Unmarshal(pv, &pair); err != nil {
					return nil, &ParseError{File: file, Line: 1, Field: gpu + "/" + k + "/" + pk, Err: fmt.Errorf("want [tput_self, tput_partner]")}
				}
				t.pairs = append(t.pairs, policy.ColocationSample{GPU: gpu, Self: self.jobType, Partner: partner.jobType, Factor: pair[0] / solo})
			}
		}
	}
	if len(t.solo) == 0 {
		return nil, &ParseError{File: file, Line: 1, Err: ErrEmpty}
	}
	sort.Slice(t.pairs, func(a, b int) bool {
		pa, pb := t.pairs[a], t.pairs[b]
		if pa.GPU != pb.GPU {
			return pa.GPU < pb.GPU
		}
		if pa.Self != pb.Self {
			return pa.Self < pb.Self
		}
		return pa.Partner < pb.Partner
	})
	return t, nil
}

func parseGavelKey(file, gpu, k string) (tputKey, error) {
	m := gavelKeyRe.FindStringSubmatch(k)
	if m == nil {
		return tputKey{}, &ParseError{File: file, Line: 1, Field: gpu + "/" + k, Err: fmt.Errorf("want a key like \"('ResNet-50 (batch size 64)', 1)\"")}
	}
	sc, err := strconv.Atoi(m[2])
	if err != nil || sc <= 0 {
		return tputKey{}, &ParseError{File: file, Line: 1, Field: gpu + "/" + k, Err: fmt.Errorf("bad scale factor")}
	}
	return tputKey{m[1], sc}, nil
}

// LoadThroughputs reads the Gavel throughput file at path.
func LoadThroughputs(path string) (*Throughputs, error) { return openWith(path, ParseThroughputs) }

// GPUAlias maps cluster GPU models (lower case) onto Gavel's three
// measured models. Gavel measured K80, P100 and V100 only: V100M32 is a
// V100; T4 is closest to a P100 in training throughput; PAI's MISC class
// (older mixed cards) is taken as a K80.
var GPUAlias = map[string]string{"v100m32": "v100", "t4": "p100", "misc": "k80"}

func gavelGPU(model string) string {
	m := strings.ToLower(model)
	if a, ok := GPUAlias[m]; ok {
		return a
	}
	return m
}

// Solo is jobType's throughput in steps/s on scale GPUs of model, or 0
// when unmeasured. A scale without a measurement uses the nearest smaller
// measured scale, times the ratio (linear scaling).
func (t *Throughputs) Solo(model, jobType string, scale int) float64 {
	byKey := t.solo[gavelGPU(model)]
	if byKey == nil {
		return 0
	}
	if v, ok := byKey[tputKey{jobType, scale}]; ok {
		return v
	}
	best := 0
	for k := range byKey {
		if k.jobType == jobType && k.scale < scale && k.scale > best {
			best = k.scale
		}
	}
	if best == 0 {
		return 0
	}
	return byKey[tputKey{jobType, best}] * float64(scale) / float64(best)
}

// Models lists the measured GPU models.
func (t *Throughputs) Models() []string {
	var out []string
	for g := range t.solo {
		out = append(out, g)
	}
	sort.Strings(out)
	return out
}

// Colocation is the measured co-location slowdown model for lane packing.
func (t *Throughputs) Colocation() *policy.Colocation {
	return policy.NewColocation(t.pairs, GPUAlias)
}

// ParseSensitivity reads Synergy's sensitivity CSV
// (model,gpus,cpus_per_gpu,mem_gb_per_gpu,normalized_throughput).
func ParseSensitivity(r io.Reader, file string) (*policy.Sensitivity, error) {
	var rows []policy.SensitivityRow
	var idx map[string]int
	err := lines(r, file, func(n int, line string) error {
		cols := strings.Split(line, ",")
		if idx == nil {
			var err error
			idx, err = header(file, n, cols, "model", "gpus", "cpus_per_gpu", "mem_gb_per_gpu", "normalized_throughput")
			return err
		}
		var row policy.SensitivityRow
		var err error
		if row.Model, err = field(file, n, cols, idx, "model"); err != nil {
			return err
		}
		if row.Model == "" {
			return perr(file, n, "model", "empty")
		}
		s, err := field(file, n, cols, idx, "gpus")
		if err != nil {
			return err
		}
		if row.GPUs, err = parseInt(file, n, "gpus", s, 1); err != nil {
			return err
		}
		for _, f := range []struct {
			name string
			dst  *float64
			min  float64
		}{{"cpus_per_gpu", &row.CPUsPerGPU, 1e-9}, {"mem_gb_per_gpu", &row.MemGBPerGPU, 1e-9}, {"normalized_throughput", &row.Throughput, 0}} {
			s, err := field(file, n, cols, idx, f.name)
			if err != nil {
				return err
			}
			if *f.dst, err = parseFloat(file, n, f.name, s, f.min); err != nil {
				return err
			}
		}
		rows = append(rows, row)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, &ParseError{File: file, Line: 1, Err: ErrEmpty}
	}
	return policy.NewSensitivity(rows)
}

// LoadSensitivity reads the sensitivity CSV at path.
func LoadSensitivity(path string) (*policy.Sensitivity, error) {
	return openWith(path, ParseSensitivity)
}

// ParseJobSizes reads a job-size sample (header, then one GPU-seconds
// value per line), like Tiresias' yarn-gput1000.csv.
func ParseJobSizes(r io.Reader, file string) (*policy.SizeDistribution, error) {
	v, err := ParseJobSizeSample(r, file)
	if err != nil {
		return nil, err
	}
	return policy.NewSizeDistribution(v), nil
}

// ParseJobSizeSample reads a job-size sample as ParseJobSizes does and
// returns its values in file order.
func ParseJobSizeSample(r io.Reader, file string) ([]float64, error) {
	var v []float64
	seenHeader := false
	err := lines(r, file, func(n int, line string) error {
		if !seenHeader {
			seenHeader = true
			return nil
		}
		x, err := parseFloat(file, n, "duration", strings.TrimSpace(strings.Split(line, ",")[0]), 0)
		if err != nil {
			return err
		}
		v = append(v, x)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(v) == 0 {
		return nil, &ParseError{File: file, Line: 1, Err: ErrEmpty}
	}
	return v, nil
}

// LoadJobSizes reads a job-size sample file.
func LoadJobSizes(path string) (*policy.SizeDistribution, error) {
	return openWith(path, ParseJobSizes)
}

// LoadJobSizeSample reads a job-size sample file's values.
func LoadJobSizeSample(path string) ([]float64, error) {
	return openWith(path, ParseJobSizeSample)
}
