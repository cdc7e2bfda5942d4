//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/caravan-gpu/caravan/e2e/harness"
	"github.com/caravan-gpu/caravan/planner/cluster"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// The Nomad server is killed (SIGKILL) while the planner is starting a
// queue of held jobs and restarted on its data: the planner, never
// restarted itself, keeps leading and starts every job.
func TestFaultNomadServerKilledDuringRounds(t *testing.T) {
	c := harness.StartT(t, harness.Options{Fleet: twoT4})
	p := startPlanner(t, c, "p1", `policy = "fifo"`+fastRounds)
	waitFor(t, 30*time.Second, "the planner leads", func() bool { s := p.status(t); return s != nil && s.Leader })
	var jobs []string
	for i := 0; i < 6; i++ {
		id := fmt.Sprintf("queued-%d", i)
		submit(t, c, id, 10, 1, nil)
		jobs = append(jobs, id)
	}
	c.WaitAllocs(t, jobs[0], 1, time.Minute, harness.Running)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	killed := time.Now()
	must.NoError(t, c.KillServer(ctx))
	back := time.Now()
	before := p.status(t).Rounds
	var recovered time.Duration
	waitFor(t, 60*time.Second, "the planner plans again", func() bool {
		s := p.status(t)
		if s == nil || s.Rounds <= before || s.LastRound == nil || s.LastRound.Error != "" {
			return false
		}
		recovered = time.Since(back)
		return true
	})
	t.Logf("server down and back in %s; the planner's first good round %s after it was back",
		back.Sub(killed).Round(time.Millisecond), recovered.Round(time.Millisecond))
	for _, id := range jobs {
		c.WaitAllocs(t, id, 1, 2*time.Minute, harness.Complete)
	}
	select {
	case <-p.done:
		t.Fatal("the planner exited")
	default:
	}
	must.True(t, p.status(t).Leader)
}

// The device plugin is killed (SIGKILL) while two tasks run on lanes: Nomad
// starts it again, the lanes come back with the same IDs, and neither task
// is disturbed.
func TestFaultDevicePluginKilled(t *testing.T) {
	c := harness.StartT(t, harness.Options{Fleet: deviceFleet, DeviceConfig: h100Lanes})
	waitDeviceGroups(t, c, map[string]int{laneGroup: 8, "NVIDIA A100-SXM4-40GB": 2, "Tesla T4": 4})
	before := laneIDs(t, c)
	type running struct{ alloc, device string }
	var tasks []running
	for i := 0; i < 2; i++ {
		alloc := waitRunning(t, c, runDeviceJob(t, c, "device-lane.nomad.hcl", fmt.Sprintf("lane-%d", i), map[string]string{"min_memory": "10 GiB"}))
		tasks = append(tasks, running{alloc.ID, allocDevice(t, alloc).DeviceIDs[0]})
	}

	pid := pluginPID(t, filepath.Join(c.Dir, "plugins", "caravan-device"))
	killed := time.Now()
	must.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	waitFor(t, 90*time.Second, "a new caravan-device process", func() bool {
		p, ok := findPluginPID(filepath.Join(c.Dir, "plugins", "caravan-device"))
		return ok && p != pid
	})
	waitFor(t, 90*time.Second, "the lanes fingerprinted again by the new plugin", func() bool {
		node, err := c.Node()
		return err == nil && node.NodeResources != nil && fmt.Sprint(before) == fmt.Sprint(laneIDs(t, c))
	})
	t.Logf("device plugin killed; restarted and lanes back within %s", time.Since(killed).Round(time.Millisecond))
	for _, task := range tasks {
		alloc, _, err := c.Nomad.Allocations().Info(task.alloc, nil)
		must.NoError(t, err)
		must.Eq(t, "running", alloc.ClientStatus)
		must.Eq(t, task.device, allocDevice(t, alloc).DeviceIDs[0])
		for _, ts := range alloc.TaskStates {
			must.Eq(t, uint64(0), ts.Restarts, must.Sprint("a task restarted when the device plugin died"))
		}
	}
}

// laneIDs lists the node's healthy lane instance IDs.
func laneIDs(t *testing.T, c *harness.Cluster) []string {
	t.Helper()
	node, err := c.Node()
	must.NoError(t, err)
	var ids []string
	for _, d := range node.NodeResources.Devices {
		if d.Type != "lane" {
			continue
		}
		for _, in := range d.Instances {
			if in.Healthy {
				ids = append(ids, in.ID)
			}
		}
	}
	sort.Strings(ids)
	return ids
}

func pluginPID(t *testing.T, path string) int {
	t.Helper()
	pid, ok := findPluginPID(path)
	must.True(t, ok, must.Sprintf("no process runs %s", path))
	return pid
}

