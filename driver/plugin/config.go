package plugin

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/caravan-gpu/caravan/gpu/mpsctl"
)

// Config is the plugin block of the Nomad client config.
type Config struct {
	// AllowRoot lets tasks run as root (uid 0); off by default.
	AllowRoot bool `codec:"allow_root"`
	// DefaultUser runs tasks that name no user when neither the Nomad
	// client (DynamicUsers) nor UIDRange gives them a UID of their own.
	DefaultUser string `codec:"default_user"`
	// DynamicUsers asks the Nomad client for a UID of its own for every
	// task that names no user (a dynamic workload user, "nomad-<id>").
	DynamicUsers bool `codec:"dynamic_users"`
	// UIDRange ("MIN-MAX") is where the driver takes a UID of its own for
	// each allocation whose tasks name no user and get no dynamic user from
	// the client; empty: such tasks run as DefaultUser, all as one user.
	UIDRange string `codec:"uid_range"`
	// GPUBackend is "auto" (NVML when libnvidia-ml loads, else none),
	// "nvml", "sim" or "none".
	GPUBackend string `codec:"gpu_backend"`
	// StateDir holds what the driver reads back after a restart (lane
	// states): root's alone, never a task's directory, which the task could
	// forge.
	StateDir string    `codec:"state_dir"`
	Sim      SimConfig `codec:"sim"`
	// BudgetPolicy is the watchdog's default action on a breach: kill or warn.
	BudgetPolicy     string `codec:"budget_policy"`
	WatchdogInterval string `codec:"watchdog_interval"`
	// MPS is "auto" (use MPS limits when a control daemon is running),
	// "on" or "off".
	MPS              string `codec:"mps"`
	MPSPipeDirectory string `codec:"mps_pipe_directory"`
	// MPSControlBin is the control program through which each task's MPS
	// server gets its limits.
	MPSControlBin string `codec:"mps_control_bin"`
	// SwitchMechanism is "auto", "cuda-checkpoint" or "freeze" ("sigstop",
	// its former name, is still accepted).
	SwitchMechanism string `codec:"switch_mechanism"`
	// CUDACheckpointPath is the cuda-checkpoint utility the nvml backend
	// falls back to where libcuda lacks the checkpoint API.
	CUDACheckpointPath string `codec:"cuda_checkpoint_path"`
	TimeSliceQuantum   string `codec:"time_slice_quantum"`
	// IterationGrace is how long past its quantum a cooperating task may run
	// to reach an iteration boundary before it is suspended anyway.
	IterationGrace    string `codec:"iteration_grace"`
	MeasureIterations int    `codec:"measure_iterations"`
	MetricsAddress    string `codec:"metrics_address"`
}

// SimConfig points the simulated backend at its fleet and shared state.
type SimConfig struct {
	FleetFile string `codec:"fleet_file"`
	StateDir  string `codec:"state_dir"`
}

// settings is Config validated and parsed.
type settings struct {
	Config
	uids             uidRange
	watchdogInterval time.Duration
	quantum          time.Duration
	iterationGrace   time.Duration
}

// DefaultUIDRange is uid_range when the plugin config names none: below
// the Nomad client's default pool of dynamic workload users (80000-89999).
const DefaultUIDRange = "70000-79999"

// DefaultStateDir is state_dir when the plugin config names none.
const DefaultStateDir = "/var/lib/caravan/driver"

func defaultConfig() Config {
	return Config{
		DefaultUser: "nobody", DynamicUsers: true, UIDRange: DefaultUIDRange, GPUBackend: "auto", StateDir: DefaultStateDir, BudgetPolicy: "kill",
		WatchdogInterval: "500ms", MPS: "auto", MPSControlBin: mpsctl.DefaultControlBin, SwitchMechanism: "auto",
		TimeSliceQuantum: "10s", IterationGrace: "2s", MeasureIterations: 3,
	}
}

// withDefaults fills fields left empty, as hclspec defaults do for a
// Nomad agent, so that configs built in code behave the same.
func (c Config) withDefaults() Config {
	d := defaultConfig()
	fill := func(v *string, def string) {
		if *v == "" {
			*v = def
		}
	}
	fill(&c.DefaultUser, d.DefaultUser)
	fill(&c.GPUBackend, d.GPUBackend)
	fill(&c.StateDir, d.StateDir)
	fill(&c.UIDRange, d.UIDRange)
	fill(&c.BudgetPolicy, d.BudgetPolicy)
	fill(&c.WatchdogInterval, d.WatchdogInterval)
	fill(&c.MPS, d.MPS)
	fill(&c.MPSControlBin, d.MPSControlBin)
	fill(&c.SwitchMechanism, d.SwitchMechanism)
	fill(&c.TimeSliceQuantum, d.TimeSliceQuantum)
	fill(&c.IterationGrace, d.IterationGrace)
	if c.MeasureIterations == 0 {
		c.MeasureIterations = d.MeasureIterations
	}
	return c
}

