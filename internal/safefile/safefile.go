// Package safefile is how the plugins, which run as root, touch files in
// places a task can write to. A task can put a symlink, a FIFO, a device
// node or a directory where the driver expects its own file; so nothing
// here follows a symlink in a task-writable component, opens what is not a
// regular file, or changes a file through its path after opening it.
//
// Every name handled here is one path component inside a directory whose
// own path the task cannot change (a task directory lives in Nomad's
// root-owned alloc directory). For one component, O_NOFOLLOW refuses the
// same symlinks that openat2's RESOLVE_NO_SYMLINKS would, and works on
// every kernel the driver supports.
package safefile

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// OpenDir opens the directory at path without following a symlink in its
// last component.
func OpenDir(path string) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// maxCreateTries bounds CreateFresh's retries when something takes the
// name between its unlink and its create: only a task racing the driver
// does that.
const maxCreateTries = 5

// CreateFresh puts a new, empty regular file at name in dir, owned by
// uid:gid with mode perm, in place of whatever the task left there (a file,
// a symlink, a FIFO). The old entry is unlinked, never opened, so a
// symlink's target is left as it is; the owner and mode are set through the
// new file's descriptor. A directory at name is refused.
func CreateFresh(dir *os.File, name string, perm os.FileMode, uid, gid int) error {
	if err := checkName(name); err != nil {
		return err
	}
	path := dir.Name() + "/" + name
	dfd := int(dir.Fd())
	for try := 0; ; try++ {
		switch err := unix.Unlinkat(dfd, name, 0); {
		case err == nil, errors.Is(err, unix.ENOENT):
		case errors.Is(err, unix.EISDIR), errors.Is(err, unix.EPERM):
			// unlink(2) gives EISDIR on Linux, EPERM by POSIX, for a directory.
			return &os.PathError{Op: "create", Path: path, Err: fmt.Errorf("a directory is in the way: %w", err)}
		default:
			return &os.PathError{Op: "unlink", Path: path, Err: err}
		}
		fd, err := unix.Openat(dfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(perm.Perm()))
		if errors.Is(err, unix.EEXIST) && try < maxCreateTries {
			continue
		}
		if err != nil {
			return &os.PathError{Op: "create", Path: path, Err: err}
		}
		f := os.NewFile(uintptr(fd), path)
		defer f.Close()
		if err := f.Chown(uid, gid); err != nil {
			return err
		}
		// The umask may have taken bits off.
		return f.Chmod(perm.Perm())
	}
}

// OpenRegular opens the file at path for reading without following a
// symlink in its last component, without blocking on a FIFO, and refuses
// anything but a regular file.
func OpenRegular(path string) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, &os.PathError{Op: "open", Path: path, Err: fmt.Errorf("not a regular file (%s)", st.Mode().Type())}
	}
	return f, nil
}

func checkName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') {
		return fmt.Errorf("%q is not a single file name", name)
	}
	return nil
}

// PrivateDir makes dir, and its parents, where missing, and checks that
// only this process's user can write to it (OwnDir): the driver keeps there
// what it reads back after a restart and must not find forged.
func PrivateDir(dir string) error { return OwnDir(dir, 0o700) }

// OwnDir makes dir with perm, and its parents, where missing, and checks
// that it is a directory (not a symlink) that this process's user owns and
// no one else can write to: a directory that a task made first, in /tmp
// say, is refused rather than used.
func OwnDir(dir string, perm os.FileMode) error {
	if err := os.MkdirAll(dir, perm); err != nil {
		return err
	}
	st, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("%s: not a directory (%s)", dir, st.Mode().Type())
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%s: cannot tell its owner", dir)
	}
	if int(sys.Uid) != os.Geteuid() {
		return fmt.Errorf("%s: owned by uid %d, not by this process's uid %d", dir, sys.Uid, os.Geteuid())
	}
	if st.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%s: writable by others (mode %s); make it %s", dir, st.Mode().Perm(), perm)
	}
	return nil
}
