package plugin

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/plugins/base"
	"github.com/hashicorp/nomad/plugins/drivers"
	"github.com/shoenig/test/must"

	"github.com/caravan-gpu/caravan/gpu"
	"github.com/caravan-gpu/caravan/gpu/nvml"
	"github.com/caravan-gpu/caravan/gpu/nvml/nvmltest"
	"github.com/caravan-gpu/caravan/gpu/reservation"
)

// withNVML makes openNVML find a mocked H100 (present) or fail as on a node
// without the NVIDIA driver, for the length of the test.
func withNVML(t *testing.T, present bool) {
	old := openNVML
	t.Cleanup(func() { openNVML = old })
	openNVML = func(logger hclog.Logger) (gpu.Backend, error) {
		if !present {
			return nil, errors.New(`nvml: libnvidia-ml.so.1 not found: install the NVIDIA driver on this node, or use backend = "sim" on machines without a GPU`)
		}
		b, err := nvml.NewWithLibrary(nvmltest.New(gpus.H100_SXM5_80GB), logger)
		if err == nil {
			t.Cleanup(func() { _ = b.Close() })
		}
		return b, err
	}
}

type syncBuffer struct {
	mu sync.Mutex
	bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.Buffer.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.Buffer.String()
}

func TestGPUBackendAutoPicksNVMLOrSaysNothingIsEnforced(t *testing.T) {
	cases := []struct {
		name     string
		backend  string
		nvml     bool
		resolved string
		enforced bool
		health   string // in the health description
	}{
		{"auto finds NVML", "", true, "nvml", true, ""},
		{"auto finds no NVML", "", false, "none", false,
			`GPU memory budgets are NOT enforced: gpu_backend = "auto" found no NVML (nvml: libnvidia-ml.so.1 not found`},
		{"none", "none", true, "none", false, `GPU memory budgets are NOT enforced: gpu_backend = "none"`},
		{"sim", "sim", false, "sim", true, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			withNVML(t, tc.nvml)
			conf := Config{GPUBackend: tc.backend}
			if tc.backend == "sim" {
				conf, _ = simConfig(t)
			}
			var logs syncBuffer
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			d := New(ctx, hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: &logs}))
			var data []byte
			must.NoError(t, base.MsgPackEncode(&data, conf.withDefaults()))
			must.NoError(t, d.SetConfig(&base.Config{PluginConfig: data}))

			fp := d.buildFingerprint()
			must.Eq(t, drivers.HealthStateHealthy, fp.Health, must.Sprint(fp.HealthDescription))
			must.Eq(t, tc.resolved, *fp.Attributes["driver.caravan.gpu_backend"].String)
			must.Eq(t, tc.enforced, *fp.Attributes["driver.caravan.budgets_enforced"].Bool)
			if tc.health == "" {
				must.StrNotContains(t, fp.HealthDescription, "NOT enforced")
				must.StrNotContains(t, logs.String(), "NOT enforced")
			} else {
				must.StrContains(t, fp.HealthDescription, tc.health)
				must.StrContains(t, logs.String(), "[WARN]")
				must.StrContains(t, logs.String(), tc.health)
			}
		})
	}
}

func TestDefaultGPUBackendIsAuto(t *testing.T) {
	s, err := Config{}.parse()
	must.NoError(t, err)
	must.Eq(t, "auto", s.GPUBackend)
	_, err = Config{GPUBackend: "cuda"}.parse()
	must.ErrorContains(t, err, `gpu_backend: must be "auto", "nvml", "sim" or "none", got "cuda"`)
}

// A task on a node where nothing enforces budgets is told so, and is not
// told of a policy or shown a budget that nothing acts on.
func TestTaskWithoutEnforcementIsToldSo(t *testing.T) {
	cases := []struct {
		name     string
		backend  string
		policy   bool
		attr     string
		warnings int
	}{
		{"enforced", "sim", true, "2048 MiB", 0},
		{"none", "none", false, "", 1},
		{"auto without NVML", "auto", false, "", 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			withNVML(t, false)
			conf, _ := simConfig(t)
			conf.GPUBackend = tc.backend
			h, _ := newHarness(t, conf)
			events := collectEvents(t, h)
			grant := reservation.Grant{InstanceID: "GPU-test", GPUUUID: "GPU-test", Lane: -1, Slots: 1, MemoryMiB: 2048, SharePercent: 100}
			cfg := newTask(t, h, "env", TaskConfig{Command: "/bin/sh", Args: []string{"-c", "env | sort"}}, grantEnv(grant))
			_, _, err := h.StartTask(cfg)
			must.NoError(t, err)
			must.Eq(t, 0, waitExit(t, h, cfg.ID, 10*time.Second).ExitCode)
			out := readLog(t, cfg, "stdout")
			// The grant's size is still the task's to keep to.
			must.StrContains(t, out, "CARAVAN_GPU_MEMORY_MIB=2048\n")
			if tc.policy {
				must.StrContains(t, out, "CARAVAN_BUDGET_POLICY=kill\n")
			} else {
				must.StrNotContains(t, out, "CARAVAN_BUDGET_POLICY")
			}
			status, err := h.InspectTask(cfg.ID)
			must.NoError(t, err)
			if tc.attr != "" {
				must.Eq(t, tc.attr, status.DriverAttributes["caravan.budget.GPU-test"])
				must.Eq(t, "kill", status.DriverAttributes["caravan.budget_policy"])
			} else {
				must.MapNotContainsKeys(t, status.DriverAttributes, []string{"caravan.budget.GPU-test", "caravan.budget_policy"})
				must.StrHasPrefix(t, "not enforced: ", status.DriverAttributes["caravan.budget"])
			}
			const warning = "warning: GPU memory budgets are NOT enforced"
			if tc.warnings > 0 {
				must.SliceLen(t, tc.warnings, waitEvents(events, cfg.ID, warning, 5*time.Second))
			} else {
				time.Sleep(200 * time.Millisecond)
				must.SliceEmpty(t, events(cfg.ID, warning))
			}
		})
	}
}
