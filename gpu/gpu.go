// Package gpu is the one seam through which caravan touches GPUs. The device
// plugin and the task driver both talk to a Backend; nvml talks to real
// NVIDIA GPUs and sim to a fleet described in a file.
package gpu

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"time"
)

// ErrUnknownDevice is returned for a UUID the backend does not know.
var ErrUnknownDevice = errors.New("unknown GPU")

// ErrCheckpointUnsupported is wrapped by a Checkpointer's Checkpoint when
// the process's CUDA state cannot be checkpointed at all: an MPS client's
// cannot (CUDA_ERROR_NOT_SUPPORTED; measured on an H100 with driver 580).
// Such a process can only be frozen, its memory staying on the GPU.
var ErrCheckpointUnsupported = errors.New("the process's CUDA state cannot be checkpointed")

// ErrRestoreLost is wrapped by a Checkpointer's Restore when the process's
// GPU state cannot come back: on the hardware a restore that runs out of
// GPU memory leaves the process checkpointed for good (every later restore
// fails too; measured on an H100 with driver 580), so retrying is useless.
var ErrRestoreLost = errors.New("the process's GPU state cannot be restored")

// Device is the static description of one GPU or MIG instance.
type Device struct {
	UUID              string
	Model             string // marketing name, e.g. "NVIDIA H100 80GB HBM3"
	Architecture      string // e.g. "hopper"
	ComputeCapability string // e.g. "9.0"
	MemoryMiB         uint64
	SMCount           int
	PCIBusID          string
	PCIBandwidthMBps  uint64
	// MIGEnabled is true on a parent GPU whose memory is carved into MIG
	// instances; such a parent is never offered itself.
	MIGEnabled bool
	// ParentUUID is set on a MIG instance and names its physical GPU.
	ParentUUID string
	// MIGProfile is the instance profile, e.g. "1g.10gb".
	MIGProfile string
}

// IsMIG reports whether d is a MIG instance rather than a physical GPU.
func (d Device) IsMIG() bool { return d.ParentUUID != "" }

// Health is a device's health as the backend last saw it.
type Health struct {
	Healthy bool
	// Reason says what is wrong in words an operator can act on.
	Reason string
}

// Stats is a point-in-time sample of one device.
type Stats struct {
	UsedMemoryMiB  uint64
	TotalMemoryMiB uint64
	GPUUtilPercent uint32
	MemUtilPercent uint32
	PowerWatts     uint32
	TemperatureC   uint32
	ECCErrorsL1    uint64
	ECCErrorsL2    uint64
	ECCErrorsDev   uint64
	Timestamp      time.Time
}

// Process is one process holding memory on a device.
type Process struct {
	PID           int
	UsedMemoryMiB uint64
	// MemoryUnknown is set when the driver does not tell how much memory
	// the process holds (NVML_VALUE_NOT_AVAILABLE, as on MIG instances or
	// under Windows WDDM); UsedMemoryMiB is 0 then.
	MemoryUnknown bool
	// PeakMemoryMiB is the most the process has held on the device since it
	// started, as the GPU recorded it between samples (NVML accounting's
	// maxMemoryUsage); 0 when the backend does not know it.
	PeakMemoryMiB uint64
}

// MemoryNotAvailable is the byte count NVML gives for a process whose memory
// it cannot tell (NVML_VALUE_NOT_AVAILABLE, all ones).
const MemoryNotAvailable = math.MaxUint64

// ProcessUsing describes a process holding usedBytes as NVML reports them,
// turning MemoryNotAvailable into MemoryUnknown rather than into 16 EiB.
func ProcessUsing(pid int, usedBytes uint64) Process {
	if usedBytes == MemoryNotAvailable {
		return Process{PID: pid, MemoryUnknown: true}
	}
	return Process{PID: pid, UsedMemoryMiB: usedBytes >> 20}
}

// MergeProcesses joins the lists a GPU gives of its processes (NVML lists
// compute processes and MPS clients apart, and may list a process in both)
// into one entry per PID, in PID order. A known memory figure wins over an
// unknown one, and the larger of two known ones is kept; so does the larger
// peak.
func MergeProcesses(lists ...[]Process) []Process {
	byPID := map[int]Process{}
	for _, list := range lists {
		for _, p := range list {
			have, ok := byPID[p.PID]
			peak := max(have.PeakMemoryMiB, p.PeakMemoryMiB)
			switch {
			case !ok, have.MemoryUnknown && !p.MemoryUnknown,
				!have.MemoryUnknown && !p.MemoryUnknown && p.UsedMemoryMiB > have.UsedMemoryMiB:
				byPID[p.PID] = p
			}
			e := byPID[p.PID]
			e.PeakMemoryMiB = peak
			byPID[p.PID] = e
		}
	}
	out := make([]Process, 0, len(byPID))
	for _, p := range byPID {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PID < out[j].PID })
	return out
}

// Backend is implemented by every GPU source. Implementations must be safe for
// concurrent use.
type Backend interface {
	// Name is the backend's config name ("nvml", "sim").
	Name() string
	// Versions returns the driver and CUDA versions.
	Versions() (driver, cuda string, err error)
	// Devices lists physical GPUs and MIG instances.
	Devices() ([]Device, error)
	// Health reports one device's health.
	Health(uuid string) (Health, error)
	// Stats samples one device.
	Stats(uuid string) (Stats, error)
	// Processes lists the processes using memory on one device, MPS clients
	// included, one entry per PID.
	Processes(uuid string) ([]Process, error)
	// Close releases the backend.
	Close() error
}

