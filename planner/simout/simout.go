// Package simout reads the output folders that `caravan sim -out` and
// `caravan replay -out` write, for the planner's dashboard to draw them
// again.
package simout

import (
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/caravan-gpu/caravan/planner/plot"
)

// Files an output folder holds.
const (
	SummaryFile = "summary.json"
	ReplayFile  = "replay.json"
	JobsSuffix  = ".jobs.csv"
	UtilSuffix  = ".util.csv"
)

// FileBase is the file name stem of a policy's CSVs.
func FileBase(policy string) string {
	return strings.Map(func(r rune) rune {
		if r == '+' || r == '/' || r == ' ' {
			return '_'
		}
		return r
	}, policy)
}

// summary is what Read needs of summary.json.
type summary struct {
	GPUs     int `json:"gpus"`
	Policies []struct {
		Policy string `json:"policy"`
	} `json:"policies"`
}

// IsOutput says whether dir in fsys is an output folder: a sim folder
// (summary.json) or a replay folder (replay.json).
func IsOutput(fsys fs.FS, dir string) bool {
	for _, f := range []string{SummaryFile, ReplayFile} {
		if st, err := fs.Stat(fsys, path.Join(dir, f)); err == nil && st.Mode().IsRegular() {
			return true
		}
	}
	return false
}

// List finds the output folders in fsys, at most depth levels down,
// sorted.
func List(fsys fs.FS, depth int) ([]string, error) {
	var out []string
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == "." {
				return err
			}
			return nil // an unreadable folder is left out
		}
		if !d.IsDir() {
			return nil
		}
		if p != "." && strings.Count(p, "/")+1 > depth {
			return fs.SkipDir
		}
		if IsOutput(fsys, p) {
			out = append(out, p)
			return fs.SkipDir // a replay's live/ and sim/ belong to it
		}
		return nil
	})
	sort.Strings(out)
	return out, err
}

// Read reads an output folder's runs: one per policy of a sim folder, or
// the live and the simulated run of a replay folder.
func Read(fsys fs.FS, dir string) ([]plot.Run, error) {
	if _, err := fs.Stat(fsys, path.Join(dir, ReplayFile)); err == nil {
		var runs []plot.Run
		for _, side := range []string{"live", "sim"} {
			rs, err := readSim(fsys, path.Join(dir, side))
			if err != nil {
				return nil, err
			}
			for _, r := range rs {
				r.Name = side + " " + r.Name
				runs = append(runs, r)
			}
		}
		return runs, nil
	}
	return readSim(fsys, dir)
}

func readSim(fsys fs.FS, dir string) ([]plot.Run, error) {
	data, err := fs.ReadFile(fsys, path.Join(dir, SummaryFile))
	if err != nil {
		return nil, err
	}
	var sum summary
	if err := json.Unmarshal(data, &sum); err != nil {
		return nil, fmt.Errorf("%s: %w", path.Join(dir, SummaryFile), err)
	}
	var runs []plot.Run
	for _, p := range sum.Policies {
		run := plot.Run{Name: p.Policy, GPUs: sum.GPUs}
		base := path.Join(dir, FileBase(p.Policy))
		if f, err := fsys.Open(base + JobsSuffix); err == nil {
			run.JCT, err = ParseJobs(f)
			f.Close()
			if err != nil {
				return nil, fmt.Errorf("%s: %w", base+JobsSuffix, err)
			}
		}
		// Folders written before the utilisation CSV have none.
		if f, err := fsys.Open(base + UtilSuffix); err == nil {
			run.Util, err = ParseUtil(f)
			f.Close()
			if err != nil {
				return nil, fmt.Errorf("%s: %w", base+UtilSuffix, err)
			}
		}
		runs = append(runs, run)
	}
	if len(runs) == 0 {
		return nil, fmt.Errorf("%s: no policies", path.Join(dir, SummaryFile))
	}
	return runs, nil
}

// ParseJobs reads the jct column of a jobs CSV; unfinished jobs (NaN) are
// left out.
func ParseJobs(r io.Reader) ([]float64, error) {
	var out []float64
	err := readColumns(r, []string{"jct"}, func(v []float64) {
		if !math.IsNaN(v[0]) {
			out = append(out, v[0])
		}
	})
	return out, err
}

// ParseUtil reads a utilisation CSV: t and busy_gpus.
func ParseUtil(r io.Reader) ([]plot.UtilPoint, error) {
	var out []plot.UtilPoint
	err := readColumns(r, []string{"t", "busy_gpus"}, func(v []float64) {
		out = append(out, plot.UtilPoint{T: v[0], Busy: v[1]})
	})
	return out, err
}

// readColumns calls row with the named columns of each record, parsed as
// numbers.
func readColumns(r io.Reader, names []string, row func([]float64)) error {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	header, err := cr.Read()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return errors.New("empty file: want a header")
		}
		return err
	}
	at := make([]int, len(names))
	for i, name := range names {
		at[i] = -1
		for j, h := range header {
			if strings.TrimSpace(h) == name {
				at[i] = j
			}
		}
		if at[i] < 0 {
			return fmt.Errorf("no %q column in the header %q", name, strings.Join(header, ","))
		}
	}
	vals := make([]float64, len(names))
	for line := 2; ; line++ {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		for i, j := range at {
			if j >= len(rec) {
				return fmt.Errorf("line %d: no %q field", line, names[i])
			}
			v, err := strconv.ParseFloat(strings.TrimSpace(rec[j]), 64)
			if err != nil {
				return fmt.Errorf("line %d: %s: %w", line, names[i], err)
			}
			vals[i] = v
		}
		row(vals)
	}
}
