// Package gpucheck measures, on a real GPU, what the simulated backend can
// only assume: NVML's view of processes and MPS clients, whether NVML's
// accounting keeps a 1 ms spike, whether an MPS client can raise its own
// pinned limit past its server's, how long a freeze and a checkpoint take,
// and what a restore does when its memory does not fit. Each check runs
// child processes of the same binary (the alloc subcommand) that allocate
// through libcuda, as a training job's framework does.
package gpucheck

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/caravan-gpu/caravan/gpu"
	"github.com/caravan-gpu/caravan/gpu/mpsctl"
	"github.com/caravan-gpu/caravan/gpu/nvml"
)

// ErrNoGPU is what Run returns where there is no GPU to measure.
var ErrNoGPU = errors.New("no NVIDIA GPU on this machine")

// Options shape a run.
type Options struct {
	// Self is this binary, run as "Self alloc ..." for each child.
	Self string
	// CheckpointCLI is the cuda-checkpoint utility; PATH when empty.
	CheckpointCLI string
	// MPSControl is nvidia-cuda-mps-control; PATH when empty.
	MPSControl string
	// SizesGiB are the checkpoint sizes; those that do not fit are skipped.
	SizesGiB []uint64
	// Checks names the checks to run (CheckNames); all when empty.
	Checks []string
	// OpTimeout bounds each checkpoint, restore and state call, so that a
	// call the driver never returns from costs one row, not the run.
	OpTimeout time.Duration
	Logf      func(format string, args ...any)
	// Progress sees the report after each row, so that a run cut short
	// still leaves what it measured.
	Progress func(Report)
}

// Row is one measurement.
type Row struct {
	Check  string `json:"check"`
	Result string `json:"result"`
	Detail string `json:"detail,omitempty"`
}

// Report is what a run measured, on which GPU.
type Report struct {
	Driver    string    `json:"driver_version"`
	CUDA      string    `json:"cuda_version"`
	GPU       string    `json:"gpu"`
	Model     string    `json:"model"`
	MemoryMiB uint64    `json:"memory_mib"`
	Started   time.Time `json:"started"`
	Rows      []Row     `json:"rows"`
}

// Markdown is the report as a table.
func (r Report) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "GPU check on %s (%s, %d MiB), driver %s, CUDA %s, %s\n\n", r.Model, r.GPU, r.MemoryMiB, r.Driver, r.CUDA, r.Started.Format(time.RFC3339))
	b.WriteString("| check | result | detail |\n|---|---|---|\n")
	for _, row := range r.Rows {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", row.Check, row.Result, strings.ReplaceAll(row.Detail, "|", "\\|"))
	}
	return b.String()
}

// WriteFiles writes gpu-check.json and gpu-check.md into dir.
func (r Report) WriteFiles(dir string) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "gpu-check.json"), append(data, '\n'), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "gpu-check.md"), []byte(r.Markdown()), 0o644)
}

type run struct {
	opts    Options
	ctx     context.Context
	backend *nvml.Backend
	gpu     gpu.Device
	report  *Report
}

// Run measures GPU 0 of the node. It returns ErrNoGPU, wrapped with the
// reason, where NVML does not load or lists no GPU.
func Run(ctx context.Context, opts Options) (Report, error) {
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	if opts.Progress == nil {
		opts.Progress = func(Report) {}
	}
	if opts.OpTimeout == 0 {
		opts.OpTimeout = 2 * time.Minute
	}
	b, err := nvml.New(nil)
	if err != nil {
		return Report{}, fmt.Errorf("%w: %v", ErrNoGPU, err)
	}
	defer b.Close()
	devs, err := b.Devices()
	if err != nil {
		return Report{}, fmt.Errorf("%w: %v", ErrNoGPU, err)
	}
	var dev *gpu.Device
	for i := range devs {
		if !devs[i].IsMIG() && !devs[i].MIGEnabled {
			dev = &devs[i]
			break
		}
	}
	if dev == nil {
		return Report{}, fmt.Errorf("%w: NVML lists no whole GPU", ErrNoGPU)
	}
	drv, cuda, _ := b.Versions()
	rep := &Report{Driver: drv, CUDA: cuda, GPU: dev.UUID, Model: dev.Model, MemoryMiB: dev.MemoryMiB, Started: time.Now()}
	r := &run{opts: opts, ctx: ctx, backend: b, gpu: *dev, report: rep}
	// The backend turns accounting on the first time it lists processes,
	// as caravan-driver needs it; the card is left as it was found.
	if wasOn, err := b.AccountingMode(dev.UUID); err == nil && !wasOn {
		defer func() {
			if err := b.SetAccountingMode(dev.UUID, false); err != nil {
				opts.Logf("accounting mode left on: %v", err)
			}
		}()
	}
	want := map[string]bool{}
	for _, name := range opts.Checks {
		want[name] = true
	}
	for _, c := range checks {
		if len(want) == 0 || want[c.name] {
			c.run(r)
		}
	}
	return *rep, nil
}

