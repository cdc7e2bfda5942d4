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

// The JCT axis's labels never overlap, however many decades it spans, and
// are as dense as that allows: a decade or two gets 1, 2 and 5, many
// decades fewer, and each label is short (10k, not 10000).
func TestLogTicksDoNotOverlap(t *testing.T) {
	p, err := JCTPanel([]Run{{Name: "x", JCT: []float64{1}}})
	must.NoError(t, err)
	lt := p.X.Tick.Marker.(logTicks)
	cases := []struct {
		lo, hi float64
		want   []string // labels that must be there
	}{
		{30, 300, []string{"50", "100", "200"}},
		{10, 1e4, []string{"20", "50", "100", "1k"}},
		{10, 1e6, []string{"100", "1k", "10k", "100k", "1M"}},
		{1, 1e9, []string{"1", "1M"}},
		{0.001, 1e12, nil},
	}
	for _, tc := range cases {
		ticks := lt.Ticks(tc.lo, tc.hi)
		var labels []string
		var xs, ws []float64
		for _, tk := range ticks {
			if tk.Label == "" {
				continue
			}
			labels = append(labels, tk.Label)
			xs = append(xs, float64(lt.axis)*math.Log(tk.Value/tc.lo)/math.Log(tc.hi/tc.lo))
			ws = append(ws, float64(lt.style.Width(tk.Label)))
		}
		must.Greater(t, 1, len(labels), must.Sprintf("%g..%g: %v", tc.lo, tc.hi, labels))
		for i := 1; i < len(xs); i++ {
			must.Greater(t, (ws[i-1]+ws[i])/2, xs[i]-xs[i-1], must.Sprintf("%g..%g: %q and %q touch", tc.lo, tc.hi, labels[i-1], labels[i]))
		}
		for _, w := range tc.want {
			must.SliceContains(t, labels, w, must.Sprintf("%g..%g: %v", tc.lo, tc.hi, labels))
		}
	}
	must.Eq(t, "10k", shortTick(1e4))
	must.Eq(t, "1.5M", shortTick(1.5e6))
	must.Eq(t, "500", shortTick(500))
}
