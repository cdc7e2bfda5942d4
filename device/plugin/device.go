// Package plugin is caravan-device, a Nomad device plugin that fingerprints
// NVIDIA GPUs (real through NVML, or simulated) and offers each one either
// whole or cut into lanes: slices of its memory with a share of its compute,
// each a device instance that Nomad schedules like any other.
package plugin

import (
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/caravan-gpu/caravan/device/metrics"
	"github.com/caravan-gpu/caravan/gpu"
	"github.com/caravan-gpu/caravan/gpu/backend"
	"github.com/caravan-gpu/caravan/gpu/reservation"
	log "github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/plugins/base"
	"github.com/hashicorp/nomad/plugins/device"
	"github.com/hashicorp/nomad/plugins/shared/hclspec"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Name is the plugin's name in the agent's plugin blocks.
const Name = "caravan-device"

// Version is the plugin's version.
var Version = "0.1.0"

var pluginInfo = &base.PluginInfoResponse{
	Type:              base.PluginTypeDevice,
	PluginApiVersions: []string{device.ApiVersion010},
	PluginVersion:     Version,
	Name:              Name,
}

// Device is the caravan-device plugin.
type Device struct {
	logger log.Logger
	// openBackend opens the configured GPU backend; tests replace it with
	// one built on go-nvml's mocks.
	openBackend func(*settings, log.Logger) (gpu.Backend, error)
	metrics     *metrics.Metrics

	mu        sync.Mutex
	settings  *settings
	backend   gpu.Backend
	mps       *mpsDaemon
	instances map[string]instance
	// metricsSrv serves /metrics once metrics_address is set; it lives as
	// long as the plugin, as the driver's does.
	metricsSrv *http.Server
}

var _ device.DevicePlugin = (*Device)(nil)

// New returns the plugin.
func New(logger log.Logger) *Device {
	return &Device{logger: logger.Named(Name), openBackend: openBackend, metrics: metrics.New()}
}

// openBackend opens the backend the config names: the device plugin's
// "nvml" fails where NVML does not load, so that a node meant to offer
// GPUs says why it offers none.
func openBackend(s *settings, logger log.Logger) (gpu.Backend, error) {
	b, _, err := backend.Open(backend.Config{Kind: s.backend, FleetFile: s.sim.FleetFile, StateDir: s.sim.StateDir}, logger)
	return b, err
}

// PluginInfo identifies the plugin.
func (d *Device) PluginInfo() (*base.PluginInfoResponse, error) { return pluginInfo, nil }

// ConfigSchema is the plugin block's schema.
func (d *Device) ConfigSchema() (*hclspec.Spec, error) { return configSpec, nil }

// SetConfig validates the plugin config. A simulated fleet is opened here so
// that a bad fleet file stops the agent with a clear error; NVML is opened at
// the first fingerprint, so a node without a GPU still starts.
func (d *Device) SetConfig(c *base.Config) error {
	var cfg Config
	if len(c.PluginConfig) > 0 {
		if err := base.MsgPackDecode(c.PluginConfig, &cfg); err != nil {
			return fmt.Errorf("caravan-device config: %w", err)
		}
	}
	s, err := cfg.validate()
	if err != nil {
		return fmt.Errorf("caravan-device config: %w", err)
	}
	var backend gpu.Backend
	if s.backend == "sim" {
		if backend, err = d.openBackend(s, d.logger); err != nil {
			return fmt.Errorf("caravan-device config: sim: %w", err)
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if s.metricsAddress != "" && d.metricsSrv == nil {
		srv, addr, err := d.metrics.Serve(s.metricsAddress)
		if err != nil {
			if backend != nil {
				_ = backend.Close()
			}
			return fmt.Errorf("caravan-device config: metrics_address: %w", err)
		}
		d.metricsSrv = srv
		d.logger.Info("serving Prometheus metrics", "address", addr.String())
	}
	if d.backend != nil {
		_ = d.backend.Close()
	}
	d.settings, d.backend, d.instances = s, backend, nil
	d.logger.Info("config set", "backend", s.backend, "fingerprint_period", s.fingerprintPeriod.String(),
		"partition_rules", len(s.rules), "mps", s.mps.Enabled)
	return nil
}

// state returns the settings and the backend, opening the backend on first
// use.
func (d *Device) state() (*settings, gpu.Backend, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.settings == nil {
		return nil, nil, errors.New("caravan-device: no config set")
	}
	if d.backend == nil {
		b, err := d.openBackend(d.settings, d.logger)
		if err != nil {
			return nil, nil, err
		}
		d.backend = b
	}
	return d.settings, d.backend, nil
}

func (d *Device) setInstances(insts []instance) {
	m := make(map[string]instance, len(insts))
	for _, in := range insts {
		m[in.id] = in
	}
	d.mu.Lock()
	d.instances = m
	d.mu.Unlock()
}

// currentInstances returns the last layout, computing it when Reserve comes
// before the first fingerprint (as after a plugin restart).
func (d *Device) currentInstances() (map[string]instance, *settings, error) {
	s, backend, err := d.state()
	if err != nil {
		return nil, nil, err
	}
	d.mu.Lock()
	m := d.instances
	d.mu.Unlock()
	if m != nil {
		return m, s, nil
	}
	devs, err := backend.Devices()
	if err != nil {
		return nil, nil, err
	}
	insts, _ := layout(devs, s)
	d.setInstances(insts)
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.instances, s, nil
}

// Reserve returns the environment (and, with MPS, the pipe mount) for the
// granted instances. Each instance gets its own CARAVAN_DEV_ variable, so two
// device blocks in one task never overwrite each other's grants.
func (d *Device) Reserve(ids []string) (*device.ContainerReservation, error) {
	if len(ids) == 0 {
		return &device.ContainerReservation{}, nil
	}
	insts, s, err := d.currentInstances()
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "caravan-device: %v", err)
	}
	grants := make([]reservation.Grant, 0, len(ids))
	for _, id := range ids {
		in, ok := insts[id]
		if !ok {
			return nil, status.Errorf(codes.InvalidArgument, "caravan-device: unknown device instance %q", id)
		}
		grants = append(grants, in.grant())
	}
	sort.Slice(grants, func(i, j int) bool { return grants[i].InstanceID < grants[j].InstanceID })
	if err := distinctGPUs(grants); err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "caravan-device: %v", err)
	}

	visible := reservation.VisibleDevices(grants)
	envs := map[string]string{
		"CUDA_VISIBLE_DEVICES":   visible,
		"NVIDIA_VISIBLE_DEVICES": visible,
	}
	for _, g := range grants {
		envs[g.EnvName()] = g.EnvValue()
	}
	res := &device.ContainerReservation{Envs: envs}
	// Without a daemon MPS settings would only point the task at a dead pipe.
	if s.mps.Enabled && d.mpsDown(s) == nil {
		addMPS(res, s.mps, grants, strings.Split(visible, ","))
	}
	return res, nil
}