// checks run in this order. MPS comes before the checkpoints: a restore
// that does not fit may leave its process, or the GPU, in a state later
// checks cannot use.
var checks = []struct {
	name string
	run  func(*run)
}{
	{"process", (*run).nvmlSeesProcess},
	{"accounting", (*run).accountingSpike},
	{"freeze", (*run).freezeThaw},
	{"mps", (*run).mps},
	{"checkpoint", (*run).checkpoints},
	{"refusals", (*run).checkpointRefusals},
	{"restore-oom", (*run).restoreWithoutRoom},
}

// CheckNames are the names Options.Checks takes, in the order they run.
func CheckNames() []string {
	var out []string
	for _, c := range checks {
		out = append(out, c.name)
	}
	return out
}

// checkpointRefusals measures what the simulated backend assumes a
// checkpoint refuses: a stopped process (which is why the driver
// checkpoints before it freezes), a second checkpoint, and a process with
// a CUDA context but no allocation.
func (r *run) checkpointRefusals() {
	ck := r.preferredCheckpointer()
	if ck == nil {
		r.add("checkpoint refusals", "unavailable", "no way to checkpoint here")
		return
	}
	idle, err := r.start(nil, "-mib", "0", "-hold", "2m")
	if err != nil {
		r.add("checkpoint of a process with no allocation", "error", err.Error())
	} else {
		err = r.checkpoint(ck, idle.pid())
		result := "refused"
		if err == nil {
			result = "done"
			err = r.restore(ck, idle.pid())
		}
		r.add("checkpoint of a process with no allocation", result, fmt.Sprintf("a CUDA context and no cuMemAlloc: %v", err))
		idle.stop()
	}

	if c, err := r.start(nil, "-mib", "1024", "-hold", "2m"); err != nil {
		r.add("second checkpoint", "error", err.Error())
	} else if err := r.checkpoint(ck, c.pid()); err != nil {
		r.add("second checkpoint", "error", "first checkpoint: "+err.Error())
		c.stop()
	} else {
		err := r.checkpoint(ck, c.pid())
		result := "refused"
		if err == nil {
			result = "accepted"
		}
		r.add("second checkpoint", result, fmt.Sprintf("%v; restore after: %v", err, r.restore(ck, c.pid())))
		c.stop()
	}

	// Last: a lock that never returns may leave libcuda's checkpoint API
	// busy in this process.
	c, err := r.start(nil, "-mib", "1024", "-hold", "2m")
	if err != nil {
		r.add("checkpoint of a stopped process", "error", err.Error())
		return
	}
	defer c.stop()
	_ = syscall.Kill(c.pid(), syscall.SIGSTOP)
	waitState(c.pid(), true)
	const lockTimeout = 10 * time.Second
	start := time.Now()
	_, err = boundedFor(r, lockTimeout, 10*time.Second, "checkpoint", func(ctx context.Context) (struct{}, error) {
		return struct{}{}, ck.Checkpoint(ctx, c.pid())
	})
	took := time.Since(start)
	_ = syscall.Kill(c.pid(), syscall.SIGCONT)
	waitState(c.pid(), false)
	if err != nil {
		r.add("checkpoint of a stopped process", "refused", fmt.Sprintf("lock timeout %s, answered after %s: %v", lockTimeout, took.Round(time.Millisecond), err))
	} else {
		r.add("checkpoint of a stopped process", "done", fmt.Sprintf("in %s; restore once running: %v", took.Round(time.Millisecond), r.restore(ck, c.pid())))
	}
}

// preferredCheckpointer is the driver API where libcuda has it, else the
// utility.
func (r *run) preferredCheckpointer() gpu.Checkpointer {
	ckpts := r.checkpointers()
	for _, name := range []string{"driver API", "cuda-checkpoint"} {
		if c, ok := ckpts[name]; ok {
			return c
		}
	}
	return nil
}

