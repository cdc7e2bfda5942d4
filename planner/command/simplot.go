package command

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"strings"

	"github.com/caravan-gpu/caravan/planner/plot"
	"github.com/caravan-gpu/caravan/planner/sim"
)

// writePlot writes one SVG with two panels, the JCT CDF (log time axis) and
// GPU utilisation over time, one line per policy, drawn by planner/plot as
// the dashboard draws them.
func writePlot(path string, results []*sim.Result) error {
	if len(results) == 0 {
		return errNoResults
	}
	var buf bytes.Buffer
	if err := plot.WriteBoth(&buf, plotRuns(results)); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

// plotRuns turns simulated results into the plot package's runs.
func plotRuns(results []*sim.Result) []plot.Run {
	runs := make([]plot.Run, 0, len(results))
	for _, r := range results {
		run := plot.Run{Name: r.Policy, GPUs: r.GPUs}
		for _, j := range r.Jobs {
			if !math.IsNaN(j.JCT) {
				run.JCT = append(run.JCT, j.JCT)
			}
		}
		for _, u := range r.Util {
			run.Util = append(run.Util, plot.UtilPoint{T: u.T, Busy: u.Busy})
		}
		runs = append(runs, run)
	}
	return runs
}

// writeUtilCSV writes the busy GPUs over time, so that the dashboard can
// draw an output folder's utilisation again.
func writeUtilCSV(path string, r *sim.Result) error {
	var b strings.Builder
	fmt.Fprintf(&b, "t,busy_gpus,gpus\n")
	for _, u := range r.Util {
		fmt.Fprintf(&b, "%g,%g,%d\n", u.T, u.Busy, r.GPUs)
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
