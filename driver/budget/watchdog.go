package budget

import (
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/caravan-gpu/caravan/gpu"
)

// Usage is what the task's processes hold on one GPU.
type Usage struct {
	UUID     string
	UsedMiB  uint64
	LimitMiB uint64
	// Procs are the task's processes on this GPU, largest first.
	Procs []ProcUsage
}

// ProcUsage is one process's memory on a GPU.
type ProcUsage struct {
	PID     int
	Name    string
	UsedMiB uint64
	// PeakMiB is the most the process has held since it started, as the
	// GPU recorded it (0: not known).
	PeakMiB uint64
	// MemoryUnknown is set when the GPU does not tell the process's memory;
	// such a process adds nothing to UsedMiB and is listed last.
	MemoryUnknown bool
	// Exited is set on a process that had exited by the sample, known from
	// the GPU's accounting of exited processes: only its peak counts.
	Exited bool
}

// Unknown returns the processes whose memory the GPU does not tell.
func (u Usage) Unknown() []ProcUsage {
	var out []ProcUsage
	for _, p := range u.Procs {
		if p.MemoryUnknown {
			out = append(out, p)
		}
	}
	return out
}

// Breach is a budget exceeded on one GPU.
type Breach struct {
	Usage
	Policy Policy
	// Processes is the budget's gpu_processes (0 reads as 1).
	Processes int
	// Peak, when set, is the process whose recorded peak went past its
	// share between two samples that both saw the task within it.
	Peak *ProcUsage
	// OverShare, when set, is a process that holds more than its share of
	// the budget now, while the task as a whole is within it.
	OverShare *ProcUsage
	// TooMany is set when more processes hold memory on the GPU than
	// gpu_processes allows: their shares no longer add up to the budget.
	TooMany bool
	// Ungranted is set when the task holds memory on a GPU it was not
	// granted (Granted lists those it was).
	Ungranted bool
	Granted   []string
}

// Reason says which process used how much of what budget, for task events
// and the exit message.
func (b Breach) Reason() string {
	n := max(b.Processes, 1)
	share := b.LimitMiB / uint64(n)
	// of names the process's limit: the budget, or its share of it.
	of := fmt.Sprintf("its %d MiB budget", b.LimitMiB)
	if n > 1 {
		of = fmt.Sprintf("its %d MiB share of the %d MiB budget (gpu_processes = %d)", share, b.LimitMiB, n)
	}
	switch {
	case b.Ungranted:
		granted := "none"
		if len(b.Granted) > 0 {
			granted = strings.Join(b.Granted, ", ")
		}
		var procs []string
		for _, p := range b.Procs {
			switch {
			case p.Exited:
				procs = append(procs, fmt.Sprintf("pid %d (%s) peaked at %d MiB and exited", p.PID, p.Name, p.PeakMiB))
			case p.MemoryUnknown:
				procs = append(procs, fmt.Sprintf("pid %d (%s) holds memory the GPU does not report", p.PID, p.Name))
			default:
				procs = append(procs, fmt.Sprintf("pid %d (%s) holds %d MiB", p.PID, p.Name, p.UsedMiB))
			}
		}
		return fmt.Sprintf("GPU memory on %s, a GPU the task was not granted (granted: %s): %s",
			b.UUID, granted, strings.Join(procs, ", "))
	case b.Peak != nil && b.Peak.Exited:
		p := b.Peak
		return fmt.Sprintf("GPU memory budget exceeded on %s: pid %d (%s) peaked at %d MiB of %s and exited before a sample saw it (the GPU's accounting of exited processes)",
			b.UUID, p.PID, p.Name, p.PeakMiB, of)
	case b.Peak != nil:
		p := b.Peak
		return fmt.Sprintf("GPU memory budget exceeded on %s: pid %d (%s) peaked at %d MiB of %s between two samples; the task holds %d MiB now",
			b.UUID, p.PID, p.Name, p.PeakMiB, of, b.UsedMiB)
	case b.OverShare != nil:
		p := b.OverShare
		return fmt.Sprintf("GPU memory budget exceeded on %s: pid %d (%s) holds %d MiB of %s; the task holds %d MiB",
			b.UUID, p.PID, p.Name, p.UsedMiB, of, b.UsedMiB)
	case b.TooMany:
		procs := make([]string, len(b.Procs))
		for i, p := range b.Procs {
			procs[i] = fmt.Sprintf("pid %d (%s)", p.PID, p.Name)
		}
		return fmt.Sprintf("GPU memory budget exceeded on %s: %d processes hold memory there and gpu_processes = %d allows %d, each with %d MiB of the %d MiB budget, so together they may hold more than it: %s",
			b.UUID, len(b.Procs), n, n, share, b.LimitMiB, strings.Join(procs, ", "))
	}
	top := "no single process"
	if len(b.Procs) > 0 && !b.Procs[0].MemoryUnknown {
		p := b.Procs[0]
		top = fmt.Sprintf("pid %d (%s) holds %d MiB", p.PID, p.Name, p.UsedMiB)
	}
	msg := fmt.Sprintf("GPU memory budget exceeded on %s: task uses %d MiB of its %d MiB budget; %s", b.UUID, b.UsedMiB, b.LimitMiB, top)
	if n := len(b.Unknown()); n > 0 {
		msg += fmt.Sprintf(" (and %d process(es) whose memory the GPU does not report)", n)
	}
	return msg
}

