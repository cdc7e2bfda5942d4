package plugin

import (
	"fmt"
	"net"
	"path"
	"strings"
	"time"

	"github.com/caravan-gpu/caravan/gpu"
	"github.com/hashicorp/nomad/plugins/shared/hclspec"
)

// configSpec is the plugin's config schema. Everything beyond types is
// checked in Config.validate, so that errors name the field and the problem.
var configSpec = hclspec.NewObject(map[string]*hclspec.Spec{
	"backend": hclspec.NewDefault(
		hclspec.NewAttr("backend", "string", false),
		hclspec.NewLiteral(`"nvml"`),
	),
	"fingerprint_period": hclspec.NewDefault(
		hclspec.NewAttr("fingerprint_period", "string", false),
		hclspec.NewLiteral(`"30s"`),
	),
	"lanes_as_gpus": hclspec.NewDefault(
		hclspec.NewAttr("lanes_as_gpus", "bool", false),
		hclspec.NewLiteral("false"),
	),
	"ignored_gpu_ids": hclspec.NewDefault(
		hclspec.NewAttr("ignored_gpu_ids", "list(string)", false),
		hclspec.NewLiteral("[]"),
	),
	"metrics_address": hclspec.NewAttr("metrics_address", "string", false),
	"sim": hclspec.NewBlock("sim", false, hclspec.NewObject(map[string]*hclspec.Spec{
		"fleet_file": hclspec.NewAttr("fleet_file", "string", false),
		"state_dir":  hclspec.NewAttr("state_dir", "string", false),
	})),
	"partition": hclspec.NewBlockList("partition", hclspec.NewObject(map[string]*hclspec.Spec{
		"model":           hclspec.NewAttr("model", "string", false),
		"uuid":            hclspec.NewAttr("uuid", "string", false),
		"lanes":           hclspec.NewAttr("lanes", "number", false),
		"lane_memory":     hclspec.NewAttr("lane_memory", "string", false),
		"reserved_memory": hclspec.NewAttr("reserved_memory", "string", false),
		"slots":           hclspec.NewAttr("slots", "number", false),
	})),
	"mps": hclspec.NewBlock("mps", false, hclspec.NewObject(map[string]*hclspec.Spec{
		"enabled": hclspec.NewDefault(
			hclspec.NewAttr("enabled", "bool", false),
			hclspec.NewLiteral("false"),
		),
		"mode": hclspec.NewDefault(
			hclspec.NewAttr("mode", "string", false),
			hclspec.NewLiteral(`"supervise"`),
		),
		"pipe_dir": hclspec.NewDefault(
			hclspec.NewAttr("pipe_dir", "string", false),
			hclspec.NewLiteral(`"/tmp/nvidia-mps"`),
		),
		"log_dir": hclspec.NewDefault(
			hclspec.NewAttr("log_dir", "string", false),
			hclspec.NewLiteral(`"/var/log/nvidia-mps"`),
		),
		"control_bin": hclspec.NewDefault(
			hclspec.NewAttr("control_bin", "string", false),
			hclspec.NewLiteral(`"nvidia-cuda-mps-control"`),
		),
		"task_pipe_dir": hclspec.NewAttr("task_pipe_dir", "string", false),
		"compute_mode": hclspec.NewDefault(
			hclspec.NewAttr("compute_mode", "string", false),
			hclspec.NewLiteral(`"exclusive_process"`),
		),
	})),
})

// Config is the plugin config as the agent sends it.
type Config struct {
	Backend           string   `codec:"backend"`
	FingerprintPeriod string   `codec:"fingerprint_period"`
	IgnoredGPUIDs     []string `codec:"ignored_gpu_ids"`
	// LanesAsGPUs offers lanes as device type "gpu", to every nvidia/gpu
	// request; by default they are type "lane", asked for by name.
	LanesAsGPUs bool            `codec:"lanes_as_gpus"`
	Sim         SimConfig       `codec:"sim"`
	Partitions  []PartitionRule `codec:"partition"`
	MPS         MPSConfig       `codec:"mps"`
	// MetricsAddress is where /metrics is served (host:port); off when
	// empty.
	MetricsAddress string `codec:"metrics_address"`
}