func (r *run) add(check, result, detail string) {
	r.opts.Logf("%s: %s %s", check, result, detail)
	r.report.Rows = append(r.report.Rows, Row{Check: check, Result: result, Detail: detail})
	r.opts.Progress(*r.report)
}

// bounded runs op for at most opts.OpTimeout. A driver call that never
// returns is left behind in its goroutine.
func bounded[T any](r *run, what string, op func(context.Context) (T, error)) (T, error) {
	return boundedFor(r, r.opts.OpTimeout, 0, what, op)
}

// boundedFor gives op a deadline of d (a lock's timeout is what is left of
// it) and waits grace longer for its answer.
func boundedFor[T any](r *run, d, grace time.Duration, what string, op func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(r.ctx, d)
	defer cancel()
	wait, stop := context.WithTimeout(r.ctx, d+grace)
	defer stop()
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := op(ctx)
		done <- result{v, err}
	}()
	select {
	case res := <-done:
		return res.v, res.err
	case <-wait.Done():
		var zero T
		return zero, fmt.Errorf("%s: no answer within %s", what, d+grace)
	}
}

func (r *run) checkpoint(ck gpu.Checkpointer, pid int) error {
	_, err := bounded(r, "checkpoint", func(ctx context.Context) (struct{}, error) { return struct{}{}, ck.Checkpoint(ctx, pid) })
	return err
}

func (r *run) restore(ck gpu.Checkpointer, pid int) error {
	_, err := bounded(r, "restore", func(ctx context.Context) (struct{}, error) { return struct{}{}, ck.Restore(ctx, pid) })
	return err
}

func (r *run) checkpointState(ck gpu.Checkpointer, pid int) (gpu.CheckpointState, error) {
	return bounded(r, "checkpoint state", func(ctx context.Context) (gpu.CheckpointState, error) { return ck.CheckpointState(ctx, pid) })
}

// child is one "alloc" process.
type child struct {
	cmd *exec.Cmd
	out *bufio.Reader
	// said is what followed "ready" on its first line.
	said string
}

// start runs "Self alloc args..." with extra env on this GPU and waits for
// it to say it holds its memory ("ready") or to fail.
func (r *run) start(env []string, args ...string) (*child, error) {
	cmd := exec.CommandContext(r.ctx, r.opts.Self, append([]string{"alloc"}, args...)...)
	cmd.Env = append(append(os.Environ(), "CUDA_VISIBLE_DEVICES="+r.gpu.UUID), env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, out: bufio.NewReader(stdout)}
	line, err := c.out.ReadString('\n')
	said, ready := strings.CutPrefix(strings.TrimSpace(line), "ready")
	c.said = strings.TrimSpace(said)
	if !ready {
		_ = cmd.Wait()
		return nil, fmt.Errorf("alloc %s: %s%s (%v)", strings.Join(args, " "), strings.TrimSpace(line), strings.TrimSpace(stderr.String()), err)
	}
	go func() { _, _ = io.Copy(io.Discard, c.out) }()
	return c, nil
}

func (c *child) pid() int { return c.cmd.Process.Pid }

// stop kills the child and waits for it a while: a process stuck in the
// driver may not die at once, and the run goes on without it.
func (c *child) stop() {
	_ = c.cmd.Process.Kill()
	done := make(chan struct{})
	go func() { _ = c.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
}

// listed waits up to 5 s for NVML to list pid on the GPU, with its memory.
func (r *run) listed(pid int) (gpu.Process, bool) {
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		procs, err := r.backend.Processes(r.gpu.UUID)
		if err != nil {
			continue
		}
		for _, p := range procs {
			if p.PID == pid {
				return p, true
			}
		}
	}
	return gpu.Process{}, false
}

func (r *run) nvmlSeesProcess() {
	c, err := r.start(nil, "-mib", "1024", "-hold", "30s")
	if err != nil {
		r.add("NVML lists a process", "error", err.Error())
		return
	}
	defer c.stop()
	p, ok := r.listed(c.pid())
	if !ok {
		r.add("NVML lists a process", "not listed", "a process holding 1024 MiB was not listed within 5 s")
		return
	}
	r.add("NVML lists a process", fmt.Sprintf("%d MiB", p.UsedMemoryMiB), "a process that allocated 1024 MiB through cuMemAlloc (the rest is its CUDA context)")
}

