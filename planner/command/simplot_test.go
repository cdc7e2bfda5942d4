package command

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caravan-gpu/caravan/planner/sim"
	"github.com/shoenig/test/must"
)

// The plot file is an SVG with both panels and every policy in each legend.
func TestWritePlot(t *testing.T) {
	res := []*sim.Result{
		{Policy: "las", GPUs: 4, Jobs: []sim.JobResult{{JCT: 10}, {JCT: 100}, {JCT: 1000}},
			Util: []sim.UtilPoint{{T: 0, Busy: 4}, {T: 1800, Busy: 2}, {T: 3600, Busy: 0}}},
		{Policy: "fifo", GPUs: 4, Jobs: []sim.JobResult{{JCT: 20}, {JCT: 200}},
			Util: []sim.UtilPoint{{T: 0, Busy: 1}, {T: 3000, Busy: 0}}},
	}
	path := filepath.Join(t.TempDir(), "plots.svg")
	must.NoError(t, writePlot(path, res))
	data, err := os.ReadFile(path)
	must.NoError(t, err)
	svg := string(data)
	must.StrHasPrefix(t, "<?xml", svg)
	for _, want := range []string{"JCT CDF", "GPU utilisation", "time (minutes)", "las", "fifo"} {
		must.StrContains(t, svg, want)
	}
	must.Eq(t, 2, strings.Count(svg, ">las<"), must.Sprint("a legend entry per panel"))
}
