// Package plugin is the caravan Nomad task driver: identity, config specs and
// capabilities here; the lifecycle in driver.go.
package plugin

import (
	"strconv"

	"github.com/hashicorp/nomad/plugins/base"
	"github.com/hashicorp/nomad/plugins/drivers"
	"github.com/hashicorp/nomad/plugins/drivers/fsisolation"
	"github.com/hashicorp/nomad/plugins/shared/hclspec"
)

const (
	// Name is the driver name jobspecs use: driver = "caravan".
	Name = "caravan"
	// Version is the plugin version.
	Version = "0.1.0"
)

var pluginInfo = &base.PluginInfoResponse{
	Type:              base.PluginTypeDriver,
	PluginApiVersions: []string{drivers.ApiVersion010},
	PluginVersion:     Version,
	Name:              Name,
}

// configSpec is the plugin block of the Nomad client config.
var configSpec = hclspec.NewObject(map[string]*hclspec.Spec{
	"allow_root": hclspec.NewDefault(hclspec.NewAttr("allow_root", "bool", false), hclspec.NewLiteral("false")),
	"default_user": hclspec.NewDefault(hclspec.NewAttr("default_user", "string", false),
		hclspec.NewLiteral(`"nobody"`)),
	"dynamic_users": hclspec.NewDefault(hclspec.NewAttr("dynamic_users", "bool", false), hclspec.NewLiteral("true")),
	"uid_range": hclspec.NewDefault(hclspec.NewAttr("uid_range", "string", false),
		hclspec.NewLiteral(strconv.Quote(DefaultUIDRange))),
	"gpu_backend": hclspec.NewDefault(hclspec.NewAttr("gpu_backend", "string", false), hclspec.NewLiteral(`"auto"`)),
	"state_dir": hclspec.NewDefault(hclspec.NewAttr("state_dir", "string", false),
		hclspec.NewLiteral(strconv.Quote(DefaultStateDir))),
	"sim": hclspec.NewBlock("sim", false, hclspec.NewObject(map[string]*hclspec.Spec{
		"fleet_file": hclspec.NewAttr("fleet_file", "string", false),
		"state_dir":  hclspec.NewAttr("state_dir", "string", false),
	})),
	"budget_policy": hclspec.NewDefault(hclspec.NewAttr("budget_policy", "string", false), hclspec.NewLiteral(`"kill"`)),
	"watchdog_interval": hclspec.NewDefault(hclspec.NewAttr("watchdog_interval", "string", false),
		hclspec.NewLiteral(`"500ms"`)),
	"mps":                hclspec.NewDefault(hclspec.NewAttr("mps", "string", false), hclspec.NewLiteral(`"auto"`)),
	"mps_pipe_directory": hclspec.NewAttr("mps_pipe_directory", "string", false),
	"mps_control_bin":    hclspec.NewDefault(hclspec.NewAttr("mps_control_bin", "string", false), hclspec.NewLiteral(`"nvidia-cuda-mps-control"`)),
	"switch_mechanism": hclspec.NewDefault(hclspec.NewAttr("switch_mechanism", "string", false),
		hclspec.NewLiteral(`"auto"`)),
	"cuda_checkpoint_path": hclspec.NewAttr("cuda_checkpoint_path", "string", false),
	"time_slice_quantum": hclspec.NewDefault(hclspec.NewAttr("time_slice_quantum", "string", false),
		hclspec.NewLiteral(`"10s"`)),
	"iteration_grace": hclspec.NewDefault(hclspec.NewAttr("iteration_grace", "string", false),
		hclspec.NewLiteral(`"2s"`)),
	"measure_iterations": hclspec.NewDefault(hclspec.NewAttr("measure_iterations", "number", false),
		hclspec.NewLiteral("3")),
	"metrics_address": hclspec.NewAttr("metrics_address", "string", false),
})

// taskConfigSpec is the config block of a task with driver = "caravan".
var taskConfigSpec = hclspec.NewObject(map[string]*hclspec.Spec{
	"command":           hclspec.NewAttr("command", "string", true),
	"args":              hclspec.NewAttr("args", "list(string)", false),
	"work_dir":          hclspec.NewAttr("work_dir", "string", false),
	"gpu_memory":        hclspec.NewAttr("gpu_memory", "string", false),
	"gpu_memory_policy": hclspec.NewAttr("gpu_memory_policy", "string", false),
	"gpu_processes":     hclspec.NewDefault(hclspec.NewAttr("gpu_processes", "number", false), hclspec.NewLiteral("1")),
	"memory_profile": hclspec.NewBlock("memory_profile", false, hclspec.NewObject(map[string]*hclspec.Spec{
		"persistent": hclspec.NewAttr("persistent", "string", false),
		"ephemeral":  hclspec.NewAttr("ephemeral", "string", false),
	})),
	"framework_hints": hclspec.NewDefault(hclspec.NewAttr("framework_hints", "bool", false), hclspec.NewLiteral("true")),
})

var capabilities = &drivers.Capabilities{
	SendSignals: true,
	Exec:        true,
	FSIsolation: fsisolation.None,
	NetIsolationModes: []drivers.NetIsolationMode{
		drivers.NetIsolationModeHost,
		drivers.NetIsolationModeGroup,
	},
	MountConfigs: drivers.MountConfigSupportNone,
}
