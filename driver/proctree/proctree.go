// Package proctree finds every process that belongs to a task by its
// process tree (the task's main process, its descendants, and anything left
// in its process group) and signals them: the driver's fallback for a task
// that has no usable cgroup.
package proctree

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// Proc is one line of /proc/<pid>/stat, reduced to what the driver needs.
type Proc struct {
	PID   int
	Comm  string
	State byte // R, S, D, T (stopped), Z, ...
	PPID  int
	PGID  int
}

// ParseStat parses the contents of /proc/<pid>/stat. The command name may
// hold spaces and parentheses, so it is delimited by the last ')'.
func ParseStat(data string) (Proc, error) {
	open := strings.IndexByte(data, '(')
	closing := strings.LastIndexByte(data, ')')
	if open < 1 || closing < open {
		return Proc{}, fmt.Errorf("proc stat: no (comm) in %q", truncate(data))
	}
	pid, err := strconv.Atoi(strings.TrimSpace(data[:open]))
	if err != nil {
		return Proc{}, fmt.Errorf("proc stat: pid: %w", err)
	}
	rest := strings.Fields(data[closing+1:])
	if len(rest) < 3 || len(rest[0]) != 1 {
		return Proc{}, fmt.Errorf("proc stat: too few fields in %q", truncate(data))
	}
	ppid, err := strconv.Atoi(rest[1])
	if err != nil {
		return Proc{}, fmt.Errorf("proc stat: ppid: %w", err)
	}
	pgid, err := strconv.Atoi(rest[2])
	if err != nil {
		return Proc{}, fmt.Errorf("proc stat: pgrp: %w", err)
	}
	return Proc{PID: pid, Comm: data[open+1 : closing], State: rest[0][0], PPID: ppid, PGID: pgid}, nil
}

func truncate(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// Read returns the process pid, or an error when it is gone.
func Read(pid int) (Proc, error) {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return Proc{}, err
	}
	return ParseStat(string(data))
}

// All lists every process on the host.
func All() []Proc {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	out := make([]Proc, 0, len(entries))
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		p, err := Read(pid)
		if err != nil {
			continue // exited since ReadDir
		}
		out = append(out, p)
	}
	return out
}

// Tree returns root and every process that descends from it or shares its
// process group, sorted by PID. Zombies are left out: they hold nothing.
func Tree(root int) []Proc {
	return TreeOf(All(), root)
}

// TreeOf is Tree over a given process list.
func TreeOf(procs []Proc, root int) []Proc {
	children := map[int][]int{}
	byPID := map[int]Proc{}
	for _, p := range procs {
		children[p.PPID] = append(children[p.PPID], p.PID)
		byPID[p.PID] = p
	}
	rootProc, ok := byPID[root]
	if !ok {
		return nil
	}
	in := map[int]bool{root: true}
	queue := []int{root}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, c := range children[pid] {
			if !in[c] {
				in[c] = true
				queue = append(queue, c)
			}
		}
	}
	// The task runs in its own process group; a child that outlived its
	// parent keeps the group even after it is re-parented.
	if rootProc.PGID == root {
		for _, p := range procs {
			if p.PGID == root {
				in[p.PID] = true
			}
		}
	}
	var out []Proc
	for pid := range in {
		if p := byPID[pid]; p.State != 'Z' {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PID < out[j].PID })
	return out
}

// PIDs returns the PIDs of procs.
func PIDs(procs []Proc) []int {
	out := make([]int, len(procs))
	for i, p := range procs {
		out[i] = p.PID
	}
	return out
}

// Method names this way of reaching a task's processes in the driver's
// fingerprint and task events.
const Method = "signals"

// Signals reaches a task's processes through its process tree (Tree) and
// stops, continues and kills them with signals. The driver falls back to it
// for a task that has no usable cgroup; a process that calls setsid and
// forks leaves the tree and escapes it.
type Signals struct {
	Root int
}

// Method is "signals".
func (Signals) Method() string { return Method }

// PIDs lists the tree's processes.
func (s Signals) PIDs() ([]int, error) { return PIDs(Tree(s.Root)), nil }

// Freeze sends SIGSTOP to the tree.
func (s Signals) Freeze(context.Context) error { return s.signal(syscall.SIGSTOP) }

// Thaw sends SIGCONT to the tree.
func (s Signals) Thaw(context.Context) error { return s.signal(syscall.SIGCONT) }

// Kill sends SIGKILL to the tree.
func (s Signals) Kill(context.Context) error { return s.signal(syscall.SIGKILL) }

// Frozen reports whether any process of the tree is stopped.
func (s Signals) Frozen() (bool, error) {
	for _, p := range Tree(s.Root) {
		if p.State == 'T' {
			return true, nil
		}
	}
	return false, nil
}

// signal signals every process of the tree; one that has exited meanwhile
// is not an error.
func (s Signals) signal(sig syscall.Signal) error {
	var errs []error
	for _, pid := range PIDs(Tree(s.Root)) {
		if err := syscall.Kill(pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("pid %d: %w", pid, err))
		}
	}
	return errors.Join(errs...)
}
