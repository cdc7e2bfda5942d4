package sim

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/caravan-gpu/caravan/gpu"
	"github.com/shoenig/test/must"
)

// child starts a process that waits to be told to exit; exit kills and
// reaps it.
func child(t *testing.T) (pid int, start time.Time, exit func()) {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	must.NoError(t, cmd.Start())
	exit = func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
	t.Cleanup(exit)
	start, err := gpu.ProcessStartTime(cmd.Process.Pid)
	must.NoError(t, err)
	return cmd.Process.Pid, start, exit
}

// accounted lists GPU-a's accounted processes.
func accounted(t *testing.T, b *Backend) []gpu.AccountedProcess {
	t.Helper()
	procs, err := b.AccountedProcesses("GPU-a")
	must.NoError(t, err)
	return procs
}

// A PID that cannot be alive (above any pid_max).
const deadPID = 1 << 30

// writeRecord plants a process's record as a workload of an older caravan,
// or one whose process has exited, left it.
func writeRecord(t *testing.T, b *Backend, dir string, pid int, text string) {
	t.Helper()
	must.NoError(t, os.MkdirAll(filepath.Join(b.stateDir, dir, "GPU-a"), 0o755))
	must.NoError(t, os.WriteFile(filepath.Join(b.stateDir, dir, "GPU-a", strconv.Itoa(pid)), []byte(text+"\n"), 0o644))
}

// A process that went to 900 MiB, freed down to 100 and exited is
// accounted as exited with its peak and its start, though nobody looked at
// the GPU between its last allocation and its exit; while it ran it was
// accounted running.
func TestAnExitedProcessKeepsItsPeak(t *testing.T) {
	b := simGPU(t)
	pid, start, exit := child(t)
	for _, mib := range []uint64{300, 900, 100} {
		must.NoError(t, SetProcessMemory(b.stateDir, "GPU-a", pid, mib))
	}
	running := gpu.AccountedProcess{PID: pid, PeakMemoryMiB: 900, StartTime: start, Running: true}
	must.Eq(t, []gpu.AccountedProcess{running}, accounted(t, b))

	exit()
	got := accounted(t, b)
	exited := running
	exited.Running = false
	must.Eq(t, []gpu.AccountedProcess{exited}, got)
	must.True(t, got[0].BelongsTo(pid, start))
	// It has left the GPU, and stays accounted.
	procs, err := b.Processes("GPU-a")
	must.NoError(t, err)
	must.SliceEmpty(t, procs)
	must.Eq(t, []gpu.AccountedProcess{exited}, accounted(t, b))
	data, err := os.ReadFile(filepath.Join(b.stateDir, "accounting", "GPU-a", accountedName(pid, start.UnixMicro())))
	must.NoError(t, err)
	must.Eq(t, "900 "+strconv.FormatInt(start.UnixMicro(), 10)+" exited\n", string(data))
}

// A process that releases its memory leaves the process list, as today,
// but not the accounting: the workloads release as they end, and the peak
// of their last iterations must outlive the release and the exit. One
// that allocates again starts a new peak in the list and keeps one entry,
// with the larger peak, in the accounting.
func TestAReleasedProcessIsAccountedUntilItExits(t *testing.T) {
	b := simGPU(t)
	pid, start, exit := child(t)
	must.NoError(t, SetProcessMemory(b.stateDir, "GPU-a", pid, 900))
	must.NoError(t, SetProcessMemory(b.stateDir, "GPU-a", pid, 100))
	must.NoError(t, ReleaseProcess(b.stateDir, "GPU-a", pid))
	procs, err := b.Processes("GPU-a")
	must.NoError(t, err)
	must.SliceEmpty(t, procs)
	want := gpu.AccountedProcess{PID: pid, PeakMemoryMiB: 900, StartTime: start, Running: true}
	must.Eq(t, []gpu.AccountedProcess{want}, accounted(t, b))

	must.NoError(t, SetProcessMemory(b.stateDir, "GPU-a", pid, 200))
	procs, err = b.Processes("GPU-a")
	must.NoError(t, err)
	must.Eq(t, []gpu.Process{{PID: pid, UsedMemoryMiB: 200, PeakMemoryMiB: 200}}, procs)
	must.Eq(t, []gpu.AccountedProcess{want}, accounted(t, b))
	must.NoError(t, ReleaseProcess(b.stateDir, "GPU-a", pid))

	exit()
	want.Running = false
	must.Eq(t, []gpu.AccountedProcess{want}, accounted(t, b))
	entries, err := os.ReadDir(filepath.Join(b.stateDir, "procs", "GPU-a"))
	must.NoError(t, err)
	must.SliceEmpty(t, entries) // records and lock gone
}

