// Command caravan-workload is a synthetic deep-learning training job: it
// holds persistent and cyclic ephemeral GPU memory on the simulated backend,
// reports iterations/s as JSON lines, and can misbehave on purpose. It reads
// its GPU, its GPU's model and its budget from the caravan env contract, and
// with -checkpoint resumes where an earlier run of the same job stopped.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/caravan-gpu/caravan/driver/workload"
)

func main() {
	var c workload.Config
	var mode string
	flag.IntVar(&c.Iterations, "iterations", 20, "iterations to run")
	flag.DurationVar(&c.IterationTime, "iteration-time", 200*time.Millisecond, "duration of one iteration")
	flag.Uint64Var(&c.PersistentMiB, "persistent-mib", 1024, "memory held for the whole run")
	flag.Uint64Var(&c.EphemeralMiB, "ephemeral-mib", 512, "peak memory allocated and freed within each iteration")
	flag.IntVar(&c.Steps, "steps", 4, "steps of the ephemeral ramp per pass")
	flag.StringVar(&mode, "mode", "normal", "normal, exceed, leak, crash or ignore-signals")
	flag.IntVar(&c.ExceedAfter, "after", 3, "iteration at which exceed and crash modes act")
	flag.StringVar(&c.ActWhen, "act-when", "", "exceed and crash modes act only once this file exists (and from -after on)")
	flag.Uint64Var(&c.LeakMiB, "leak-mib", 256, "memory leaked per iteration in leak mode")
	flag.DurationVar(&c.SpikeTime, "spike-time", 0, "exceed mode frees its excess after this long (e.g. 2ms); 0: after the next step")
	flag.StringVar(&c.GPU, "gpu", "", "GPU UUID (default: from the caravan env)")
	flag.StringVar(&c.ProgressFile, "progress-file", "", "file rewritten with the latest progress JSON")
	flag.StringVar(&c.Checkpoint, "checkpoint", "", "file to resume from and rewrite after each iteration")
	gang := flag.String("gang-checkpoints", "", "FILE,...: the checkpoints of every worker of a synchronous gang, -checkpoint among them: resume from the least advanced and start only once all are up")
	speeds := flag.String("speed", "", "MODEL=FACTOR,...: iterations are FACTOR times shorter on GPU model MODEL (from $CARAVAN_GPU_MODEL); other models take the smallest factor")
	flag.StringVar(&c.GPUModel, "gpu-model", "", "GPU model for -speed (default: $CARAVAN_GPU_MODEL)")
	hostSpeed := flag.String("host-speed", "", "JSON {\"core_mhz\": MHz, \"share\": [cores, GB], \"points\": [[cores, GB, throughput], ...]}: iterations are shorter by the profile's throughput at the task's NOMAD_CPU_LIMIT and NOMAD_MEMORY_LIMIT (per GPU) over that at share")
	flag.Float64Var(&c.SharedSpeed, "shared-speed", 1, "share of its speed the run keeps for each other process on its GPU (simulated GPUs only; 1: none lost)")
	flag.Parse()
	c.Mode = workload.Mode(mode)
	if *gang != "" {
		c.GangCheckpoints = strings.Split(*gang, ",")
	}
	var err error
	if c.Speed, err = workload.ParseSpeeds(*speeds); err != nil {
		fmt.Fprintln(os.Stderr, "caravan-workload: -speed:", err)
		os.Exit(2)
	}
	if c.HostSpeed, err = workload.ParseHostSpeed(*hostSpeed); err != nil {
		fmt.Fprintln(os.Stderr, "caravan-workload: -host-speed:", err)
		os.Exit(2)
	}

	env := map[string]string{}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	if err := c.FromEnv(env); err != nil {
		fmt.Fprintln(os.Stderr, "caravan-workload:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if c.Mode == workload.ModeIgnoreSignal {
		stop()
		ctx = context.Background()
	}
	if err := workload.Run(ctx, c, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "caravan-workload:", err)
		os.Exit(1)
	}
}