func (r *run) accountingSpike() {
	const check = "accounting keeps a 1 ms spike"
	if why := r.backend.AccountingUnavailable(r.gpu.UUID); why != "" {
		r.add(check, "no accounting", why)
		return
	}
	c, err := r.start(nil, "-mib", "256", "-spike-mib", "2048", "-spike", "1ms", "-hold", "500ms")
	if err != nil {
		r.add(check, "error", err.Error())
		return
	}
	pid := c.pid()
	_ = c.cmd.Wait()
	procs, err := r.backend.AccountedProcesses(r.gpu.UUID)
	if err != nil {
		r.add(check, "error", err.Error())
		return
	}
	for _, p := range procs {
		if p.PID == pid {
			result := "no"
			if p.PeakMemoryMiB >= 256+2048 {
				result = "yes"
			}
			r.add(check, result, fmt.Sprintf("exited process, 256 MiB held and 2048 MiB more for 1 ms: accounting peak %d MiB", p.PeakMemoryMiB))
			return
		}
	}
	r.add(check, "not accounted", fmt.Sprintf("pid %d is not in the accounting buffer after it exited", pid))
}

// procState is the state letter of pid in /proc.
func procState(pid int) byte {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 || i+2 >= len(data) {
		return 0
	}
	return data[i+2]
}

func waitState(pid int, stopped bool) time.Duration {
	start := time.Now()
	for time.Since(start) < 5*time.Second {
		if (procState(pid) == 'T') == stopped {
			return time.Since(start)
		}
		time.Sleep(20 * time.Microsecond)
	}
	return -1
}

func (r *run) freezeThaw() {
	c, err := r.start(nil, "-mib", "1024", "-hold", "30s")
	if err != nil {
		r.add("freeze and thaw (signals)", "error", err.Error())
		return
	}
	defer c.stop()
	start := time.Now()
	_ = syscall.Kill(c.pid(), syscall.SIGSTOP)
	waitState(c.pid(), true)
	freeze := time.Since(start)
	start = time.Now()
	_ = syscall.Kill(c.pid(), syscall.SIGCONT)
	waitState(c.pid(), false)
	r.add("freeze and thaw (signals)", fmt.Sprintf("%s / %s", freeze.Round(time.Microsecond), time.Since(start).Round(time.Microsecond)),
		"SIGSTOP until /proc says stopped, SIGCONT until it does not, a process holding 1024 MiB")
}

// checkpointers are the ways this host checkpoints: the driver API where
// libcuda has it, and the cuda-checkpoint utility where it is installed.
func (r *run) checkpointers() map[string]gpu.Checkpointer {
	out := map[string]gpu.Checkpointer{}
	r.backend.EnableCheckpoint(r.opts.CheckpointCLI)
	if r.backend.CheckpointMechanism() == "cuda-driver-api" {
		out["driver API"] = r.backend
	}
	path := r.opts.CheckpointCLI
	if path == "" {
		path, _ = exec.LookPath("cuda-checkpoint")
	}
	if path != "" {
		out["cuda-checkpoint"] = nvml.DetectCLI(path)
	}
	return out
}

func (r *run) freeMiB() uint64 {
	st, err := r.backend.Stats(r.gpu.UUID)
	if err != nil || st.UsedMemoryMiB > st.TotalMemoryMiB {
		return 0
	}
	return st.TotalMemoryMiB - st.UsedMemoryMiB
}

func (r *run) checkpoints() {
	ckpts := r.checkpointers()
	if len(ckpts) == 0 {
		r.add("checkpoint and restore", "unavailable", "neither libcuda's checkpoint API nor cuda-checkpoint: "+r.backend.CheckpointUnavailable())
		return
	}
	for _, name := range []string{"driver API", "cuda-checkpoint"} {
		ck, ok := ckpts[name]
		if !ok {
			continue
		}
		for _, gib := range r.opts.SizesGiB {
			check := fmt.Sprintf("checkpoint / restore %d GiB (%s)", gib, name)
			if gib*1024 > r.freeMiB()*8/10 {
				r.add(check, "skipped", fmt.Sprintf("%d MiB free", r.freeMiB()))
				continue
			}
			c, err := r.start(nil, "-mib", strconv.FormatUint(gib*1024, 10), "-hold", "5m")
			if err != nil {
				r.add(check, "error", err.Error())
				continue
			}
			start := time.Now()
			err = r.checkpoint(ck, c.pid())
			ckpt := time.Since(start)
			if err != nil {
				r.add(check, "error", "checkpoint: "+err.Error())
				c.stop()
				continue
			}
			_, stillListed := r.listedNow(c.pid())
			start = time.Now()
			err = r.restore(ck, c.pid())
			restore := time.Since(start)
			detail := fmt.Sprintf("listed by NVML while checkpointed: %v", stillListed)
			if err != nil {
				detail += "; restore: " + err.Error()
			}
			r.add(check, fmt.Sprintf("%s / %s", ckpt.Round(time.Millisecond), restore.Round(time.Millisecond)), detail)
			c.stop()
		}
	}
}

