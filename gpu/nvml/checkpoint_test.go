package nvml_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/caravan-gpu/caravan/gpu"
	"github.com/caravan-gpu/caravan/gpu/nvml"
	"github.com/caravan-gpu/caravan/gpu/nvml/nvmltest"
	"github.com/shoenig/test/must"
)

// Without libcuda's checkpoint API the backend falls back to the
// cuda-checkpoint utility, and says so; without either it cannot
// checkpoint and says why.
func TestEnableCheckpointFallsBackToTheCLI(t *testing.T) {
	if _, err := os.Stat("/usr/lib/x86_64-linux-gnu/libcuda.so.1"); err == nil {
		t.Skip("libcuda is present: the driver API is preferred")
	}
	dir := t.TempDir()
	fake, log := fakeCheckpointCLI(t, false)
	cases := []struct {
		name, cli, mechanism, why string
	}{
		{"utility found", fake, "cuda-checkpoint-cli", ""},
		{"neither", filepath.Join(dir, "missing"), "", "libcuda"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := open(t, nvmltest.Complete(dgxa100.New()))
			b.EnableCheckpoint(tc.cli)
			must.Eq(t, tc.mechanism, b.CheckpointMechanism())
			must.StrContains(t, b.CheckpointUnavailable(), tc.why)
			if tc.mechanism == "" {
				must.Error(t, b.Checkpoint(context.Background(), 42))
				return
			}
			must.NoError(t, b.Checkpoint(context.Background(), 42))
			state, err := b.CheckpointState(context.Background(), 42)
			must.NoError(t, err)
			must.Eq(t, gpu.CheckpointCheckpointed, state)
			must.NoError(t, b.Restore(context.Background(), 42))
			data, err := os.ReadFile(log)
			must.NoError(t, err)
			must.Eq(t, "--help\n--get-state --pid 42\n--toggle --pid 42\n--get-state --pid 42\n--get-state --pid 42\n--toggle --pid 42\n", string(data))
		})
	}
}

func TestCLIReportsToolFailure(t *testing.T) {
	fake := filepath.Join(t.TempDir(), "cuda-checkpoint")
	must.NoError(t, os.WriteFile(fake, []byte("#!/bin/sh\necho restore failed >&2\nexit 1\n"), 0o755))
	err := nvml.CLI{Path: fake}.Restore(context.Background(), 42)
	must.ErrorContains(t, err, "restore failed")
}

// The utility's --get-state words map onto CUDA's process states; a word it
// does not know is an error naming it.
func TestCLIReadsTheCheckpointState(t *testing.T) {
	for _, tc := range []struct {
		out   string
		state gpu.CheckpointState
		err   string
	}{
		{"running", gpu.CheckpointRunning, ""},
		{"locked", gpu.CheckpointLocked, ""},
		{"checkpointed\n", gpu.CheckpointCheckpointed, ""},
		{"failed", 0, `the process is in state "failed"`},
	} {
		fake := filepath.Join(t.TempDir(), "cuda-checkpoint")
		must.NoError(t, os.WriteFile(fake, []byte("#!/bin/sh\nprintf '"+tc.out+"'\n"), 0o755))
		state, err := nvml.CLI{Path: fake}.CheckpointState(context.Background(), 42)
		if tc.err != "" {
			must.ErrorContains(t, err, tc.err)
			continue
		}
		must.NoError(t, err)
		must.Eq(t, tc.state, state)
	}
}

