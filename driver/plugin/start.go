package plugin

// This file starts a task, and takes one back after a driver restart.

import (
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	goplugin "github.com/hashicorp/go-plugin"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/client/lib/cpustats"
	"github.com/hashicorp/nomad/drivers/shared/executor"
	"github.com/hashicorp/nomad/helper/users/dynamic"
	"github.com/hashicorp/nomad/plugins/base"
	"github.com/hashicorp/nomad/plugins/drivers"
	pstructs "github.com/hashicorp/nomad/plugins/shared/structs"

	"github.com/caravan-gpu/caravan/driver/budget"
	"github.com/caravan-gpu/caravan/driver/devices"
	"github.com/caravan-gpu/caravan/driver/lane"
	"github.com/caravan-gpu/caravan/driver/proctree"
	"github.com/caravan-gpu/caravan/driver/runas"
	"github.com/caravan-gpu/caravan/driver/task"
	"github.com/caravan-gpu/caravan/gpu"
	"github.com/caravan-gpu/caravan/gpu/reservation"
)

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
	env := taskEnv(s, cfg, tc, grants, spec, backend)

	handle := drivers.NewTaskHandle(task.HandleVersion)
	handle.Config = cfg
	logger := d.logger.With("alloc_id", cfg.AllocID, "task_name", cfg.Name)

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
	argv, envs, execUser, err := commandLine(cfg, tc, env, runAs, cred, runsAs, iso.v1Dir)
	if err != nil {
		return nil, nil, err
	}

	exec, client, ps, err := launch(s, cfg, tc, nomadConfig, compute, argv, envs, execUser, logger)
	if err != nil {
		return nil, nil, err
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

// commandLine is how the executor starts the task's command: as runAs
// itself, or through caravan-run-as where the executor cannot, for a
// dynamic workload user or where the task's devices cgroup (v1, v1Dir) is
// one only root may join. cred is runAs's, as StartTask read it once.
func commandLine(cfg *drivers.TaskConfig, tc TaskConfig, env map[string]string, runAs string, cred runas.Credential, runsAs bool, v1Dir string) (argv, envs []string, execUser string, err error) {
	argv, envs, execUser = append([]string{tc.Command}, tc.Args...), envList(env), runAs
	if runsAs {
		// The executor looks users up in the user database, where a dynamic
		// workload user is not: it starts the driver's binary as root,
		// which joins the task's devices cgroup (v1), drops to the user and
		// runs the command.
		env["USER"], env["LOGNAME"], env["HOME"] = runAs, runAs, dynamic.Home
	}
	if runsAs || v1Dir != "" {
		// A user of the user database on cgroup v1 too: the executor would
		// start it outside the task's devices cgroup, which only root may
		// join, so it too starts through caravan-run-as, with its groups.
		if _, err = runas.Lookup(cfg.TaskDir().Dir, argv[0], envList(env)); err != nil {
			return nil, nil, "", fmt.Errorf("launch %s: %w", tc.Command, err)
		}
		if argv, err = runAsCommand(cred, cfg.TaskDir().Dir, v1Dir, argv); err != nil {
			return nil, nil, "", err
		}
		envs, execUser = runas.Env(envList(env)), ""
	}
	return argv, envs, execUser, nil
}

// taskEnv is the task's environment: the job's, the grants' and the
// budget's, and where the task marks iterations and finds its lanes.
func taskEnv(s *settings, cfg *drivers.TaskConfig, tc TaskConfig, grants []reservation.Grant, spec task.Spec, backend gpu.Backend) map[string]string {
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
	return env
}

// launch starts the task's command under a Nomad executor.
func launch(s *settings, cfg *drivers.TaskConfig, tc TaskConfig, nomadConfig *base.ClientDriverConfig, compute cpustats.Compute,
	argv, envs []string, execUser string, logger hclog.Logger) (executor.Executor, *goplugin.Client, *executor.ProcessState, error) {
	exec, client, err := executor.CreateExecutor(logger, nomadConfig, &executor.ExecutorConfig{
		// Nomad's executor opens its log as root, following symlinks: not
		// in the task's directory, where the task could plant one.
		LogFile:  executorLogPath(s.StateDir, cfg),
		LogLevel: "debug",
		Compute:  compute,
	})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("create executor: %w", err)
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
		return nil, nil, nil, fmt.Errorf("launch %s: %w", tc.Command, err)
	}
	return exec, client, ps, nil
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
