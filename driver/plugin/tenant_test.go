package plugin

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/client/lib/cgroupslib"
	"github.com/hashicorp/nomad/plugins/base"
	"github.com/hashicorp/nomad/plugins/drivers"
	"github.com/shoenig/test/must"
	"github.com/shoenig/test/wait"

	"github.com/caravan-gpu/caravan/driver/lane"
	"github.com/caravan-gpu/caravan/driver/task"
	"github.com/caravan-gpu/caravan/driver/workload"
	"github.com/caravan-gpu/caravan/gpu/reservation"
	"github.com/caravan-gpu/caravan/gpu/sim"
)

// A task that replaced its iteration file with a symlink to a root-owned
// file, and was started again, gets a fresh file of its own: the target is
// neither truncated nor handed to the task's user.
func TestIterationFileReplacesAPlantedSymlink(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, as the driver runs")
	}
	taskDir := t.TempDir()
	cfg := &drivers.TaskConfig{AllocDir: filepath.Dir(taskDir), Name: filepath.Base(taskDir)}
	victim := filepath.Join(t.TempDir(), "ld.so.preload")
	must.NoError(t, os.WriteFile(victim, []byte("root's own\n"), 0o600))
	planted := filepath.Join(taskDir, iterationFileName)
	must.NoError(t, os.Symlink(victim, planted))

	path, err := prepareIterationFile(cfg, "nobody")
	must.NoError(t, err)
	must.Eq(t, planted, path)

	data, err := os.ReadFile(victim)
	must.NoError(t, err)
	must.Eq(t, "root's own\n", string(data))
	st, err := os.Stat(victim)
	must.NoError(t, err)
	must.Eq(t, uint32(0), st.Sys().(*syscall.Stat_t).Uid)
	must.Eq(t, os.FileMode(0o600), st.Mode().Perm())

	st, err = os.Lstat(planted)
	must.NoError(t, err)
	must.True(t, st.Mode().IsRegular())
	must.Eq(t, uint32(65534), st.Sys().(*syscall.Stat_t).Uid) // nobody
}

// The lane counts a task's iterations from its file; one that made the file
// a FIFO does not hang the driver's read.
func TestIterationCountDoesNotOpenAFIFO(t *testing.T) {
	path := filepath.Join(t.TempDir(), iterationFileName)
	must.NoError(t, syscall.Mkfifo(path, 0o666))
	done := make(chan int64)
	go func() { done <- lane.NewIterationCounter(path).Count() }()
	select {
	case n := <-done:
		must.Eq(t, int64(0), n)
	case <-time.After(10 * time.Second):
		t.Fatal("counting the iterations of a FIFO blocked")
	}
}

// A lane state that a stored task state places in the task's directory
// (where drivers kept it before state_dir, and where the task can write) is
// not believed after a restart: the task rejoins its lane afresh, and the
// forged mode and profile are nowhere.
func TestRecoveryDoesNotBelieveALaneStateInTheTaskDirectory(t *testing.T) {
	conf, _ := simConfig(t)
	h1, _, stopDriver := newStoppableHarness(t, conf)
	cfg := workloadTask(t, h1, "forger", workload.Config{Iterations: 20, IterationTime: 50 * time.Millisecond,
		PersistentMiB: 1024, EphemeralMiB: 256}, TaskConfig{}, grantEnv(laneGrant(0)))
	handle, _, err := h1.StartTask(cfg)
	must.NoError(t, err)
	must.NoError(t, h1.WaitUntilStarted(cfg.ID, 5*time.Second))
	var state task.State
	must.NoError(t, handle.GetDriverState(&state))
	// The driver keeps the state in its own directory, not the task's.
	must.StrHasPrefix(t, testStateDir+"/", state.LaneStateFile)
	stopDriver()

	forged := filepath.Join(cfg.TaskDir().Dir, "caravan-lane-state.json")
	must.NoError(t, writeLaneStates(forged, laneStates{"GPU-test/lane0": lane.MemberState{
		Mode: "forged-mode", Turn: true, SliceStart: time.Now().Add(time.Hour),
		Profile: lane.Profile{Known: true, PersistentMiB: 1, EphemeralMiB: 1}}}))
	state.LaneStateFile = forged
	must.NoError(t, handle.SetDriverState(&state))

	h2, _ := newHarness(t, conf)
	events := collectEvents(t, h2)
	must.NoError(t, h2.RecoverTask(handle))
	_, err = h2.WaitTask(context.Background(), cfg.ID)
	must.NoError(t, err)
	recovered := waitEvents(events, cfg.ID, "recovered by a new driver process", 5*time.Second)
	must.SliceLen(t, 1, recovered)
	must.StrNotContains(t, recovered[0].Message, "forged-mode")
	must.StrContains(t, recovered[0].Message, "(suspended: false)")
	for _, e := range events(cfg.ID, "") {
		must.StrNotContains(t, e.Message, "forged-mode")
	}
	res := waitExit(t, h2, cfg.ID, 30*time.Second)
	must.Eq(t, 0, res.ExitCode)
	// The forged file is left to the task; the driver now keeps the state
	// in state_dir again.
	must.Wait(t, wait.InitialSuccess(wait.BoolFunc(func() bool {
		_, err := os.Stat(laneStatePath(testStateDir, cfg))
		return err == nil
	}), wait.Timeout(5*time.Second), wait.Gap(20*time.Millisecond)))
}

