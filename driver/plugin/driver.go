package plugin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/consul-template/signals"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/client/lib/cgroupslib"
	"github.com/hashicorp/nomad/client/lib/cpustats"
	"github.com/hashicorp/nomad/client/lib/numalib"
	"github.com/hashicorp/nomad/drivers/shared/eventer"
	"github.com/hashicorp/nomad/drivers/shared/executor"
	"github.com/hashicorp/nomad/helper/users/dynamic"
	"github.com/hashicorp/nomad/plugins/base"
	"github.com/hashicorp/nomad/plugins/drivers"
	"github.com/hashicorp/nomad/plugins/shared/hclspec"
	pstructs "github.com/hashicorp/nomad/plugins/shared/structs"

	"github.com/caravan-gpu/caravan/device/gpu"
	"github.com/caravan-gpu/caravan/device/reservation"
	"github.com/caravan-gpu/caravan/driver/budget"
	"github.com/caravan-gpu/caravan/driver/devices"
	"github.com/caravan-gpu/caravan/driver/lane"
	"github.com/caravan-gpu/caravan/driver/metrics"
	"github.com/caravan-gpu/caravan/driver/proctree"
	"github.com/caravan-gpu/caravan/driver/runas"
	"github.com/caravan-gpu/caravan/driver/switcher"
	"github.com/caravan-gpu/caravan/driver/task"
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

// resolveUser picks the user a task runs as and refuses root unless the
// plugin config allows it. A Nomad dynamic workload user ("nomad-<id>",
// in no user database) is taken only with dynamic_users.
func resolveUser(s *settings, requested string) (string, error) {
	name := requested
	if name == "" {
		name = s.DefaultUser
	}
	u, err := user.Lookup(name)
	if err != nil {
		if u, err = user.LookupId(name); err != nil {
			ugid, perr := dynamic.Parse(name)
			switch {
			case perr != nil:
				return "", fmt.Errorf("user: %q is not a user on this node: %v", name, err)
			case !s.DynamicUsers:
				return "", fmt.Errorf("user: %q is a Nomad dynamic workload user, which the caravan-driver plugin config does not take (dynamic_users = false)", name)
			case ugid == 0:
				return "", fmt.Errorf("user: %q would be root", name)
			}
			return name, nil
		}
	}
	if u.Uid == "0" && !s.AllowRoot {
		return "", fmt.Errorf("user: tasks may not run as root (%q) unless the caravan-driver plugin config sets allow_root = true", name)
	}
	return name, nil
}

// dynamicUser returns the UID and GID of a Nomad dynamic workload user, which
// the executor cannot look up; ok is false for a user of the user database.
func dynamicUser(name string) (uid, gid int, ok bool) {
	if _, err := user.Lookup(name); err == nil {
		return 0, 0, false
	}
	ugid, err := dynamic.Parse(name)
	if err != nil || ugid == 0 {
		return 0, 0, false
	}
	return int(ugid), int(ugid), true
}

// runAsCommand wraps argv so that the executor, which runs it as root,
// drops to a dynamic workload user before argv runs (driver/runas).
func runAsCommand(cred runas.Credential, taskDir, devicesCgroup string, argv []string) ([]string, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find the driver's binary: %w", err)
	}
	return runas.CommandAs(self, cred, taskDir, devicesCgroup, argv), nil
}

