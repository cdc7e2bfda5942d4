package sim

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/caravan-gpu/caravan/gpu"
)

// The simulated GPUs keep each process's statistics after it exits, as
// NVML's accounting mode does. The state directory holds them:
//
//	procs/<uuid>/<pid>                  a process on the GPU: "<MiB> <peak> <start ticks>"
//	checkpointed/<uuid>/<pid>           a checkpointed process, the same
//	procs/<uuid>/.ended-<pid>-<ticks>   a process that released its memory
//	                                    and still runs: its record, peak and all
//	accounting/<uuid>/<pid>-<start>     a process that exited: "<peak> <start> exited"
//
// A running process's start is in the kernel's clock ticks since boot
// (gpu.ProcessStartTicks), which tells a later process with the same PID
// apart exactly; an exited one's is in microseconds since the epoch, as
// NVML's startTime, worked out as it is accounted. 0 stands for unknown.
// Whoever reads a GPU's processes (the device plugin, the driver)
// sweeps: a record whose process has exited moves into accounting/, which
// keeps the newest accountingBufferSize processes a GPU, by start, as
// NVML's circular buffer keeps its newest. Tasks write procs/ and
// checkpointed/, which are open to every user; accounting/ is written only
// by the sweepers, made 0755 by the first, and never through a link.

var _ gpu.Accounting = (*Backend)(nil)

// accountingBufferSize is how many exited processes a simulated GPU keeps,
// as many as NVML's accounting buffer holds by default.
const accountingBufferSize = 4000

// endedPrefix names the record of a process that left the GPU but runs.
const endedPrefix = ".ended-"

// AccountingUnavailable is empty unless the fleet file turns accounting
// off on uuid (accounting_off), or the statistics of an exited process
// cannot be kept in the state directory.
func (b *Backend) AccountingUnavailable(uuid string) string {
	_, _, listing, err := b.deviceListing(uuid)
	if err != nil {
		return err.Error()
	}
	if listing.accountingOff {
		return accountingOffWhy(uuid)
	}
	dir, err := accountingDir(b.stateDir, uuid)
	if err == nil {
		const writable = 0x2 // W_OK
		err = syscall.Access(dir, writable)
	}
	if err != nil {
		return fmt.Sprintf("the simulated GPU %s cannot keep the statistics of exited processes: %v", uuid, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.accountingWhy[uuid]
}

func accountingOffWhy(uuid string) string {
	return fmt.Sprintf("NVML accounting mode is off on %s and could not be enabled: Insufficient Permissions (simulated: accounting_off in the fleet file)", uuid)
}

// AccountedProcesses lists the processes that have held memory on uuid:
// those that run, on the GPU, checkpointed or released, and those that
// have exited, as far back as the accounting keeps them. It sweeps first,
// so that a process that exited since anyone last looked is listed as
// exited, with its peak.
func (b *Backend) AccountedProcesses(uuid string) ([]gpu.AccountedProcess, error) {
	_, _, listing, err := b.deviceListing(uuid)
	if err != nil {
		return nil, err
	}
	if listing.accountingOff {
		return nil, errors.New(accountingOffWhy(uuid))
	}
	r, err := b.sweep(uuid)
	if err == nil {
		err = r.unaccounted
	}
	if err != nil {
		return nil, err
	}
	exited, err := readAccounting(filepath.Join(b.stateDir, "accounting", uuid))
	if err != nil {
		return nil, err
	}
	// One entry a process: a process that released its memory and
	// allocated again has two records.
	type process struct {
		pid     int
		startUS int64
	}
	byProcess := map[process]gpu.AccountedProcess{}
	add := func(e exitedProcess, running bool) {
		p := gpu.AccountedProcess{PID: e.pid, Running: running}
		if e.known && !listing.memoryNotAvailable {
			p.PeakMemoryMiB = e.peak
		}
		if e.startUS != 0 {
			p.StartTime = time.UnixMicro(e.startUS)
		}
		k := process{e.pid, e.startUS}
		if have, ok := byProcess[k]; ok {
			p.PeakMemoryMiB = max(p.PeakMemoryMiB, have.PeakMemoryMiB)
			p.Running = p.Running || have.Running
		}
		byProcess[k] = p
	}
	for _, list := range [][]heldMemory{r.onGPU, r.checkpointed, r.released} {
		for _, h := range list {
			e := accountedAs(h)
			if e.startUS == 0 { // a record from before starts were kept
				if start, err := gpu.ProcessStartTime(h.pid); err == nil {
					e.startUS = start.UnixMicro()
				}
			}
			add(e, true)
		}
	}
	for _, e := range exited {
		add(e, false)
	}
	out := make([]gpu.AccountedProcess, 0, len(byProcess))
	for _, p := range byProcess {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].PID != out[j].PID {
			return out[i].PID < out[j].PID
		}
		return out[i].StartTime.Before(out[j].StartTime)
	})
	return out, nil
}