// state_dir must be the driver's alone.
func TestStateDirThatOthersCanWriteIsRefused(t *testing.T) {
	dir := t.TempDir()
	must.NoError(t, os.MkdirAll(filepath.Join(dir, "lanes"), 0o700))
	must.NoError(t, os.Chmod(filepath.Join(dir, "lanes"), 0o777))
	var data []byte
	must.NoError(t, base.MsgPackEncode(&data, Config{StateDir: dir, GPUBackend: "none"}.withDefaults()))
	d := New(context.Background(), hclog.NewNullLogger())
	err := d.SetConfig(&base.Config{PluginConfig: data})
	must.ErrorContains(t, err, "state_dir:")
	must.ErrorContains(t, err, "writable by others")
}

// A task that goes past its budget in its last iteration, for a
// millisecond, and exits 0 before the next sample is judged from the GPU's
// accounting of exited processes: under "kill" it fails with the reason,
// under "warn" it is warned of and succeeds.
func TestBreachThenExitIsJudged(t *testing.T) {
	for _, policy := range []string{"kill", "warn"} {
		t.Run(policy, func(t *testing.T) {
			conf := simConfigFor(t, "")
			// One sample at the start, none after: the spike always falls
			// between two.
			conf.WatchdogInterval = "1m"
			h, _ := newHarness(t, conf)
			events := collectEvents(t, h)
			grant := reservation.Grant{InstanceID: "GPU-test", GPUUUID: "GPU-test", Lane: -1, Slots: 1, MemoryMiB: 2048, SharePercent: 100}
			cfg := workloadTask(t, h, "hit-and-run", workload.Config{Iterations: 3, IterationTime: 100 * time.Millisecond,
				PersistentMiB: 1024, EphemeralMiB: 512, Mode: workload.ModeExceed, ExceedAfter: 2, SpikeTime: time.Millisecond},
				TaskConfig{GPUMemoryPolicy: policy}, grantEnv(grant))
			_, _, err := h.StartTask(cfg)
			must.NoError(t, err)
			res := waitExit(t, h, cfg.ID, 30*time.Second)
			must.Eq(t, 0, res.ExitCode)
			const why = "exited before a sample saw it"
			found := waitEvents(events, cfg.ID, why, 5*time.Second)
			must.SliceNotEmpty(t, found)
			must.StrContains(t, found[0].Message, "2561 MiB of its 2048 MiB budget")
			if policy == "kill" {
				must.ErrorContains(t, res.Err, why)
				must.False(t, res.Successful())
			} else {
				must.NoError(t, res.Err)
				must.StrHasPrefix(t, "warning: ", found[0].Message)
			}
		})
	}
}

// A task granted one GPU that puts memory on another is killed with a
// reason that names the other GPU, though it is well within its budget.
func TestMemoryOnAnUngrantedGPUIsABreach(t *testing.T) {
	conf := simConfigFor(t, `},{"uuid":"GPU-other","model":"Sim GPU","memory_mib":16384`)
	h, _ := newHarness(t, conf)
	events := collectEvents(t, h)
	grant := reservation.Grant{InstanceID: "GPU-test", GPUUUID: "GPU-test", Lane: -1, Slots: 1, MemoryMiB: 8192, SharePercent: 100}
	// The workload records its memory where its config says, not where its
	// grant is: the task picks a GPU it was not given.
	cfg := workloadTask(t, h, "trespasser", workload.Config{Iterations: 50, IterationTime: 100 * time.Millisecond,
		PersistentMiB: 256, EphemeralMiB: 128, GPU: "GPU-other"}, TaskConfig{}, grantEnv(grant))
	_, _, err := h.StartTask(cfg)
	must.NoError(t, err)
	res := waitExit(t, h, cfg.ID, 30*time.Second)
	must.ErrorContains(t, res.Err, "GPU memory on GPU-other, a GPU the task was not granted (granted: GPU-test)")
	found := waitEvents(events, cfg.ID, "a GPU the task was not granted", 5*time.Second)
	must.SliceNotEmpty(t, found)
	must.Eq(t, "GPU-other", found[0].Annotations["gpu"])
}

