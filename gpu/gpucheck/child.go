package gpucheck

// This file is the child side of the checks: a process that allocates GPU memory through libcuda as a check asks.

import (
	"errors"
	"fmt"
	"io"
	"time"
)

// Probe is the child that finds how much it may hold: it allocates stepMiB
// at a time until an allocation fails, says "ready <MiB held>", and holds
// that for hold.
func Probe(libcuda string, stepMiB uint64, hold time.Duration, out io.Writer) error {
	c, err := OpenCUDA(libcuda)
	if err != nil {
		return err
	}
	if stepMiB == 0 {
		return errors.New("probe step is 0 MiB")
	}
	var held uint64
	for {
		if _, err := c.Alloc(stepMiB); err != nil {
			break
		}
		held += stepMiB
	}
	fmt.Fprintf(out, "ready %d\n", held)
	time.Sleep(hold)
	return nil
}

// Alloc is the child: it allocates mib MiB through libcuda (none, only a
// context, for 0), says "ready",
// holds a spike of spikeMiB more for spike, and holds mib for hold.
func Alloc(libcuda string, mib, spikeMiB uint64, spike, hold time.Duration, out io.Writer) error {
	c, err := OpenCUDA(libcuda)
	if err != nil {
		return err
	}
	if mib > 0 {
		if _, err := c.Alloc(mib); err != nil {
			return err
		}
	}
	fmt.Fprintln(out, "ready")
	if spikeMiB > 0 {
		ptr, err := c.Alloc(spikeMiB)
		if err != nil {
			return err
		}
		time.Sleep(spike)
		if err := c.Free(ptr); err != nil {
			return err
		}
	}
	time.Sleep(hold)
	return nil
}
