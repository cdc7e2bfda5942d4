package plugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	log "github.com/hashicorp/go-hclog"

	"github.com/caravan-gpu/caravan/gpu"
	"github.com/caravan-gpu/caravan/gpu/mpsctl"
	"github.com/caravan-gpu/caravan/internal/safefile"
)

// mpsDaemon supervises nvidia-cuda-mps-control, or checks on the operator's.
type mpsDaemon struct {
	cfg    MPSConfig
	logger log.Logger

	// check serialises checks, so that two never start a daemon each.
	check sync.Mutex

	mu       sync.Mutex
	defaults string // the lane defaults last applied, to apply changes only
	checked  bool
	down     error // why MPS does not serve the lanes, from the last check
}

// mpsReady makes sure an MPS daemon serves the lanes when MPS is on, and
// sets the lane defaults as soon as it does. Missing binaries, a daemon
// that fails or a missing operator daemon are returned as errors that say
// what to do; they degrade MPS only, never the GPUs.
func (d *Device) mpsReady(s *settings) error {
	if !s.mps.Enabled {
		return nil
	}
	d.mu.Lock()
	if d.mps == nil || d.mps.cfg != s.mps {
		d.mps = &mpsDaemon{cfg: s.mps, logger: d.logger.Named("mps")}
	}
	m := d.mps
	insts := d.instances
	backend := d.backend
	d.mu.Unlock()
	m.check.Lock()
	defer m.check.Unlock()
	err := m.ensure()
	if err == nil && insts != nil {
		m.applyDefaults(insts)
		err = m.exclusive(backend, insts)
	}
	m.record(err)
	return err
}

// mpsDown says why MPS does not serve the lanes; nil when MPS is off or
// serves them. It checks now when no check has run yet, as when Reserve
// comes before the first fingerprint.
func (d *Device) mpsDown(s *settings) error {
	if !s.mps.Enabled {
		return nil
	}
	d.mu.Lock()
	m := d.mps
	d.mu.Unlock()
	if m != nil && m.cfg == s.mps {
		m.mu.Lock()
		checked, down := m.checked, m.down
		m.mu.Unlock()
		if checked {
			return down
		}
	}
	return d.mpsReady(s)
}

// record keeps the outcome of a check and logs when MPS goes down or comes
// back.
func (m *mpsDaemon) record(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	changed := !m.checked || (err == nil) != (m.down == nil) || (err != nil && err.Error() != m.down.Error())
	m.checked, m.down = true, err
	switch {
	case !changed:
	case err != nil:
		m.logger.Warn("MPS is down: GPUs and lanes stay offered, and tasks get no MPS limits until it is back", "error", err)
	default:
		m.logger.Info("MPS serves the lanes", "pipe_dir", m.cfg.PipeDir)
	}
}

func (m *mpsDaemon) controlPipe() string { return filepath.Join(m.cfg.PipeDir, "control") }

// ensure starts the daemon when it is not running (supervise mode) or checks
// that the operator's is (external mode).
func (m *mpsDaemon) ensure() error {
	if m.cfg.Mode == MPSExternal {
		if _, err := os.Stat(m.controlPipe()); err != nil {
			return fmt.Errorf("mps: mode = \"external\" but no MPS daemon listens at %s: start `nvidia-cuda-mps-control -d` with CUDA_MPS_PIPE_DIRECTORY=%s, or set mps.mode = \"supervise\"", m.controlPipe(), m.cfg.PipeDir)
		}
		return nil
	}
	control, err := exec.LookPath(m.cfg.ControlBin)
	if err != nil {
		return fmt.Errorf("mps: %s not found (%v): install the NVIDIA driver's MPS utilities, set mps.control_bin, or set mps.enabled = false", m.cfg.ControlBin, err)
	}
	server := filepath.Join(filepath.Dir(control), "nvidia-cuda-mps-server")
	if _, err := os.Stat(server); err != nil {
		if _, err := exec.LookPath("nvidia-cuda-mps-server"); err != nil {
			return fmt.Errorf("mps: nvidia-cuda-mps-server not found next to %s or on PATH: install the NVIDIA driver's MPS utilities, or set mps.enabled = false", control)
		}
	}
	// Whoever can write to the pipe directory can talk to the control
	// daemon as root would (raise limits, stop it), or run a daemon of its
	// own there: one a task made first, under /tmp say, is refused before
	// any daemon found in it is taken as ours.
	for _, dir := range []string{m.cfg.PipeDir, m.cfg.LogDir} {
		if err := safefile.OwnDir(dir, 0o755); err != nil {
			return fmt.Errorf("mps: %w", err)
		}
	}
	if m.running(control) {
		return nil
	}
	m.logger.Info("starting MPS control daemon", "bin", control, "pipe_dir", m.cfg.PipeDir)
	if err := m.daemon(control).Start(context.Background()); err != nil {
		return fmt.Errorf("mps: %w", err)
	}
	m.mu.Lock()
	m.defaults = ""
	m.mu.Unlock()
	return nil
}