// records are one GPU's records of the processes that still run.
type records struct {
	exists       bool         // false when no process ever held memory on the GPU
	onGPU        []heldMemory // procs/<uuid>/<pid>, in PID order
	checkpointed []heldMemory // checkpointed/<uuid>/<pid>
	released     []heldMemory // procs/<uuid>/.ended-<pid>-<ticks>
	// unaccounted is the first record of an exited process that could not
	// be accounted for; it stays for the next sweep.
	unaccounted error
}

// sweep reads uuid's records. A record whose process has exited it
// accounts for and removes (where the GPU does no accounting, it only
// removes it), and so it does with the locks of exited processes.
func (b *Backend) sweep(uuid string) (records, error) {
	b.mu.Lock()
	off := b.listing[uuid].accountingOff
	b.mu.Unlock()
	var r records
	retire := func(path string, h heldMemory) {
		if !off {
			if err := b.account(uuid, h); err != nil {
				if r.unaccounted == nil {
					r.unaccounted = fmt.Errorf("sim: keep the statistics of pid %d, which exited, on %s: %w", h.pid, uuid, err)
				}
				return
			}
		}
		_ = os.Remove(path)
	}
	// live reads a record, and retires it when its process has exited.
	live := func(path string, pid int) (heldMemory, bool) {
		h, ok := readHeld(path)
		if !ok {
			if !alive(pid) {
				_ = os.Remove(path) // unreadable, and its process is gone
			}
			return h, false
		}
		h.pid = pid
		if running(h) {
			return h, true
		}
		retire(path, h)
		return h, false
	}

	dir := filepath.Join(b.stateDir, "procs", uuid)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return r, nil
	}
	if err != nil {
		return r, err
	}
	r.exists, r.onGPU = true, []heldMemory{}
	for _, e := range entries {
		name, path := e.Name(), filepath.Join(dir, e.Name())
		if pid, err := strconv.Atoi(name); err == nil {
			if h, ok := live(path, pid); ok {
				r.onGPU = append(r.onGPU, h)
			}
			continue
		}
		if pid, ok := prefixedPID(name, endedPrefix); ok {
			if h, ok := live(path, pid); ok {
				r.released = append(r.released, h)
			}
			continue
		}
		// A gone process's lock goes with it; temp files stay.
		if pid, ok := prefixedPID(name, lockPrefix); ok && !alive(pid) {
			_ = os.Remove(path)
		}
	}
	dir = filepath.Join(b.stateDir, "checkpointed", uuid)
	entries, _ = os.ReadDir(dir)
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			if h, ok := live(filepath.Join(dir, e.Name()), pid); ok {
				r.checkpointed = append(r.checkpointed, h)
			}
		}
	}
	sort.Slice(r.onGPU, func(i, j int) bool { return r.onGPU[i].pid < r.onGPU[j].pid })
	return r, nil
}

// prefixedPID reads the PID in a name of prefix, the PID and, for an
// ended record, a dash and the start.
func prefixedPID(name, prefix string) (int, bool) {
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok {
		return 0, false
	}
	rest, _, _ = strings.Cut(rest, "-")
	pid, err := strconv.Atoi(rest)
	return pid, err == nil
}

// setAside keeps h, the record of a process that left the GPU (it released
// its memory, or its PID went to a later process before a sweep saw it
// exit), beside the live records until a sweep accounts for it. A process
// that left the GPU before has its peaks joined.
func setAside(stateDir, uuid string, h heldMemory) error {
	dir := filepath.Join(stateDir, "procs", uuid)
	path := filepath.Join(dir, endedPrefix+strconv.Itoa(h.pid)+"-"+strconv.FormatUint(h.startTicks, 10))
	if prev, ok := readHeld(path); ok {
		h = merge(h, prev)
	}
	return replaceFile(dir, path, h.String(), 0o600)
}

// merge joins two records of one process: the larger peak, and figures
// over none.
func merge(a, b heldMemory) heldMemory {
	if !a.known && b.known {
		a.mib, a.known = b.mib, true
	}
	a.peak = max(a.peak, b.peak)
	if a.startTicks == 0 {
		a.startTicks = b.startTicks
	}
	return a
}

// exitedProcess is an accounting entry.
type exitedProcess struct {
	pid     int
	peak    uint64
	known   bool  // false when the GPU could not tell the process's memory
	startUS int64 // microseconds since the epoch; 0 when unknown
}

// accountedAs is how the accounting keeps the process of record h, with
// its start in microseconds since the epoch.
func accountedAs(h heldMemory) exitedProcess {
	e := exitedProcess{pid: h.pid, peak: h.peak, known: h.known}
	if h.startTicks != 0 {
		if start, err := gpu.TimeOfTicks(h.startTicks); err == nil {
			e.startUS = start.UnixMicro()
		}
	}
	return e
}

