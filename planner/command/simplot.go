package command

import (
	"fmt"
	"html"
	"math"
	"os"
	"slices"
	"strings"

	"github.com/caravan-gpu/caravan/planner/sim"
)

var plotColors = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"}

// writePlot writes one SVG with two panels: the JCT CDF (log time axis)
// and GPU utilisation over time, one line per policy.
func writePlot(path string, results []*sim.Result) error {
	if len(results) == 0 {
		return errNoResults
	}
	const w, h, pad = 900, 360, 60
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", w, 2*h)
	b.WriteString(`<rect width="100%" height="100%" fill="white"/>` + "\n")

	// Panel 1: JCT CDF.
	lo, hi := math.Inf(1), 0.0
	cdfs := make([][]float64, len(results))
	for i, r := range results {
		for _, j := range r.Jobs {
			if !math.IsNaN(j.JCT) && j.JCT > 0 {
				cdfs[i] = append(cdfs[i], j.JCT)
			}
		}
		slices.Sort(cdfs[i])
		if n := len(cdfs[i]); n > 0 {
			lo, hi = min(lo, cdfs[i][0]), max(hi, cdfs[i][n-1])
		}
	}
	if hi <= 0 {
		lo, hi = 1, 10
	}
	lo = math.Max(lo, 1)
	llo, lhi := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
	if lhi <= llo {
		lhi = llo + 1
	}
	x := func(v float64) float64 { return pad + (math.Log10(math.Max(v, lo))-llo)/(lhi-llo)*(w-2*pad) }
	y := func(p float64, top float64) float64 { return top + h - pad - p*(h-2*pad) }
	axes(&b, 0, w, h, pad, "JCT CDF", "job completion time (s, log scale)", "fraction of jobs")
	for e := llo; e <= lhi; e++ {
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">1e%d</text>`+"\n", x(math.Pow(10, e)), h-pad+16, int(e))
	}
	for _, p := range []float64{0, 0.5, 1} {
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%.1f</text>`+"\n", pad-6, y(p, 0)+4, p)
	}
	for i, c := range cdfs {
		var pts []string
		step := max(len(c)/800, 1)
		for k := 0; k < len(c); k += step {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(c[k]), y(float64(k+1)/float64(len(c)), 0)))
		}
		if len(c) > 0 {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(c[len(c)-1]), y(1, 0)))
		}
		polyline(&b, pts, plotColors[i%len(plotColors)])
		legend(&b, i, results[i].Policy, w, pad, 0)
	}

	// Panel 2: utilisation over time.
	end := 0.0
	for _, r := range results {
		if n := len(r.Util); n > 0 {
			end = max(end, r.Util[n-1].T)
		}
	}
	if end <= 0 {
		end = 1
	}
	axes(&b, h, w, h, pad, "GPU utilisation", "time (hours)", "busy GPUs (%)")
	ux := func(t float64) float64 { return pad + t/end*(w-2*pad) }
	for k := 0; k <= 4; k++ {
		t := end * float64(k) / 4
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%.0f</text>`+"\n", ux(t), 2*h-pad+16, t/3600)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%d</text>`+"\n", pad-6, y(float64(k)/4, h)+4, 25*k)
	}
	for i, r := range results {
		var pts []string
		step := max(len(r.Util)/1500, 1)
		for k := 0; k < len(r.Util); k += step {
			u := r.Util[k]
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", ux(u.T), y(math.Min(u.Busy/float64(max(r.GPUs, 1)), 1), h)))
		}
		polyline(&b, pts, plotColors[i%len(plotColors)])
		legend(&b, i, r.Policy, w, pad, h)
	}
	b.WriteString("</svg>\n")
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

func axes(b *strings.Builder, top, w, h, pad int, title, xl, yl string) {
	fmt.Fprintf(b, `<text x="%d" y="%d" font-size="14" font-weight="bold">%s</text>`+"\n", pad, top+pad-20, html.EscapeString(title))
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", pad, top+h-pad, w-pad, top+h-pad)
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", pad, top+pad, pad, top+h-pad)
	fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", w/2, top+h-pad+34, html.EscapeString(xl))
	fmt.Fprintf(b, `<text x="14" y="%d" transform="rotate(-90 14 %d)" text-anchor="middle">%s</text>`+"\n", top+h/2, top+h/2, html.EscapeString(yl))
}

func polyline(b *strings.Builder, pts []string, color string) {
	fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`+"\n", color, strings.Join(pts, " "))
}

func legend(b *strings.Builder, i int, name string, w, pad, top int) {
	yy := top + pad + 14*i
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="3"/>`, w-pad-150, yy, w-pad-130, yy, plotColors[i%len(plotColors)])
	fmt.Fprintf(b, `<text x="%d" y="%d">%s</text>`+"\n", w-pad-125, yy+4, html.EscapeString(name))
}