// taskCredential is who a task of user runs as, numerically, and whether
// caravan-run-as can start it (any user but root: a dynamic workload user,
// or a user of the user database with its supplementary groups).
func taskCredential(name string) (runas.Credential, bool) {
	if uid, gid, ok := dynamicUser(name); ok {
		return runas.Credential{UID: uid, GID: gid}, true
	}
	u, err := user.Lookup(name)
	if err != nil {
		return runas.Credential{}, false
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err1 != nil || err2 != nil || uid <= 0 || gid <= 0 {
		return runas.Credential{}, false
	}
	cred := runas.Credential{UID: uid, GID: gid}
	ids, _ := u.GroupIds()
	for _, id := range ids {
		if g, err := strconv.Atoi(id); err == nil && g > 0 {
			cred.Groups = append(cred.Groups, g)
		}
	}
	return cred, true
}

func (d *Driver) StartTask(cfg *drivers.TaskConfig) (_ *drivers.TaskHandle, _ *drivers.DriverNetwork, err error) {
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
	runAs, err := d.taskUser(s, cfg)
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if err != nil {
			d.uids.release(s.uids, cfg.AllocID, runAs)
		}
	}()
	backend, backendErr := d.gpuBackend()
	spec, grants, err := planSpec(s, cfg, tc)
	if err != nil {
		return nil, nil, fmt.Errorf("caravan task config: %w", err)
	}
	if backendErr != nil && spec.Budget.Enforced() {
		return nil, nil, fmt.Errorf("cannot enforce the GPU memory budget: %w", backendErr)
	}
	spec.User = runAs
	if err = checkLogFIFOs(cfg); err != nil {
		return nil, nil, err
	}
	if spec.IterationFile, err = prepareIterationFile(cfg, runAs); err != nil {
		return nil, nil, fmt.Errorf("iteration file: %w", err)
	}
	env := budget.TaskEnv(cfg.Env, cfg.DeviceEnv, grants, spec.Budget, budget.EnvOptions{
		Watchdog: backend != nil, MPS: mpsActive(s), MPSPipeDirectory: s.MPSPipeDirectory,
		FrameworkHints: tc.FrameworkHints, DeviceMemoryMiB: deviceMemory(backend), DeviceModel: deviceModels(backend),
	})
	env[lane.IterationEnv] = spec.IterationFile
	if keys := spec.LaneKeys(); keys != "" {
		env["CARAVAN_LANE"] = keys
	}
	if s.GPUBackend == "sim" {
		env["CARAVAN_SIM_STATE_DIR"] = s.Sim.StateDir
	}

	handle := drivers.NewTaskHandle(task.HandleVersion)
	handle.Config = cfg
	logger := d.logger.With("alloc_id", cfg.AllocID, "task_name", cfg.Name)

	argv, envs, execUser := append([]string{tc.Command}, tc.Args...), envList(env), runAs
	_, _, runsAs := dynamicUser(runAs)
	cred, canJoin := taskCredential(runAs)
	// Before the command runs: a device it opened before the
	// restriction would stay open.
	iso, err := isolateDevices(backend, spec, cfg, canJoin)
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if err != nil && iso.v1Dir != "" {
			_ = devices.RemoveV1(iso.v1Dir)
		}
	}()
	mpsLimits, err := limitMPSServer(s, mpsServers(s), grants, spec.Budget, runAs)
	if err != nil {
		return nil, nil, err
	}
	if runsAs {
		// The executor looks users up in the user database, where a dynamic
		// workload user is not: it starts the driver's binary as root,
		// which joins the task's devices cgroup (v1), drops to the user and
		// runs the command.
		env["USER"], env["LOGNAME"], env["HOME"] = runAs, runAs, dynamic.Home
		if _, err = runas.Lookup(cfg.TaskDir().Dir, argv[0], envList(env)); err != nil {
			return nil, nil, fmt.Errorf("launch %s: %w", tc.Command, err)
		}
		if argv, err = runAsCommand(cred, cfg.TaskDir().Dir, iso.v1Dir, argv); err != nil {
			return nil, nil, err
		}
		envs, execUser = runas.Env(envList(env)), ""
	} else if iso.v1Dir != "" {
		// A user of the user database on cgroup v1: the executor would
		// start it outside the task's devices cgroup, which only root may
		// join, so it too starts through caravan-run-as, with its groups.
		if _, err = runas.Lookup(cfg.TaskDir().Dir, argv[0], envList(env)); err != nil {
			return nil, nil, fmt.Errorf("launch %s: %w", tc.Command, err)
		}
		if argv, err = runAsCommand(cred, cfg.TaskDir().Dir, iso.v1Dir, argv); err != nil {
			return nil, nil, err
		}
		envs, execUser = runas.Env(envList(env)), ""
	}

	exec, client, err := executor.CreateExecutor(logger, nomadConfig, &executor.ExecutorConfig{
		// Nomad's executor opens its log as root, following symlinks: not
		// in the task's directory, where the task could plant one.
		LogFile:  executorLogPath(s.StateDir, cfg),
		LogLevel: "debug",
		Compute:  compute,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("create executor: %w", err)
	}
	ps, err := exec.Launch(&executor.ExecCommand{
		Cmd:              argv[0],
		Args:             argv[1:],
		Env:              envs,
		User:             execUser,
		TaskDir:          cfg.TaskDir().Dir,
		WorkDir:          tc.WorkDir,
		StdoutPath:       cfg.StdoutPath,
		StderrPath:       cfg.StderrPath,
		NetworkIsolation: cfg.NetworkIsolation,
		Resources:        cfg.Resources.Copy(),
	})
	if err != nil {
		client.Kill()
		if strings.Contains(err.Error(), "cgroup") {
			err = fmt.Errorf("%w (driver.caravan.cgroups = %s: the host's cgroups are not usable by the executor)", err, cgroupMode())
		}
		return nil, nil, fmt.Errorf("launch %s: %w", tc.Command, err)
	}

	startedAt := time.Now().Round(time.Millisecond)
	procs, fallbackWhy := taskProcesses(taskCgroup(cfg), ps.Pid)
	h := task.NewHandle(exec, client, ps.Pid, procs, cfg, spec, startedAt, logger)
	if len(spec.AllLanes()) > 0 {
		h.LaneStateFile = laneStatePath(s.StateDir, cfg)
	}
	state := task.State{
		LaneStateFile:  h.LaneStateFile,
		ReattachConfig: pstructs.ReattachConfigFromGoPlugin(client.ReattachConfig()),
		TaskConfig:     cfg,
		Pid:            ps.Pid,
		Cgroup:         cgroupDir(procs),
		StartedAt:      startedAt,
		Spec:           spec,
	}
	if err := handle.SetDriverState(&state); err != nil {
		_ = exec.Shutdown("", 0)
		client.Kill()
		return nil, nil, fmt.Errorf("store driver state: %w", err)
	}
	if fallbackWhy != "" {
		d.emit(h, fallbackMessage(fallbackWhy), map[string]string{"process_control": procs.Method()}, nil)
	}
	recordGrants(h, grants)
	h.DevicesCgroup = iso.v1Dir
	d.adopt(h, backend, s, nil)
	if backend == nil {
		d.warnUnenforced(h, s)
	}
	d.describeIsolation(h, iso)
	if mpsLimits != "" {
		d.emit(h, mpsLimits, map[string]string{"mps": "server limits"}, nil)
	}
	d.warnMPSServesOneUID(h, cfg, runsAs)
	return handle, nil, nil
}

