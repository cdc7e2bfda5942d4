package budget

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// PerGPUEnv gives a task its budget on each of its GPUs, as
// "ORDINAL=MiB,..." with ordinals in CUDA_VISIBLE_DEVICES order, the way
// CUDA_MPS_PINNED_DEVICE_MEM_LIMIT lists them. CARAVAN_GPU_MEMORY_MIB keeps
// the smallest of them for scripts that read one number.
const PerGPUEnv = "CARAVAN_GPU_MEMORY_MIB_PER_GPU"

// ProcessesEnv tells a task how many of its processes may hold memory on
// one GPU (gpu_processes); each may hold that fraction of the budget.
const ProcessesEnv = "CARAVAN_GPU_PROCESSES"

// MPSLimitEnv is the MPS client's per-device pinned memory limit.
const MPSLimitEnv = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"

// ParseDeviceLimits reads "ORDINAL=SIZE,..." as CUDA_MPS_PINNED_DEVICE_MEM_LIMIT
// and PerGPUEnv write it: SIZE is MiB, bare or with M/MB, or GiB with G/GB.
func ParseDeviceLimits(s string) (map[int]uint64, error) {
	out := map[int]uint64{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for _, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return nil, fmt.Errorf("%q is not ORDINAL=SIZE", part)
		}
		ordinal, err := strconv.Atoi(strings.TrimSpace(k))
		if err != nil || ordinal < 0 || ordinal > 1023 {
			return nil, fmt.Errorf("%q: ordinal must be a number from 0 to 1023", part)
		}
		mib, err := parseLimitMiB(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("%q: %w", part, err)
		}
		if _, dup := out[ordinal]; dup {
			return nil, fmt.Errorf("ordinal %d given twice", ordinal)
		}
		out[ordinal] = mib
	}
	return out, nil
}

func parseLimitMiB(v string) (uint64, error) {
	upper := strings.ToUpper(v)
	shift := 0
	switch {
	case strings.HasSuffix(upper, "GB"):
		upper, shift = upper[:len(upper)-2], 10
	case strings.HasSuffix(upper, "G"):
		upper, shift = upper[:len(upper)-1], 10
	case strings.HasSuffix(upper, "MB"):
		upper = upper[:len(upper)-2]
	case strings.HasSuffix(upper, "M"):
		upper = upper[:len(upper)-1]
	}
	n, err := strconv.ParseUint(upper, 10, 64)
	if err != nil || n >= 1<<40>>shift {
		return 0, fmt.Errorf("size %q must be a whole number of MiB (M, MB) or GiB (G, GB)", v)
	}
	return n << shift, nil
}

// FormatDeviceLimits writes limits as ParseDeviceLimits reads them, in MiB
// with unit suffix (e.g. "M" for MPS, "" for PerGPUEnv), by ordinal.
func FormatDeviceLimits(limits map[int]uint64, unit string) string {
	ordinals := make([]int, 0, len(limits))
	for o := range limits {
		ordinals = append(ordinals, o)
	}
	sort.Ints(ordinals)
	parts := make([]string, len(ordinals))
	for i, o := range ordinals {
		parts[i] = fmt.Sprintf("%d=%d%s", o, limits[o], unit)
	}
	return strings.Join(parts, ",")
}

// LimitFor is the limit env (PerGPUEnv or MPSLimitEnv) gives uuid, whose
// ordinal is its place in CUDA_VISIBLE_DEVICES; 0 when none.
func LimitFor(env map[string]string, name, uuid string) (uint64, error) {
	v := env[name]
	if v == "" || uuid == "" {
		return 0, nil
	}
	limits, err := ParseDeviceLimits(v)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	for i, u := range strings.Split(env["CUDA_VISIBLE_DEVICES"], ",") {
		if strings.TrimSpace(u) == uuid {
			return limits[i], nil
		}
	}
	return 0, nil
}
