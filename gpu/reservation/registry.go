package reservation

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// GrantsDir is where the caravan driver records the grants of each task it
// runs, by the task's cgroup, so that caravan-device can tell which lane a
// process on a GPU belongs to from the process's cgroup, which a task cannot
// choose, rather than from its environment, which it can. Both plugins run
// as root; the directory and its files are root's and read-only to tasks.
const GrantsDir = "/run/caravan/grants"

// WriteTaskGrants records grants for the task whose cgroup directory is
// named cgroupName (its last path element).
func WriteTaskGrants(dir, cgroupName string, grants []Grant) error {
	if !validCgroupName(cgroupName) {
		return fmt.Errorf("reservation: %q is not a cgroup name", cgroupName)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var b strings.Builder
	for _, g := range grants {
		b.WriteString(g.EnvName() + "=" + g.EnvValue() + "\n")
	}
	tmp, err := os.CreateTemp(dir, ".tmp-")
	if err != nil {
		return err
	}
	_, err = tmp.WriteString(b.String())
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(dir, cgroupName))
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
	}
	return err
}

// RemoveTaskGrants forgets the task of cgroupName.
func RemoveTaskGrants(dir, cgroupName string) error {
	if !validCgroupName(cgroupName) {
		return nil
	}
	err := os.Remove(filepath.Join(dir, cgroupName))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

func validCgroupName(name string) bool {
	return name != "" && name != "." && name != ".." && !strings.ContainsAny(name, "/\x00") && !strings.HasPrefix(name, ".tmp-")
}

// ReadTaskGrants returns the recorded grants by cgroup name. Only files
// owned by owner (the plugins' own UID, root) count, so that nothing another
// user managed to put there is believed; unreadable or bad files are skipped.
func ReadTaskGrants(dir string, owner int) (map[string][]Grant, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return map[string][]Grant{}, nil
	}
	if err != nil {
		return nil, err
	}
	out := make(map[string][]Grant, len(entries))
	for _, e := range entries {
		if !validCgroupName(e.Name()) || !e.Type().IsRegular() {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		if st, ok := info.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != owner {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		if grants, err := ParseTaskGrants(string(data)); err == nil {
			out[e.Name()] = grants
		}
	}
	return out, nil
}

// ParseTaskGrants reads a file WriteTaskGrants wrote: NAME=VALUE lines of
// the task's CARAVAN_DEV_ variables.
func ParseTaskGrants(text string) ([]Grant, error) {
	env := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		if line == "" {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || !strings.HasPrefix(k, EnvPrefix) {
			return nil, fmt.Errorf("reservation: %q is not a %sNAME=VALUE line", line, EnvPrefix)
		}
		env[k] = v
	}
	return FromEnv(env)
}

// CgroupNames lists the path elements of every cgroup in a
// /proc/<pid>/cgroup file ("0::/nomad.slice/share.slice/<alloc>.<task>.scope",
// "7:freezer:/nomad/<alloc>.<task>"), innermost first, so that a process in
// a child cgroup of a task is found under the task's.
func CgroupNames(procCgroup string) []string {
	var out []string
	scanner := bufio.NewScanner(strings.NewReader(procCgroup))
	for scanner.Scan() {
		parts := strings.SplitN(scanner.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		elems := strings.Split(parts[2], "/")
		for i := len(elems) - 1; i >= 0; i-- {
			if validCgroupName(elems[i]) {
				out = append(out, elems[i])
			}
		}
	}
	return out
}
