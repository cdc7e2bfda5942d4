// Package backend opens the GPU backend a plugin's config names. The device
// plugin and the task driver both open theirs here, so that the two read one
// config the same way and a new backend is added in one place.
package backend

import (
	"fmt"

	"github.com/caravan-gpu/caravan/gpu"
	"github.com/caravan-gpu/caravan/gpu/nvml"
	"github.com/caravan-gpu/caravan/gpu/sim"
	"github.com/hashicorp/go-hclog"
)

// The backends a config may name.
const (
	Sim  = "sim"  // a fleet described in a file (gpu/sim)
	NVML = "nvml" // real NVIDIA GPUs; failing to load NVML is an error
	Auto = "auto" // NVML where it loads, else none
	None = "none" // no backend: nothing is fingerprinted or enforced
)

// Config names a backend and, for Sim, its fleet.
type Config struct {
	Kind string
	// FleetFile and StateDir are the simulated fleet's description and
	// the directory its per-process state lives in (Sim only).
	FleetFile, StateDir string
	// OpenNVML opens NVML; nil means nvml.New. Tests hand in go-nvml's
	// mocks here.
	OpenNVML func(hclog.Logger) (gpu.Backend, error)
}

// Open opens the backend c names. Without one (None, or Auto where NVML
// does not load) it returns a nil backend and why, in words for the
// fingerprint, the log and task events (`"none"`, or `"auto" found no
// NVML (…)`). The caller names its config field in errors.
func Open(c Config, logger hclog.Logger) (b gpu.Backend, none string, err error) {
	openNVML := c.OpenNVML
	if openNVML == nil {
		openNVML = func(l hclog.Logger) (gpu.Backend, error) { return nvml.New(l) }
	}
	switch c.Kind {
	case Sim:
		b, err := sim.New(c.FleetFile, c.StateDir)
		if err != nil {
			return nil, "", err
		}
		return b, "", nil
	case NVML:
		b, err := openNVML(logger.Named("nvml"))
		if err != nil {
			return nil, "", err
		}
		return b, "", nil
	case Auto:
		b, err := openNVML(logger.Named("nvml"))
		if err != nil {
			return nil, fmt.Sprintf("%q found no NVML (%v)", Auto, err), nil
		}
		return b, "", nil
	case None:
		return nil, fmt.Sprintf("%q", None), nil
	}
	return nil, "", fmt.Errorf("unknown GPU backend %q: must be %q, %q, %q or %q", c.Kind, Auto, NVML, Sim, None)
}
