package gpucheck

// This file checks, on a real GPU, what MPS enforces.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/caravan-gpu/caravan/gpu/mpsctl"
)

func (r *run) mps() {
	const check = "MPS"
	control := r.opts.MPSControl
	if control == "" {
		control = mpsctl.DefaultControlBin
	}
	if _, err := exec.LookPath(control); err != nil {
		r.add(check, "unavailable", err.Error())
		return
	}
	dir, err := os.MkdirTemp("", "caravan-gpucheck-mps-")
	if err != nil {
		r.add(check, "error", err.Error())
		return
	}
	defer os.RemoveAll(dir)
	d := mpsctl.Daemon{Bin: control, PipeDir: filepath.Join(dir, "pipe"), LogDir: filepath.Join(dir, "log")}
	for _, sub := range []string{d.PipeDir, d.LogDir} {
		_ = os.MkdirAll(sub, 0o755)
	}
	if err := d.Start(r.ctx); err != nil {
		r.add(check, "error", err.Error())
		return
	}
	defer func() { _, _ = d.Command("quit") }()
	env := []string{"CUDA_MPS_PIPE_DIRECTORY=" + d.PipeDir, "CUDA_MPS_LOG_DIRECTORY=" + d.LogDir}

	// What the driver does: the server of the client's UID gets the limit,
	// and a client that asks for more in its own environment is held to it.
	const limitMiB = 2048
	if err := d.LimitServer(uint32(os.Getuid()), map[string]uint64{r.gpu.UUID: limitMiB}); err != nil {
		r.add("MPS server limit", "error", err.Error())
		return
	}
	held := func(extra ...string) (*child, uint64, error) {
		c, err := r.start(append(env, extra...), "-probe-step", "64", "-hold", "30s")
		if err != nil {
			return nil, 0, err
		}
		n, err := strconv.ParseUint(c.said, 10, 64)
		if err != nil {
			c.stop()
			return nil, 0, fmt.Errorf("probe said %q", c.said)
		}
		return c, n, nil
	}
	raised, got, err := held("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=8192M")
	if err != nil {
		r.add("MPS server limit", "error", err.Error())
	} else {
		raised.stop()
		result := fmt.Sprintf("held: %d MiB", got)
		if got > limitMiB {
			result = fmt.Sprintf("raised: %d MiB", got)
		}
		r.add("MPS server limit", result, fmt.Sprintf("server limit %d MiB; the client's own environment asks for 8192 MiB and allocates 64 MiB at a time until refused", limitMiB))
	}
	c, got, err := held()
	if err != nil {
		r.add("NVML lists an MPS client", "error", err.Error())
		return
	}
	defer c.stop()
	r.add("what an MPS client holds under its limit", fmt.Sprintf("%d MiB of %d", got, limitMiB), "allocating 64 MiB at a time until refused: the rest of the limit goes to the client's context")
	if p, ok := r.listed(c.pid()); ok {
		r.add("NVML lists an MPS client", fmt.Sprintf("%d MiB", p.UsedMemoryMiB), fmt.Sprintf("a client holding %d MiB; NVML lists %s", got, r.processList(c.pid())))
	} else {
		r.add("NVML lists an MPS client", "not listed", fmt.Sprintf("a client holding %d MiB was not listed within 5 s; NVML lists %s", got, r.processList(c.pid())))
	}
	// A lane that both runs its tasks under MPS and switches them with
	// checkpoints needs an MPS client to checkpoint.
	if ck := r.preferredCheckpointer(); ck != nil {
		err := r.checkpoint(ck, c.pid())
		result := "refused"
		detail := fmt.Sprintf("a client holding %d MiB: %v", got, err)
		if err == nil {
			result = "done"
			_, listed := r.listedNow(c.pid())
			detail += fmt.Sprintf("; listed by NVML while checkpointed: %v; restore: %v", listed, r.restore(ck, c.pid()))
		}
		r.add("checkpoint of an MPS client", result, detail)
	}
	// What the driver meets for a task of a UID of its own while another
	// UID's client runs: does the daemon start a second user's server?
	const otherUID = 70001
	second := d
	second.Timeout = 5 * time.Second
	start := time.Now()
	err = second.LimitServer(otherUID, map[string]uint64{r.gpu.UUID: 1024})
	result := fmt.Sprintf("started in %s", time.Since(start).Round(time.Millisecond))
	if err != nil {
		result = "did not start within 5 s"
	}
	r.add("MPS server for a second UID", result, fmt.Sprintf("start_server -uid %d while a client of uid %d runs: %v", otherUID, os.Getuid(), err))
}
