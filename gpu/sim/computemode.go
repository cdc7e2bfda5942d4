package sim

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/caravan-gpu/caravan/gpu"
	"github.com/caravan-gpu/caravan/internal/safefile"
)

// ErrDevicesUnavailable is what a process gets whose context the GPU's
// compute mode refuses, as CUDA returns cudaErrorDevicesUnavailable.
var ErrDevicesUnavailable = errors.New("CUDA error: all CUDA-capable devices are busy or unavailable")

func computeModeDir(stateDir string) string { return filepath.Join(stateDir, "computemode") }

// ComputeMode is the simulated GPU's compute mode, kept in the backend's
// state where only root writes; default until set.
func (b *Backend) ComputeMode(uuid string) (gpu.ComputeMode, error) {
	if _, _, _, err := b.deviceListing(uuid); err != nil {
		return "", err
	}
	return readComputeMode(b.stateDir, uuid)
}

// SetComputeMode sets the simulated GPU's compute mode.
func (b *Backend) SetComputeMode(uuid string, m gpu.ComputeMode) error {
	switch m {
	case gpu.ComputeDefault, gpu.ComputeExclusiveProcess, gpu.ComputeProhibited:
	default:
		return fmt.Errorf("sim: unknown compute mode %q", m)
	}
	if _, _, _, err := b.deviceListing(uuid); err != nil {
		return err
	}
	dir := computeModeDir(b.stateDir)
	if err := safefile.OwnDir(dir, 0o755); err != nil {
		return fmt.Errorf("sim: compute mode: %w", err)
	}
	return replaceOwnFile(filepath.Join(dir, uuid), []byte(m))
}

func readComputeMode(stateDir, uuid string) (gpu.ComputeMode, error) {
	if !fileName(uuid) {
		return "", fmt.Errorf("sim: GPU %q", uuid)
	}
	data, err := readRecord(filepath.Join(computeModeDir(stateDir), uuid))
	if errors.Is(err, fs.ErrNotExist) {
		return gpu.ComputeDefault, nil
	}
	if err != nil {
		return "", err
	}
	return gpu.ComputeMode(strings.TrimSpace(data)), nil
}

// CheckContext is what creating a CUDA context on uuid finds, for a
// process that connected to MPS or not (conn, from ConnectMPS). A GPU in
// prohibited mode takes no context; one in exclusive-process mode takes
// only one, which is the MPS server's while the simulated daemon runs a
// server: a process outside MPS is then refused.
func CheckContext(stateDir, uuid string, conn MPSConnection) error {
	mode, err := readComputeMode(stateDir, uuid)
	if err != nil {
		return err
	}
	switch mode {
	case gpu.ComputeProhibited:
		return fmt.Errorf("%w: GPU %s is in prohibited compute mode", ErrDevicesUnavailable, uuid)
	case gpu.ComputeExclusiveProcess:
		if conn.Served {
			return nil
		}
		servers, err := os.ReadDir(MPSDaemon{StateDir: stateDir}.serversDir())
		if err == nil && len(servers) > 0 {
			return fmt.Errorf("%w: GPU %s is in exclusive-process compute mode and its one context is the MPS server's; this process is not an MPS client of it", ErrDevicesUnavailable, uuid)
		}
	}
	return nil
}
