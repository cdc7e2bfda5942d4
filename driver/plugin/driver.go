package plugin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/consul-template/signals"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/client/lib/cgroupslib"
	"github.com/hashicorp/nomad/client/lib/cpustats"
	"github.com/hashicorp/nomad/client/lib/numalib"
	"github.com/hashicorp/nomad/drivers/shared/eventer"
	"github.com/hashicorp/nomad/plugins/base"
	"github.com/hashicorp/nomad/plugins/drivers"
	"github.com/hashicorp/nomad/plugins/shared/hclspec"
	pstructs "github.com/hashicorp/nomad/plugins/shared/structs"

	"github.com/caravan-gpu/caravan/driver/lane"
	"github.com/caravan-gpu/caravan/driver/metrics"
	"github.com/caravan-gpu/caravan/driver/switcher"
	"github.com/caravan-gpu/caravan/driver/task"
	"github.com/caravan-gpu/caravan/gpu"
	"github.com/caravan-gpu/caravan/internal/safefile"
)

// Driver is the caravan task driver.
type Driver struct {
	ctx     context.Context
	logger  hclog.Logger
	eventer *eventer.Eventer
	tasks   *task.Store

	metrics *metrics.Metrics

	mu          sync.RWMutex
	settings    *settings
	nomadConfig *base.ClientDriverConfig
	compute     cpustats.Compute
	backend     gpu.Backend
	backendErr  error
	noBackend   string // why there is no backend, when none was wanted or found
	coord       *lane.Coordinator
	switchWhy   string
	metricsSrv  *http.Server

	// recoveryEvents holds each recovered task's events, its recovery
	// first, until Nomad waits on the task: while a client restores its
	// allocations it has no handler for task events yet and drops them,
	// and a recovered task's lanes and watchdog act at once.
	recoveryEvents sync.Map // task ID → *heldEvents
	// laneStateMu serialises the writes of tasks' lane state files.
	laneStateMu sync.Mutex
	// uids are the UIDs of uid_range that allocations hold.
	uids uidLeases
}

var _ drivers.DriverPlugin = (*Driver)(nil)

// New returns a driver. ctx ends the driver's background work.
func New(ctx context.Context, logger hclog.Logger) *Driver {
	logger = logger.Named(Name)
	s, _ := defaultConfig().parse()
	d := &Driver{
		ctx:      ctx,
		logger:   logger,
		eventer:  eventer.NewEventer(ctx, logger),
		tasks:    task.NewStore(),
		settings: s,
		metrics:  metrics.New(),
	}
	d.metrics.WatchLanes(d.taskLanes)
	return d
}

func (d *Driver) PluginInfo() (*base.PluginInfoResponse, error) { return pluginInfo, nil }

func (d *Driver) ConfigSchema() (*hclspec.Spec, error) { return configSpec, nil }

func (d *Driver) TaskConfigSchema() (*hclspec.Spec, error) { return taskConfigSpec, nil }

// Capabilities are the driver's; with dynamic_users the Nomad client gives
// a task that names no user a UID of its own.
func (d *Driver) Capabilities() (*drivers.Capabilities, error) {
	s, _, _ := d.config()
	caps := *capabilities
	caps.DynamicWorkloadUsers = s.DynamicUsers
	return &caps, nil
}