// SimConfig locates the simulated fleet.
type SimConfig struct {
	FleetFile string `codec:"fleet_file"`
	StateDir  string `codec:"state_dir"`
}

// PartitionRule cuts matching GPUs into lanes. A rule matches by a model glob
// or by a UUID (also a glob); the first matching rule wins.
type PartitionRule struct {
	Model          string `codec:"model"`
	UUID           string `codec:"uuid"`
	Lanes          int    `codec:"lanes"`
	LaneMemory     string `codec:"lane_memory"`
	ReservedMemory string `codec:"reserved_memory"`
	Slots          int    `codec:"slots"`
}

// MPS modes.
const (
	MPSSupervise = "supervise" // the plugin starts and watches the daemon
	MPSExternal  = "external"  // the operator runs the daemon
)

// MPSConfig turns on CUDA MPS for lanes.
type MPSConfig struct {
	Enabled    bool   `codec:"enabled"`
	Mode       string `codec:"mode"`
	PipeDir    string `codec:"pipe_dir"`
	LogDir     string `codec:"log_dir"`
	ControlBin string `codec:"control_bin"`
	// TaskPipeDir is where the pipe directory appears inside a task; the
	// host path when empty.
	TaskPipeDir string `codec:"task_pipe_dir"`
	// ComputeMode is what a supervised daemon's lane GPUs are set to:
	// "exclusive_process" (the default; only the MPS server holds a
	// context, so a client that leaves MPS gets no GPU) or "unchanged".
	ComputeMode string `codec:"compute_mode"`
}

// MPS compute_mode values.
const (
	MPSComputeExclusive = "exclusive_process"
	MPSComputeUnchanged = "unchanged"
)

// settings is a validated Config in the types the plugin works with.
type settings struct {
	backend           string
	fingerprintPeriod time.Duration
	ignored           map[string]bool
	sim               SimConfig
	rules             []rule
	mps               MPSConfig
	laneType          string // the device type lanes are offered as
	metricsAddress    string
}

// rule is a validated PartitionRule.
type rule struct {
	model, uuid       string
	lanes             int
	laneMemoryMiB     uint64
	reservedMemoryMiB uint64
	slots             int
}

func (r rule) matches(model, uuid string) bool {
	if r.uuid != "" {
		ok, _ := path.Match(r.uuid, uuid)
		return ok
	}
	ok, _ := path.Match(r.model, model)
	return ok
}

