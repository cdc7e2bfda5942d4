package service

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/shoenig/test/must"
)

// The Grafana dashboard in docs/grafana asks only for metrics that the
// planner, the driver and the device plugin define, by labels they have: a
// renamed metric or label fails here rather than as an empty panel.
func TestGrafanaDashboardUsesDefinedMetrics(t *testing.T) {
	data, err := os.ReadFile("../../docs/grafana/caravan.json")
	must.NoError(t, err)
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	must.NoError(t, json.Unmarshal(data, &dash))

	defined := definedMetrics(t, "../../planner", "../../driver", "../../device")
	must.MapNotEmpty(t, defined)
	metricRe := regexp.MustCompile(`caravan_[a-z_]+`)
	byRe := regexp.MustCompile(`by \(([a-z_, ]+)\)`)
	used := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, name := range metricRe.FindAllString(tg.Expr, -1) {
				base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")
				labels, ok := defined[base]
				must.True(t, ok, must.Sprintf("panel %q: no metric %s in the code", p.Title, base))
				used++
				for _, m := range byRe.FindAllStringSubmatch(tg.Expr, -1) {
					for _, l := range strings.Split(m[1], ",") {
						l = strings.TrimSpace(l)
						if l == "le" || l == "instance" {
							continue
						}
						must.SliceContains(t, labels, l, must.Sprintf("panel %q: %s has no label %q", p.Title, base, l))
					}
				}
			}
		}
	}
	must.Greater(t, 10, used)
}

// definedMetrics finds the caravan_* metrics defined in the Go sources
// under dirs, with their label names: a metric name literal followed, in
// the same definition, by a []string of labels or a labels variable.
func definedMetrics(t *testing.T, dirs ...string) map[string][]string {
	t.Helper()
	def := regexp.MustCompile(`(?s)"(caravan_[a-z_]+)"(.{0,400}?)(?:\}\)|\n\n|nil\)|\},\s*\[\]string\{([^}]*)\}|, (taskLaneLabels|[a-z]+Labels), )`)
	vars := regexp.MustCompile(`([a-zA-Z]+Labels) *= *\[\]string\{([^}]*)\}`)
	out := map[string][]string{}
	for _, dir := range dirs {
		must.NoError(t, filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			named := map[string][]string{}
			for _, m := range vars.FindAllStringSubmatch(string(src), -1) {
				named[m[1]] = splitLabels(m[2])
			}
			for _, m := range def.FindAllStringSubmatch(string(src), -1) {
				labels := splitLabels(m[3])
				if m[4] != "" {
					labels = named[m[4]]
				}
				out[m[1]] = labels
			}
			return nil
		}))
	}
	return out
}

func splitLabels(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.Trim(strings.TrimSpace(f), `"`); f != "" {
			out = append(out, f)
		}
	}
	return out
}