// processList says which processes NVML lists on the GPU, marking client.
func (r *run) processList(client int) string {
	procs, err := r.backend.Processes(r.gpu.UUID)
	if err != nil {
		return err.Error()
	}
	var parts []string
	for _, p := range procs {
		who := "pid " + strconv.Itoa(p.PID)
		if p.PID == client {
			who += " (the client)"
		} else if comm, err := os.ReadFile("/proc/" + strconv.Itoa(p.PID) + "/comm"); err == nil {
			who += " (" + strings.TrimSpace(string(comm)) + ")"
		}
		parts = append(parts, fmt.Sprintf("%s %d MiB", who, p.UsedMemoryMiB))
	}
	if len(parts) == 0 {
		return "no process"
	}
	return strings.Join(parts, ", ")
}

func (r *run) listedNow(pid int) (gpu.Process, bool) {
	procs, err := r.backend.Processes(r.gpu.UUID)
	if err != nil {
		return gpu.Process{}, false
	}
	for _, p := range procs {
		if p.PID == pid {
			return p, true
		}
	}
	return gpu.Process{}, false
}

func (r *run) restoreWithoutRoom() {
	const check = "restore when its memory does not fit"
	ck := r.preferredCheckpointer()
	if ck == nil {
		r.add(check, "unavailable", "no way to checkpoint here")
		return
	}
	quarter := r.gpu.MemoryMiB / 4
	a, err := r.start(nil, "-mib", strconv.FormatUint(quarter, 10), "-hold", "5m")
	if err != nil {
		r.add(check, "error", err.Error())
		return
	}
	defer a.stop()
	if err := r.checkpoint(ck, a.pid()); err != nil {
		r.add(check, "error", "checkpoint: "+err.Error())
		return
	}
	// Leave less free than the checkpointed process needs.
	fill := r.freeMiB() - quarter/2
	b, err := r.start(nil, "-mib", strconv.FormatUint(fill, 10), "-hold", "5m")
	if err != nil {
		r.add(check, "error", "fill: "+err.Error())
		return
	}
	restoreErr := r.restore(ck, a.pid())
	state, stateErr := r.checkpointState(ck, a.pid())
	b.stop()
	again := r.restore(ck, a.pid())
	detail := fmt.Sprintf("%d MiB checkpointed, %d MiB free: restore error %v; state after %v (%v); restore once the memory is free: %v",
		quarter, quarter/2, restoreErr, state, stateErr, again)
	result := "fails, recoverable"
	switch {
	case restoreErr == nil:
		result = "succeeded"
	case again != nil:
		result = "fails, stuck"
	}
	r.add(check, result, detail)
}

