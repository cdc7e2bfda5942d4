package safefile

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/shoenig/test/must"
	"golang.org/x/sys/unix"
)

func openDir(t *testing.T, dir string) *os.File {
	t.Helper()
	f, err := OpenDir(dir)
	must.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	return f
}

func owner(t *testing.T, path string) (int, int) {
	t.Helper()
	st, err := os.Lstat(path)
	must.NoError(t, err)
	sys := st.Sys().(*syscall.Stat_t)
	return int(sys.Uid), int(sys.Gid)
}

func TestCreateFreshDoesNotFollowAPlantedSymlink(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(t.TempDir(), "victim")
	must.NoError(t, os.WriteFile(victim, []byte("keep me\n"), 0o600))
	must.NoError(t, os.Symlink(victim, filepath.Join(dir, "iterations")))
	uid, gid := os.Getuid(), os.Getgid()
	if uid == 0 {
		uid, gid = 65534, 65534
	}

	must.NoError(t, CreateFresh(openDir(t, dir), "iterations", 0o644, uid, gid))

	data, err := os.ReadFile(victim)
	must.NoError(t, err)
	must.Eq(t, "keep me\n", string(data))
	vu, _ := owner(t, victim)
	must.Eq(t, os.Getuid(), vu)
	st, err := os.Lstat(filepath.Join(dir, "iterations"))
	must.NoError(t, err)
	must.True(t, st.Mode().IsRegular())
	must.Eq(t, os.FileMode(0o644), st.Mode().Perm())
	must.Eq(t, int64(0), st.Size())
	gotUID, gotGID := owner(t, filepath.Join(dir, "iterations"))
	must.Eq(t, uid, gotUID)
	must.Eq(t, gid, gotGID)
}

func TestCreateFreshReplacesAFileAndAFIFO(t *testing.T) {
	dir := t.TempDir()
	must.NoError(t, os.WriteFile(filepath.Join(dir, "old"), []byte("1\n2\n"), 0o666))
	must.NoError(t, unix.Mkfifo(filepath.Join(dir, "fifo"), 0o666))
	d := openDir(t, dir)
	for _, name := range []string{"old", "fifo"} {
		must.NoError(t, CreateFresh(d, name, 0o600, os.Getuid(), os.Getgid()))
		st, err := os.Lstat(filepath.Join(dir, name))
		must.NoError(t, err)
		must.True(t, st.Mode().IsRegular(), must.Sprint(name))
		must.Eq(t, int64(0), st.Size())
	}
}

func TestCreateFreshRefusesADirectoryAndBadNames(t *testing.T) {
	dir := t.TempDir()
	must.NoError(t, os.Mkdir(filepath.Join(dir, "sub"), 0o755))
	must.NoError(t, os.WriteFile(filepath.Join(dir, "sub", "kept"), nil, 0o644))
	d := openDir(t, dir)
	must.ErrorContains(t, CreateFresh(d, "sub", 0o644, os.Getuid(), os.Getgid()), "a directory is in the way")
	_, err := os.Stat(filepath.Join(dir, "sub", "kept"))
	must.NoError(t, err)
	for _, bad := range []string{"", ".", "..", "a/b", "../x"} {
		must.ErrorContains(t, CreateFresh(d, bad, 0o644, os.Getuid(), os.Getgid()), "not a single file name")
	}
}

func TestOpenDirRefusesASymlink(t *testing.T) {
	dir := t.TempDir()
	must.NoError(t, os.Symlink(t.TempDir(), filepath.Join(dir, "link")))
	_, err := OpenDir(filepath.Join(dir, "link"))
	must.Error(t, err)
}

func TestOpenRegularRefusesSymlinksFIFOsAndDevicesWithoutBlocking(t *testing.T) {
	dir := t.TempDir()
	regular := filepath.Join(dir, "regular")
	must.NoError(t, os.WriteFile(regular, []byte("1\n"), 0o644))
	must.NoError(t, os.Symlink(regular, filepath.Join(dir, "link")))
	must.NoError(t, unix.Mkfifo(filepath.Join(dir, "fifo"), 0o666))

	f, err := OpenRegular(regular)
	must.NoError(t, err)
	f.Close()

	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, path := range []string{filepath.Join(dir, "link"), filepath.Join(dir, "fifo"), "/dev/null", dir} {
			_, err := OpenRegular(path)
			must.Error(t, err, must.Sprint(path))
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("OpenRegular blocked")
	}
}

func TestPrivateDir(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "a", "b")
	must.NoError(t, PrivateDir(dir))
	st, err := os.Stat(dir)
	must.NoError(t, err)
	must.Eq(t, os.FileMode(0o700), st.Mode().Perm())
	must.NoError(t, PrivateDir(dir)) // again: already there

	open := filepath.Join(base, "open")
	must.NoError(t, os.Mkdir(open, 0o700))
	must.NoError(t, os.Chmod(open, 0o777))
	must.ErrorContains(t, PrivateDir(open), "writable by others")

	link := filepath.Join(base, "link")
	must.NoError(t, os.Symlink(dir, link))
	must.ErrorContains(t, PrivateDir(link), "not a directory")

	if os.Geteuid() == 0 {
		theirs := filepath.Join(base, "theirs")
		must.NoError(t, os.Mkdir(theirs, 0o700))
		must.NoError(t, os.Chown(theirs, 65534, 65534))
		must.ErrorContains(t, PrivateDir(theirs), "owned by uid 65534")
		must.ErrorContains(t, OwnDir(theirs, 0o755), "owned by uid 65534")
	}
}
