package replay

// This file cleans up after a replay: the jobs it submitted, and why a failed one failed.

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"
)

// failure turns a failed allocation of a job into an error naming the job,
// the allocation and what its task reported; nil when no failed task is
// found.
func (p *Plan) failure(ctx context.Context, n Nomad, jobID, workloadPath string) error {
	allocs, err := n.Allocations(ctx, jobID)
	if err != nil {
		return nil
	}
	for _, a := range allocs {
		for task, ts := range a.TaskStates {
			if ts == nil || !ts.Failed {
				continue
			}
			msg := ""
			driverFailed := false
			for _, ev := range ts.Events {
				if ev == nil {
					continue
				}
				if ev.Type == api.TaskDriverFailure || ev.Type == api.TaskSetupFailure {
					driverFailed = true
				}
				if ev.DisplayMessage != "" && ev.Type != api.TaskNotRestarting {
					msg = ev.Type + ": " + ev.DisplayMessage
				}
			}
			if driverFailed {
				return fmt.Errorf("job %s: the caravan driver could not start task %s of allocation %s (%s): is -workload %s on every client node and executable there?",
					jobID, task, shortID(a.ID), msg, workloadPath)
			}
			return fmt.Errorf("job %s: task %s of allocation %s failed (%s); see `nomad alloc logs -stderr %s`",
				jobID, task, shortID(a.ID), msg, a.ID)
		}
	}
	return nil
}

func shortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// purge removes every job of the replay, however the run ends.
func (p *Plan) purge(n Nomad) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stubs, err := n.Jobs(ctx, p.cfg.Job.Prefix)
	if err != nil {
		p.log.Error("cannot list the replay's jobs to purge them; purge them by hand", "prefix", p.cfg.Job.Prefix, "error", err)
		return
	}
	purged := 0
	for _, s := range stubs {
		if !strings.HasPrefix(s.ID, p.cfg.Job.Prefix) {
			continue
		}
		if err := n.Purge(ctx, s.ID); err != nil {
			p.log.Error("cannot purge a replay job", "job", s.ID, "error", err)
			continue
		}
		purged++
	}
	p.log.Info("purged the replay's jobs", "prefix", p.cfg.Job.Prefix, "jobs", purged)
}

// openCheckpointDir makes dir when it is missing or the replay's own, and
// then lets tasks running as any user write their checkpoints in it. It is
// not sticky: a job resumed in a new allocation, on this node or another,
// runs as another UID and must replace the checkpoint its earlier run
// wrote. A directory the user named and that exists is left as it is.
func openCheckpointDir(dir string, own bool) error {
	st, err := os.Stat(dir)
	switch {
	case os.IsNotExist(err):
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("checkpoint directory: %w", err)
		}
		own = true
	case err != nil:
		return fmt.Errorf("checkpoint directory: %w", err)
	case !st.IsDir():
		return fmt.Errorf("checkpoint directory %s is not a directory", dir)
	}
	if !own {
		return nil
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		return fmt.Errorf("checkpoint directory %s: tasks run as another user and must write there: %w", dir, err)
	}
	return nil
}