// adopt starts tracking a task that runs now: its exit, its budget and its
// lane.
func (d *Driver) adopt(h *task.Handle, backend gpu.Backend, s *settings, restored laneStates) {
	describe(h, d.unenforced())
	// The main process is judged at the task's exit even if no sample saw
	// it alive.
	if p, err := proctree.Read(h.Pid); err == nil {
		h.NoteProcs(map[int]string{h.Pid: mainProcName(h, p.Comm)}, processStart)
	}
	d.tasks.Set(h.Config.ID, h)
	go func() {
		h.Run(func() {
			d.killLeftovers(h)
			d.judgeAfterExit(h, backend)
		})
		if d.coord != nil {
			d.coord.Leave(h.Config.ID)
		}
	}()
	go d.watch(h, backend, s.watchdogInterval)
	d.joinLane(h, backend, restored)
}

// mainProcName names a task's main process for breach reports: while
// caravan-run-as has not yet exec'd the task's command, the process goes by
// the driver's name, so the command's is taken (as the kernel would show
// it, 15 bytes at most).
func mainProcName(h *task.Handle, comm string) string {
	if _, _, runsAs := dynamicUser(h.Spec.User); !runsAs {
		return comm
	}
	var tc TaskConfig
	if err := h.Config.DecodeDriverConfig(&tc); err != nil || tc.Command == "" {
		return comm
	}
	name := filepath.Base(tc.Command)
	if len(name) > 15 {
		name = name[:15]
	}
	return name
}

// describe puts the task's GPU spec and how its processes are reached in
// its InspectTask attributes. A budget that nothing enforces (unenforced
// says why) is not shown as one.
func describe(h *task.Handle, unenforced string) {
	h.SetAttr("caravan.process_control", h.Procs.Method())
	if unenforced != "" {
		h.SetAttr("caravan.budget", "not enforced: "+unenforced)
	} else {
		for _, g := range h.Spec.Budget.GPUs {
			h.SetAttr("caravan.budget."+g.UUID, strconv.FormatUint(g.LimitMiB, 10)+" MiB")
		}
		if h.Spec.Budget.Enforced() {
			h.SetAttr("caravan.budget_policy", string(h.Spec.Budget.Policy))
		}
	}
	if keys := h.Spec.LaneKeys(); keys != "" {
		h.SetAttr("caravan.lane", keys)
	}
}

