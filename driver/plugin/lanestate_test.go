package plugin

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/caravan-gpu/caravan/device/gpu/sim"
	"github.com/caravan-gpu/caravan/driver/lane"
	"github.com/caravan-gpu/caravan/driver/task"
	"github.com/caravan-gpu/caravan/driver/workload"
	"github.com/shoenig/test/must"
	"github.com/shoenig/test/wait"
)

func TestLaneStateRoundTrip(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name    string
		content *string // nil: no file
		want    lane.MemberState
		wantErr string
	}{
		{"no file is a fresh member", nil, lane.MemberState{}, ""},
		{"no path", nil, lane.MemberState{}, ""},
		{"damaged file names itself", ptr(`{"suspended": tru`), lane.MemberState{}, "lane state"},
		{"bad PID names the field", ptr(`{"checkpointed": [0]}`), lane.MemberState{}, "checkpointed"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, tc.name)
			if tc.name == "no path" {
				path = ""
			}
			if tc.content != nil {
				must.NoError(t, os.WriteFile(path, []byte(*tc.content), 0o600))
			}
			got, err := readLaneState(path)
			if tc.wantErr != "" {
				must.ErrorContains(t, err, tc.wantErr)
				must.ErrorContains(t, err, path)
				return
			}
			must.NoError(t, err, must.Sprint(i))
			must.Eq(t, tc.want, got)
		})
	}
	st := lane.MemberState{Profile: lane.Profile{PersistentMiB: 3000, EphemeralMiB: 500, Known: true, Measured: true},
		Suspended: true, Checkpointed: []int{41, 42}, Mode: "time-sliced", Switches: 3, Peers: []string{"b"},
		SliceStart: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	path := filepath.Join(dir, "state.json")
	must.NoError(t, writeLaneState(path, st))
	got, err := readLaneState(path)
	must.NoError(t, err)
	must.Eq(t, st, got)
}

func ptr(s string) *string { return &s }

// FuzzReadLaneState: whatever the lane state file holds, reading it
// returns a state or an error, never a panic.
func FuzzReadLaneState(f *testing.F) {
	f.Add([]byte(`{"profile":{"PersistentMiB":1,"EphemeralMiB":2,"Known":true},"suspended":true,"checkpointed":[1,2],"turn":false,"mode":"time-sliced"}`))
	f.Add([]byte(`{"checkpointed":[-1]}`))
	f.Add([]byte(``))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "state.json")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Skip()
		}
		_, _ = readLaneState(path)
	})
}

// A driver that dies after checkpointing a task but before freezing it
// leaves the task running with its GPU state in host memory. The new
// driver reads the checkpointed PIDs from the lane state, counts the task
// as suspended although it is not frozen, and restores exactly those.
func TestRecoverTaskRestoresWhatWasCheckpointed(t *testing.T) {
	conf, stateDir := simConfig(t)
	h1, _, stopDriver := newStoppableHarness(t, conf)
	cfg := workloadTask(t, h1, "ckpt", workload.Config{Iterations: 20, IterationTime: 100 * time.Millisecond,
		PersistentMiB: 1024, EphemeralMiB: 256}, TaskConfig{}, grantEnv(laneGrant(0)))
	handle, _, err := h1.StartTask(cfg)
	must.NoError(t, err)
	must.NoError(t, h1.WaitUntilStarted(cfg.ID, 5*time.Second))
	b, err := sim.New(conf.Sim.FleetFile, stateDir)
	must.NoError(t, err)
	var pid int
	must.Wait(t, wait.InitialSuccess(wait.BoolFunc(func() bool {
		procs, _ := b.Processes("GPU-test")
		if len(procs) == 1 {
			pid = procs[0].PID
		}
		return pid != 0
	}), wait.Timeout(10*time.Second), wait.Gap(20*time.Millisecond)))
	stopDriver()

	must.NoError(t, b.Checkpoint(context.Background(), pid))
	var state task.State
	must.NoError(t, handle.GetDriverState(&state))
	must.NotEq(t, "", state.LaneStateFile)
	must.NoError(t, writeLaneState(state.LaneStateFile, lane.MemberState{Checkpointed: []int{pid}, Mode: "alone"}))

	h2, _ := newHarness(t, conf)
	events := collectEvents(t, h2)
	must.NoError(t, h2.RecoverTask(handle))
	res := waitExit(t, h2, cfg.ID, 30*time.Second)
	must.Eq(t, 0, res.ExitCode)
	must.SliceNotEmpty(t, waitEvents(events, cfg.ID, fmt.Sprintf("(suspended: true, checkpointed PIDs [%d]", pid), 5*time.Second))
	var all []string
	for _, e := range events(cfg.ID, "") {
		all = append(all, e.Message)
	}
	must.SliceNotEmpty(t, waitEvents(events, cfg.ID, fmt.Sprintf("restored PIDs [%d]", pid), 5*time.Second), must.Sprint(all))
}
