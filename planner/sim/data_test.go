package sim

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// sharedData finds the shared data folder: $CARAVAN_SHARED_DATA, or
// ../shared/data next to the repository root (the folder with go.mod).
// It skips the test when the data is absent.
func sharedData(tb testing.TB, rel string) string {
	tb.Helper()
	p, err := sharedDataPath(rel)
	if err != nil {
		tb.Skipf("shared data: %v (set CARAVAN_SHARED_DATA)", err)
	}
	return p
}

// sharedDataPath is the path of a shared data file, or why it is absent.
func sharedDataPath(rel string) (string, error) {
	base := os.Getenv("CARAVAN_SHARED_DATA")
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
