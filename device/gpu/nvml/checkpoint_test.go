package nvml_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/caravan-gpu/caravan/device/gpu"
	"github.com/caravan-gpu/caravan/device/gpu/nvml"
	"github.com/caravan-gpu/caravan/device/gpu/nvml/nvmltest"
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
	log := filepath.Join(dir, "log")
	fake := filepath.Join(dir, "cuda-checkpoint")
	must.NoError(t, os.WriteFile(fake, []byte("#!/bin/sh\necho \"$@\" >> "+log+"\ncase \"$1\" in --get-state) echo checkpointed;; esac\n"), 0o755))
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
			must.Eq(t, "--toggle --pid 42\n--get-state --pid 42\n--toggle --pid 42\n", string(data))
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