// fakeCheckpointCLI is cuda-checkpoint at the hardware seam: it keeps one
// process's CUDA state (running, locked, checkpointed) in a file, moves it
// as the utility does, refuses a move from the wrong state, and logs every
// call. With actions it offers --action besides --toggle, as newer
// releases do; a file named fail-checkpoint beside it fails checkpoints.
func fakeCheckpointCLI(t *testing.T, actions bool) (path, log string) {
	t.Helper()
	dir := t.TempDir()
	path, log = filepath.Join(dir, "cuda-checkpoint"), filepath.Join(dir, "log")
	state, fail := filepath.Join(dir, "state"), filepath.Join(dir, "fail-checkpoint")
	help := `echo "usage: cuda-checkpoint --toggle --pid PID | --get-state --pid PID"`
	if actions {
		help += `; echo "  --action ACTION   lock, checkpoint, restore or unlock"`
	}
	script := `#!/bin/sh
echo "$@" >> ` + log + `
st=$(cat ` + state + ` 2>/dev/null || echo running)
to() { [ "$st" = "$1" ] || { echo "process is $st, not $1" >&2; exit 1; }; echo "$2" > ` + state + `; }
case "$1" in
--help) ` + help + `;;
--get-state) echo "$st";;
--toggle) case "$st" in running) to running checkpointed;; checkpointed) to checkpointed running;; *) echo "cannot toggle $st" >&2; exit 1;; esac;;
--action)
  [ ` + map[bool]string{true: "1", false: "0"}[actions] + ` = 1 ] || { echo "unknown option --action" >&2; exit 2; }
  case "$2" in
  lock) to running locked;;
  checkpoint) [ -f ` + fail + ` ] && { echo "checkpoint failed" >&2; exit 1; }; to locked checkpointed;;
  restore) to checkpointed locked;;
  unlock) to locked running;;
  esac;;
esac
`
	must.NoError(t, os.WriteFile(path, []byte(script), 0o755))
	return path, log
}

func calls(t *testing.T, log string) []string {
	t.Helper()
	data, err := os.ReadFile(log)
	must.NoError(t, err)
	return strings.Split(strings.TrimSpace(string(data)), "\n")
}

// Where the utility has explicit actions, a checkpoint locks and then
// checkpoints, a restore restores and then unlocks, and a failed
// checkpoint unlocks again: nothing is toggled, and a repeated restore
// leaves a running process running.
func TestCLIUsesExplicitActionsWhereItHasThem(t *testing.T) {
	fake, log := fakeCheckpointCLI(t, true)
	cli := nvml.DetectCLI(fake)
	must.True(t, cli.Actions)
	ctx := context.Background()
	must.NoError(t, cli.Checkpoint(ctx, 42))
	must.NoError(t, cli.Restore(ctx, 42))
	must.NoError(t, cli.Restore(ctx, 42)) // again: already running
	state, err := cli.CheckpointState(ctx, 42)
	must.NoError(t, err)
	must.Eq(t, gpu.CheckpointRunning, state)
	must.Eq(t, []string{"--help",
		"--action lock --pid 42", "--action checkpoint --pid 42",
		"--get-state --pid 42", "--action restore --pid 42", "--action unlock --pid 42",
		"--get-state --pid 42", "--get-state --pid 42"}, calls(t, log))

	must.NoError(t, os.WriteFile(filepath.Join(filepath.Dir(fake), "fail-checkpoint"), nil, 0o644))
	err = cli.Checkpoint(ctx, 42)
	must.ErrorContains(t, err, "checkpoint failed")
	state, err = cli.CheckpointState(ctx, 42)
	must.NoError(t, err)
	must.Eq(t, gpu.CheckpointRunning, state, must.Sprint("a failed checkpoint left the process locked"))
}

// Where the utility only toggles, each call asks the state first: a
// restore of a running process, or a checkpoint of a checkpointed one,
// toggles nothing, so it never moves the state the wrong way.
func TestCLIToggleNeverGoesTheWrongWay(t *testing.T) {
	fake, log := fakeCheckpointCLI(t, false)
	cli := nvml.DetectCLI(fake)
	must.False(t, cli.Actions)
	ctx := context.Background()
	must.NoError(t, cli.Restore(ctx, 42)) // running: nothing to restore
	must.NoError(t, cli.Checkpoint(ctx, 42))
	must.NoError(t, cli.Checkpoint(ctx, 42)) // checkpointed already
	state, err := cli.CheckpointState(ctx, 42)
	must.NoError(t, err)
	must.Eq(t, gpu.CheckpointCheckpointed, state)
	must.NoError(t, cli.Restore(ctx, 42))
	must.NoError(t, cli.Restore(ctx, 42))
	state, err = cli.CheckpointState(ctx, 42)
	must.NoError(t, err)
	must.Eq(t, gpu.CheckpointRunning, state)
	toggles := 0
	for _, c := range calls(t, log) {
		if strings.HasPrefix(c, "--toggle") {
			toggles++
		}
	}
	must.Eq(t, 2, toggles)
}
