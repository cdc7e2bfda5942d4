package workload

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// A gang is the workers of one synchronous data-parallel job, one process
// per GPU: like NCCL's ranks, none makes progress until all have joined,
// and they share one model state, so a run resumes from the checkpoint the
// least advanced worker reached. Without this each worker would run its
// own course, so a job whose workers start seconds apart would keep the
// early workers' progress over a preemption and free their GPUs before
// the last one ends, which a real gang does not.

// gangPoll is how often a worker waiting for its gang looks again;
// gangBeat how often it shows it is up, well within gangFresh.
const (
	gangPoll = 20 * time.Millisecond
	gangBeat = 100 * time.Millisecond
)

// gangFresh is how recently a worker must have shown it is up to count as
// joined: a worker that was killed leaves its mark behind, and it goes
// stale.
const gangFresh = 500 * time.Millisecond

// upFile marks a worker as up: its checkpoint file with ".up" added,
// holding the process ID and start time so that a worker removes only
// its own mark.
func upFile(checkpoint string) string { return checkpoint + ".up" }

// validateGang checks a gang's checkpoint list against the worker's own.
func (c Config) validateGang() error {
	if len(c.GangCheckpoints) == 0 {
		return nil
	}
	switch {
	case c.Checkpoint == "":
		return errors.New("gang-checkpoints: needs -checkpoint, the worker's own file")
	case !slices.Contains(c.GangCheckpoints, c.Checkpoint):
		return fmt.Errorf("gang-checkpoints: does not list the worker's own checkpoint %q", c.Checkpoint)
	}
	for i, p := range c.GangCheckpoints {
		if p == "" {
			return fmt.Errorf("gang-checkpoints: entry %d is empty", i+1)
		}
		if slices.Contains(c.GangCheckpoints[:i], p) {
			return fmt.Errorf("gang-checkpoints: %q is listed twice", p)
		}
	}
	return nil
}

// gangResume is the last iteration every worker of the gang finished: the
// state they share.
func (c Config) gangResume() (int, error) {
	least := c.Iterations
	for _, p := range c.GangCheckpoints {
		done, err := ReadCheckpoint(p, c.Iterations)
		if err != nil {
			return 0, err
		}
		least = min(least, done)
	}
	return least, nil
}

// joinGang marks the worker up until stop is called, and waits until every
// other worker of the gang is up too (or ctx ends).
func (c Config) joinGang(ctx context.Context) (stop func(), err error) {
	mine := upFile(c.Checkpoint)
	mark := strconv.Itoa(os.Getpid()) + " " + strconv.FormatInt(time.Now().UnixNano(), 10)
	if err := writeFileAtomic(mine, []byte(mark+"\n")); err != nil {
		return func() {}, fmt.Errorf("gang: %w", err)
	}
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(gangBeat)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case now := <-t.C:
				_ = os.Chtimes(mine, now, now)
			}
		}
	}()
	stop = func() {
		close(done)
		<-stopped
		// A later run of this worker may have replaced the mark already.
		if data, err := os.ReadFile(mine); err == nil && strings.TrimSpace(string(data)) == mark {
			_ = os.Remove(mine)
		}
	}
	for !c.gangUp(time.Now()) {
		if err := sleep(ctx, gangPoll); err != nil {
			stop()
			return func() {}, err
		}
	}
	return stop, nil
}

// gangUp says every worker of the gang has shown it is up within
// gangFresh of now.
func (c Config) gangUp(now time.Time) bool {
	for _, p := range c.GangCheckpoints {
		fi, err := os.Stat(upFile(p))
		if err != nil || now.Sub(fi.ModTime()) > gangFresh {
			return false
		}
	}
	return true
}
