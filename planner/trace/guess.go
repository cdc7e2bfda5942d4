package trace

import (
	"bufio"
	"os"
	"strings"
)

// guessFormat reads the first line of path to tell the formats apart.
func guessFormat(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), maxLine)
	if !sc.Scan() {
		return "unknown"
	}
	first := sc.Text()
	switch {
	case strings.Contains(first, "\t"):
		return "gavel"
	case strings.HasPrefix(first, "job_id,"):
		return "tiresias"
	case strings.HasPrefix(first, "timestamp,"):
		return "philly"
	}
	return "unknown"
}