// account keeps h, the record of a process that exited, in uuid's
// accounting, and notes for AccountingUnavailable whether it could.
func (b *Backend) account(uuid string, h heldMemory) error {
	err := writeAccounted(b.stateDir, uuid, accountedAs(h), b.accountingBuffer)
	b.mu.Lock()
	defer b.mu.Unlock()
	if err != nil {
		b.accountingWhy[uuid] = fmt.Sprintf("the simulated GPU %s cannot keep the statistics of exited processes: %v", uuid, err)
	} else {
		delete(b.accountingWhy, uuid)
	}
	return err
}

// writeAccounted writes e into uuid's accounting, joined with what the
// accounting holds of the same process already, and drops the oldest
// processes past keep.
func writeAccounted(stateDir, uuid string, e exitedProcess, keep int) error {
	dir, err := accountingDir(stateDir, uuid)
	if err != nil {
		return err
	}
	path := filepath.Join(dir, accountedName(e.pid, e.startUS))
	if text, err := readRecord(path); err == nil {
		if prev, ok := parseAccounted(text); ok {
			e.peak, e.known = max(e.peak, prev.peak), e.known || prev.known
		}
	}
	text := formatFigure(e.peak, e.known) + " " + strconv.FormatInt(e.startUS, 10) + " exited"
	if err := replaceFile(dir, path, text, 0o644); err != nil {
		return err
	}
	return prune(dir, keep)
}

// accountingDir makes <stateDir>/accounting/<uuid>, and makes sure that
// neither is a link: a sweeper may be root.
func accountingDir(stateDir, uuid string) (string, error) {
	top := filepath.Join(stateDir, "accounting")
	dir := filepath.Join(top, uuid)
	for _, d := range []string{top, dir} {
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return "", err
		}
		if st, err := os.Lstat(d); err != nil {
			return "", err
		} else if !st.IsDir() {
			return "", fmt.Errorf("%s is not a directory", d)
		}
	}
	return dir, nil
}

// parseStart reads the start of an accounting entry, in microseconds since
// the epoch; 0 stands for unknown.
func parseStart(field string) (int64, bool) {
	start, err := strconv.ParseInt(field, 10, 64)
	return start, err == nil && start >= 0 && start < 1<<62
}

func accountedName(pid int, startUS int64) string {
	return strconv.Itoa(pid) + "-" + strconv.FormatInt(startUS, 10)
}

// parseAccountedName reads the PID and the start in an accounting entry's
// name.
func parseAccountedName(name string) (pid int, startUS int64, ok bool) {
	p, s, found := strings.Cut(name, "-")
	if !found {
		return 0, 0, false
	}
	pid, err := strconv.Atoi(p)
	if err != nil || pid <= 0 {
		return 0, 0, false
	}
	startUS, ok = parseStart(s)
	return pid, startUS, ok
}

// parseAccounted reads an accounting entry: the peak in MiB (or
// notAvailable), the start, and "exited".
func parseAccounted(text string) (exitedProcess, bool) {
	fields := strings.Fields(text)
	if len(fields) != 3 || fields[2] != "exited" {
		return exitedProcess{}, false
	}
	peak, known, ok := parseFigure(fields[0])
	start, startOK := parseStart(fields[1])
	if !ok || !startOK {
		return exitedProcess{}, false
	}
	return exitedProcess{peak: peak, known: known, startUS: start}, true
}

// readAccounting reads the accounting entries in dir.
func readAccounting(dir string) ([]exitedProcess, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []exitedProcess
	for _, entry := range entries {
		pid, _, ok := parseAccountedName(entry.Name())
		if !ok {
			continue // temp files
		}
		text, err := readRecord(filepath.Join(dir, entry.Name()))
		if err != nil {
			continue // dropped since the listing
		}
		if e, ok := parseAccounted(text); ok {
			e.pid = pid
			out = append(out, e)
		}
	}
	return out, nil
}

// prune drops the processes that started first from the accounting in dir
// until it holds keep.
func prune(dir string, keep int) error {
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) <= keep {
		return err
	}
	type entry struct {
		name    string
		pid     int
		startUS int64
	}
	var all []entry
	for _, e := range entries {
		if pid, start, ok := parseAccountedName(e.Name()); ok {
			all = append(all, entry{e.Name(), pid, start})
		}
	}
	if len(all) <= keep {
		return nil
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].startUS != all[j].startUS {
			return all[i].startUS < all[j].startUS
		}
		return all[i].pid < all[j].pid
	})
	for _, e := range all[:len(all)-keep] {
		if err := os.Remove(filepath.Join(dir, e.name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}
