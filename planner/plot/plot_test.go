package plot

import (
	"bytes"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/shoenig/test/must"
)

// The time axis is labelled in a unit that gives distinct round ticks: a
// one-hour run reads in minutes, not "0, 0, 0, 0, 1, 1" hours.
func TestTimeAxisTicksAreDistinctAndReadable(t *testing.T) {
	cases := []struct {
		end  float64
		unit string
	}{{90, "seconds"}, {3600, "minutes"}, {3380, "minutes"}, {8 * 3600, "hours"}, {30 * 86400, "days"}}
	for _, tc := range cases {
		unit, labels := TimeTickLabels(tc.end)
		must.Eq(t, tc.unit, unit.Name, must.Sprint(tc.end))
		must.GreaterEq(t, 3, len(labels), must.Sprintf("%v s: %v", tc.end, labels))
		must.Eq(t, len(labels), len(slices.Compact(slices.Clone(labels))), must.Sprintf("repeated labels %v", labels))
	}
}

// Ticks at fractional steps read as the step does: 0.1, 0.2, ... not
// 0.30000000000000004, which adding the step up would print.
func TestRoundTicksHaveNoFloatNoise(t *testing.T) {
	for _, hi := range []float64{0.7, 0.07, 1.3, 2.9, 0.0009, 77} {
		for _, tk := range (roundTicks{}).Ticks(0, hi) {
			if tk.Label == "" {
				continue
			}
			if i := strings.IndexByte(tk.Label, '.'); i >= 0 {
				must.LessEq(t, 5, len(tk.Label)-i-1, must.Sprintf("range 0..%g: label %q", hi, tk.Label))
			}
		}
	}
}

// Panels draw with data, without data (a live cluster before its first
// completion), and with values a log axis cannot show.
func TestPanelsDrawAnyRuns(t *testing.T) {
	cases := []struct {
		name  string
		runs  []Run
		wants []string
	}{
		{"two runs", []Run{
			{Name: "las", GPUs: 4, JCT: []float64{10, 100, 1000}, Util: []UtilPoint{{0, 4}, {1800, 2}, {3600, 0}}},
			{Name: "fifo", GPUs: 4, JCT: []float64{20, 200}, Util: []UtilPoint{{0, 1}, {3000, 0}}},
		}, []string{"JCT CDF", "GPU utilisation", "time (minutes)", ">las<", ">fifo<"}},
		{"nothing yet", []Run{{Name: "live", GPUs: 8}}, []string{"no completed jobs yet", "no samples yet"}},
		{"one sample", []Run{{Name: "live", GPUs: 8, Util: []UtilPoint{{0, 3}}}}, []string{"time (seconds)"}},
		{"bad values", []Run{{Name: "live", GPUs: 0, JCT: []float64{math.NaN(), 0, -5, math.Inf(1)}}}, []string{"no completed jobs yet"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			must.NoError(t, WriteBoth(&buf, tc.runs))
			svg := buf.String()
			must.StrHasPrefix(t, "<?xml", svg)
			for _, want := range tc.wants {
				must.StrContains(t, svg, want)
			}
		})
	}
	must.ErrorIs(t, WriteBoth(&bytes.Buffer{}, nil), ErrNoRuns)
}

// A legend entry per panel for each run.
func TestBothPanelsHaveEveryRun(t *testing.T) {
	var buf bytes.Buffer
	must.NoError(t, WriteBoth(&buf, []Run{{Name: "las", GPUs: 2, JCT: []float64{5}, Util: []UtilPoint{{0, 1}, {9, 0}}}}))
	must.Eq(t, 2, strings.Count(buf.String(), ">las<"))
}