// addMPS points the task at the MPS daemon and sets its client limits for the
// lanes granted: memory pinned per device and the smallest compute share.
func addMPS(res *device.ContainerReservation, cfg MPSConfig, grants []reservation.Grant, visible []string) {
	taskDir := cfg.TaskPipeDir
	if taskDir == "" {
		taskDir = cfg.PipeDir
	}
	res.Mounts = append(res.Mounts, &device.Mount{TaskPath: taskDir, HostPath: cfg.PipeDir})
	res.Envs["CUDA_MPS_PIPE_DIRECTORY"] = taskDir

	memByGPU := map[string]uint64{}
	share := 0
	lanes := false
	for _, g := range grants {
		if g.Lane < 0 {
			continue
		}
		lanes = true
		memByGPU[g.GPUUUID] += g.MemoryMiB
		if share == 0 || g.SharePercent < share {
			share = g.SharePercent
		}
	}
	if !lanes {
		return
	}
	var limits []string
	for i, uuid := range visible {
		if mib, ok := memByGPU[uuid]; ok {
			limits = append(limits, strconv.Itoa(i)+"="+strconv.FormatUint(mib, 10)+"M")
		}
	}
	res.Envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = strings.Join(limits, ",")
	res.Envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = strconv.Itoa(share)
}

// distinctGPUs refuses a reservation that puts two instances of one request
// on the same physical GPU: a request for N devices means N GPUs, and two
// lanes of one GPU would show the task a single GPU and one budget. Nomad
// picks a request's instances from a device group without regard to which
// GPU they are on, so this is where that is caught.
func distinctGPUs(grants []reservation.Grant) error {
	seen := map[string]string{}
	for _, g := range grants {
		if first, ok := seen[g.GPUUUID]; ok {
			return fmt.Errorf("a request for %d devices was given %s and %s, two lanes of GPU %s; "+
				"a request for N devices needs N distinct GPUs: ask for one lane per task (count = 1), "+
				"or for whole GPUs (device \"nvidia/gpu\")", len(grants), first, g.InstanceID, g.GPUUUID)
		}
		seen[g.GPUUUID] = g.InstanceID
	}
	return nil
}
