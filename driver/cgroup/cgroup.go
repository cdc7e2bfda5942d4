// Package cgroup controls the processes of one cgroup as a whole: it lists
// them, freezes and thaws them, and kills every one of them. The driver
// points it at the cgroup Nomad's executor put a task in, so that a process
// that leaves the task's process tree (setsid and fork) is still the task's.
//
// Two kinds of cgroup are handled: a cgroup v2 directory (cgroup.procs,
// cgroup.freeze, cgroup.events, cgroup.kill) and a cgroup v1 freezer
// directory (cgroup.procs, freezer.state).
package cgroup

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/opencontainers/cgroups"
	cgroupsv1 "github.com/opencontainers/cgroups/fs"
	"golang.org/x/sys/unix"
)

// Methods, as the driver names them in its fingerprint and task events.
const (
	MethodV2       = "cgroup-v2"
	MethodV1Freeze = "cgroup-v1-freezer"
)

// Group is one cgroup directory.
type Group struct {
	dir string
	v2  bool
	// noKillFile makes Kill take the freeze, kill, thaw path even where
	// cgroup.kill exists, for tests.
	noKillFile bool
}

// Open returns the cgroup at dir. It tells v2 from a v1 freezer by the
// interface files dir holds, and refuses a directory that has neither (a v1
// cgroup of another controller, a v2 root, a kernel older than 5.2).
func Open(dir string) (*Group, error) {
	if dir == "" {
		return nil, errors.New("cgroup: no directory")
	}
	if _, err := os.Stat(filepath.Join(dir, "cgroup.procs")); err != nil {
		return nil, fmt.Errorf("cgroup %s: %w", dir, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "cgroup.freeze")); err == nil {
		return &Group{dir: dir, v2: true}, nil
	}
	if _, err := os.Stat(filepath.Join(dir, "freezer.state")); err == nil {
		return &Group{dir: dir}, nil
	}
	return nil, fmt.Errorf("cgroup %s: neither cgroup.freeze (v2) nor freezer.state (v1 freezer)", dir)
}

// Dir is the cgroup's directory.
func (g *Group) Dir() string { return g.dir }

// Method is MethodV2 or MethodV1Freeze.
func (g *Group) Method() string {
	if g.v2 {
		return MethodV2
	}
	return MethodV1Freeze
}