// validate checks c and converts it; every error names the offending field.
func (c Config) validate() (*settings, error) {
	s := &settings{sim: c.Sim, mps: c.MPS, ignored: map[string]bool{}, laneType: laneDeviceType}
	if c.LanesAsGPUs {
		s.laneType = deviceType
	}
	switch c.Backend {
	case "nvml", "sim":
		s.backend = c.Backend
	case "":
		s.backend = "nvml"
	default:
		return nil, fmt.Errorf(`backend: must be "nvml" or "sim", got %q`, c.Backend)
	}
	if c.Backend == "sim" {
		if c.Sim.FleetFile == "" {
			return nil, fmt.Errorf(`sim.fleet_file: is required when backend = "sim"`)
		}
		if c.Sim.StateDir == "" {
			return nil, fmt.Errorf(`sim.state_dir: is required when backend = "sim"`)
		}
	}
	period := c.FingerprintPeriod
	if period == "" {
		period = "30s"
	}
	d, err := time.ParseDuration(period)
	if err != nil {
		return nil, fmt.Errorf("fingerprint_period: %q is not a duration such as \"30s\": %v", period, err)
	}
	if d < 100*time.Millisecond {
		return nil, fmt.Errorf("fingerprint_period: must be at least 100ms, got %s", d)
	}
	s.fingerprintPeriod = d
	if c.MetricsAddress != "" {
		if _, port, err := net.SplitHostPort(c.MetricsAddress); err != nil || port == "" {
			return nil, fmt.Errorf("metrics_address: %q is not a host:port such as \"127.0.0.1:9101\"", c.MetricsAddress)
		}
		s.metricsAddress = c.MetricsAddress
	}
	for i, id := range c.IgnoredGPUIDs {
		if strings.TrimSpace(id) == "" {
			return nil, fmt.Errorf("ignored_gpu_ids[%d]: must not be empty", i)
		}
		s.ignored[id] = true
	}
	for i, p := range c.Partitions {
		r, err := p.validate()
		if err != nil {
			return nil, fmt.Errorf("partition[%d].%w", i, err)
		}
		s.rules = append(s.rules, r)
	}
	if c.MPS.Enabled {
		switch c.MPS.Mode {
		case "", MPSSupervise:
			s.mps.Mode = MPSSupervise
		case MPSExternal:
		default:
			return nil, fmt.Errorf(`mps.mode: must be "supervise" or "external", got %q`, c.MPS.Mode)
		}
		if s.mps.PipeDir == "" || !strings.HasPrefix(s.mps.PipeDir, "/") {
			return nil, fmt.Errorf("mps.pipe_dir: must be an absolute path, got %q", s.mps.PipeDir)
		}
		if s.mps.TaskPipeDir != "" && !strings.HasPrefix(s.mps.TaskPipeDir, "/") {
			return nil, fmt.Errorf("mps.task_pipe_dir: must be an absolute path, got %q", s.mps.TaskPipeDir)
		}
		if s.mps.Mode == MPSSupervise && s.mps.ControlBin == "" {
			return nil, fmt.Errorf("mps.control_bin: must not be empty")
		}
		switch s.mps.ComputeMode {
		case "":
			s.mps.ComputeMode = MPSComputeExclusive
		case MPSComputeExclusive, MPSComputeUnchanged:
		default:
			return nil, fmt.Errorf(`mps.compute_mode: must be %q or %q, got %q`, MPSComputeExclusive, MPSComputeUnchanged, s.mps.ComputeMode)
		}
	}
	return s, nil
}

// validate checks one partition rule. Errors start with the field name so the
// caller can prefix the rule's position.
func (p PartitionRule) validate() (rule, error) {
	r := rule{model: p.Model, uuid: p.UUID, lanes: p.Lanes, slots: p.Slots}
	switch {
	case p.Model == "" && p.UUID == "":
		return r, fmt.Errorf("model: one of model (a glob) or uuid is required")
	case p.Model != "" && p.UUID != "":
		return r, fmt.Errorf("model: give model or uuid, not both")
	}
	for name, pattern := range map[string]string{"model": p.Model, "uuid": p.UUID} {
		if _, err := path.Match(pattern, ""); err != nil {
			return r, fmt.Errorf("%s: %q is not a valid glob: %v", name, pattern, err)
		}
	}
	switch {
	case p.Lanes == 0 && p.LaneMemory == "":
		return r, fmt.Errorf("lanes: one of lanes or lane_memory is required")
	case p.Lanes != 0 && p.LaneMemory != "":
		return r, fmt.Errorf("lanes: give lanes or lane_memory, not both")
	case p.Lanes < 0 || p.Lanes > maxLanes:
		return r, fmt.Errorf("lanes: must be between 1 and %d, got %d", maxLanes, p.Lanes)
	}
	if p.LaneMemory != "" {
		mib, err := gpu.ParseMemoryMiB(p.LaneMemory)
		if err != nil {
			return r, fmt.Errorf("lane_memory: %v", err)
		}
		if mib == 0 {
			return r, fmt.Errorf("lane_memory: must be more than 0")
		}
		r.laneMemoryMiB = mib
	}
	if p.ReservedMemory != "" {
		mib, err := gpu.ParseMemoryMiB(p.ReservedMemory)
		if err != nil {
			return r, fmt.Errorf("reserved_memory: %v", err)
		}
		r.reservedMemoryMiB = mib
	}
	switch {
	case p.Slots == 0:
		r.slots = 1
	case p.Slots < 0 || p.Slots > maxSlots:
		return r, fmt.Errorf("slots: must be between 1 and %d, got %d", maxSlots, p.Slots)
	}
	return r, nil
}

const (
	maxLanes = 64
	maxSlots = 64
)