// UnknownReport says which processes the watchdog cannot account for on a
// GPU; empty when it can account for all.
func (u Usage) UnknownReport() string {
	unknown := u.Unknown()
	if len(unknown) == 0 {
		return ""
	}
	var procs []string
	for _, p := range unknown {
		procs = append(procs, fmt.Sprintf("pid %d (%s)", p.PID, p.Name))
	}
	return fmt.Sprintf("the GPU does not report the memory of %s on %s (NVML_VALUE_NOT_AVAILABLE): the budget of %d MiB is checked on the task's other processes only (%d MiB known)",
		strings.Join(procs, ", "), u.UUID, u.LimitMiB, u.UsedMiB)
}

// Sampler reads the GPU memory of processes. gpu.Backend satisfies it.
type Sampler interface {
	Processes(uuid string) ([]gpu.Process, error)
	Devices() ([]gpu.Device, error)
}

// Measure sums the memory that the processes in pids hold on each budgeted
// GPU. names maps PIDs to command names for the report.
func Measure(s Sampler, b Budget, pids map[int]string) ([]Usage, error) {
	uuids, err := watchedGPUs(s, b)
	if err != nil {
		return nil, err
	}
	var out []Usage
	for _, uuid := range uuids {
		limit, _ := b.For(uuid)
		procs, err := s.Processes(uuid)
		if err != nil {
			return nil, fmt.Errorf("GPU %s: %w", uuid, err)
		}
		u := Usage{UUID: uuid, LimitMiB: limit.LimitMiB}
		for _, p := range procs {
			name, ok := pids[p.PID]
			if !ok {
				continue
			}
			// An unknown figure is neither counted nor guessed: the budget
			// is checked on what is known, and the owner reports the rest.
			if !p.MemoryUnknown {
				u.UsedMiB += p.UsedMemoryMiB
			}
			u.Procs = append(u.Procs, ProcUsage{PID: p.PID, Name: name, UsedMiB: p.UsedMemoryMiB, PeakMiB: p.PeakMemoryMiB, MemoryUnknown: p.MemoryUnknown})
		}
		sort.SliceStable(u.Procs, func(i, j int) bool {
			a, b := u.Procs[i], u.Procs[j]
			if a.MemoryUnknown != b.MemoryUnknown {
				return b.MemoryUnknown
			}
			return a.UsedMiB > b.UsedMiB
		})
		out = append(out, u)
	}
	return out, nil
}