// A process that dies checkpointed is accounted with the peak it had.
func TestACheckpointedProcessThatDiesIsAccounted(t *testing.T) {
	b := simGPU(t)
	pid, start, exit := child(t)
	must.NoError(t, SetProcessMemory(b.stateDir, "GPU-a", pid, 3000))
	must.NoError(t, b.Checkpoint(context.Background(), pid))
	must.Eq(t, []gpu.AccountedProcess{{PID: pid, PeakMemoryMiB: 3000, StartTime: start, Running: true}}, accounted(t, b))
	exit()
	must.Eq(t, []gpu.AccountedProcess{{PID: pid, PeakMemoryMiB: 3000, StartTime: start}}, accounted(t, b))
	must.False(t, Checkpointed(b.stateDir, pid))
}

// The accounting keeps the newest processes by start, as NVML's circular
// buffer does, whatever order they exited in.
func TestTheAccountingDropsTheOldest(t *testing.T) {
	b := simGPU(t)
	b.accountingBuffer = 3
	ticks := func(i int) string { return strconv.Itoa(100 * (i + 1)) } // a second apart
	for _, i := range []int{3, 0, 4, 1, 2} {
		writeRecord(t, b, "procs", deadPID+i, "0 "+strconv.Itoa(100*(i+1))+" "+ticks(i))
	}
	exited := func(i int) gpu.AccountedProcess {
		start, err := gpu.TimeOfTicks(uint64(100 * (i + 1)))
		must.NoError(t, err)
		return gpu.AccountedProcess{PID: deadPID + i, PeakMemoryMiB: uint64(100 * (i + 1)), StartTime: start}
	}
	must.Eq(t, []gpu.AccountedProcess{exited(2), exited(3), exited(4)}, accounted(t, b))

	writeRecord(t, b, "procs", deadPID+5, "0 600 "+ticks(5))
	must.Eq(t, []gpu.AccountedProcess{exited(3), exited(4), exited(5)}, accounted(t, b))
}

// A link planted where an accounting entry goes is replaced, not written
// through; a link planted for a GPU's accounting directory stops the
// accounting, which says why, and keeps the record for later.
func TestTheAccountingFollowsNoLink(t *testing.T) {
	b := simGPU(t)
	outside := t.TempDir()
	target := filepath.Join(outside, "target")
	must.NoError(t, os.WriteFile(target, []byte("keep me\n"), 0o644))
	dir, err := accountingDir(b.stateDir, "GPU-a")
	must.NoError(t, err)
	must.NoError(t, os.Symlink(target, filepath.Join(dir, accountedName(deadPID, 0))))

	writeRecord(t, b, "procs", deadPID, "100 900")
	must.Eq(t, []gpu.AccountedProcess{{PID: deadPID, PeakMemoryMiB: 900}}, accounted(t, b))
	data, err := os.ReadFile(target)
	must.NoError(t, err)
	must.Eq(t, "keep me\n", string(data))
	st, err := os.Lstat(filepath.Join(dir, accountedName(deadPID, 0)))
	must.NoError(t, err)
	must.True(t, st.Mode().IsRegular())

	// The GPU's directory itself a link.
	must.NoError(t, os.RemoveAll(dir))
	must.NoError(t, os.Symlink(outside, dir))
	writeRecord(t, b, "procs", deadPID+1, "100 700")
	_, err = b.AccountedProcesses("GPU-a")
	must.ErrorContains(t, err, "is not a directory")
	must.StrContains(t, b.AccountingUnavailable("GPU-a"), "is not a directory")
	procs, err := b.Processes("GPU-a") // the GPU's own listing goes on
	must.NoError(t, err)
	must.SliceEmpty(t, procs)
	entries, err := os.ReadDir(outside)
	must.NoError(t, err)
	must.Len(t, 1, entries) // the target alone
	_, err = os.Stat(filepath.Join(b.stateDir, "procs", "GPU-a", strconv.Itoa(deadPID+1)))
	must.NoError(t, err) // kept to be accounted once the directory is fixed

	must.NoError(t, os.Remove(dir))
	must.Eq(t, []gpu.AccountedProcess{{PID: deadPID + 1, PeakMemoryMiB: 700}}, accounted(t, b))
	must.Eq(t, "", b.AccountingUnavailable("GPU-a"))
}