func (m *mpsDaemon) daemon(control string) mpsctl.Daemon {
	return mpsctl.Daemon{Bin: control, PipeDir: m.cfg.PipeDir, LogDir: m.cfg.LogDir}
}

// running asks the daemon for its server list; only a live daemon answers.
func (m *mpsDaemon) running(control string) bool {
	if _, err := os.Stat(m.controlPipe()); err != nil {
		return false
	}
	_, err := m.command(control, "get_server_list")
	return err == nil
}

func (m *mpsDaemon) command(control, line string) (string, error) {
	return m.daemon(control).Command(line)
}

// exclusive puts each lane-cut GPU in exclusive-process compute mode, so
// that its one context is the MPS server's: a task's process that points
// CUDA_MPS_PIPE_DIRECTORY elsewhere, to run outside MPS and its limits,
// then finds no GPU. Only a supervised daemon's GPUs are changed; an
// error degrades MPS, with the reason, as the limits would not hold.
func (m *mpsDaemon) exclusive(backend gpu.Backend, insts map[string]instance) error {
	if m.cfg.Mode == MPSExternal || m.cfg.ComputeMode == MPSComputeUnchanged {
		return nil
	}
	modes, ok := backend.(gpu.ComputeModes)
	if !ok {
		return nil
	}
	done := map[string]bool{}
	for _, in := range insts {
		u := in.device.UUID
		if !in.isLane() || in.device.IsMIG() || done[u] {
			continue
		}
		done[u] = true
		if cur, err := modes.ComputeMode(u); err == nil && cur == gpu.ComputeExclusiveProcess {
			continue
		}
		if err := modes.SetComputeMode(u, gpu.ComputeExclusiveProcess); err != nil {
			return fmt.Errorf("mps: %w (set mps.compute_mode = %q to leave GPUs as they are, and rely on the watchdog for clients that leave MPS)", err, MPSComputeUnchanged)
		}
		m.logger.Info("GPU set to exclusive-process compute mode, so that only the MPS server holds a context", "gpu", u)
	}
	return nil
}

// mpsDefaultCommands are the control commands that give new MPS clients
// their lane's limits by default: the pinned memory of each lane-cut GPU
// and, when every lane has the same share, the active thread percentage.
// The per-client limits Reserve puts in the task's environment still win.
func mpsDefaultCommands(insts map[string]instance) []string {
	byGPU := map[string]instance{}
	for _, in := range insts {
		if in.isLane() {
			byGPU[in.device.UUID] = in
		}
	}
	uuids := make([]string, 0, len(byGPU))
	for u := range byGPU {
		uuids = append(uuids, u)
	}
	sort.Strings(uuids)
	var cmds []string
	share := -1
	for _, u := range uuids {
		in := byGPU[u]
		cmds = append(cmds, fmt.Sprintf("set_default_device_pinned_mem_limit %s %dM", u, in.memoryMiB))
		switch {
		case share == -1:
			share = in.sharePercent
		case share != in.sharePercent:
			share = 0
		}
	}
	if share > 0 {
		cmds = append(cmds, fmt.Sprintf("set_default_active_thread_percentage %d", share))
	}
	return cmds
}

func (m *mpsDaemon) applyDefaults(insts map[string]instance) {
	if m.cfg.Mode == MPSExternal {
		return // the operator's daemon, the operator's defaults
	}
	cmds := mpsDefaultCommands(insts)
	key := strings.Join(cmds, "\n")
	m.mu.Lock()
	same := key == m.defaults
	m.mu.Unlock()
	if same {
		return
	}
	control, err := exec.LookPath(m.cfg.ControlBin)
	if err != nil {
		return
	}
	var errs []error
	for _, c := range cmds {
		if _, err := m.command(control, c); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		m.logger.Warn("cannot set MPS lane defaults", "error", err)
		return
	}
	m.mu.Lock()
	m.defaults = key
	m.mu.Unlock()
}
