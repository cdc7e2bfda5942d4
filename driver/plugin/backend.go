package plugin

// This file holds how the driver opens its GPU backend, and what a task
// is told where there is none.

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/hashicorp/go-hclog"

	"github.com/caravan-gpu/caravan/driver/task"
	"github.com/caravan-gpu/caravan/gpu"
	"github.com/caravan-gpu/caravan/gpu/backend"
	"github.com/caravan-gpu/caravan/gpu/nvml"
	"github.com/caravan-gpu/caravan/gpu/sim"
)

// openNVML opens the NVML backend; tests replace it with go-nvml's mocks.
var openNVML = func(logger hclog.Logger) (gpu.Backend, error) { return nvml.New(logger) }

// openBackend opens the configured GPU backend. Without one (gpu_backend =
// "none", or "auto" where NVML does not load) it returns nil and why, in
// words for the fingerprint, the log and task events.
func openBackend(s *settings, logger hclog.Logger) (gpu.Backend, string, error) {
	b, none, err := backend.Open(backend.Config{
		Kind: s.GPUBackend, FleetFile: s.Sim.FleetFile, StateDir: s.Sim.StateDir, OpenNVML: openNVML,
	}, logger)
	if err != nil {
		return nil, "", fmt.Errorf("gpu_backend %s: %w", s.GPUBackend, err)
	}
	if b == nil {
		return nil, "gpu_backend = " + none, nil
	}
	if sb, ok := b.(*sim.Backend); ok {
		if err := openSimState(sb, s.Sim.StateDir, logger); err != nil {
			_ = b.Close()
			return nil, "", fmt.Errorf("gpu_backend sim: %w", err)
		}
	}
	return b, "", nil
}

// warnUnenforced tells a task, and the log, that nothing enforces its GPU
// memory budget on this node.
func (d *Driver) warnUnenforced(h *task.Handle, s *settings) {
	msg := "warning: " + unwatched(d.unenforced())
	if h.Spec.Budget.Enforced() && mpsActive(s) {
		msg += "; only the MPS client limits apply"
	}
	h.Logger.Warn("task started without GPU memory enforcement", "reason", d.unenforced())
	d.emit(h, msg, map[string]string{"gpu_backend": "none"}, nil)
}

// unwatched says that nothing enforces GPU memory budgets on this node.
func unwatched(none string) string {
	return "GPU memory budgets are NOT enforced: " + none + "; nothing watches or limits a task's GPU memory"
}

// openSimState lets tasks that run as unprivileged users record their
// simulated GPU memory, as any user may allocate on a real GPU: the
// per-GPU process directories are world-writable and sticky.
func openSimState(b *sim.Backend, stateDir string, logger hclog.Logger) error {
	devs, err := b.Devices()
	if err != nil {
		return err
	}
	// checkpointed/ holds a checkpointed process's entry, which the task
	// keeps writing as it allocates.
	var dirs []string
	for _, top := range []string{"procs", "checkpointed"} {
		dirs = append(dirs, filepath.Join(stateDir, top))
		for _, d := range devs {
			dirs = append(dirs, filepath.Join(stateDir, top, d.UUID))
		}
	}
	for _, dir := range dirs {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if err := os.Chmod(dir, os.ModeSticky|0o777); err != nil {
			return err
		}
	}
	// The simulated MPS daemon's server limits: root's alone, made before
	// any task could make the directory first.
	if err := (sim.MPSDaemon{StateDir: stateDir}).Prepare(); err != nil {
		return err
	}
	// The simulated GPUs are opened through device nodes, so that the
	// kernel holds each task to the GPUs the driver let it open.
	skipped, err := b.CreateDeviceNodes()
	if err != nil {
		return err
	}
	if skipped != "" {
		logger.Warn("simulated GPUs have no device nodes: every task can open every simulated GPU", "reason", skipped)
	}
	return nil
}

// mpsActive reports whether MPS client limits apply to tasks on this node.
func mpsActive(s *settings) bool {
	switch s.MPS {
	case "on":
		return true
	case "off":
		return false
	}
	_, err := os.Stat(filepath.Join(mpsPipeDir(s), "control"))
	return err == nil
}
