package plugin

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/plugins/drivers"

	"github.com/caravan-gpu/caravan/driver/lane"
	"github.com/caravan-gpu/caravan/driver/task"
	"github.com/caravan-gpu/caravan/driver/workload"
	"github.com/caravan-gpu/caravan/gpu/sim"
	"github.com/shoenig/test/must"
	"github.com/shoenig/test/wait"
)

func TestLaneStateRoundTrip(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name    string
		content *string // nil: no file
		want    laneStates
		wantErr string
	}{
		{"no file is a fresh member", nil, nil, ""},
		{"no path", nil, nil, ""},
		{"damaged file names itself", ptr(`{"GPU-a/lane0": {"suspended": tru`), nil, "lane state"},
		{"bad PID names the field", ptr(`{"GPU-a/lane0": {"checkpointed": [0]}}`), nil, "GPU-a/lane0: checkpointed"},
		{"bad PID of a suspend in flight names the field", ptr(`{"GPU-a/lane0": {"suspending": [-3]}}`), nil, "GPU-a/lane0: suspending: -3"},
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
			got, err := readLaneStates(path)
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
	states := laneStates{"GPU-a/lane0": st, "GPU-b/lane1": {Mode: "alone"}}
	must.NoError(t, writeLaneStates(path, states))
	got, err := readLaneStates(path)
	must.NoError(t, err)
	must.Eq(t, states, got)
}

func ptr(s string) *string { return &s }

// FuzzReadLaneState: whatever the lane state file holds, reading it
// returns a state or an error, never a panic.
func FuzzReadLaneState(f *testing.F) {
	f.Add([]byte(`{"GPU-a/lane0":{"profile":{"PersistentMiB":1,"EphemeralMiB":2,"Known":true},"suspended":true,"checkpointed":[1,2],"turn":false,"mode":"time-sliced"}}`))
	f.Add([]byte(`{"GPU-a/lane0":{"checkpointed":[-1]}}`))
	f.Add([]byte(`{"GPU-a/lane0":{"suspending":[4242],"mode":"time-sliced"}}`))
	f.Add([]byte(``))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "state.json")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Skip()
		}
		_, _ = readLaneStates(path)
	})
}

// A driver that dies in the middle of a switch leaves the lane state behind
// the processes. The new driver asks the GPU which processes are
// checkpointed, counts the task as suspended when any is (although it is
// not frozen), restores exactly those, and restores nothing that runs.
func TestRecoverTaskRestoresWhatIsCheckpointed(t *testing.T) {
	cases := []struct {
		name       string
		checkpoint bool
		state      func(pid int) lane.MemberState
		suspended  bool
	}{
		// Died after the checkpoint, before the freeze.
		{"checkpointed and recorded", true, func(pid int) lane.MemberState {
			return lane.MemberState{Checkpointed: []int{pid}, Mode: "alone"}
		}, true},
		// Died inside the checkpoint call: only the state written ahead of
		// it names the process.
		{"checkpointed, only the suspend's intent recorded", true, func(pid int) lane.MemberState {
			return lane.MemberState{Suspending: []int{pid}, Mode: "alone"}
		}, true},
		// Died after the thaw and the restore, before the state was written.
		{"recorded, but restored already", false, func(pid int) lane.MemberState {
			return lane.MemberState{Suspended: true, Checkpointed: []int{pid}, Mode: "alone"}
		}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
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

			if tc.checkpoint {
				must.NoError(t, b.Checkpoint(context.Background(), pid))
			}
			var state task.State
			must.NoError(t, handle.GetDriverState(&state))
			must.NotEq(t, "", state.LaneStateFile)
			must.NoError(t, writeLaneStates(state.LaneStateFile, laneStates{"GPU-test/lane0": tc.state(pid)}))

			h2, _ := newHarness(t, conf)
			events := collectEvents(t, h2)
			must.NoError(t, h2.RecoverTask(handle))
			all := func() (out []string) {
				for _, e := range events(cfg.ID, "") {
					out = append(out, e.Message)
				}
				return out
			}
			if tc.suspended {
				// Alone in its lane, the task is restored at once.
				must.Wait(t, wait.InitialSuccess(wait.BoolFunc(func() bool { return !sim.Checkpointed(stateDir, pid) }),
					wait.Timeout(10*time.Second), wait.Gap(10*time.Millisecond)))
				time.Sleep(200 * time.Millisecond)
			}
			// A Nomad client drops a task's events until it waits on the
			// task: the driver holds them, the recovery first, till then.
			must.SliceEmpty(t, all(), must.Sprint("events sent before Nomad waits on the task"))
			ch, err := h2.WaitTask(context.Background(), cfg.ID)
			must.NoError(t, err)
			var res *drivers.ExitResult
			select {
			case res = <-ch:
			case <-time.After(30 * time.Second):
				t.Fatalf("the task did not exit within 30 s; checkpointed: %v; events: %q", sim.Checkpointed(stateDir, pid), all())
			}
			must.Eq(t, 0, res.ExitCode, must.Sprint(all()))
			must.False(t, sim.Checkpointed(stateDir, pid))
			if !tc.suspended {
				must.SliceNotEmpty(t, waitEvents(events, cfg.ID, "(suspended: false", 5*time.Second), must.Sprint(all()))
				must.SliceEmpty(t, events(cfg.ID, "resume"), must.Sprint(all()))
				return
			}
			must.SliceNotEmpty(t, waitEvents(events, cfg.ID, fmt.Sprintf("(suspended: true, checkpointed PIDs [%d]", pid), 5*time.Second), must.Sprint(all()))
			must.SliceNotEmpty(t, waitEvents(events, cfg.ID, fmt.Sprintf("restored PIDs [%d]", pid), 5*time.Second), must.Sprint(all()))
			got := all()
			must.StrHasPrefix(t, "recovered by a new driver process", got[0], must.Sprint(got))
		})
	}
}