// A task is held by the kernel to the GPUs it was granted, whether it runs
// as a UID of its own or as a user of the user database (a job's user): its
// open of another simulated GPU's device node is refused before it can
// allocate there, and the GPU holds nothing of it.
func TestTaskCannotOpenAGPUItWasNotGranted(t *testing.T) {
	for _, who := range []struct{ name, uidRange, user string }{
		{"UID of its own", "70000-79999", ""},
		{"user of the user database", "none", "nobody"},
	} {
		t.Run(who.name, func(t *testing.T) { testTaskCannotOpenAGPUItWasNotGranted(t, who.uidRange, who.user) })
	}
}

func testTaskCannotOpenAGPUItWasNotGranted(t *testing.T, uidRange, user string) {
	if os.Geteuid() != 0 {
		t.Skip("holding a task to its devices needs root")
	}
	if cgroupslib.GetMode() == cgroupslib.OFF {
		t.Skip("no cgroups to hold a task to its devices")
	}
	conf := simConfigFor(t, `},{"uuid":"GPU-other","model":"Sim GPU","memory_mib":16384`)
	conf.UIDRange = uidRange
	h, _ := newHarness(t, conf)
	events := collectEvents(t, h)
	// The task's user must be able to run the workload: a copy of the test
	// binary where every user can reach it.
	dir := t.TempDir()
	for d := dir; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		must.NoError(t, os.Chmod(d, 0o755))
	}
	exe, err := os.Executable()
	must.NoError(t, err)
	data, err := os.ReadFile(exe)
	must.NoError(t, err)
	workloadBin := filepath.Join(dir, "workload")
	must.NoError(t, os.WriteFile(workloadBin, data, 0o755))

	grant := reservation.Grant{InstanceID: "GPU-test", GPUUUID: "GPU-test", Lane: -1, Slots: 1, MemoryMiB: 8192, SharePercent: 100}
	run := func(name, gpu string) (*drivers.TaskConfig, *drivers.ExitResult) {
		cfg := workloadTask(t, h, name, workload.Config{Iterations: 3, IterationTime: 50 * time.Millisecond,
			PersistentMiB: 256, EphemeralMiB: 128, GPU: gpu}, TaskConfig{}, grantEnv(grant))
		must.NoError(t, cfg.EncodeConcreteDriverConfig(&TaskConfig{Command: workloadBin, GPUProcesses: 1, FrameworkHints: true}))
		cfg.User = user
		must.NoError(t, os.Chmod(filepath.Dir(cfg.AllocDir), 0o755))
		must.NoError(t, os.Chmod(cfg.AllocDir, 0o755))
		_, _, err := h.StartTask(cfg)
		must.NoError(t, err)
		return cfg, waitExit(t, h, cfg.ID, 30*time.Second)
	}
	// Its own GPU opens, and the task completes.
	own, res := run("own", "")
	must.Eq(t, 0, res.ExitCode, must.Sprint(readLog(t, own, "stderr")))
	status, err := h.InspectTask(own.ID)
	must.NoError(t, err)
	attr := status.DriverAttributes["caravan.devices"]
	if strings.Contains(attr, "no cgroups") {
		t.Skipf("the host cannot hold tasks to their devices: %s", attr)
	}
	must.Eq(t, "held to its granted GPUs", attr)

	other, res := run("trespasser", "GPU-other")
	must.NotEq(t, 0, res.ExitCode)
	must.StrContains(t, readLog(t, other, "stderr"), "CUDA error: no CUDA-capable device is detected: GPU GPU-other")
	b, err := sim.New(conf.Sim.FleetFile, conf.Sim.StateDir)
	must.NoError(t, err)
	procs, err := b.AccountedProcesses("GPU-other")
	must.NoError(t, err)
	must.SliceEmpty(t, procs)
	must.SliceEmpty(t, events(other.ID, "not isolated"))
}

// A task whose stdout FIFO was replaced with a symlink (alloc/logs is
// writable by every task of the allocation) is not started: the executor
// would open the link as root and write the task's output into its
// target.
func TestStartRefusesALogFIFOReplacedWithASymlink(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, as the driver runs")
	}
	h, _ := newHarness(t, Config{})
	cfg := newTask(t, h, "planted", TaskConfig{Command: "/bin/sh", Args: []string{"-c", "echo overwritten"}}, nil)
	victim := filepath.Join(t.TempDir(), "shadow")
	must.NoError(t, os.WriteFile(victim, []byte("root's own\n"), 0o600))
	must.NoError(t, os.Remove(cfg.StdoutPath))
	must.NoError(t, os.Symlink(victim, cfg.StdoutPath))

	_, _, err := h.StartTask(cfg)
	must.ErrorContains(t, err, "is a symlink, not the FIFO Nomad made")
	data, err := os.ReadFile(victim)
	must.NoError(t, err)
	must.Eq(t, "root's own\n", string(data))
}