func (d *Driver) SetConfig(cfg *base.Config) error {
	conf := defaultConfig()
	if len(cfg.PluginConfig) != 0 {
		if err := base.MsgPackDecode(cfg.PluginConfig, &conf); err != nil {
			return fmt.Errorf("caravan-driver config: %w", err)
		}
	}
	s, err := conf.parse()
	if err != nil {
		return fmt.Errorf("caravan-driver config: %w", err)
	}
	for _, dir := range []string{laneStateDir(s.StateDir), executorLogDir(s.StateDir), uidLeaseDir(s.StateDir)} {
		if err := safefile.PrivateDir(dir); err != nil {
			return fmt.Errorf("caravan-driver config: state_dir: %w", err)
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.settings = s
	if cfg.AgentConfig != nil && cfg.AgentConfig.Driver != nil {
		d.nomadConfig = cfg.AgentConfig.Driver
	}
	if d.nomadConfig == nil || d.nomadConfig.Topology == nil {
		// Outside a Nomad client (tests) nobody hands us the topology.
		d.nomadConfig = &base.ClientDriverConfig{Topology: numalib.Scan(numalib.PlatformScanners(true))}
	}
	d.compute = d.nomadConfig.Topology.Compute()

	// A backend that fails to open makes the driver unhealthy rather than
	// failing SetConfig, so the fingerprint can say what is wrong.
	if d.backend != nil {
		_ = d.backend.Close()
	}
	d.backend, d.noBackend, d.backendErr = openBackend(s, d.logger)
	if d.noBackend != "" {
		d.logger.Warn(unwatched(d.noBackend))
	}
	driverVersion := ""
	if d.backend != nil {
		driverVersion, _, _ = d.backend.Versions()
	}
	if c, ok := d.backend.(interface{ EnableCheckpoint(cliPath string) }); ok && s.SwitchMechanism != "freeze" && s.SwitchMechanism != "sigstop" {
		c.EnableCheckpoint(s.CUDACheckpointPath)
	}
	choice, err := switcher.Select(s.SwitchMechanism, d.backend, driverVersion)
	if err != nil {
		return fmt.Errorf("caravan-driver config: %w", err)
	}
	d.switchWhy = choice.Reason
	if d.coord == nil {
		d.coord = lane.New(d.ctx, lane.Options{
			Mechanism: choice.Mechanism, Quantum: s.quantum, IterationGrace: s.iterationGrace,
			MeasureIterations: s.MeasureIterations, Logger: d.logger.Named("lane"), FreeMiB: d.gpuFreeMiB,
			Hooks: lane.Hooks{Event: d.laneEvent, Switched: d.metrics.ObserveSwitch, ResumeFailed: d.resumeFailed, Evict: d.evictFromLane,
				Members: func(k lane.Key, n int) { d.metrics.SetLaneMembers(k.String(), n) }, Persist: d.persistLane},
		})
	}
	if s.MetricsAddress != "" && d.metricsSrv == nil {
		srv, addr, err := d.metrics.Serve(s.MetricsAddress)
		if err != nil {
			return fmt.Errorf("caravan-driver config: metrics_address: %w", err)
		}
		d.metricsSrv = srv
		d.logger.Info("serving Prometheus metrics", "address", addr.String())
	}
	return nil
}

func (d *Driver) config() (*settings, *base.ClientDriverConfig, cpustats.Compute) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.settings, d.nomadConfig, d.compute
}

func (d *Driver) gpuBackend() (gpu.Backend, error) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.backend, d.backendErr
}

// unenforced says why GPU memory budgets are not enforced on this node;
// empty when a backend watches them (or failed to open, which is an error).
func (d *Driver) unenforced() string {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.noBackend
}

func (d *Driver) Fingerprint(ctx context.Context) (<-chan *drivers.Fingerprint, error) {
	ch := make(chan *drivers.Fingerprint)
	go func() {
		defer close(ch)
		timer := time.NewTimer(0)
		defer timer.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-d.ctx.Done():
				return
			case <-timer.C:
				timer.Reset(fingerprintPeriod)
			}
			select {
			case ch <- d.buildFingerprint():
			case <-ctx.Done():
				return
			case <-d.ctx.Done():
				return
			}
		}
	}()
	return ch, nil
}

const fingerprintPeriod = 15 * time.Second

