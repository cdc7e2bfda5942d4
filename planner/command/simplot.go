package command

import (
	"bytes"
	"image/color"
	"math"
	"os"
	"slices"
	"strconv"

	"github.com/caravan-gpu/caravan/planner/sim"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

var plotColors = []color.RGBA{
	{0x1f, 0x77, 0xb4, 0xff}, {0xd6, 0x27, 0x28, 0xff}, {0x2c, 0xa0, 0x2c, 0xff}, {0xff, 0x7f, 0x0e, 0xff},
	{0x94, 0x67, 0xbd, 0xff}, {0x8c, 0x56, 0x4b, 0xff}, {0xe3, 0x77, 0xc2, 0xff}, {0x17, 0xbe, 0xcf, 0xff},
}

// writePlot writes one SVG with two panels drawn by gonum/plot: the JCT CDF
// (log time axis) and GPU utilisation over time, one line per policy.
// Utilisation changes only at events, so it is drawn as steps.
func writePlot(path string, results []*sim.Result) error {
	if len(results) == 0 {
		return errNoResults
	}
	cdf, err := jctPlot(results)
	if err != nil {
		return err
	}
	util, err := utilPlot(results)
	if err != nil {
		return err
	}
	const w, h = 9 * vg.Inch, 7.2 * vg.Inch
	canvas := vgsvg.New(w, h)
	dc := draw.New(canvas)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadX: vg.Millimeter, PadY: 4 * vg.Millimeter,
		PadTop: 2 * vg.Millimeter, PadBottom: 2 * vg.Millimeter, PadLeft: 2 * vg.Millimeter, PadRight: 2 * vg.Millimeter}
	plots := [][]*plot.Plot{{cdf}, {util}}
	canvases := plot.Align(plots, tiles, dc)
	cdf.Draw(canvases[0][0])
	util.Draw(canvases[1][0])
	var buf bytes.Buffer
	if _, err := canvas.WriteTo(&buf); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

func jctPlot(results []*sim.Result) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "JCT CDF"
	p.X.Label.Text = "job completion time (s, log scale)"
	p.Y.Label.Text = "fraction of jobs"
	p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, logTicks{}
	p.Y.Min, p.Y.Max = 0, 1
	p.Legend.Top, p.Legend.Left = false, true
	for i, r := range results {
		var jct []float64
		for _, j := range r.Jobs {
			if !math.IsNaN(j.JCT) && j.JCT > 0 {
				jct = append(jct, j.JCT)
			}
		}
		if len(jct) == 0 {
			continue
		}
		slices.Sort(jct)
		step := max(len(jct)/2000, 1)
		var pts plotter.XYs
		for k := 0; k < len(jct); k += step {
			pts = append(pts, plotter.XY{X: jct[k], Y: float64(k+1) / float64(len(jct))})
		}
		pts = append(pts, plotter.XY{X: jct[len(jct)-1], Y: 1})
		line, err := plotter.NewLine(pts)
		if err != nil {
			return nil, err
		}
		line.StepStyle = plotter.PostStep // the CDF jumps at each completion
		line.Color = plotColors[i%len(plotColors)]
		line.Width = vg.Points(1.5)
		p.Add(line)
		p.Legend.Add(r.Policy, line)
	}
	return p, nil
}

func utilPlot(results []*sim.Result) (*plot.Plot, error) {
	end := 0.0
	for _, r := range results {
		if n := len(r.Util); n > 0 {
			end = max(end, r.Util[n-1].T)
		}
	}
	unit := timeUnitFor(end)
	p := plot.New()
	p.Title.Text = "GPU utilisation"
	p.X.Label.Text = "time (" + unit.name + ")"
	p.Y.Label.Text = "busy GPUs (%)"
	p.Y.Min, p.Y.Max = 0, 100
	p.X.Min = 0
	p.X.Tick.Marker = roundTicks{}
	p.Legend.Top = true
	for i, r := range results {
		if len(r.Util) == 0 {
			continue
		}
		step := max(len(r.Util)/4000, 1)
		var pts plotter.XYs
		for k := 0; k < len(r.Util); k += step {
			u := r.Util[k]
			pts = append(pts, plotter.XY{X: u.T / unit.seconds, Y: 100 * math.Min(u.Busy/float64(max(r.GPUs, 1)), 1)})
		}
		line, err := plotter.NewLine(pts)
		if err != nil {
			return nil, err
		}
		line.StepStyle = plotter.PostStep // busy GPUs hold their value until the next event
		line.Color = plotColors[i%len(plotColors)]
		line.Width = vg.Points(1.5)
		p.Add(line)
		p.Legend.Add(r.Policy, line)
	}
	return p, nil
}

// timeUnit is a unit the time axis is labelled in.
type timeUnit struct {
	name    string
	seconds float64
}

// timeUnitFor picks the unit that gives a span of end seconds a handful of
// round ticks: seconds up to 5 minutes, minutes up to 5 hours, hours up to
// 5 days, then days.
func timeUnitFor(end float64) timeUnit {
	switch {
	case end <= 300:
		return timeUnit{"seconds", 1}
	case end <= 5*3600:
		return timeUnit{"minutes", 60}
	case end <= 5*86400:
		return timeUnit{"hours", 3600}
	}
	return timeUnit{"days", 86400}
}

// timeTickLabels are the labelled ticks of a time axis of end seconds, in
// its unit; the tests read them.
func timeTickLabels(end float64) (timeUnit, []string) {
	unit := timeUnitFor(end)
	var labels []string
	for _, t := range (roundTicks{}).Ticks(0, end/unit.seconds) {
		if t.Label != "" {
			labels = append(labels, t.Label)
		}
	}
	return unit, labels
}

// roundTicks labels 4 to 10 ticks at a round step (1, 2 or 5 × 10^k),
// without trailing zeros, and puts unlabelled ticks between them.
type roundTicks struct{}

func (roundTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(hi > lo) {
		return []plot.Tick{{Value: lo, Label: formatTick(lo)}}
	}
	span := hi - lo
	step := math.Pow(10, math.Floor(math.Log10(span)))
	for _, m := range []float64{0.1, 0.2, 0.5, 1} {
		if span/(step*m) <= 10 {
			step *= m
			break
		}
	}
	var ticks []plot.Tick
	for v := math.Ceil(lo/step) * step; v <= hi+step*1e-9; v += step {
		ticks = append(ticks, plot.Tick{Value: v, Label: formatTick(v)})
		if minor := v + step/2; minor < hi {
			ticks = append(ticks, plot.Tick{Value: minor})
		}
	}
	return ticks
}

// logTicks labels 1, 2 and 5 × 10^k within the range, with unlabelled
// ticks at the other integers × 10^k.
type logTicks struct{}

func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	for e := math.Floor(math.Log10(lo)); math.Pow(10, e) <= hi; e++ {
		for m := 1.0; m < 10; m++ {
			v := m * math.Pow(10, e)
			if v < lo || v > hi {
				continue
			}
			t := plot.Tick{Value: v}
			if m == 1 || m == 2 || m == 5 {
				t.Label = formatTick(v)
			}
			ticks = append(ticks, t)
		}
	}
	return ticks
}

func formatTick(v float64) string {
	if math.Abs(v) < 1e-9 {
		return "0"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}
