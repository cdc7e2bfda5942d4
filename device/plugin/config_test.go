package plugin

import (
	"testing"
	"time"

	"github.com/hashicorp/nomad/plugins/base"
	"github.com/shoenig/test/must"
)

func TestSetConfig_Errors(t *testing.T) {
	fleetPath, stateDir := simFiles(t, testFleet)
	sim := simConfig(fleetPath, stateDir)
	cases := []struct {
		name string
		body string
		want string
	}{
		{"unknown backend", `backend = "cuda"`, `backend: must be "nvml" or "sim", got "cuda"`},
		{"sim without fleet", `backend = "sim"`, `sim.fleet_file: is required when backend = "sim"`},
		{"bad period", sim + `fingerprint_period = "often"`, `fingerprint_period: "often" is not a duration`},
		{"tiny period", sim + `fingerprint_period = "1ms"`, `fingerprint_period: must be at least 100ms`},
		{"metrics address without port", sim + `metrics_address = "127.0.0.1"`, `metrics_address: "127.0.0.1" is not a host:port`},
		{"empty ignored id", sim + `ignored_gpu_ids = [""]`, `ignored_gpu_ids[0]: must not be empty`},
		{"rule without match", sim + `partition { lanes = 2 }`, `partition[0].model: one of model (a glob) or uuid is required`},
		{"rule with both matches", sim + `partition {
  model = "*"
  uuid  = "GPU-1"
  lanes = 2
}`, `partition[0].model: give model or uuid, not both`},
		{"rule without size", sim + `partition { model = "*" }`, `partition[0].lanes: one of lanes or lane_memory is required`},
		{"rule with both sizes", sim + `partition {
  model       = "*"
  lanes       = 2
  lane_memory = "10GiB"
}`, `partition[0].lanes: give lanes or lane_memory, not both`},
		{"too many lanes", sim + `partition {
  model = "*"
  lanes = 1000
}`, `partition[0].lanes: must be between 1 and 64, got 1000`},
		{"bad lane memory", sim + `partition {
  model       = "*"
  lane_memory = "20 parsecs"
}`, `partition[0].lane_memory: "20 parsecs" has unknown unit "parsecs"`},
		{"ambiguous lane memory unit", sim + `partition {
  model       = "*"
  lane_memory = "20G"
}`, `partition[0].lane_memory: "20G": unit "G" is ambiguous: write GiB (binary) or GB (decimal)`},
		{"bad reserved memory", sim + `partition {
  model           = "*"
  lanes           = 2
  reserved_memory = "lots"
}`, `partition[0].reserved_memory: "lots" is not a size`},
		{"bad slots", sim + `partition {
  model = "*"
  lanes = 2
  slots = -1
}`, `partition[0].slots: must be between 1 and 64, got -1`},
		{"bad glob", sim + `partition {
  model = "[H100"
  lanes = 2
}`, `partition[0].model: "[H100" is not a valid glob`},
		{"second rule named", sim + `partition {
  model = "*H100*"
  lanes = 2
}
partition {
  uuid = "GPU-t4-*"
}`, `partition[1].lanes: one of lanes or lane_memory is required`},
		{"bad mps mode", sim + `mps {
  enabled = true
  mode    = "sometimes"
}`, `mps.mode: must be "supervise" or "external", got "sometimes"`},
		{"relative pipe dir", sim + `mps {
  enabled  = true
  pipe_dir = "mps"
}`, `mps.pipe_dir: must be an absolute path, got "mps"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			data, err := encodeConfig(t, tc.body)
			must.NoError(t, err)
			err = New(testLogger(t)).SetConfig(&base.Config{PluginConfig: data})
			must.ErrorContains(t, err, tc.want)
		})
	}
}

func TestSetConfig_TypeErrorsComeFromTheSchema(t *testing.T) {
	_, err := encodeConfig(t, `ignored_gpu_ids = 3`)
	must.Error(t, err)
	_, err = encodeConfig(t, `partition {
  model = "*"
  lanes = "four"
}`)
	must.ErrorContains(t, err, "lanes")
}

func TestSetConfig_BadFleetNamesTheFile(t *testing.T) {
	fleetPath, stateDir := simFiles(t, `{"gpus": [{"model": "X"}]}`)
	data, err := encodeConfig(t, simConfig(fleetPath, stateDir))
	must.NoError(t, err)
	err = New(testLogger(t)).SetConfig(&base.Config{PluginConfig: data})
	must.ErrorContains(t, err, "gpus[0].memory_mib: must be > 0")
	must.ErrorContains(t, err, fleetPath)
}

func TestSetConfig_Defaults(t *testing.T) {
	data, err := encodeConfig(t, ``)
	must.NoError(t, err)
	d := New(testLogger(t))
	must.NoError(t, d.SetConfig(&base.Config{PluginConfig: data}))
	must.Eq(t, "nvml", d.settings.backend)
	must.Eq(t, 30*time.Second, d.settings.fingerprintPeriod)
	must.False(t, d.settings.mps.Enabled)
}

func TestSetConfig_FullExample(t *testing.T) {
	fleetPath, stateDir := simFiles(t, testFleet)
	data, err := encodeConfig(t, simConfig(fleetPath, stateDir)+`
ignored_gpu_ids = ["GPU-t4-03"]
partition {
  model           = "NVIDIA H100*"
  lanes           = 4
  reserved_memory = "512MiB"
  slots           = 2
}
partition {
  uuid        = "GPU-a100-0"
  lane_memory = "10GiB"
}
partition {
  model       = "Tesla T4"
  lane_memory = "5GB"
}
mps {
  enabled       = true
  mode          = "external"
  pipe_dir      = "/run/nvidia-mps"
  task_pipe_dir = "/tmp/nvidia-mps"
}`)
	must.NoError(t, err)
	d := New(testLogger(t))
	must.NoError(t, d.SetConfig(&base.Config{PluginConfig: data}))
	s := d.settings
	must.Eq(t, 100*time.Millisecond, s.fingerprintPeriod)
	must.True(t, s.ignored["GPU-t4-03"])
	must.Eq(t, []rule{
		{model: "NVIDIA H100*", lanes: 4, reservedMemoryMiB: 512, slots: 2},
		{uuid: "GPU-a100-0", laneMemoryMiB: 10240, slots: 1},
		{model: "Tesla T4", laneMemoryMiB: 4768, slots: 1}, // 5e9 bytes
	}, s.rules)
	must.Eq(t, MPSConfig{Enabled: true, Mode: MPSExternal, PipeDir: "/run/nvidia-mps",
		LogDir: "/var/log/nvidia-mps", ControlBin: "nvidia-cuda-mps-control", TaskPipeDir: "/tmp/nvidia-mps", ComputeMode: MPSComputeExclusive}, s.mps)
}