func (d *Driver) buildFingerprint() *drivers.Fingerprint {
	s, _, _ := d.config()
	d.mu.RLock()
	switchWhy := d.switchWhy
	mechanism, checkpointVia := "", ""
	if d.coord != nil {
		mechanism, checkpointVia = d.coord.Mechanism(), d.coord.CheckpointVia()
	}
	backendName := s.GPUBackend
	if d.backend != nil {
		backendName = d.backend.Name()
	} else if d.noBackend != "" {
		backendName = "none"
	}
	noBackend, enforced := d.noBackend, d.backend != nil
	d.mu.RUnlock()
	attrs := map[string]*pstructs.Attribute{
		"driver.caravan":                 pstructs.NewBoolAttribute(true),
		"driver.caravan.version":         pstructs.NewStringAttribute(Version),
		"driver.caravan.gpu_backend":     pstructs.NewStringAttribute(backendName),
		"driver.caravan.cgroups":         pstructs.NewStringAttribute(cgroupMode()),
		"driver.caravan.process_control": pstructs.NewStringAttribute(processControl()),
		"driver.caravan.mps":             pstructs.NewBoolAttribute(mpsActive(s)),
	}
	attrs["driver.caravan.budgets_enforced"] = pstructs.NewBoolAttribute(enforced)
	if mechanism != "" {
		attrs["driver.caravan.switch_mechanism"] = pstructs.NewStringAttribute(mechanism)
	}
	if checkpointVia != "" {
		attrs["driver.caravan.checkpoint_via"] = pstructs.NewStringAttribute(checkpointVia)
	}
	fp := &drivers.Fingerprint{Attributes: attrs, Health: drivers.HealthStateHealthy, HealthDescription: drivers.DriverHealthy}
	if switchWhy != "" {
		fp.HealthDescription = "healthy; switching: " + switchWhy
	}
	backend, err := d.gpuBackend()
	if err != nil {
		fp.Health, fp.HealthDescription = drivers.HealthStateUnhealthy, err.Error()
		return fp
	}
	if backend == nil {
		// Tasks still run, so the driver stays healthy, but says so loudly.
		fp.HealthDescription = "healthy; " + unwatched(noBackend)
		return fp
	}
	devs, err := backend.Devices()
	if err != nil {
		fp.Health, fp.HealthDescription = drivers.HealthStateUnhealthy, "GPU backend "+backend.Name()+": "+err.Error()
		return fp
	}
	healthy, sick := 0, []string{}
	for _, dev := range devs {
		if dev.MIGEnabled {
			continue
		}
		h, err := backend.Health(dev.UUID)
		if err == nil && h.Healthy {
			healthy++
		} else if err != nil {
			sick = append(sick, dev.UUID+": "+err.Error())
		} else {
			sick = append(sick, dev.UUID+": "+h.Reason)
		}
	}
	attrs["driver.caravan.gpus"] = pstructs.NewIntAttribute(int64(healthy+len(sick)), "")
	attrs["driver.caravan.gpus_healthy"] = pstructs.NewIntAttribute(int64(healthy), "")
	if drv, cuda, err := backend.Versions(); err == nil {
		attrs["driver.caravan.nvidia_driver"] = pstructs.NewStringAttribute(drv)
		attrs["driver.caravan.cuda"] = pstructs.NewStringAttribute(cuda)
	}
	if len(sick) > 0 {
		attrs["driver.caravan.unhealthy_gpus"] = pstructs.NewStringAttribute(strings.Join(sick, "; "))
	}
	if healthy == 0 && len(sick) > 0 {
		fp.Health, fp.HealthDescription = drivers.HealthStateUnhealthy, "no healthy GPU: "+strings.Join(sick, "; ")
	}
	return fp
}

// cgroupMode names the cgroups the executor will put tasks in; "off" means
// tasks run without CPU and memory limits.
func cgroupMode() string {
	switch cgroupslib.GetMode() {
	case cgroupslib.CG1:
		return "v1"
	case cgroupslib.CG2:
		return "v2"
	}
	return "off"
}

func (d *Driver) WaitTask(ctx context.Context, taskID string) (<-chan *drivers.ExitResult, error) {
	h, ok := d.tasks.Get(taskID)
	if !ok {
		return nil, drivers.ErrTaskNotFound
	}
	if held, ok := d.recoveryEvents.Load(taskID); ok {
		held.(*heldEvents).release(d.eventer, h.Logger)
	}
	ch := make(chan *drivers.ExitResult, 1)
	go func() {
		defer close(ch)
		select {
		case <-h.Done:
		case <-ctx.Done():
			return
		case <-d.ctx.Done():
			return
		}
		ch <- h.ExitResult()
	}()
	return ch, nil
}

func (d *Driver) StopTask(taskID string, timeout time.Duration, signal string) error {
	h, ok := d.tasks.Get(taskID)
	if !ok {
		return drivers.ErrTaskNotFound
	}
	// A suspended task must run again to receive its stop signal; one that
	// cannot be resumed would never act on it, so it is killed at once.
	if d.coord != nil {
		if err := d.coord.Leave(taskID); err != nil {
			h.Logger.Warn("the task could not be resumed to stop; killing it", "error", err)
			ctx, cancel := context.WithTimeout(d.ctx, killTimeout)
			if kerr := h.Procs.Kill(ctx); kerr != nil {
				h.Logger.Warn("killing the task's processes failed", "process_control", h.Procs.Method(), "error", kerr)
			}
			cancel()
			signal, timeout = "SIGKILL", 0
		}
	}
	if err := h.Exec.Shutdown(signal, timeout); err != nil {
		if h.PluginClient.Exited() {
			return nil
		}
		return fmt.Errorf("StopTask: executor shutdown: %w", err)
	}
	<-h.Done
	h.PluginClient.Kill()
	return nil
}

