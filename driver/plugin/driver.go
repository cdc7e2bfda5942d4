package plugin

import (
	"context"
	"errors"
	"fmt"
	"os/user"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/consul-template/signals"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/client/lib/cpustats"
	"github.com/hashicorp/nomad/client/lib/numalib"
	"github.com/hashicorp/nomad/drivers/shared/eventer"
	"github.com/hashicorp/nomad/drivers/shared/executor"
	"github.com/hashicorp/nomad/plugins/base"
	"github.com/hashicorp/nomad/plugins/drivers"
	"github.com/hashicorp/nomad/plugins/shared/hclspec"
	pstructs "github.com/hashicorp/nomad/plugins/shared/structs"

	"github.com/caravan-gpu/caravan/driver/task"
)

// Driver is the caravan task driver.
type Driver struct {
	ctx     context.Context
	logger  hclog.Logger
	eventer *eventer.Eventer
	tasks   *task.Store

	mu          sync.RWMutex
	settings    *settings
	nomadConfig *base.ClientDriverConfig
	compute     cpustats.Compute
}

var _ drivers.DriverPlugin = (*Driver)(nil)

// New returns a driver. ctx ends the driver's background work.
func New(ctx context.Context, logger hclog.Logger) *Driver {
	logger = logger.Named(Name)
	s, _ := defaultConfig().parse()
	return &Driver{
		ctx:      ctx,
		logger:   logger,
		eventer:  eventer.NewEventer(ctx, logger),
		tasks:    task.NewStore(),
		settings: s,
	}
}

func (d *Driver) PluginInfo() (*base.PluginInfoResponse, error) { return pluginInfo, nil }

func (d *Driver) ConfigSchema() (*hclspec.Spec, error) { return configSpec, nil }

func (d *Driver) TaskConfigSchema() (*hclspec.Spec, error) { return taskConfigSpec, nil }

func (d *Driver) Capabilities() (*drivers.Capabilities, error) { return capabilities, nil }

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
	return nil
}

func (d *Driver) config() (*settings, *base.ClientDriverConfig, cpustats.Compute) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.settings, d.nomadConfig, d.compute
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
	return &drivers.Fingerprint{
		Attributes: map[string]*pstructs.Attribute{
			"driver.caravan":         pstructs.NewBoolAttribute(true),
			"driver.caravan.version": pstructs.NewStringAttribute(Version),
		},
		Health:            drivers.HealthStateHealthy,
		HealthDescription: drivers.DriverHealthy,
	}
}

// resolveUser picks the user a task runs as and refuses root unless the
// plugin config allows it.
func resolveUser(s *settings, requested string) (string, error) {
	name := requested
	if name == "" {
		name = s.DefaultUser
	}
	u, err := user.Lookup(name)
	if err != nil {
		if u, err = user.LookupId(name); err != nil {
			return "", fmt.Errorf("user: %q is not a user on this node: %v", name, err)
		}
	}
	if u.Uid == "0" && !s.AllowRoot {
		return "", fmt.Errorf("user: tasks may not run as root (%q) unless the caravan-driver plugin config sets allow_root = true", name)
	}
	return name, nil
}

func (d *Driver) StartTask(cfg *drivers.TaskConfig) (*drivers.TaskHandle, *drivers.DriverNetwork, error) {
	if _, ok := d.tasks.Get(cfg.ID); ok {
		return nil, nil, fmt.Errorf("task with ID %q already started", cfg.ID)
	}
	s, nomadConfig, compute := d.config()
	var tc TaskConfig
	if err := cfg.DecodeDriverConfig(&tc); err != nil {
		return nil, nil, fmt.Errorf("caravan task config: %w", err)
	}
	if err := tc.validate(); err != nil {
		return nil, nil, fmt.Errorf("caravan task config: %w", err)
	}
	runAs, err := resolveUser(s, cfg.User)
	if err != nil {
		return nil, nil, err
	}

	handle := drivers.NewTaskHandle(task.HandleVersion)
	handle.Config = cfg
	logger := d.logger.With("alloc_id", cfg.AllocID, "task_name", cfg.Name)

	exec, client, err := executor.CreateExecutor(logger, nomadConfig, &executor.ExecutorConfig{
		LogFile:  filepath.Join(cfg.TaskDir().Dir, "executor.out"),
		LogLevel: "debug",
		Compute:  compute,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("create executor: %w", err)
	}
	ps, err := exec.Launch(&executor.ExecCommand{
		Cmd:              tc.Command,
		Args:             tc.Args,
		Env:              envList(cfg.Env),
		User:             runAs,
		TaskDir:          cfg.TaskDir().Dir,
		WorkDir:          tc.WorkDir,
		StdoutPath:       cfg.StdoutPath,
		StderrPath:       cfg.StderrPath,
		NetworkIsolation: cfg.NetworkIsolation,
		Resources:        cfg.Resources.Copy(),
	})
	if err != nil {
		client.Kill()
		return nil, nil, fmt.Errorf("launch %s: %w", tc.Command, err)
	}

	startedAt := time.Now().Round(time.Millisecond)
	h := task.NewHandle(exec, client, ps.Pid, cfg, task.Spec{}, startedAt, logger)
	state := task.State{
		ReattachConfig: pstructs.ReattachConfigFromGoPlugin(client.ReattachConfig()),
		TaskConfig:     cfg,
		Pid:            ps.Pid,
		StartedAt:      startedAt,
	}
	if err := handle.SetDriverState(&state); err != nil {
		_ = exec.Shutdown("", 0)
		client.Kill()
		return nil, nil, fmt.Errorf("store driver state: %w", err)
	}
	d.tasks.Set(cfg.ID, h)
	go h.Run()
	return handle, nil, nil
}

func envList(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

func (d *Driver) RecoverTask(handle *drivers.TaskHandle) error {
	if handle == nil {
		return errors.New("RecoverTask: nil handle")
	}
	if _, ok := d.tasks.Get(handle.Config.ID); ok {
		return nil
	}
	var state task.State
	if err := handle.GetDriverState(&state); err != nil {
		return fmt.Errorf("RecoverTask: decode driver state: %w", err)
	}
	rc, err := pstructs.ReattachConfigToGoPlugin(state.ReattachConfig)
	if err != nil {
		return fmt.Errorf("RecoverTask: reattach config: %w", err)
	}
	_, _, compute := d.config()
	logger := d.logger.With("alloc_id", handle.Config.AllocID, "task_name", handle.Config.Name)
	exec, client, err := executor.ReattachToExecutor(rc, logger, compute)
	if err != nil {
		return fmt.Errorf("RecoverTask: reattach to executor: %w", err)
	}
	cfg := state.TaskConfig
	if cfg == nil {
		cfg = handle.Config
	}
	h := task.NewHandle(exec, client, state.Pid, cfg, state.Spec, state.StartedAt, logger)
	d.tasks.Set(cfg.ID, h)
	go h.Run()
	return nil
}

func (d *Driver) WaitTask(ctx context.Context, taskID string) (<-chan *drivers.ExitResult, error) {
	h, ok := d.tasks.Get(taskID)
	if !ok {
		return nil, drivers.ErrTaskNotFound
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
	if !h.PluginClient.Exited() {
		if err := h.Exec.Shutdown("", 0); err != nil {
			h.Logger.Error("destroying executor failed", "error", err)
		}
		h.PluginClient.Kill()
	}
	d.tasks.Delete(taskID)
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
	return h.Exec.ExecStreaming(ctx, command, tty, stream)
}