// MeasureUngranted returns what the processes in pids hold on the node's
// GPUs that b does not cover, one Usage per such GPU where they hold any:
// a task reaches only the GPUs it was granted, so any of it is a breach
// (CheckUngranted). A budget that covers every GPU (AnyGPU) leaves none.
func MeasureUngranted(s Sampler, b Budget, pids map[int]string) ([]Usage, error) {
	if _, any := b.For(AnyGPU); any {
		return nil, nil
	}
	devs, err := s.Devices()
	if err != nil {
		return nil, err
	}
	var out []Usage
	for _, d := range devs {
		if d.MIGEnabled {
			continue
		}
		if _, granted := b.For(d.UUID); granted {
			continue
		}
		procs, err := s.Processes(d.UUID)
		if err != nil {
			return nil, fmt.Errorf("GPU %s: %w", d.UUID, err)
		}
		u := Usage{UUID: d.UUID}
		for _, p := range procs {
			if name, ok := pids[p.PID]; ok {
				u.UsedMiB += p.UsedMemoryMiB
				u.Procs = append(u.Procs, ProcUsage{PID: p.PID, Name: name, UsedMiB: p.UsedMemoryMiB, PeakMiB: p.PeakMemoryMiB, MemoryUnknown: p.MemoryUnknown})
			}
		}
		if len(u.Procs) > 0 {
			out = append(out, u)
		}
	}
	return out, nil
}

// CheckUngranted returns a breach for the first of usages (from
// MeasureUngranted, or exited processes on such a GPU) that holds anything.
func CheckUngranted(b Budget, usages []Usage) *Breach {
	for _, u := range usages {
		if len(u.Procs) == 0 {
			continue
		}
		granted := make([]string, 0, len(b.GPUs))
		for _, g := range b.GPUs {
			granted = append(granted, g.UUID)
		}
		return &Breach{Usage: u, Policy: b.Policy, Processes: b.Processes, Ungranted: true, Granted: granted}
	}
	return nil
}

func watchedGPUs(s Sampler, b Budget) ([]string, error) {
	if _, any := b.For(AnyGPU); any && len(b.GPUs) == 1 && b.GPUs[0].UUID == AnyGPU {
		devs, err := s.Devices()
		if err != nil {
			return nil, err
		}
		var out []string
		for _, d := range devs {
			if !d.MIGEnabled {
				out = append(out, d.UUID)
			}
		}
		return out, nil
	}
	out := make([]string, 0, len(b.GPUs))
	for _, g := range b.GPUs {
		out = append(out, g.UUID)
	}
	return out, nil
}

// Check returns the first breach among usages, if any: the task over its
// budget on a GPU; more processes there than gpu_processes allows; or one
// process over its share. The last two keep the task within its budget
// between samples too, since each process's peak is then checked against
// a share and the shares add up to the budget.
func Check(b Budget, usages []Usage) *Breach {
	for _, u := range usages {
		if u.LimitMiB == 0 {
			continue
		}
		breach := &Breach{Usage: u, Policy: b.Policy, Processes: b.Processes}
		if u.UsedMiB > u.LimitMiB {
			return breach
		}
		if len(u.Procs) > b.ProcessCount() {
			breach.TooMany = true
			return breach
		}
		share := b.ShareMiB(u.LimitMiB)
		for _, p := range u.Procs {
			if !p.MemoryUnknown && p.UsedMiB > share {
				p := p
				breach.OverShare = &p
				return breach
			}
		}
	}
	return nil
}

// Peaks remembers the highest peak seen of each process on each GPU, so
// that the watchdog judges only what is new since it last looked: GPUs keep
// a process's peak for its whole life.
type Peaks struct {
	mu   sync.Mutex
	seen map[peakKey]uint64
}

type peakKey struct {
	uuid string
	pid  int
}

// Check records the peaks in usages and returns a breach for the first
// process whose peak is new and past its share of its GPU's budget. Peaks
// of several processes need not have come at once, so they are not summed:
// each is held to its share (Budget.ShareMiB), and the shares add up to the
// budget.
func (p *Peaks) Check(b Budget, usages []Usage) *Breach {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.seen == nil {
		p.seen = map[peakKey]uint64{}
	}
	var breach *Breach
	for _, u := range usages {
		for _, proc := range u.Procs {
			k := peakKey{u.UUID, proc.PID}
			before := p.seen[k]
			if proc.PeakMiB <= before {
				continue
			}
			p.seen[k] = proc.PeakMiB
			if breach == nil && u.LimitMiB > 0 && proc.PeakMiB > b.ShareMiB(u.LimitMiB) {
				proc := proc
				breach = &Breach{Usage: u, Policy: b.Policy, Processes: b.Processes, Peak: &proc}
			}
		}
	}
	return breach
}
