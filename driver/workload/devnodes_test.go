package workload

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/caravan-gpu/caravan/gpu"
	"github.com/caravan-gpu/caravan/gpu/sim"
)

// The run opens its GPU before its first allocation, as CUDA does: where
// the sim made device nodes, a GPU the process cannot open ends the run
// with CUDA's no-device error before anything is recorded. (The devices
// cgroup that refuses the open is tested in driver/runas.)
func TestRunOpensItsGPUFirst(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("device nodes need root")
	}
	b, state := simBackend(t)
	skipped, err := b.CreateDeviceNodes()
	must.NoError(t, err)
	if skipped != "" {
		t.Skip(skipped)
	}
	c := Config{Iterations: 1, IterationTime: time.Millisecond, Steps: 1, PersistentMiB: 64, EphemeralMiB: 64,
		Mode: ModeNormal, GPU: "GPU-a", SimStateDir: state}
	var out bytes.Buffer
	must.NoError(t, Run(context.Background(), c, &out))

	// Nodes for another fleet: GPU-a has none.
	_, err = sim.CreateDeviceNodes(state, []gpu.Device{{UUID: "GPU-other"}})
	must.NoError(t, err)
	out.Reset()
	err = Run(context.Background(), c, &out)
	must.ErrorIs(t, err, sim.ErrNoDevice)
	ps := progressLines(t, out.String())
	must.StrContains(t, ps[len(ps)-1].Event, "CUDA error: no CUDA-capable device is detected: GPU GPU-a")
	procs, err := b.Processes("GPU-a")
	must.NoError(t, err)
	must.SliceEmpty(t, procs)
}
