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

func (r *run) freeMiB() uint64 {
	st, err := r.backend.Stats(r.gpu.UUID)
	if err != nil || st.UsedMemoryMiB > st.TotalMemoryMiB {
		return 0
	}
	return st.TotalMemoryMiB - st.UsedMemoryMiB
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
