// Package trace loads job traces, cluster specs and the measured tables
// (Gavel throughputs, Synergy sensitivities) the simulator runs on, and
// generates a synthetic Philly-like trace when no file is at hand. Every
// parser reports bad input as a *ParseError naming file, line and field.
package trace

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
)

// Job is one job of a trace, before simulation.
type Job struct {
	ID      string
	Arrival float64 // seconds from the trace start
	GPUs    int
	// Duration is the run time in seconds on a reference GPU holding all
	// its GPUs; 0 when the job is given as Steps of JobType instead.
	Duration float64
	// Steps and JobType (a Gavel job type such as "ResNet-50 (batch size
	// 64)") describe the work when throughputs per GPU model are known.
	Steps   float64
	JobType string
	Model   string  // network name for sensitivity lookups, if known
	Weight  float64 // 1 unless the trace says otherwise
	// Group is the team or virtual cluster that submitted the job (the
	// Philly trace's cluster column), "" if the trace does not say.
	Group string
}

// ParseError is a bad value in an input file.
type ParseError struct {
	File  string
	Line  int
	Field string
	Err   error
}

func (e *ParseError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("%s:%d: %v", e.File, e.Line, e.Err)
	}
	return fmt.Sprintf("%s:%d: field %s: %v", e.File, e.Line, e.Field, e.Err)
}

func (e *ParseError) Unwrap() error { return e.Err }

func perr(file string, line int, field string, format string, a ...any) error {
	return &ParseError{File: file, Line: line, Field: field, Err: fmt.Errorf(format, a...)}
}

// maxLine bounds one input line; longer ones are an error, not a hang.
const maxLine = 1 << 20

// lines calls fn for each non-empty line with its 1-based number.
func lines(r io.Reader, file string, fn func(n int, line string) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), maxLine)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimRight(sc.Text(), "\r")
		if strings.TrimSpace(line) == "" {
			continue
		}
		if err := fn(n, line); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return &ParseError{File: file, Line: n + 1, Err: err}
	}
	return nil
}

// header maps column names to indices and checks the required ones.
func header(file string, line int, cols []string, required ...string) (map[string]int, error) {
	idx := map[string]int{}
	for i, c := range cols {
		idx[strings.TrimSpace(strings.TrimPrefix(c, "\ufeff"))] = i
	}
	for _, r := range required {
		if _, ok := idx[r]; !ok {
			return nil, perr(file, line, r, "missing column (header has %q)", strings.Join(cols, ","))
		}
	}
	return idx, nil
}

func field(file string, line int, cols []string, idx map[string]int, name string) (string, error) {
	i := idx[name]
	if i >= len(cols) {
		return "", perr(file, line, name, "missing value: line has %d fields", len(cols))
	}
	return strings.TrimSpace(cols[i]), nil
}

func parseFloat(file string, line int, name, v string, min float64) (float64, error) {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, perr(file, line, name, "not a number: %q", v)
	}
	if f < min {
		return 0, perr(file, line, name, "%v is below %v", f, min)
	}
	return f, nil
}

func parseInt(file string, line int, name, v string, min int) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil {
		f, ferr := strconv.ParseFloat(v, 64)
		if ferr != nil || f != math.Trunc(f) || math.Abs(f) > 1<<40 {
			return 0, perr(file, line, name, "not an integer: %q", v)
		}
		n = int(f)
	}
	if n < min {
		return 0, perr(file, line, name, "%d is below %d", n, min)
	}
	if n > 1<<30 {
		return 0, perr(file, line, name, "%d is too large", n)
	}
	return n, nil
}

// openWith opens path and runs parse on it.
func openWith[T any](path string, parse func(io.Reader, string) (T, error)) (T, error) {
	var zero T
	f, err := os.Open(path)
	if err != nil {
		return zero, err
	}
	defer f.Close()
	return parse(f, path)
}

// ErrEmpty is returned for inputs with no data rows.
var ErrEmpty = errors.New("no data rows")
