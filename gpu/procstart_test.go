package gpu

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

// initialised is taken as the test binary's packages initialise, just
// after the process started.
var initialised = time.Now()

// The kernel's start time for this test binary lies just before its
// packages initialised (less a second for the boot time's rounding); a
// process started later starts later; one that does not exist has none.
func TestProcessStartTime(t *testing.T) {
	self, err := ProcessStartTime(os.Getpid())
	must.NoError(t, err)
	must.True(t, self.After(initialised.Add(-10*time.Second)), must.Sprintf("started %s, initialised %s", self, initialised))
	must.True(t, self.Before(initialised.Add(time.Second)), must.Sprintf("started %s, initialised %s", self, initialised))

	before := time.Now()
	cmd := exec.Command("sleep", "60")
	must.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	child, err := ProcessStartTime(cmd.Process.Pid)
	must.NoError(t, err)
	must.True(t, !child.Before(self))
	must.True(t, child.After(before.Add(-StartTimeSlack)) && child.Before(time.Now().Add(StartTimeSlack)),
		must.Sprintf("child started %s, between %s and now", child, before))

	// In ticks, one process reads the same twice, and a later one more.
	ticks, err := ProcessStartTicks(os.Getpid())
	must.NoError(t, err)
	again, err := ProcessStartTicks(os.Getpid())
	must.NoError(t, err)
	must.Eq(t, ticks, again)
	childTicks, err := ProcessStartTicks(cmd.Process.Pid)
	must.NoError(t, err)
	must.GreaterEq(t, ticks, childTicks)
	at, err := TimeOfTicks(ticks)
	must.NoError(t, err)
	must.Eq(t, self, at)

	_, err = ProcessStartTime(1 << 30)
	must.Error(t, err)
	_, err = ProcessStartTicks(1 << 30)
	must.Error(t, err)
}

func TestParseStartTicks(t *testing.T) {
	fields := func(n int) string { return strings.Repeat("0 ", n) }
	cases := []struct {
		name string
		stat string
		want uint64
		err  bool
	}{
		{"plain", "42 (sleep) S " + fields(18) + "123456 7 8", 123456, false},
		{"command with spaces and parentheses", "42 (a) b (c)) S " + fields(18) + "99 7", 99, false},
		{"too short", "42 (sleep) S 1 2 3", 0, true},
		{"no command", "42 sleep S " + fields(18) + "99", 0, true},
		{"not a number", "42 (sleep) S " + fields(18) + "x", 0, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseStartTicks(tc.stat)
			if tc.err {
				must.Error(t, err)
				return
			}
			must.NoError(t, err)
			must.Eq(t, tc.want, got)
		})
	}
}

func TestParseBootTime(t *testing.T) {
	boot, err := parseBootTime("cpu  1 2 3\nintr 5\nbtime 1720000000\nprocesses 9\n")
	must.NoError(t, err)
	must.Eq(t, int64(1720000000), boot)
	_, err = parseBootTime("cpu  1 2 3\n")
	must.Error(t, err)
	_, err = parseBootTime("btime -1\n")
	must.Error(t, err)
}

func FuzzParseStartTicks(f *testing.F) {
	f.Add("42 (sleep) S " + strings.Repeat("0 ", 18) + "123456 7 8")
	f.Add("42 (a) b)) S 1")
	f.Fuzz(func(t *testing.T, stat string) {
		ticks, err := parseStartTicks(stat)
		if err == nil && ticks >= 1<<50 {
			t.Fatalf("start %d out of range for %q", ticks, stat)
		}
	})
}

// An accounted process belongs to the process with its PID that started
// no later than it did, less the slack.
func TestAccountedProcessBelongsTo(t *testing.T) {
	start := time.Unix(1720000000, 0)
	p := AccountedProcess{PID: 7, StartTime: start.Add(3 * time.Second)}
	must.True(t, p.BelongsTo(7, start))                      // the GPU was first used after the start
	must.True(t, p.BelongsTo(7, start.Add(4*time.Second)))   // within the slack
	must.False(t, p.BelongsTo(7, start.Add(10*time.Second))) // a later process with the same PID
	must.False(t, p.BelongsTo(8, start))
	must.True(t, AccountedProcess{PID: 7}.BelongsTo(7, start))
	must.True(t, p.BelongsTo(7, time.Time{}))
}
