// Command caravan-gpucheck measures on a real GPU what caravan's simulated
// backend assumes (gpu/gpucheck), and writes gpu-check.json and
// gpu-check.md. Where there is no GPU it says so and exits 0.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/caravan-gpu/caravan/gpu/gpucheck"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "alloc" {
		os.Exit(alloc(os.Args[2:]))
	}
	os.Exit(check(os.Args[1:]))
}

func alloc(args []string) int {
	fs := flag.NewFlagSet("alloc", flag.ContinueOnError)
	mib := fs.Uint64("mib", 1024, "MiB to allocate and hold")
	spikeMiB := fs.Uint64("spike-mib", 0, "MiB more to allocate for -spike, once")
	spike := fs.Duration("spike", time.Millisecond, "how long the spike lasts")
	hold := fs.Duration("hold", 10*time.Second, "how long to hold -mib")
	libcuda := fs.String("libcuda", "libcuda.so.1", "the CUDA driver library")
	probeStep := fs.Uint64("probe-step", 0, "allocate this many MiB at a time until refused, instead of -mib")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *probeStep > 0 {
		if err := gpucheck.Probe(*libcuda, *probeStep, *hold, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "caravan-gpucheck alloc:", err)
			return 1
		}
		return 0
	}
	if err := gpucheck.Alloc(*libcuda, *mib, *spikeMiB, *spike, *hold, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "caravan-gpucheck alloc:", err)
		return 1
	}
	return 0
}

func check(args []string) int {
	fs := flag.NewFlagSet("caravan-gpucheck", flag.ContinueOnError)
	out := fs.String("out", ".", "directory for gpu-check.json and gpu-check.md")
	cli := fs.String("cuda-checkpoint", "", "the cuda-checkpoint utility (PATH when empty)")
	mps := fs.String("mps-control", "", "nvidia-cuda-mps-control (PATH when empty)")
	sizes := fs.String("sizes", "1,10,40", "checkpoint sizes in GiB, comma-separated")
	only := fs.String("checks", "", "comma-separated checks to run, of "+strings.Join(gpucheck.CheckNames(), ",")+" (all when empty)")
	timeout := fs.Duration("timeout", 8*time.Minute, "give up after this long")
	opTimeout := fs.Duration("op-timeout", 2*time.Minute, "give up on one checkpoint, restore or state call after this long")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var gib []uint64
	for _, f := range strings.Split(*sizes, ",") {
		n, err := strconv.ParseUint(strings.TrimSpace(f), 10, 64)
		if err != nil || n == 0 {
			fmt.Fprintf(os.Stderr, "caravan-gpucheck: -sizes: %q is not a whole number of GiB above 0\n", f)
			return 2
		}
		gib = append(gib, n)
	}
	var names []string
	if *only != "" {
		known := map[string]bool{}
		for _, n := range gpucheck.CheckNames() {
			known[n] = true
		}
		for _, f := range strings.Split(*only, ",") {
			f = strings.TrimSpace(f)
			if !known[f] {
				fmt.Fprintf(os.Stderr, "caravan-gpucheck: -checks: %q is not a check; the checks are %s\n", f, strings.Join(gpucheck.CheckNames(), ","))
				return 2
			}
			names = append(names, f)
		}
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "caravan-gpucheck:", err)
		return 1
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	ctx, cancelTimeout := context.WithTimeout(ctx, *timeout)
	defer cancelTimeout()
	rep, err := gpucheck.Run(ctx, gpucheck.Options{Self: self, CheckpointCLI: *cli, MPSControl: *mps, SizesGiB: gib, Checks: names, OpTimeout: *opTimeout,
		Logf: func(format string, a ...any) { fmt.Fprintf(os.Stderr, format+"\n", a...) },
		Progress: func(partial gpucheck.Report) {
			if err := partial.WriteFiles(*out); err != nil {
				fmt.Fprintln(os.Stderr, "caravan-gpucheck:", err)
			}
		}})
	if errors.Is(err, gpucheck.ErrNoGPU) {
		fmt.Printf("gpu-check: %v; nothing measured\n", err)
		return 0
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "caravan-gpucheck:", err)
		return 1
	}
	if err := rep.WriteFiles(*out); err != nil {
		fmt.Fprintln(os.Stderr, "caravan-gpucheck:", err)
		return 1
	}
	fmt.Print(rep.Markdown())
	return 0
}
