package budget

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ParseMiB parses a memory size into MiB: "4096" (MiB), "512MiB", "512MB",
// "4GiB", "4G", "1.5GiB", "1TiB". Binary and decimal suffixes are both read
// as binary, as GPU memory is always quoted in binary units.
func ParseMiB(s string) (uint64, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, fmt.Errorf("empty size")
	}
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	if num == "" {
		return 0, fmt.Errorf("size %q does not start with a number", s)
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: %v", s, err)
	}
	var mult float64
	switch unit {
	case "", "m", "mb", "mib":
		mult = 1
	case "k", "kb", "kib":
		mult = 1.0 / 1024
	case "g", "gb", "gib":
		mult = 1024
	case "t", "tb", "tib":
		mult = 1024 * 1024
	default:
		return 0, fmt.Errorf("size %q: unknown unit %q (use MiB, GiB or TiB)", s, unit)
	}
	mib := v * mult
	if math.IsInf(mib, 0) || math.IsNaN(mib) || mib >= float64(1<<40) {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return uint64(math.Round(mib)), nil
}
