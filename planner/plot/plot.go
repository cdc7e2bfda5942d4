// Package plot draws caravan's charts with gonum/plot: the JCT CDF and GPU
// utilisation over time. `caravan sim -out` writes them into plots.svg and
// the planner's dashboard serves them, so that both read the same way.
package plot

import (
	"bytes"
	"errors"
	"image/color"
	"io"
	"math"
	"slices"
	"strconv"

	gplot "gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Run is one line in each panel: a policy's simulated run, a replay, or
// the live cluster.
type Run struct {
	Name string
	// GPUs is the cluster's GPU count, for utilisation in percent.
	GPUs int
	// JCT holds the completed jobs' completion times in seconds; NaN and
	// non-positive values are left out.
	JCT []float64
	// Util is the number of busy GPUs over time, changing only at its
	// points.
	Util []UtilPoint
}

// UtilPoint says that from T seconds on, Busy GPUs were busy.
type UtilPoint struct {
	T    float64 `json:"t"`
	Busy float64 `json:"busy"`
}

// ErrNoRuns is returned when there is nothing to draw.
var ErrNoRuns = errors.New("plot: no runs to draw")

// Colors are the lines' colours, one per run in order.
var Colors = []color.RGBA{
	{0x1f, 0x77, 0xb4, 0xff}, {0xd6, 0x27, 0x28, 0xff}, {0x2c, 0xa0, 0x2c, 0xff}, {0xff, 0x7f, 0x0e, 0xff},
	{0x94, 0x67, 0xbd, 0xff}, {0x8c, 0x56, 0x4b, 0xff}, {0xe3, 0x77, 0xc2, 0xff}, {0x17, 0xbe, 0xcf, 0xff},
}

// Sizes of the SVGs: both panels stacked (plots.svg), or one panel.
const (
	Width       = 9 * vg.Inch
	BothHeight  = 7.2 * vg.Inch
	PanelHeight = 3.8 * vg.Inch
)

// WriteBoth writes one SVG with the JCT CDF above GPU utilisation.
func WriteBoth(w io.Writer, runs []Run) error {
	if len(runs) == 0 {
		return ErrNoRuns
	}
	cdf, err := JCTPanel(runs)
	if err != nil {
		return err
	}
	util, err := UtilPanel(runs)
	if err != nil {
		return err
	}
	return WriteSVG(w, Width, BothHeight, cdf, util)
}

// WriteSVG draws panels stacked top to bottom into one SVG.
func WriteSVG(w io.Writer, width, height vg.Length, panels ...*gplot.Plot) error {
	canvas := vgsvg.New(width, height)
	dc := draw.New(canvas)
	tiles := draw.Tiles{Rows: len(panels), Cols: 1, PadX: vg.Millimeter, PadY: 4 * vg.Millimeter,
		PadTop: 2 * vg.Millimeter, PadBottom: 2 * vg.Millimeter, PadLeft: 2 * vg.Millimeter, PadRight: 2 * vg.Millimeter}
	grid := make([][]*gplot.Plot, len(panels))
	for i, p := range panels {
		grid[i] = []*gplot.Plot{p}
	}
	canvases := gplot.Align(grid, tiles, dc)
	for i, p := range panels {
		p.Draw(canvases[i][0])
	}
	// Buffered, so that a failed draw writes nothing.
	var buf bytes.Buffer
	if _, err := canvas.WriteTo(&buf); err != nil {
		return err
	}
	_, err := w.Write(buf.Bytes())
	return err
}

// JCTPanel is the JCT CDF on a log time axis, one line per run.
func JCTPanel(runs []Run) (*gplot.Plot, error) {
	p := gplot.New()
	p.Title.Text = "JCT CDF"
	p.X.Label.Text = "job completion time (s, log scale)"
	p.Y.Label.Text = "fraction of jobs"
	// The axis is about the panel's width less the y axis and padding.
	p.X.Scale, p.X.Tick.Marker = gplot.LogScale{}, logTicks{axis: Width - 1.2*vg.Inch, style: p.X.Tick.Label}
	p.Y.Min, p.Y.Max = 0, 1
	p.Legend.Top, p.Legend.Left = false, true
	lines := 0
	lo, hi := math.Inf(1), math.Inf(-1)
	for i, r := range runs {
		var jct []float64
		for _, v := range r.JCT {
			if !math.IsNaN(v) && !math.IsInf(v, 0) && v > 0 {
				jct = append(jct, v)
			}
		}
		if len(jct) == 0 {
			continue
		}
		slices.Sort(jct)
		lo, hi = min(lo, jct[0]), max(hi, jct[len(jct)-1])
		step := max(len(jct)/2000, 1)
		// From 0 at the first completion, so that a single job still
		// draws its step.
		pts := plotter.XYs{{X: jct[0], Y: 0}}
		for k := 0; k < len(jct); k += step {
			pts = append(pts, plotter.XY{X: jct[k], Y: float64(k+1) / float64(len(jct))})
		}
		pts = append(pts, plotter.XY{X: jct[len(jct)-1], Y: 1})
		line, err := plotter.NewLine(pts)
		if err != nil {
			return nil, err
		}
		line.StepStyle = plotter.PostStep // the CDF jumps at each completion
		line.Color = Colors[i%len(Colors)]
		line.Width = vg.Points(1.5)
		p.Add(line)
		p.Legend.Add(r.Name, line)
		lines++
	}
	switch {
	case lines == 0:
		// A log axis needs a positive range even with nothing on it.
		p.Title.Text += " (no completed jobs yet)"
		p.X.Min, p.X.Max = 1, 1000
	case hi/lo < 10:
		// A decade at least, so that a few close JCTs get labelled ticks.
		mid := math.Sqrt(lo * hi)
		p.X.Min, p.X.Max = mid/math.Sqrt(10), mid*math.Sqrt(10)
	}
	return p, nil
}

// UtilPanel is the percentage of busy GPUs over time, one step line per
// run.
func UtilPanel(runs []Run) (*gplot.Plot, error) {
	end := 0.0
	for _, r := range runs {
		if n := len(r.Util); n > 0 {
			end = max(end, r.Util[n-1].T)
		}
	}
	unit := TimeUnitFor(end)
	p := gplot.New()
	p.Title.Text = "GPU utilisation"
	p.X.Label.Text = "time (" + unit.Name + ")"
	p.Y.Label.Text = "busy GPUs (%)"
	p.Y.Min, p.Y.Max = 0, 100
	p.X.Min = 0
	p.X.Tick.Marker = roundTicks{}
	p.Legend.Top = true
	lines := 0
	for i, r := range runs {
		if len(r.Util) == 0 {
			continue
		}
		step := max(len(r.Util)/4000, 1)
		var pts plotter.XYs
		for k := 0; k < len(r.Util); k += step {
			u := r.Util[k]
			pts = append(pts, plotter.XY{X: u.T / unit.Seconds, Y: 100 * math.Min(u.Busy/float64(max(r.GPUs, 1)), 1)})
		}
		line, err := plotter.NewLine(pts)
		if err != nil {
			return nil, err
		}
		line.StepStyle = plotter.PostStep // busy GPUs hold their value until the next event
		line.Color = Colors[i%len(Colors)]
		line.Width = vg.Points(1.5)
		p.Add(line)
		p.Legend.Add(r.Name, line)
		lines++
	}
	if lines == 0 || end == 0 {
		p.X.Max = max(p.X.Max, 1)
	}
	if lines == 0 {
		p.Title.Text += " (no samples yet)"
	}
	return p, nil
}

// TimeUnit is a unit the time axis is labelled in.
type TimeUnit struct {
	Name    string
	Seconds float64
}

// TimeUnitFor picks the unit that gives a span of end seconds a handful of
// round ticks: seconds up to 5 minutes, minutes up to 5 hours, hours up to
// 5 days, then days.
func TimeUnitFor(end float64) TimeUnit {
	switch {
	case end <= 300:
		return TimeUnit{"seconds", 1}
	case end <= 5*3600:
		return TimeUnit{"minutes", 60}
	case end <= 5*86400:
		return TimeUnit{"hours", 3600}
	}
	return TimeUnit{"days", 86400}
}

// TimeTickLabels are the labelled ticks of a time axis of end seconds, in
// its unit.
func TimeTickLabels(end float64) (TimeUnit, []string) {
	unit := TimeUnitFor(end)
	var labels []string
	for _, t := range (roundTicks{}).Ticks(0, end/unit.Seconds) {
		if t.Label != "" {
			labels = append(labels, t.Label)
		}
	}
	return unit, labels
}

// roundTicks labels 4 to 10 ticks at a round step (1, 2 or 5 × 10^k),
// without trailing zeros, and puts unlabelled ticks between them.
type roundTicks struct{}

func (roundTicks) Ticks(lo, hi float64) []gplot.Tick {
	if !(hi > lo) {
		return []gplot.Tick{{Value: lo, Label: formatTick(lo)}}
	}
	span := hi - lo
	step := math.Pow(10, math.Floor(math.Log10(span)))
	for _, m := range []float64{0.1, 0.2, 0.5, 1} {
		if span/(step*m) <= 10 {
			step *= m
			break
		}
	}
	// Each tick is a whole multiple of step, labelled to step's decimals:
	// adding step up would print float noise such as 0.6000000000000001.
	decimals := max(0, int(-math.Floor(math.Log10(step)+1e-9)))
	var ticks []gplot.Tick
	for k := math.Ceil(lo / step); k*step <= hi+step*1e-9; k++ {
		v := k * step
		ticks = append(ticks, gplot.Tick{Value: v, Label: formatTickTo(v, decimals)})
		if minor := v + step/2; minor < hi {
			ticks = append(ticks, gplot.Tick{Value: minor})
		}
	}
	return ticks
}

// formatTickTo prints v with at most decimals digits after the point,
// without trailing zeros.
func formatTickTo(v float64, decimals int) string {
	return formatTick(math.Round(v*math.Pow(10, float64(decimals))) / math.Pow(10, float64(decimals)))
}

// logTicks puts a tick at every integer × 10^k within the range and labels
// the densest of 1-2-5, 1-3 and 1 per decade (then every second, third...
// decade) whose labels do not overlap on an axis of length axis in style;
// labels are short (10k, 2M).
type logTicks struct {
	axis  vg.Length
	style text.Style
}

// logLabelSets are the mantissas labelled per decade, densest first.
var logLabelSets = [][]float64{{1, 2, 5}, {1, 3}, {1}}

func (lt logTicks) Ticks(lo, hi float64) []gplot.Tick {
	if !(lo > 0) || !(hi >= lo) || math.IsInf(hi, 0) {
		return nil
	}
	var values []float64
	for e := math.Floor(math.Log10(lo)); math.Pow(10, e) <= hi; e++ {
		for m := 1.0; m < 10; m++ {
			if v := m * math.Pow(10, e); v >= lo && v <= hi {
				values = append(values, v)
			}
		}
	}
	labelled := func(v float64, set []float64, every int) bool {
		e := math.Floor(math.Log10(v) + 1e-9)
		m := math.Round(v / math.Pow(10, e))
		return int(e)%every == 0 && slices.Contains(set, m)
	}
	ticks := make([]gplot.Tick, len(values))
	label := func(set []float64, every int) []gplot.Tick {
		for i, v := range values {
			ticks[i] = gplot.Tick{Value: v}
			if labelled(v, set, every) {
				ticks[i].Label = shortTick(v)
			}
		}
		return ticks
	}
	for _, set := range logLabelSets {
		if !lt.overlap(label(set, 1), lo, hi) {
			return ticks
		}
	}
	every := 2
	for lt.overlap(label([]float64{1}, every), lo, hi) && every < 12 {
		every++
	}
	return ticks
}

// overlap reports whether two labels of ticks would touch on the axis (with
// a gap of one "0"); with no axis length given, none do.
func (lt logTicks) overlap(ticks []gplot.Tick, lo, hi float64) bool {
	if lt.axis <= 0 || hi <= lo {
		return false
	}
	gap := lt.style.Width("0")
	var lastEnd vg.Length
	first := true
	for _, t := range ticks {
		if t.Label == "" {
			continue
		}
		x := lt.axis * vg.Length(math.Log(t.Value/lo)/math.Log(hi/lo))
		w := lt.style.Width(t.Label)
		if !first && x-w/2 < lastEnd+gap {
			return true
		}
		lastEnd, first = x+w/2, false
	}
	return false
}

// shortTick prints a tick value of a seconds axis briefly: 500, 2k, 10k,
// 1.5M, 1G.
func shortTick(v float64) string {
	switch {
	case v >= 1e9:
		return formatTick(v/1e9) + "G"
	case v >= 1e6:
		return formatTick(v/1e6) + "M"
	case v >= 1e3:
		return formatTick(v/1e3) + "k"
	}
	return formatTick(v)
}

func formatTick(v float64) string {
	if math.Abs(v) < 1e-9 {
		return "0"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}