func TestRecoveredLanes(t *testing.T) {
	a, b := lane.Key{GPU: "GPU-a", Lane: 0}, lane.Key{GPU: "GPU-b", Lane: 1}
	spec := task.Spec{Lanes: []task.LaneSpec{{Key: a}, {Key: b}}}
	cases := []struct {
		name          string
		states        laneStates
		frozen        bool
		checkpointed  []int
		wantSuspended map[string]bool
		wantAny       bool
	}{
		{"running, no state", nil, false, nil, map[string]bool{"GPU-a/lane0": false, "GPU-b/lane1": false}, false},
		{"frozen, no state: every lane resumes it", nil, true, nil, map[string]bool{"GPU-a/lane0": true, "GPU-b/lane1": true}, true},
		{"frozen by one lane", laneStates{"GPU-a/lane0": {Suspended: true}}, true, nil, map[string]bool{"GPU-a/lane0": true, "GPU-b/lane1": false}, true},
		{"state says suspended but the task runs", laneStates{"GPU-a/lane0": {Suspended: true}}, false, nil, map[string]bool{"GPU-a/lane0": false, "GPU-b/lane1": false}, false},
		{"checkpointed, not frozen", laneStates{"GPU-a/lane0": {Suspended: true, Checkpointed: []int{7}}}, false, []int{7}, map[string]bool{"GPU-a/lane0": true, "GPU-b/lane1": false}, true},
		{"checkpointed mid-suspend, no lane says so", laneStates{"GPU-a/lane0": {Suspending: []int{7}}}, false, []int{7}, map[string]bool{"GPU-a/lane0": true, "GPU-b/lane1": true}, true},
		{"state says checkpointed but all was restored", laneStates{"GPU-a/lane0": {Suspended: true, Checkpointed: []int{7}}}, false, nil, map[string]bool{"GPU-a/lane0": false, "GPU-b/lane1": false}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, any, _ := recoveredLanes(spec, tc.states, tc.frozen, tc.checkpointed)
			must.Eq(t, tc.wantAny, any)
			for key, want := range tc.wantSuspended {
				must.Eq(t, want, got[key].Suspended, must.Sprint(key))
			}
		})
	}
}

// Recovery asks the GPU only about the task's own processes: the lane state
// file lies in the task's directory, and PIDs a task wrote there of a
// neighbour's checkpointed process are ignored rather than restored.
func TestCheckpointedNowAsksOnlyOfTheTasksOwnProcesses(t *testing.T) {
	conf, stateDir := simConfig(t)
	b, err := sim.New(conf.Sim.FleetFile, stateDir)
	must.NoError(t, err)
	var pids []int
	for range 3 {
		cmd := exec.Command("sleep", "60")
		must.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		pids = append(pids, cmd.Process.Pid)
		must.NoError(t, sim.SetProcessMemory(stateDir, "GPU-test", cmd.Process.Pid, 1000))
	}
	mine, mineRunning, neighbour := pids[0], pids[1], pids[2]
	must.NoError(t, b.Checkpoint(context.Background(), mine))
	must.NoError(t, b.Checkpoint(context.Background(), neighbour))
	states := laneStates{"GPU-test/lane0": {Checkpointed: []int{mine, neighbour}, Suspending: []int{mineRunning}}}
	got := checkpointedNow(context.Background(), b, states, []int{mine, mineRunning}, hclog.NewNullLogger())
	must.Eq(t, []int{mine}, got)
	// Without a backend that can tell, the file's list stands, the task's
	// own processes only.
	must.Eq(t, []int{mine}, checkpointedNow(context.Background(), nil, states, []int{mine, mineRunning}, hclog.NewNullLogger()))
}

// BenchmarkWriteLaneStates is one write of a task's lane state file: a
// suspend with cuda-checkpoint writes it twice (its intent before the first
// checkpoint call, its result after), a resume once.
func BenchmarkWriteLaneStates(b *testing.B) {
	path := filepath.Join(b.TempDir(), "caravan-lane-state.json")
	states := laneStates{"GPU-a/lane0": {Profile: lane.Profile{PersistentMiB: 5000, EphemeralMiB: 2000, Known: true},
		Suspended: true, Checkpointed: []int{4242, 4243}, Mode: "time-sliced", Switches: 12, Peers: []string{"b"}}}
	for b.Loop() {
		if err := writeLaneStates(path, states); err != nil {
			b.Fatal(err)
		}
	}
}