func (r *run) mps() {
	const check = "MPS"
	control := r.opts.MPSControl
	if control == "" {
		control = mpsctl.DefaultControlBin
	}
	if _, err := exec.LookPath(control); err != nil {
		r.add(check, "unavailable", err.Error())
		return
	}
	dir, err := os.MkdirTemp("", "caravan-gpucheck-mps-")
	if err != nil {
		r.add(check, "error", err.Error())
		return
	}
	defer os.RemoveAll(dir)
	d := mpsctl.Daemon{Bin: control, PipeDir: filepath.Join(dir, "pipe"), LogDir: filepath.Join(dir, "log")}
	for _, sub := range []string{d.PipeDir, d.LogDir} {
		_ = os.MkdirAll(sub, 0o755)
	}
	if err := d.Start(r.ctx); err != nil {
		r.add(check, "error", err.Error())
		return
	}
	defer func() { _, _ = d.Command("quit") }()
	env := []string{"CUDA_MPS_PIPE_DIRECTORY=" + d.PipeDir, "CUDA_MPS_LOG_DIRECTORY=" + d.LogDir}

	// What the driver does: the server of the client's UID gets the limit,
	// and a client that asks for more in its own environment is held to it.
	const limitMiB = 2048
	if err := d.LimitServer(uint32(os.Getuid()), map[string]uint64{r.gpu.UUID: limitMiB}); err != nil {
		r.add("MPS server limit", "error", err.Error())
		return
	}
	held := func(extra ...string) (*child, uint64, error) {
		c, err := r.start(append(env, extra...), "-probe-step", "64", "-hold", "30s")
		if err != nil {
			return nil, 0, err
		}
		n, err := strconv.ParseUint(c.said, 10, 64)
		if err != nil {
			c.stop()
			return nil, 0, fmt.Errorf("probe said %q", c.said)
		}
		return c, n, nil
	}
	raised, got, err := held("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=8192M")
	if err != nil {
		r.add("MPS server limit", "error", err.Error())
	} else {
		raised.stop()
		result := fmt.Sprintf("held: %d MiB", got)
		if got > limitMiB {
			result = fmt.Sprintf("raised: %d MiB", got)
		}
		r.add("MPS server limit", result, fmt.Sprintf("server limit %d MiB; the client's own environment asks for 8192 MiB and allocates 64 MiB at a time until refused", limitMiB))
	}
	c, got, err := held()
	if err != nil {
		r.add("NVML lists an MPS client", "error", err.Error())
		return
	}
	defer c.stop()
	r.add("what an MPS client holds under its limit", fmt.Sprintf("%d MiB of %d", got, limitMiB), "allocating 64 MiB at a time until refused: the rest of the limit goes to the client's context")
	if p, ok := r.listed(c.pid()); ok {
		r.add("NVML lists an MPS client", fmt.Sprintf("%d MiB", p.UsedMemoryMiB), fmt.Sprintf("a client holding %d MiB; NVML lists %s", got, r.processList(c.pid())))
	} else {
		r.add("NVML lists an MPS client", "not listed", fmt.Sprintf("a client holding %d MiB was not listed within 5 s; NVML lists %s", got, r.processList(c.pid())))
	}
	// A lane that both runs its tasks under MPS and switches them with
	// checkpoints needs an MPS client to checkpoint.
	if ck := r.preferredCheckpointer(); ck != nil {
		err := r.checkpoint(ck, c.pid())
		result := "refused"
		detail := fmt.Sprintf("a client holding %d MiB: %v", got, err)
		if err == nil {
			result = "done"
			_, listed := r.listedNow(c.pid())
			detail += fmt.Sprintf("; listed by NVML while checkpointed: %v; restore: %v", listed, r.restore(ck, c.pid()))
		}
		r.add("checkpoint of an MPS client", result, detail)
	}
	// What the driver meets for a task of a UID of its own while another
	// UID's client runs: does the daemon start a second user's server?
	const otherUID = 70001
	second := d
	second.Timeout = 5 * time.Second
	start := time.Now()
	err = second.LimitServer(otherUID, map[string]uint64{r.gpu.UUID: 1024})
	result := fmt.Sprintf("started in %s", time.Since(start).Round(time.Millisecond))
	if err != nil {
		result = "did not start within 5 s"
	}
	r.add("MPS server for a second UID", result, fmt.Sprintf("start_server -uid %d while a client of uid %d runs: %v", otherUID, os.Getuid(), err))
}

// Probe is the child that finds how much it may hold: it allocates stepMiB
// at a time until an allocation fails, says "ready <MiB held>", and holds
// that for hold.
func Probe(libcuda string, stepMiB uint64, hold time.Duration, out io.Writer) error {
	c, err := OpenCUDA(libcuda)
	if err != nil {
		return err
	}
	if stepMiB == 0 {
		return errors.New("probe step is 0 MiB")
	}
	var held uint64
	for {
		if _, err := c.Alloc(stepMiB); err != nil {
			break
		}
		held += stepMiB
	}
	fmt.Fprintf(out, "ready %d\n", held)
	time.Sleep(hold)
	return nil
}

// Alloc is the child: it allocates mib MiB through libcuda (none, only a
// context, for 0), says "ready",
// holds a spike of spikeMiB more for spike, and holds mib for hold.
func Alloc(libcuda string, mib, spikeMiB uint64, spike, hold time.Duration, out io.Writer) error {
	c, err := OpenCUDA(libcuda)
	if err != nil {
		return err
	}
	if mib > 0 {
		if _, err := c.Alloc(mib); err != nil {
			return err
		}
	}
	fmt.Fprintln(out, "ready")
	if spikeMiB > 0 {
		ptr, err := c.Alloc(spikeMiB)
		if err != nil {
			return err
		}
		time.Sleep(spike)
		if err := c.Free(ptr); err != nil {
			return err
		}
	}
	time.Sleep(hold)
	return nil
}