func (d *Driver) DestroyTask(taskID string, force bool) error {
	h, ok := d.tasks.Get(taskID)
	if !ok {
		return drivers.ErrTaskNotFound
	}
	if h.IsRunning() && !force {
		return errors.New("DestroyTask: task is still running; stop it first or force")
	}
	if d.coord != nil {
		d.coord.Leave(taskID)
	}
	if !h.PluginClient.Exited() {
		if err := h.Exec.Shutdown("", 0); err != nil {
			h.Logger.Error("destroying executor failed", "error", err)
		}
		h.PluginClient.Kill()
	}
	for _, g := range h.GPUUsage() {
		d.metrics.TaskGPUMemory.DeleteLabelValues(h.Config.AllocID, h.Config.Name, g.UUID)
		d.metrics.TaskGPUBudget.DeleteLabelValues(h.Config.AllocID, h.Config.Name, g.UUID)
	}
	forgetGrants(h)
	releaseDevices(h)
	d.tasks.Delete(taskID)
	s, _, _ := d.config()
	d.uids.release(s.uids, h.Config.AllocID, h.Spec.User)
	_ = os.Remove(executorLogPath(s.StateDir, h.Config))
	if h.LaneStateFile != "" {
		if err := os.Remove(h.LaneStateFile); err != nil && !errors.Is(err, os.ErrNotExist) {
			h.Logger.Warn("lane state file not removed", "path", h.LaneStateFile, "error", err)
		}
	}
	d.recoveryEvents.Delete(taskID)
	return nil
}

func (d *Driver) InspectTask(taskID string) (*drivers.TaskStatus, error) {
	h, ok := d.tasks.Get(taskID)
	if !ok {
		return nil, drivers.ErrTaskNotFound
	}
	return h.Status(), nil
}

func (d *Driver) TaskStats(ctx context.Context, taskID string, interval time.Duration) (<-chan *drivers.TaskResourceUsage, error) {
	h, ok := d.tasks.Get(taskID)
	if !ok {
		return nil, drivers.ErrTaskNotFound
	}
	// CPU and memory only: the driver protocol has no field for GPU figures,
	// which go to Prometheus instead (stats.go).
	return h.Exec.Stats(ctx, interval)
}

func (d *Driver) TaskEvents(ctx context.Context) (<-chan *drivers.TaskEvent, error) {
	return d.eventer.TaskEvents(ctx)
}

func (d *Driver) SignalTask(taskID string, signal string) error {
	h, ok := d.tasks.Get(taskID)
	if !ok {
		return drivers.ErrTaskNotFound
	}
	sig, ok := signals.SignalLookup[signal]
	if !ok {
		return fmt.Errorf("SignalTask: unknown signal %q", signal)
	}
	return h.Exec.Signal(sig)
}

func (d *Driver) ExecTask(taskID string, cmd []string, timeout time.Duration) (*drivers.ExecTaskResult, error) {
	if len(cmd) == 0 {
		return nil, errors.New("ExecTask: command is empty")
	}
	h, ok := d.tasks.Get(taskID)
	if !ok {
		return nil, drivers.ErrTaskNotFound
	}
	cmd, err := execCommand(h, cmd)
	if err != nil {
		return nil, err
	}
	out, code, err := h.Exec.Exec(time.Now().Add(timeout), cmd[0], cmd[1:])
	if err != nil {
		return nil, err
	}
	return &drivers.ExecTaskResult{Stdout: out, ExitResult: &drivers.ExitResult{ExitCode: code}}, nil
}

var _ drivers.ExecTaskStreamingRawDriver = (*Driver)(nil)

func (d *Driver) ExecTaskStreamingRaw(ctx context.Context, taskID string, command []string, tty bool, stream drivers.ExecTaskStream) error {
	if len(command) == 0 {
		return errors.New("exec: command is empty")
	}
	h, ok := d.tasks.Get(taskID)
	if !ok {
		return drivers.ErrTaskNotFound
	}
	command, err := execCommand(h, command)
	if err != nil {
		return err
	}
	return h.Exec.ExecStreaming(ctx, command, tty, stream)
}

// execCommand is the command an exec session into the task runs: as the
// task's dynamic workload user, if it has one, rather than as root, which
// the executor would run it as.
func execCommand(h *task.Handle, cmd []string) ([]string, error) {
	_, _, dynamicUID := dynamicUser(h.Spec.User)
	if !dynamicUID && h.DevicesCgroup == "" {
		return cmd, nil
	}
	cred, ok := taskCredential(h.Spec.User)
	if !ok {
		return cmd, nil
	}
	// An exec session is held to the task's devices too (v1; on v2 the
	// executor puts it in the task's cgroup).
	return runAsCommand(cred, h.Config.TaskDir().Dir, h.DevicesCgroup, cmd)
}