func deviceMemory(b gpu.Backend) map[string]uint64 {
	if b == nil {
		return nil
	}
	devs, err := b.Devices()
	if err != nil {
		return nil
	}
	out := make(map[string]uint64, len(devs))
	for _, dev := range devs {
		out[dev.UUID] = dev.MemoryMiB
	}
	return out
}

func deviceModels(b gpu.Backend) map[string]string {
	if b == nil {
		return nil
	}
	devs, err := b.Devices()
	if err != nil {
		return nil
	}
	out := make(map[string]string, len(devs))
	for _, dev := range devs {
		out[dev.UUID] = dev.Model
	}
	return out
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
	s, _, compute := d.config()
	logger := d.logger.With("alloc_id", handle.Config.AllocID, "task_name", handle.Config.Name)
	exec, client, err := executor.ReattachToExecutor(rc, logger, compute)
	if err != nil {
		return fmt.Errorf("RecoverTask: reattach to executor: %w", err)
	}
	cfg := state.TaskConfig
	if cfg == nil {
		cfg = handle.Config
	}
	// A state from before the driver stored the cgroup names none: find it
	// as at the start.
	dir := state.Cgroup
	if dir == "" {
		dir = taskCgroup(cfg)
	}
	procs, fallbackWhy := taskProcesses(dir, state.Pid)
	// The budget comes from the stored state, never from the env again.
	h := task.NewHandle(exec, client, state.Pid, procs, cfg, state.Spec, state.StartedAt, logger)
	if err := d.uids.recover(s.uids, uidLeaseDir(s.StateDir), cfg.AllocID, cfg.AllocDir, h.Spec.User); err != nil {
		logger.Warn("cannot store the task's UID lease; another allocation could be given its UID after the next driver restart", "error", err)
	}
	h.DevicesCgroup = recoveredDevicesCgroup(cfg)
	backend, _ := d.gpuBackend()
	var restored laneStates
	var laneErr error
	if len(h.Spec.AllLanes()) > 0 {
		var distrusted bool
		h.LaneStateFile, distrusted = trustedLaneState(s.StateDir, cfg, state.LaneStateFile)
		if distrusted {
			laneErr = fmt.Errorf("the stored lane state %s is not in state_dir %s, where the driver keeps it; the task could have written it, so it is not believed", state.LaneStateFile, s.StateDir)
		} else {
			restored, laneErr = readLaneStates(h.LaneStateFile)
		}
	}
	if laneErr != nil {
		logger.Warn("lane state not recovered; the task rejoins its lanes afresh", "error", laneErr)
	}
	laneNote := ""
	if laneErr != nil && restored == nil {
		laneNote = "; lane state not recovered (" + laneErr.Error() + "): the task rejoins its lanes afresh"
	}
	// The processes themselves say whether they are frozen; the lane states
	// say which lanes have the task suspended, what is checkpointed and
	// whose turn it is.
	frozen, err := procs.Frozen()
	if err != nil {
		logger.Warn("cannot tell whether the recovered task is frozen", "error", err)
	}
	own, err := procs.PIDs()
	if err != nil {
		logger.Warn("cannot list the recovered task's processes", "error", err)
	}
	restored, suspended, checkpointed := recoveredLanes(h.Spec, restored, frozen, checkpointedNow(d.ctx, backend, restored, own, logger))
	if grants, err := reservation.FromEnv(cfg.DeviceEnv); err == nil {
		recordGrants(h, grants)
	}
	msg := fmt.Sprintf("recovered by a new driver process; budget re-attached (suspended: %v", suspended)
	if len(checkpointed) > 0 {
		msg += fmt.Sprintf(", checkpointed PIDs %v", checkpointed)
	}
	for _, spec := range h.Spec.AllLanes() {
		if st, ok := restored[spec.Key.String()]; ok && st.Mode != "" {
			msg += fmt.Sprintf(", lane %s mode %q, profile %s", spec.Key, st.Mode, st.Profile)
		}
	}
	msg += ")" + laneNote
	if fallbackWhy != "" {
		msg += "; " + fallbackMessage(fallbackWhy)
	}
	// Held before the task rejoins its lanes, so that a resume or a kill
	// at once comes after the recovery, and reaches Nomad.
	d.recoveryEvents.Store(handle.Config.ID, &heldEvents{})
	d.emit(h, msg, nil, nil)
	d.adopt(h, backend, s, restored)
	h.SetAttr("caravan.recovered", "true")
	return nil
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
