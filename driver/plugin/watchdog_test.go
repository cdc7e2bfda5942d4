package plugin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/caravan-gpu/caravan/driver/workload"
	"github.com/caravan-gpu/caravan/gpu/reservation"
)

// simConfigFor is simConfig on a fleet of one 16 GiB GPU, GPU-test, whose
// fleet entry adds extra fields.
func simConfigFor(t *testing.T, extra string) Config {
	dir := t.TempDir()
	fleet := filepath.Join(dir, "fleet.json")
	must.NoError(t, os.WriteFile(fleet, []byte(`{"gpus":[{"uuid":"GPU-test","model":"Sim GPU","memory_mib":16384`+extra+`}]}`), 0o644))
	return Config{GPUBackend: "sim", Sim: SimConfig{FleetFile: fleet, StateDir: filepath.Join(dir, "state")},
		WatchdogInterval: "50ms", AllowRoot: true, DefaultUser: "root"}
}

// The watchdog on GPUs that list processes in the ways NVML can: a task
// that goes over its budget is killed when the GPU lists it only as an MPS
// client, and is not killed (but reported) when the GPU cannot tell its
// memory.
func TestWatchdogOnGPUsThatListProcessesDifferently(t *testing.T) {
	cases := []struct {
		name     string
		fleet    string
		killed   bool
		event    string
		noEvents string
	}{
		{"compute processes", ``, true, "killing the task", ""},
		{"MPS clients only", `, "mps_clients": true`, true, "killing the task", ""},
		{"memory not available", `, "process_memory_not_available": true`, false,
			"warning: the GPU does not report the memory of pid", "budget exceeded"},
		{"MPS clients without memory figures", `, "mps_clients": true, "process_memory_not_available": true`, false,
			"warning: the GPU does not report the memory of pid", "budget exceeded"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h, _ := newHarness(t, simConfigFor(t, tc.fleet))
			events := collectEvents(t, h)
			grant := reservation.Grant{InstanceID: "GPU-test", GPUUUID: "GPU-test", Lane: -1, Slots: 1, MemoryMiB: 2048, SharePercent: 100}
			// 25% over its budget from the second iteration on, for about 1.5 s.
			cfg := workloadTask(t, h, "greedy", workload.Config{Iterations: 18, IterationTime: 100 * time.Millisecond,
				PersistentMiB: 1024, EphemeralMiB: 512, Mode: workload.ModeExceed, ExceedAfter: 2}, TaskConfig{}, grantEnv(grant))
			_, _, err := h.StartTask(cfg)
			must.NoError(t, err)
			res := waitExit(t, h, cfg.ID, 20*time.Second)
			if tc.killed {
				must.ErrorContains(t, res.Err, "GPU memory budget exceeded on GPU-test")
			} else {
				must.NoError(t, res.Err)
				must.Eq(t, 0, res.ExitCode)
			}
			must.SliceNotEmpty(t, waitEvents(events, cfg.ID, tc.event, 5*time.Second))
			if tc.noEvents != "" {
				must.SliceEmpty(t, events(cfg.ID, tc.noEvents))
				// Reported once, not on every sample.
				must.SliceLen(t, 1, events(cfg.ID, tc.event))
			}
		})
	}
}

// A spike of a millisecond per iteration past the budget falls between the
// watchdog's samples; the process's recorded peak still shows it. Under MPS
// the allocation itself fails, in the task, and nothing is over budget.
func TestMillisecondSpikePastTheBudget(t *testing.T) {
	cases := []struct {
		name     string
		mps      string
		policy   string
		exitErr  string // the driver's reason, for a task it killed
		exitCode int
		event    string
		noEvent  string
	}{
		{"kill", "off", "kill", "2561 MiB of its 2048 MiB budget", 0, "killing the task", ""},
		{"warn", "off", "warn", "", 0, "warning: GPU memory budget exceeded on GPU-test", ""},
		{"MPS refuses the allocation", "on", "kill", "", 1, "", "budget exceeded"},
		// The task raises its own MPS limit before CUDA starts: its
		// server's limit, which the driver set, still refuses the excess.
		{"MPS limit raised from inside", "on", "kill", "", 1, "the MPS server of uid", "budget exceeded"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := simConfigFor(t, "")
			// The default interval: a 1 ms spike in each 300 ms iteration is
			// seen by a sample about once in 300.
			cfg.WatchdogInterval, cfg.MPS = "500ms", tc.mps
			h, _ := newHarness(t, cfg)
			events := collectEvents(t, h)
			grant := reservation.Grant{InstanceID: "GPU-test", GPUUUID: "GPU-test", Lane: -1, Slots: 1, MemoryMiB: 2048, SharePercent: 100}
			task := workloadTask(t, h, "spiky", workload.Config{Iterations: 8, IterationTime: 300 * time.Millisecond,
				PersistentMiB: 1024, EphemeralMiB: 512, Mode: workload.ModeExceed, ExceedAfter: 1, SpikeTime: time.Millisecond},
				TaskConfig{GPUMemoryPolicy: tc.policy}, grantEnv(grant))
			if strings.Contains(tc.name, "raised") {
				must.NoError(t, task.EncodeConcreteDriverConfig(&TaskConfig{GPUMemoryPolicy: tc.policy, GPUProcesses: 1, Command: "/bin/sh",
					Args: []string{"-c", `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=1000000M exec "$0"`, testBinary(t)}}))
			}
			_, _, err := h.StartTask(task)
			must.NoError(t, err)
			res := waitExit(t, h, task.ID, 30*time.Second)
			if tc.exitErr != "" {
				must.ErrorContains(t, res.Err, tc.exitErr)
			} else {
				must.NoError(t, res.Err)
				must.Eq(t, tc.exitCode, res.ExitCode)
			}
			if tc.event != "" {
				found := waitEvents(events, task.ID, tc.event, 5*time.Second)
				must.SliceNotEmpty(t, found)
				if tc.mps == "on" {
					must.StrContains(t, found[0].Message, "2048 MiB on GPU-test")
				} else {
					must.StrContains(t, found[0].Message, "2561 MiB of its 2048 MiB budget")
				}
			}
			if tc.noEvent != "" {
				must.SliceEmpty(t, events(task.ID, tc.noEvent))
			}
		})
	}
}
