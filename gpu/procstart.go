package gpu

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTicks is the kernel's USER_HZ, the unit of the start time in
// /proc/<pid>/stat: 100 on every architecture Linux runs GPUs on
// (sysconf(_SC_CLK_TCK), which Go cannot ask without cgo).
const clockTicks = 100

// ProcessStartTime is when process pid started, as the kernel tells in
// /proc: its starttime (field 22 of /proc/<pid>/stat, in clock ticks since
// boot) after the boot time (btime in /proc/stat). The boot time is in
// whole seconds, so the result is up to a second early, by the same amount
// for every process until the clock is stepped. It fails for a process
// that does not exist.
func ProcessStartTime(pid int) (time.Time, error) {
	ticks, err := ProcessStartTicks(pid)
	if err != nil {
		return time.Time{}, err
	}
	return TimeOfTicks(ticks)
}

// ProcessStartTicks is pid's start in the kernel's own terms, clock ticks
// since boot: exact and unmoved by clock steps, so two readings of one
// process are equal and a later process with the same PID differs.
func ProcessStartTicks(pid int) (uint64, error) {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	ticks, err := parseStartTicks(string(stat))
	if err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return ticks, nil
}

// TimeOfTicks is the time ticks clock ticks after boot, as ProcessStartTime
// turns a process's start into one.
func TimeOfTicks(ticks uint64) (time.Time, error) {
	sys, err := os.ReadFile("/proc/stat")
	if err != nil {
		return time.Time{}, err
	}
	boot, err := parseBootTime(string(sys))
	if err != nil {
		return time.Time{}, fmt.Errorf("/proc/stat: %w", err)
	}
	since := time.Duration(ticks/clockTicks)*time.Second + time.Duration(ticks%clockTicks)*(time.Second/clockTicks)
	return time.Unix(boot, 0).Add(since), nil
}

// parseStartTicks reads starttime, field 22, from a /proc/<pid>/stat line.
// The command name (field 2) may hold spaces and parentheses, so the
// fields are counted from the last ')'.
func parseStartTicks(stat string) (uint64, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("no (comm)")
	}
	fields := strings.Fields(stat[i+1:])
	const starttime = 22 - 3 // fields[0] is field 3, the state
	if len(fields) <= starttime {
		return 0, fmt.Errorf("%d fields after the command name, want more than %d", len(fields), starttime)
	}
	ticks, err := strconv.ParseUint(fields[starttime], 10, 64)
	if err != nil || ticks >= 1<<50 {
		return 0, fmt.Errorf("starttime %q", fields[starttime])
	}
	return ticks, nil
}

// parseBootTime reads btime, the boot time in seconds since the epoch,
// from /proc/stat.
func parseBootTime(stat string) (int64, error) {
	for line := range strings.Lines(stat) {
		if rest, ok := strings.CutPrefix(line, "btime "); ok {
			boot, err := strconv.ParseInt(strings.TrimSpace(rest), 10, 64)
			if err != nil || boot <= 0 || boot >= 1<<40 {
				return 0, fmt.Errorf("btime %q", strings.TrimSpace(rest))
			}
			return boot, nil
		}
	}
	return 0, errors.New("no btime")
}
