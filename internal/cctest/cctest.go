// Package cctest builds small C shared libraries for tests that stand in
// for a vendor library at the hardware seam (a fake libcuda), with the C
// compiler cgo uses.
package cctest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// SharedLib compiles source into name.so in a directory of its own and
// returns its path; the test is skipped where there is no C compiler.
func SharedLib(t testing.TB, name, source string) string {
	t.Helper()
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "gcc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		t.Skipf("no C compiler (%s) to build %s: %v", cc, name, err)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, name+".c")
	if err := os.WriteFile(src, []byte(source), 0o644); err != nil {
		t.Fatal(err)
	}
	lib := filepath.Join(dir, name+".so")
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-o", lib, src).CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v: %s", name, err, out)
	}
	return lib
}
