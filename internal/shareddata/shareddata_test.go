package shareddata

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/shoenig/test/must"
)

// $CARAVAN_SHARED_DATA wins over ../shared/data; a file absent from it is
// an error naming the path, and Require skips on it.
func TestPathFollowsTheEnvironment(t *testing.T) {
	dir := t.TempDir()
	must.NoError(t, os.MkdirAll(filepath.Join(dir, "tiresias"), 0o755))
	must.NoError(t, os.WriteFile(filepath.Join(dir, "tiresias", "60_job.csv"), []byte("x"), 0o644))
	t.Setenv(Env, dir)

	p, err := Path("tiresias/60_job.csv")
	must.NoError(t, err)
	must.Eq(t, filepath.Join(dir, "tiresias", "60_job.csv"), p)
	must.Eq(t, p, Require(t, "tiresias/60_job.csv"))

	_, err = Path("philly/philly.csv")
	must.ErrorContains(t, err, filepath.Join(dir, "philly", "philly.csv"))

	skipped := t.Run("absent", func(t *testing.T) {
		Require(t, "philly/philly.csv")
		t.Error("Require went on past an absent file")
	})
	must.True(t, skipped, must.Sprint("a skipped subtest passes"))
}

// Without the environment, the folder is ../shared/data beside the
// repository root, found from a package folder below it.
func TestPathFindsTheRepositoryRoot(t *testing.T) {
	t.Setenv(Env, "")
	root, err := filepath.Abs(filepath.Join("..", ".."))
	must.NoError(t, err)
	_, err = Path("no-such-file")
	must.ErrorContains(t, err, filepath.Join(root, "..", "shared", "data", "no-such-file"))
}
