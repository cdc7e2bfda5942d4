// Package shareddata finds the real traces and profiles that tests and
// benchmarks read but the repository does not ship: $CARAVAN_SHARED_DATA,
// or ../shared/data beside the repository root (the folder with go.mod
// above the working directory).
package shareddata

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// Env names the folder that overrides ../shared/data.
const Env = "CARAVAN_SHARED_DATA"

// Path is the path of the shared data file rel, or why it is absent.
func Path(rel string) (string, error) {
	base := os.Getenv(Env)
	if base == "" {
		dir, err := os.Getwd()
		if err != nil {
			return "", err
		}
		for {
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
				break
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				return "", errors.New("no go.mod above the working directory")
			}
			dir = parent
		}
		base = filepath.Join(dir, "..", "shared", "data")
	}
	p := filepath.Join(base, rel)
	if _, err := os.Stat(p); err != nil {
		return "", err
	}
	return p, nil
}

// Require is Path for a test, which it skips when the file is absent.
func Require(tb testing.TB, rel string) string {
	tb.Helper()
	p, err := Path(rel)
	if err != nil {
		tb.Skipf("shared data: %v (set %s)", err, Env)
	}
	return p
}