func (c Config) parse() (*settings, error) {
	c = c.withDefaults()
	s := &settings{Config: c}
	var err error
	switch c.GPUBackend {
	case "auto", "none", "nvml":
	case "sim":
		if c.Sim.FleetFile == "" {
			return nil, fmt.Errorf(`sim.fleet_file: is required when gpu_backend = "sim"`)
		}
		if c.Sim.StateDir == "" {
			return nil, fmt.Errorf(`sim.state_dir: is required when gpu_backend = "sim"`)
		}
		if !filepath.IsAbs(c.Sim.FleetFile) || !filepath.IsAbs(c.Sim.StateDir) {
			return nil, fmt.Errorf("sim: fleet_file and state_dir must be absolute paths")
		}
	default:
		return nil, fmt.Errorf(`gpu_backend: must be "auto", "nvml", "sim" or "none", got %q`, c.GPUBackend)
	}
	if !filepath.IsAbs(c.StateDir) {
		return nil, fmt.Errorf("state_dir: must be an absolute path, got %q", c.StateDir)
	}
	if c.DefaultUser == "" {
		return nil, fmt.Errorf("default_user: must not be empty")
	}
	if s.uids, err = parseUIDRange(c.UIDRange); err != nil {
		return nil, err
	}
	if _, err := parsePolicy("budget_policy", c.BudgetPolicy); err != nil {
		return nil, err
	}
	if s.watchdogInterval, err = positiveDuration("watchdog_interval", c.WatchdogInterval); err != nil {
		return nil, err
	}
	if s.quantum, err = positiveDuration("time_slice_quantum", c.TimeSliceQuantum); err != nil {
		return nil, err
	}
	if s.iterationGrace, err = nonNegativeDuration("iteration_grace", c.IterationGrace); err != nil {
		return nil, err
	}
	switch c.MPS {
	case "auto", "on", "off":
	default:
		return nil, fmt.Errorf(`mps: must be "auto", "on" or "off", got %q`, c.MPS)
	}
	switch c.SwitchMechanism {
	case "auto", "cuda-checkpoint", "freeze", "sigstop":
	default:
		return nil, fmt.Errorf(`switch_mechanism: must be "auto", "cuda-checkpoint" or "freeze", got %q`, c.SwitchMechanism)
	}
	if c.MeasureIterations < 1 || c.MeasureIterations > 1000 {
		return nil, fmt.Errorf("measure_iterations: must be between 1 and 1000, got %d", c.MeasureIterations)
	}
	return s, nil
}

func positiveDuration(field, v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a duration such as \"500ms\" or \"10s\"", field, v)
	}
	if d <= 0 {
		return 0, fmt.Errorf("%s: must be positive, got %s", field, v)
	}
	return d, nil
}

func nonNegativeDuration(field, v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a duration such as \"2s\"", field, v)
	}
	if d < 0 {
		return 0, fmt.Errorf("%s: must not be negative, got %s", field, v)
	}
	return d, nil
}

// TaskConfig is the config block of a task.
type TaskConfig struct {
	Command         string        `codec:"command"`
	Args            []string      `codec:"args"`
	WorkDir         string        `codec:"work_dir"`
	GPUMemory       string        `codec:"gpu_memory"`
	GPUMemoryPolicy string        `codec:"gpu_memory_policy"`
	GPUProcesses    int           `codec:"gpu_processes"`
	MemoryProfile   MemoryProfile `codec:"memory_profile"`
	FrameworkHints  bool          `codec:"framework_hints"`
}

// MemoryProfile is a task's declared GPU memory profile (Salus): memory held
// for the whole run, and memory that comes and goes within an iteration.
type MemoryProfile struct {
	Persistent string `codec:"persistent"`
	Ephemeral  string `codec:"ephemeral"`
}

func (tc TaskConfig) validate() error {
	if tc.Command == "" {
		return fmt.Errorf("command: is required")
	}
	if tc.WorkDir != "" && !filepath.IsAbs(tc.WorkDir) {
		return fmt.Errorf("work_dir: must be an absolute path, got %q", tc.WorkDir)
	}
	return nil
}

func parsePolicy(field, v string) (string, error) {
	switch v {
	case "kill", "warn":
		return v, nil
	}
	return "", fmt.Errorf(`%s: must be "kill" or "warn", got %q`, field, v)
}
