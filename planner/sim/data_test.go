package sim

import (
	"testing"

	"github.com/caravan-gpu/caravan/internal/shareddata"
)

// sharedData is the shared data file rel; the test skips without it.
func sharedData(tb testing.TB, rel string) string {
	tb.Helper()
	return shareddata.Require(tb, rel)
}