// PIDs lists the processes in the cgroup and in every cgroup below it,
// sorted, each once. Exited processes (zombies) are not listed: the kernel
// drops them from cgroup.procs when they exit.
func (g *Group) PIDs() ([]int, error) {
	var pids []int
	err := filepath.WalkDir(g.dir, func(p string, d fs.DirEntry, err error) error {
		// A child cgroup may go away while it is walked.
		if err != nil {
			if p != g.dir && gone(err) {
				return nil
			}
			return err
		}
		if !d.IsDir() {
			return nil
		}
		in, err := cgroups.GetPids(p)
		if err != nil {
			if p != g.dir && gone(err) {
				return nil
			}
			return fmt.Errorf("cgroup %s: %w", p, err)
		}
		pids = append(pids, in...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(pids)
	return slices.Compact(pids), nil
}

func gone(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENODEV)
}

// FreezeTimeout bounds how long Freeze and Thaw wait for the kernel.
const FreezeTimeout = 10 * time.Second

// Freeze stops every process in the cgroup and returns once the kernel
// reports the cgroup frozen. When it does not get there within ctx or
// FreezeTimeout, the cgroup is thawed again and the error returned: a
// cgroup left half frozen would hold some of its processes for no one.
func (g *Group) Freeze(ctx context.Context) error {
	if !g.v2 {
		// runc's freezer retries the write while the kernel reports
		// FREEZING, which a v1 cgroup that forks can stay in, and thaws
		// the cgroup when it gives up, after a few hundred milliseconds;
		// on a loaded host that is not always enough, so it is tried
		// again until FreezeTimeout.
		ctx, cancel := context.WithTimeout(ctx, FreezeTimeout)
		defer cancel()
		for {
			err := (&cgroupsv1.FreezerGroup{}).Set(g.dir, &cgroups.Resources{Freezer: cgroups.Frozen})
			if err == nil {
				return nil
			}
			// Only a cgroup stuck in FREEZING is worth another try.
			if !strings.Contains(err.Error(), "unable to freeze") || ctx.Err() != nil {
				return fmt.Errorf("freeze %s: %w", g.dir, err)
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("freeze %s: %w", g.dir, err)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	if err := cgroups.WriteFile(g.dir, "cgroup.freeze", "1"); err != nil {
		return fmt.Errorf("freeze %s: %w", g.dir, err)
	}
	if err := g.waitEvent(ctx, "frozen", true); err != nil {
		_ = cgroups.WriteFile(g.dir, "cgroup.freeze", "0")
		return err
	}
	return nil
}

// Thaw lets the cgroup's processes run again.
func (g *Group) Thaw(ctx context.Context) error {
	if !g.v2 {
		if err := cgroups.WriteFile(g.dir, "freezer.state", string(cgroups.Thawed)); err != nil {
			return fmt.Errorf("thaw %s: %w", g.dir, err)
		}
		return nil
	}
	if err := cgroups.WriteFile(g.dir, "cgroup.freeze", "0"); err != nil {
		return fmt.Errorf("thaw %s: %w", g.dir, err)
	}
	return g.waitEvent(ctx, "frozen", false)
}

// Frozen reports whether the cgroup is frozen, or on its way to it (a v1
// freezer that reads FREEZING).
func (g *Group) Frozen() (bool, error) {
	if !g.v2 {
		state, err := cgroups.ReadFile(g.dir, "freezer.state")
		if err != nil {
			return false, fmt.Errorf("cgroup %s: %w", g.dir, err)
		}
		return ParseFreezerState(state)
	}
	// cgroup.freeze is what was asked; cgroup.events says whether the
	// kernel got there. Asked is what a suspended task is.
	v, err := cgroups.ReadFile(g.dir, "cgroup.freeze")
	if err != nil {
		return false, fmt.Errorf("cgroup %s: %w", g.dir, err)
	}
	return strings.TrimSpace(v) == "1", nil
}

// Kill sends SIGKILL to every process in the cgroup and returns once the
// cgroup is empty, or with ctx's error. Processes that fork meanwhile are
// caught: v2 kernels from 5.14 kill the whole cgroup at once (cgroup.kill);
// elsewhere the cgroup is frozen, every process listed is killed and the
// cgroup thawed, until no process is left. The cgroup is left thawed, but
// for cgroup.kill, which kills frozen processes where they are.
func (g *Group) Kill(ctx context.Context) error {
	hasKill := false
	if g.v2 && !g.noKillFile {
		_, err := os.Stat(filepath.Join(g.dir, "cgroup.kill"))
		hasKill = err == nil
	}
	// A failed round is tried again: another writer (the Nomad client
	// cleaning up after the task) may thaw the cgroup meanwhile.
	var lastErr error
	for wait := 500 * time.Microsecond; ; wait = min(2*wait, 50*time.Millisecond) {
		pids, err := g.PIDs()
		if err != nil {
			if gone(err) {
				return nil // torn down: nothing left in it
			}
			return err
		}
		if len(pids) == 0 {
			return nil
		}
		if hasKill {
			err = cgroups.WriteFile(g.dir, "cgroup.kill", "1")
		} else {
			err = g.killFrozen(ctx)
		}
		if err != nil && !gone(err) {
			lastErr = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kill %s: %d process(es) left: %w", g.dir, len(pids), errors.Join(ctx.Err(), lastErr))
		case <-time.After(wait):
		}
	}
}

// killFrozen kills the processes of a frozen cgroup, so that none of them
// forks between the listing and the signal.
func (g *Group) killFrozen(ctx context.Context) error {
	frozeErr := g.Freeze(ctx)
	pids, err := g.PIDs()
	for _, pid := range pids {
		if kerr := unix.Kill(pid, unix.SIGKILL); kerr != nil && !errors.Is(kerr, unix.ESRCH) && err == nil {
			err = fmt.Errorf("pid %d: %w", pid, kerr)
		}
	}
	// Killed processes die only once thawed on v1; on v2 they die frozen,
	// and a thaw is needed only for the ones that were not listed yet.
	if terr := g.Thaw(ctx); terr != nil && err == nil {
		err = terr
	}
	if err == nil && frozeErr != nil {
		err = frozeErr
	}
	return err
}

// waitEvent waits until cgroup.events shows key as want. The kernel
// signals a change of cgroup.events to poll(2) as POLLPRI; the poll also
// times out now and then in case a change came before it started.
func (g *Group) waitEvent(ctx context.Context, key string, want bool) error {
	ctx, cancel := context.WithTimeout(ctx, FreezeTimeout)
	defer cancel()
	f, err := cgroups.OpenFile(g.dir, "cgroup.events", unix.O_RDONLY)
	if err != nil {
		return fmt.Errorf("cgroup %s: %w", g.dir, err)
	}
	defer f.Close()
	buf := make([]byte, 256)
	for {
		n, err := f.ReadAt(buf, 0)
		if err != nil && n == 0 {
			return fmt.Errorf("cgroup %s: cgroup.events: %w", g.dir, err)
		}
		events, err := ParseEvents(string(buf[:n]))
		if err != nil {
			return fmt.Errorf("cgroup %s: %w", g.dir, err)
		}
		if v, ok := events[key]; !ok {
			return fmt.Errorf("cgroup %s: cgroup.events has no %q", g.dir, key)
		} else if v == want {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("cgroup %s: waiting for %s %v: %w", g.dir, key, want, err)
		}
		fds := []unix.PollFd{{Fd: int32(f.Fd()), Events: unix.POLLPRI}}
		if _, err := unix.Poll(fds, 10); err != nil && !errors.Is(err, syscall.EINTR) {
			return fmt.Errorf("cgroup %s: poll cgroup.events: %w", g.dir, err)
		}
	}
}

// ParseEvents parses a cgroup v2 cgroup.events file: lines of a key and 0
// or 1 ("populated 1", "frozen 0").
func ParseEvents(data string) (map[string]bool, error) {
	out := map[string]bool{}
	for _, line := range strings.Split(data, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		key, value, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok || key == "" {
			return nil, fmt.Errorf("cgroup.events: line %q is not a key and a value", line)
		}
		switch value {
		case "0":
			out[key] = false
		case "1":
			out[key] = true
		default:
			return nil, fmt.Errorf("cgroup.events: %s: value %q is neither 0 nor 1", key, value)
		}
	}
	return out, nil
}

// ParseFreezerState reads a cgroup v1 freezer.state: FROZEN and FREEZING
// are frozen, THAWED is not.
func ParseFreezerState(data string) (bool, error) {
	switch s := strings.TrimSpace(data); s {
	case "FROZEN", "FREEZING":
		return true, nil
	case "THAWED":
		return false, nil
	default:
		return false, fmt.Errorf("freezer.state: unknown state %q", s)
	}
}