// Checkpointer is implemented by a backend that can move a process's GPU
// state to host memory and back (CUDA checkpointing). A checkpointed process
// leaves the device's process list and its GPU memory is freed; Restore
// brings both back. The process must not be frozen during either call.
type Checkpointer interface {
	// CheckpointMechanism names how the backend checkpoints ("cuda-driver-api",
	// "cuda-checkpoint-cli", "sim"); empty when it cannot here, and
	// CheckpointUnavailable then says why.
	CheckpointMechanism() string
	CheckpointUnavailable() string
	Checkpoint(ctx context.Context, pid int) error
	Restore(ctx context.Context, pid int) error
	// CheckpointState says where a process's CUDA state is now, so that a
	// driver that restarted in the middle of a checkpoint or a restore can
	// tell what it left checkpointed.
	CheckpointState(ctx context.Context, pid int) (CheckpointState, error)
}

// MPSServers sets limits on an MPS server rather than in its clients'
// environment: a client's own CUDA_MPS_PINNED_DEVICE_MEM_LIMIT can only
// lower the limit its server gives it, never raise it. The control daemon
// (package mpsctl) and the simulated backend's model of it (sim.MPSDaemon)
// implement it.
type MPSServers interface {
	// LimitServer makes sure the MPS server of uid runs and caps the
	// pinned device memory of each of its new clients on each GPU in
	// limitsMiB, by UUID.
	LimitServer(uid uint32, limitsMiB map[string]uint64) error
}

// ComputeMode is a GPU's compute mode, as nvidia-smi -c sets it.
type ComputeMode string

const (
	ComputeDefault ComputeMode = "default"
	// ComputeExclusiveProcess lets one process hold a context on the GPU:
	// under MPS that is the MPS server, so a process that leaves MPS gets
	// no GPU while the server holds it.
	ComputeExclusiveProcess ComputeMode = "exclusive_process"
	ComputeProhibited       ComputeMode = "prohibited"
)

// ComputeModes is implemented by a backend that can tell and set a GPU's
// compute mode (root only on a real GPU).
type ComputeModes interface {
	ComputeMode(uuid string) (ComputeMode, error)
	SetComputeMode(uuid string, m ComputeMode) error
}

// Accounting is implemented by a backend that keeps each process's
// statistics after it exits, as NVML's accounting mode does, so that a
// process that went past its budget between two samples and exited before
// the next is still seen with its peak.
type Accounting interface {
	// AccountingUnavailable says why the backend cannot account the
	// processes on uuid (NVML: accounting mode is off and could not be
	// turned on, which needs root); empty when it can.
	AccountingUnavailable(uuid string) string
	// AccountedProcesses lists the processes that have held memory on
	// uuid, running or exited, as far back as the GPU's accounting buffer
	// goes (a circular buffer: the oldest processes drop out first). A
	// process is listed once; NVML keeps only the latest of the processes
	// that had the same PID.
	AccountedProcesses(uuid string) ([]AccountedProcess, error)
}

// AccountedProcess is one process's accounting statistics.
type AccountedProcess struct {
	PID int
	// PeakMemoryMiB is the most memory the process held on the device in
	// its lifetime (NVML's maxMemoryUsage), frees and all; 0 when the
	// device does not tell.
	PeakMemoryMiB uint64
	// StartTime is NVML's startTime for the process, to tell it from
	// another that had the same PID; zero when unknown. NVIDIA documents it
	// as the process's start; it may be taken when the process first used
	// the GPU, which is later by its initialisation (a CUDA context comes
	// seconds after a Python program's start). Compare it with the start
	// the kernel gives (ProcessStartTime) through BelongsTo, which allows
	// for both.
	StartTime time.Time
	// Running is false once the process has exited.
	Running bool
}

// StartTimeSlack is how far apart two readings of one process's start may
// be: ProcessStartTime is up to a second early (the boot time it adds to
// is in whole seconds).
const StartTimeSlack = 2 * time.Second

// BelongsTo reports whether p can be the statistics of the process pid that
// started at start (ProcessStartTime): p started using the GPU no earlier
// than StartTimeSlack before start. An earlier process that had the same
// PID used the GPU before this one started and does not belong; a later
// one cannot be told apart this way, only by when the process exited. A
// zero StartTime or start matches any start.
func (p AccountedProcess) BelongsTo(pid int, start time.Time) bool {
	if p.PID != pid {
		return false
	}
	if p.StartTime.IsZero() || start.IsZero() {
		return true
	}
	return !p.StartTime.Before(start.Add(-StartTimeSlack))
}

// CheckpointState is where a process's CUDA state is, as CUDA's
// CUprocessState says.
type CheckpointState int

const (
	// CheckpointRunning: on the GPU, the process runs (or has no CUDA state).
	CheckpointRunning CheckpointState = iota
	// CheckpointLocked: on the GPU, with the process's CUDA calls locked
	// (a checkpoint begun but not done, or a restore not finished).
	CheckpointLocked
	// CheckpointCheckpointed: in host memory.
	CheckpointCheckpointed
)

func (s CheckpointState) String() string {
	switch s {
	case CheckpointRunning:
		return "running"
	case CheckpointLocked:
		return "locked"
	case CheckpointCheckpointed:
		return "checkpointed"
	}
	return fmt.Sprintf("CheckpointState(%d)", int(s))
}
