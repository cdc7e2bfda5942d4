package mpsctl

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

// fakeControl writes a control program that keeps a list of servers, logs
// every command it gets, and on start_server makes a server owned by the
// uid asked for (a directory under procDir, as /proc shows a process).
func fakeControl(t *testing.T) (d Daemon, log, servers string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a server owned by another uid needs root to make")
	}
	dir := t.TempDir()
	log, servers = filepath.Join(dir, "log"), filepath.Join(dir, "servers")
	procDir := filepath.Join(dir, "proc")
	must.NoError(t, os.MkdirAll(procDir, 0o755))
	script := fmt.Sprintf(`#!/bin/sh
read line
echo "$CUDA_MPS_PIPE_DIRECTORY $line" >> %[1]s
case "$line" in
get_server_list) cat %[2]s 2>/dev/null || true ;;
start_server*)
  pid=$((4000 + $(wc -l < %[2]s 2>/dev/null || echo 0)))
  mkdir -p %[3]s/$pid && chown "${line##* }" %[3]s/$pid && echo $pid >> %[2]s ;;
set_device_pinned_mem_limit*) ;;
*) echo "unknown command" >&2; exit 1 ;;
esac
`, log, servers, procDir)
	bin := filepath.Join(dir, "nvidia-cuda-mps-control")
	must.NoError(t, os.WriteFile(bin, []byte(script), 0o755))
	return Daemon{Bin: bin, PipeDir: filepath.Join(dir, "pipe"), ProcDir: procDir, Timeout: 2 * time.Second}, log, servers
}

func commands(t *testing.T, log string) []string {
	data, err := os.ReadFile(log)
	must.NoError(t, err)
	return strings.Split(strings.TrimSpace(string(data)), "\n")
}

// The limit goes to the server of the task's uid, started for it, and
// names that server by the PID the kernel says that uid owns.
func TestLimitServerStartsTheUIDsServerAndLimitsIt(t *testing.T) {
	d, log, _ := fakeControl(t)
	must.NoError(t, d.LimitServer(70001, map[string]uint64{"GPU-b": 2048, "GPU-a": 4096}))
	must.Eq(t, []string{
		d.PipeDir + " get_server_list",
		d.PipeDir + " start_server -uid 70001",
		d.PipeDir + " get_server_list",
		d.PipeDir + " set_device_pinned_mem_limit 4000 GPU-a 4096M",
		d.PipeDir + " set_device_pinned_mem_limit 4000 GPU-b 2048M",
	}, commands(t, log))

	// A second uid gets a server of its own; the first keeps its own.
	must.NoError(t, d.LimitServer(70002, map[string]uint64{"GPU-a": 1024}))
	must.NoError(t, d.LimitServer(70001, map[string]uint64{"GPU-a": 512}))
	got := commands(t, log)
	must.SliceContains(t, got, d.PipeDir+" set_device_pinned_mem_limit 4001 GPU-a 1024M")
	must.Eq(t, d.PipeDir+" set_device_pinned_mem_limit 4000 GPU-a 512M", got[len(got)-1])
}

// A server list that is not PIDs is an error, not a server of uid 0.
func TestLimitServerRefusesAGarbledServerList(t *testing.T) {
	d, _, servers := fakeControl(t)
	must.NoError(t, os.WriteFile(servers, []byte("server 12\n"), 0o644))
	err := d.LimitServer(70001, map[string]uint64{"GPU-a": 1})
	must.ErrorContains(t, err, `"server" is not a PID`)
}

// A daemon that never shows the server asked for gives an error that says
// why MPS may hold it back.
func TestLimitServerGivesUpOnAServerThatNeverStarts(t *testing.T) {
	d, _, _ := fakeControl(t)
	script, err := os.ReadFile(d.Bin)
	must.NoError(t, err)
	noStart := strings.Replace(string(script), "start_server*)", "start_server*) ;;\nnever*)", 1)
	must.NoError(t, os.WriteFile(d.Bin, []byte(noStart), 0o755))
	d.Timeout = 200 * time.Millisecond
	err = d.LimitServer(70001, map[string]uint64{"GPU-a": 1})
	must.ErrorContains(t, err, "no server of uid 70001")
}

// A daemon that fails a command is an error with what it said.
func TestCommandReportsTheDaemonsAnswer(t *testing.T) {
	d, _, _ := fakeControl(t)
	_, err := d.Command("quit")
	must.ErrorContains(t, err, "unknown command")
}
