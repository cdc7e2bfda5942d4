package gpu

import (
	"fmt"
	"strings"

	"github.com/dustin/go-humanize"
)

// maxMemoryMiB bounds parsed sizes far above any GPU, so that sums of them
// cannot overflow.
const maxMemoryMiB = 1 << 40

// memoryUnits are the byte units Nomad names (plugins/shared/structs), in
// lower case: decimal kB/MB/GB/... and binary KiB/MiB/GiB/...
var memoryUnits = map[string]bool{
	"b": true, "kb": true, "kib": true, "mb": true, "mib": true, "gb": true, "gib": true,
	"tb": true, "tib": true, "pb": true, "pib": true, "eb": true, "eib": true,
}

// ParseMemoryMiB reads a memory size such as "20GiB", "512 MiB", "10GB" or
// "2048" into whole MiB, rounding down. Units are read as Nomad reads them:
// GB is decimal (10^9 bytes), GiB binary (2^30 bytes), and a bare number is
// MiB, as in Nomad's own memory fields. Units are case-insensitive; a unit of
// one letter ("G") is refused, as it could mean either.
func ParseMemoryMiB(s string) (uint64, error) {
	t := strings.TrimSpace(s)
	i := strings.IndexFunc(t, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	num, unit := t, ""
	if i >= 0 {
		num, unit = t[:i], strings.TrimSpace(t[i:])
	}
	if num == "" || strings.Count(num, ".") > 1 || num == "." {
		return 0, fmt.Errorf("%q is not a size such as \"20GiB\"", s)
	}
	if unit == "" {
		unit = "MiB"
	}
	switch lower := strings.ToLower(unit); {
	case memoryUnits[lower]:
	case len(lower) == 1:
		return 0, fmt.Errorf("%q: unit %q is ambiguous: write GiB (binary) or GB (decimal)", s, unit)
	default:
		return 0, fmt.Errorf("%q has unknown unit %q (use MiB, GiB, TiB, MB, GB or TB)", s, unit)
	}
	bytes, err := humanize.ParseBytes(num + unit)
	if err != nil {
		if strings.Contains(err.Error(), "too large") {
			return 0, fmt.Errorf("%q is too large", s)
		}
		return 0, fmt.Errorf("%q is not a size such as \"20GiB\"", s)
	}
	mib := bytes >> 20
	if mib >= maxMemoryMiB {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return mib, nil
}