// findPluginPID finds the process whose command line starts with path.
func findPluginPID(path string) (int, bool) {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if strings.HasPrefix(string(cmdline), path+"\x00") || string(cmdline) == path {
			return pid, true
		}
	}
	return 0, false
}

// The leading planner is killed (SIGKILL) in the middle of a round that
// holds 1,000 jobs, while a user edits jobs: the other replica leads within
// 15 s and finishes the round; every job is whole (the hold's meta and its
// constraint agree) and every user edit is kept.
func TestFaultLeaderKilledMidRound(t *testing.T) {
	c := harness.StartT(t, harness.Options{Fleet: oneT4})
	registerJobs(t, c, benchJobs, 50)
	leader, follower := oneLeader(t, startPlanner(t, c, "a", ""), startPlanner(t, c, "b", ""))
	held := func() int {
		stubs, _, err := c.Nomad.Jobs().ListOptions(&api.JobListOptions{Fields: &api.JobListFields{Meta: true}}, nil)
		must.NoError(t, err)
		n := 0
		for _, s := range stubs {
			if s.Meta[cluster.MetaHeld] == "true" {
				n++
			}
		}
		return n
	}
	waitFor(t, 60*time.Second, "the leader is mid-round", func() bool { n := held(); return n >= 50 && n < benchJobs })

	// A user edits jobs throughout, each edit conditional on the version read.
	edits := map[string]string{}
	stop := make(chan struct{})
	doneEditing := make(chan struct{})
	go func() {
		defer close(doneEditing)
		for k := 0; ; k++ {
			select {
			case <-stop:
				return
			default:
			}
			id := fmt.Sprintf("bench-%04d", (k*37)%benchJobs)
			value := strconv.Itoa(k)
			for attempt := 0; attempt < 20; attempt++ {
				job, _, err := c.Nomad.Jobs().Info(id, nil)
				if err != nil {
					continue
				}
				job.Meta["user.edit"] = value
				if _, _, err := c.Nomad.Jobs().EnforceRegister(job, *job.JobModifyIndex, nil); err == nil {
					edits[id] = value
					break
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()

	killed := time.Now()
	leader.stop(syscall.SIGKILL)
	heldAtKill := held()
	waitFor(t, 15*time.Second, "the follower takes over", func() bool { s := follower.status(t); return s != nil && s.Leader })
	failover := time.Since(killed)
	waitFor(t, 2*time.Minute, "every job held", func() bool { return held() == benchJobs })
	close(stop)
	<-doneEditing
	t.Logf("leader killed with %d of %d jobs held; the follower led after %s", heldAtKill, benchJobs, failover.Round(time.Millisecond))

	stubs, _, err := c.Nomad.Jobs().List(nil)
	must.NoError(t, err)
	for _, s := range stubs {
		job, _, err := c.Nomad.Jobs().Info(s.ID, nil)
		must.NoError(t, err)
		must.Eq(t, job.Meta[cluster.MetaHeld] == "true", cluster.Held(job), must.Sprintf("job %s is half-written", s.ID))
		if want, ok := edits[s.ID]; ok {
			must.Eq(t, want, job.Meta["user.edit"], must.Sprintf("job %s lost the user's edit", s.ID))
		}
	}
	t.Logf("%d user edits, all kept", len(edits))
}

// eightT4s is eight GPUs of one lane each, two slots per lane: sixteen
// lane tasks, half of them suspended at any time.
const eightT4s = `{"driver_version": "550.54.15", "cuda_version": "12.4", "gpus": [
  {"uuid": "GPU-t0", "model": "Tesla T4", "memory_mib": 15360, "sm_count": 40},
  {"uuid": "GPU-t1", "model": "Tesla T4", "memory_mib": 15360, "sm_count": 40},
  {"uuid": "GPU-t2", "model": "Tesla T4", "memory_mib": 15360, "sm_count": 40},
  {"uuid": "GPU-t3", "model": "Tesla T4", "memory_mib": 15360, "sm_count": 40},
  {"uuid": "GPU-t4", "model": "Tesla T4", "memory_mib": 15360, "sm_count": 40},
  {"uuid": "GPU-t5", "model": "Tesla T4", "memory_mib": 15360, "sm_count": 40},
  {"uuid": "GPU-t6", "model": "Tesla T4", "memory_mib": 15360, "sm_count": 40},
  {"uuid": "GPU-t7", "model": "Tesla T4", "memory_mib": 15360, "sm_count": 40}]}`

// The Nomad client is restarted while sixteen lane tasks run, eight of them
// suspended with their GPU processes checkpointed. Every task is recovered
// by the new driver process; each suspended one comes back suspended and is
// resumed when its lane's turn comes; two tasks that break their budget
// only after the restart are still killed for it; the others complete.
func TestFaultClientRestartWithSixteenLaneTasks(t *testing.T) {
	c := harness.StartT(t, harness.Options{
		Fleet:        eightT4s,
		DeviceConfig: oneLaneTwoSlots,
		DriverConfig: timeSlicing("3s"),
	})
	vars := workloadVars(c)
	// 150 iterations, 30 s of each task's own running: on a loaded machine
	// the sixteen start over a dozen seconds or more, and the first of a
	// lane must still run when its partner starts, so that the lane
	// switches (at 90 iterations, one lane in some runs never did).
	vars["iterations"] = "150"
	exceeds := map[string]bool{"lane-00": true, "lane-08": true}
	// The two break their budget once this file exists, which the test
	// makes after the restart: an iteration count would have them break it
	// before, when their lane's partner starts late on a loaded machine.
	actNow := filepath.Join(c.Dir, "act-now")
	var ids []string
	for i := 0; i < 16; i++ {
		job, err := c.ParseJobspec(c.Jobspec("driver-lane-a.nomad.hcl"), vars)
		must.NoError(t, err)
		id := fmt.Sprintf("lane-%02d", i)
		job.ID, job.Name = &id, &id
		task := job.TaskGroups[0].Tasks[0]
		if exceeds[id] {
			// 250 iterations, 50 s of its own running: it is still there
			// after the restart, and breaks its budget at its next
			// iteration then.
			args := task.Config["args"].([]any)
			must.Eq[any](t, "-iterations", args[0])
			args[1] = "250"
			task.Config["args"] = append(args, "-mode", "exceed", "-after", "0", "-act-when", actNow)
			task.Config["gpu_memory_policy"] = "kill"
		}
		_, _, err = c.Nomad.Jobs().Register(job, nil)
		must.NoError(t, err)
		ids = append(ids, id)
	}

	// Restart once every lane has switched: eight tasks suspended with a
	// checkpoint.
	suspended := map[string]bool{}
	// The sixteen may take two minutes to start on a loaded 2-core machine.
	waitFor(t, 4*time.Minute, "eight tasks suspended with a checkpoint", func() bool {
		clear(suspended)
		for _, id := range ids {
			events := taskEvents(t, c, id)
			if n := len(events); n > 0 && strings.HasPrefix(events[n-1], "suspended in GPU-") && strings.Contains(events[n-1], "checkpointed PIDs") {
				suspended[id] = true
			}
		}
		return len(suspended) == 8
	})
	restarted := time.Now()
	c.RestartClientT(t)
	t.Logf("client restarted in %s with %d tasks suspended: %v", time.Since(restarted).Round(time.Millisecond), len(suspended), suspended)
	must.NoError(t, os.WriteFile(actNow, nil, 0o644))

	// Every task is recovered; a suspended one says so, with its checkpoint.
	// The old driver persists a switch before Nomad hears of it, and it
	// runs on for a second or so after the restart begins, so its last
	// switch may have no event. A lane switches every quantum (3 s), so
	// where the last switch reported came two quanta before the restart,
	// the lane had stopped switching, and the recovered state must be the
	// one that switch left.
	const quantum = 3 * time.Second
	recovered := map[string]string{}
	seen := map[string][]string{} // each task's events when last looked at
	type reported struct {
		suspended bool
		at        time.Time
	}
	lastReported := map[string]reported{}
	defer func() {
		if t.Failed() {
			for _, id := range ids {
				if _, ok := recovered[id]; !ok {
					t.Logf("%s, not seen recovered; its last events: %q", id, seen[id])
				}
			}
		}
	}()
	waitFor(t, time.Minute, "all sixteen tasks recovered", func() bool {
		for _, id := range ids {
			if _, ok := recovered[id]; ok {
				continue
			}
			events := taskEventList(t, c, id)
			seen[id] = seen[id][:0]
			for _, ev := range events {
				seen[id] = append(seen[id], ev.DisplayMessage)
			}
			for _, ev := range events {
				if strings.HasPrefix(ev.DisplayMessage, "recovered by a new driver process") {
					recovered[id] = ev.DisplayMessage
					// The old driver's last switch: by time, not by place
					// in the list, as the new driver's first resume can
					// reach Nomad before its recovery.
					if was, at, ok := lastSwitch(events, time.Unix(0, ev.Time)); ok {
						lastReported[id] = reported{was, at}
					}
				}
			}
		}
		return len(recovered) == len(ids)
	})
	clear(suspended)
	for id, ev := range recovered {
		now := strings.Contains(ev, "suspended: true")
		if now {
			must.StrContains(t, ev, "suspended: true, checkpointed PIDs", must.Sprintf("%s recovered suspended", id))
			suspended[id] = true
		} else {
			must.StrContains(t, ev, "suspended: false", must.Sprintf("%s recovered", id))
		}
		if r, ok := lastReported[id]; ok && restarted.Sub(r.at) >= 2*quantum {
			must.Eq(t, r.suspended, now, must.Sprintf("%s: its last switch, %s before the restart, left it suspended: %v", id, restarted.Sub(r.at).Round(time.Millisecond), r.suspended))
		}
	}
	t.Logf("all %d tasks recovered %s after the restart began; suspended at the restart: %v", len(recovered),
		time.Since(restarted).Round(time.Millisecond), suspended)
	// One task of each of the eight lanes, give or take a lane caught
	// between its suspend and its resume.
	must.Between(t, 7, len(suspended), 9, must.Sprint("tasks suspended at the restart"))

	// Each suspended task is resumed on schedule, restored from its
	// checkpoint, and every task ends as it should.
	resumed := map[string]time.Duration{}
	last := map[string][]string{} // each task's events when last looked at
	defer func() {
		if t.Failed() {
			for id := range suspended {
				if _, ok := resumed[id]; !ok {
					t.Logf("%s, not seen resumed; its last events: %q", id, last[id])
				}
			}
		}
	}()
	waitFor(t, 2*time.Minute, "every suspended task resumed", func() bool {
		for id := range suspended {
			if _, ok := resumed[id]; ok {
				continue
			}
			events := taskEvents(t, c, id)
			last[id] = events
			for i, ev := range events {
				if strings.HasPrefix(ev, "recovered by a new driver process") {
					for _, later := range events[i+1:] {
						if strings.HasPrefix(later, "resumed in GPU-") && strings.Contains(later, "restored PIDs") {
							resumed[id] = time.Since(restarted)
						}
					}
				}
			}
		}
		return len(resumed) == len(suspended)
	})
	t.Logf("suspended tasks resumed after the restart: %v", resumed)
	for _, id := range ids {
		allocs := c.WaitAllocs(t, id, 1, 3*time.Minute, harness.Terminal)
		if exceeds[id] {
			must.Eq(t, "failed", allocs[0].ClientStatus, must.Sprintf("%s broke its budget after the restart", id))
			events := strings.Join(taskEvents(t, c, id), "\n")
			at := strings.Index(events, "GPU memory budget exceeded")
			must.Positive(t, at, must.Sprintf("%s was not killed for its budget: %s", id, events))
			// Judged by time, not by the order of the events: the task
			// runner's own event of the kill ("Terminated", with the exit
			// message) may come before the new driver's event of the
			// recovery, which reaches Nomad through the driver's event
			// stream.
			for _, ev := range taskEventList(t, c, id) {
				if strings.Contains(ev.DisplayMessage, "GPU memory budget exceeded") {
					must.True(t, time.Unix(0, ev.Time).After(restarted),
						must.Sprintf("%s broke its budget before the restart: %q at %s", id, ev.DisplayMessage, time.Unix(0, ev.Time)))
				}
			}
			continue
		}
		must.Eq(t, "complete", allocs[0].ClientStatus, must.Sprintf("%s", id))
	}
}

// lastSwitch says whether the latest lane switch among events before
// the instant before suspended the task with its processes checkpointed
// (true) or resumed it (false), and when; ok is false when none came
// before it.
func lastSwitch(events []*api.TaskEvent, before time.Time) (suspended bool, at time.Time, ok bool) {
	for _, ev := range events {
		t := time.Unix(0, ev.Time)
		if !t.Before(before) || ok && t.Before(at) {
			continue
		}
		switch {
		case strings.HasPrefix(ev.DisplayMessage, "suspended in GPU-"):
			suspended, at, ok = strings.Contains(ev.DisplayMessage, "checkpointed PIDs"), t, true
		case strings.HasPrefix(ev.DisplayMessage, "resumed in GPU-"):
			suspended, at, ok = false, t, true
		}
	}
	return suspended, at, ok
}

// taskEvents lists the display messages of the job's first allocation's
// task events, oldest first (Nomad keeps a task's last ten).
func taskEvents(t *testing.T, c *harness.Cluster, jobID string) []string {
	t.Helper()
	var msgs []string
	for _, ev := range taskEventList(t, c, jobID) {
		msgs = append(msgs, ev.DisplayMessage)
	}
	return msgs
}

// taskEventList is the task events of the job's first allocation.
func taskEventList(t *testing.T, c *harness.Cluster, jobID string) []*api.TaskEvent {
	t.Helper()
	stubs, _, err := c.Nomad.Jobs().Allocations(jobID, false, nil)
	must.NoError(t, err)
	for _, stub := range stubs {
		alloc, _, err := c.Nomad.Allocations().Info(stub.ID, nil)
		must.NoError(t, err)
		var evs []*api.TaskEvent
		for _, state := range alloc.TaskStates {
			evs = append(evs, state.Events...)
		}
		return evs
	}
	return nil
}