// Records written before starts were kept still read: a running process's
// start comes from /proc, an exited one's is unknown.
func TestOldRecordsAreAccounted(t *testing.T) {
	b := simGPU(t)
	self := os.Getpid()
	start, err := gpu.ProcessStartTime(self)
	must.NoError(t, err)
	writeRecord(t, b, "procs", self, "1024 2048")
	writeRecord(t, b, "procs", deadPID, "512")
	must.Eq(t, []gpu.AccountedProcess{
		{PID: self, PeakMemoryMiB: 2048, StartTime: start, Running: true},
		{PID: deadPID, PeakMemoryMiB: 512},
	}, accounted(t, b))
	// A new allocation keeps the old record's peak, and adds the start.
	must.NoError(t, SetProcessMemory(b.stateDir, "GPU-a", self, 1000))
	h, ok := readHeld(filepath.Join(b.stateDir, "procs", "GPU-a", strconv.Itoa(self)))
	must.True(t, ok)
	ticks, err := gpu.ProcessStartTicks(self)
	must.NoError(t, err)
	must.Eq(t, heldMemory{mib: 1000, known: true, peak: 2048, startTicks: ticks}, h)
}

// A record left by an earlier process with the same PID, which nobody saw
// exit, is that process's: it is accounted as exited, its memory is not
// the new process's, and the new process's peak starts afresh.
func TestARecordOfAReusedPIDIsTheEarlierProcesss(t *testing.T) {
	earlier, err := gpu.TimeOfTicks(1) // just after boot
	must.NoError(t, err)
	b := simGPU(t)
	pid, start, _ := child(t)
	writeRecord(t, b, "procs", pid, "5000 5000 1")
	must.NoError(t, SetProcessMemory(b.stateDir, "GPU-a", pid, 100))
	procs, err := b.Processes("GPU-a")
	must.NoError(t, err)
	must.Eq(t, []gpu.Process{{PID: pid, UsedMemoryMiB: 100, PeakMemoryMiB: 100}}, procs)
	got := accounted(t, b)
	must.Eq(t, []gpu.AccountedProcess{
		{PID: pid, PeakMemoryMiB: 5000, StartTime: earlier},
		{PID: pid, PeakMemoryMiB: 100, StartTime: start, Running: true},
	}, got)
	must.False(t, got[0].BelongsTo(pid, start))

	// Found by a sweep rather than by the new process's allocation.
	b = simGPU(t)
	writeRecord(t, b, "procs", pid, "5000 5000 1")
	procs, err = b.Processes("GPU-a")
	must.NoError(t, err)
	must.SliceEmpty(t, procs)
	must.Eq(t, []gpu.AccountedProcess{{PID: pid, PeakMemoryMiB: 5000, StartTime: earlier}}, accounted(t, b))
}

// A GPU whose accounting mode is off in the fleet file tells no peaks and
// keeps no exited processes, and says why.
func TestAccountingOffInTheFleet(t *testing.T) {
	b := simBackend(t, `15360, "accounting_off": true`)
	must.StrContains(t, b.AccountingUnavailable("GPU-a"), "accounting mode is off on GPU-a")
	pid, _, exit := child(t)
	must.NoError(t, SetProcessMemory(b.stateDir, "GPU-a", pid, 900))
	procs, err := b.Processes("GPU-a")
	must.NoError(t, err)
	must.Eq(t, []gpu.Process{{PID: pid, UsedMemoryMiB: 900}}, procs)
	_, err = b.AccountedProcesses("GPU-a")
	must.ErrorContains(t, err, "accounting mode is off")
	exit()
	procs, err = b.Processes("GPU-a")
	must.NoError(t, err)
	must.SliceEmpty(t, procs)
	_, err = os.Stat(filepath.Join(b.stateDir, "accounting"))
	must.True(t, os.IsNotExist(err))

	must.StrContains(t, simGPU(t).AccountingUnavailable("GPU-x"), "unknown GPU")
}

func TestParseAccounted(t *testing.T) {
	cases := []struct {
		text string
		ok   bool
		want exitedProcess
	}{
		{"900 1720000000123456 exited\n", true, exitedProcess{known: true, peak: 900, startUS: 1720000000123456}},
		{"N/A 0 exited", true, exitedProcess{}},
		{"900 1720000000123456", false, exitedProcess{}},
		{"900 1720000000123456 running", false, exitedProcess{}},
		{"x 0 exited", false, exitedProcess{}},
		{"900 -1 exited", false, exitedProcess{}},
	}
	for _, tc := range cases {
		h, ok := parseAccounted(tc.text)
		must.Eq(t, tc.ok, ok, must.Sprint(tc.text))
		must.Eq(t, tc.want, h, must.Sprint(tc.text))
	}
}
