// Command demo starts a local Consul and Nomad with caravan on a simulated
// heterogeneous GPU fleet, runs caravan's planner beside them, and submits
// jobs that show the planner at work: a long job demoted and preempted by a
// short one, small jobs packed into H100 lanes, and a profiled job that
// arrives when every GPU is busy, is held by the planner while it waits, and
// is released pinned to the GPU model that the matching chooses among the
// free ones. Ctrl-C stops everything.
// `make demo` runs it.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/caravan-gpu/caravan/e2e/harness"
	"github.com/hashicorp/nomad/api"
)

func main() {
	once := flag.Bool("once", false, "show the planner's decisions for about 30 s, then stop (for tests)")
	flag.Parse()
	if err := run(*once); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(once bool) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	say("== starting Consul and Nomad with caravan on a simulated GPU fleet ...")
	c, err := harness.Start(ctx, harness.Options{
		Fleet:        harness.DefaultFleet,
		DeviceConfig: demoPartitions,
		Logf:         func(f string, a ...any) { say("  "+f, a...) },
	})
	if err != nil {
		return err
	}
	say("  cluster state in %s", c.Dir)
	defer func() {
		say("\n== stopping Consul and Nomad ...")
		c.Stop()
		say("stopped; nothing left running")
	}()

	node, err := c.Node()
	if err != nil {
		return err
	}
	showGPUs(node)

	if err := prepare(c); err != nil {
		return err
	}

	say("\n== starting the planner (policy las+match; a job that passes 5 GPU-s drops a priority band)")
	planner, err := startPlanner(c)
	if err != nil {
		return err
	}
	defer planner.stop()
	if err := planner.waitReady(ctx, c); err != nil {
		return err
	}
	say("\n== the planner's dashboard: http://%s/ui/\n   (GPU map with the lanes packed, the queue with each demotion as it happens, the\n   planner's decisions, and the results, beside a caravan sim of the same policies)", planner.addr)

	submit := func(name string, iterations int, profile, model, why string) error {
		vars := map[string]string{"workload": filepath.Join(c.BinDir, "caravan-workload"), "name": name,
			"iterations": fmt.Sprint(iterations), "profile": profile, "model": model}
		job, err := c.ParseJobspec(c.Jobspec("planner-batch.nomad.hcl"), vars)
		if err != nil {
			return err
		}
		if _, _, err := c.Nomad.Jobs().Register(job, nil); err != nil {
			return fmt.Errorf("register %s: %w", name, err)
		}
		say("  submitted %-10s %s", name, why)
		return nil
	}

	say("\n== submitting jobs (jobspecs/planner-batch.nomad.hcl, each one caravan-workload process)")
	var fillers []string
	for _, f := range []struct {
		prefix     string
		count      int
		iterations int
		model, why string
	}{
		{"long", 4, 600, "Tesla T4", "2 min of training on a T4; the four fill every T4"},
		{"mid", 2, 600, "NVIDIA A100-SXM4-40GB", "2 min on an A100; the two fill both A100s"},
		{"small", 3, 600, "NVIDIA H100 80GB HBM3", "small enough for a quarter of an H100: packed into a lane"},
		{"burst", 5, 100, "NVIDIA H100 80GB HBM3", "20 s in an H100 lane; now every GPU is busy"},
	} {
		for i := 1; i <= f.count; i++ {
			name := fmt.Sprintf("%s-%d", f.prefix, i)
			fillers = append(fillers, name)
			if err := submit(name, f.iterations, "", f.model, f.why); err != nil {
				return err
			}
		}
	}
	start := time.Now()
	// resnet must find every GPU taken, or Nomad places it at once and
	// there is nothing to match.
	if err := waitPlaced(ctx, c.Nomad, fillers, time.Minute); err != nil {
		return err
	}
	if err := submit("resnet", 300, "resnet", "", "has the resnet profile, 6x faster on an H100 than on a T4; every GPU is busy, so it waits"); err != nil {
		return err
	}

	if err := watchQueue(ctx, c, planner.addr, start, once, submit); err != nil {
		if ctx.Err() != nil {
			return nil // Ctrl-C
		}
		return err
	}
	if err := showOutcome(c, planner.addr); err != nil {
		return err
	}
	say("\n`make demo` without -once keeps the cluster and the planner running until Ctrl-C.")
	return nil
}

// watchQueue prints the planner's queue on a schedule (every 5 s once it
// is through, until ctx ends, unless once), and submits the short job that
// preempts a demoted one 10 s in. It returns ctx's error when ctx ends.
func watchQueue(ctx context.Context, c *harness.Cluster, addr string, start time.Time, once bool,
	submit func(name string, iterations int, profile, model, why string) error) error {
	shortAt := 10 * time.Second
	shortSent := false
	show := func() error {
		say("\n$ caravan queue   (%.0f s in)", time.Since(start).Seconds())
		out, err := caravan(c, "queue", "-address", addr)
		fmt.Print(out)
		return err
	}
	if !once {
		say("\nThe queue is printed every 5 s, with the planner's decisions as they happen; Ctrl-C stops the demo.\nTo watch it live, open http://%s/ui/ or from another shell:\n  export NOMAD_ADDR=%s CONSUL_HTTP_ADDR=%s\n  %s queue -watch -address %s",
			addr, c.NomadAddr, c.ConsulAddr, filepath.Join(c.BinDir, "caravan"), addr)
	}
	schedule := []time.Duration{6 * time.Second, 12 * time.Second, 20 * time.Second, 28 * time.Second, 36 * time.Second}
	for k := 0; ; k++ {
		var at time.Duration
		switch {
		case k < len(schedule):
			at = schedule[k]
		case once:
			at = -1
		default:
			at = schedule[len(schedule)-1] + time.Duration(k-len(schedule)+1)*5*time.Second
		}
		if at < 0 {
			break
		}
		for time.Since(start) < at {
			if !shortSent && time.Since(start) >= shortAt {
				if err := submit("short", 15, "", "Tesla T4", "3 s of training on a T4: top band, preempts a demoted long job"); err != nil {
					return err
				}
				shortSent = true
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
		}
		if err := show(); err != nil {
			return fmt.Errorf("caravan queue: %w", err)
		}
	}
	return nil
}

// prepare turns on Nomad's preemption, imports a throughput profile and
// simulates two policies for the dashboard's Results view.
func prepare(c *harness.Cluster) error {
	say("\n== turning on Nomad's preemption, a fallback for jobs the planner has not held (it preempts by holding jobs itself)")
	out, err := caravan(c, "setup")
	say("$ caravan setup\n%s", strings.TrimSpace(out))
	if err != nil {
		return fmt.Errorf("caravan setup: %w", err)
	}

	profiles := filepath.Join(c.Dir, "profiles.json")
	if err := os.WriteFile(profiles, []byte(demoProfiles), 0o644); err != nil {
		return err
	}
	out, err = caravan(c, "profile", "import", profiles)
	say("\n== importing a throughput profile: resnet runs 6x faster on an H100 than on a T4\n$ caravan profile import profiles.json\n%s", strings.TrimSpace(out))
	if err != nil {
		return fmt.Errorf("caravan profile import: %w", err)
	}

	// Before any job, so that it takes no time from the planner's rounds.
	if err := os.MkdirAll(resultsDir(c), 0o755); err != nil {
		return err
	}
	out, err = caravan(c, "sim", "-cluster", "n1g8", "-policy", "fifo,las", "-jobs", "200", "-load", "30",
		"-out", filepath.Join(resultsDir(c), "sim-fifo-las"))
	if err != nil {
		return fmt.Errorf("caravan sim for the dashboard's Results view: %w: %s", err, out)
	}
	return nil
}

// showOutcome shows where the jobs ran, the pin the planner gave resnet,
// the lanes, and the planner's explanations of a preempted job and resnet.
func showOutcome(c *harness.Cluster, addr string) error {
	if err := showAllocations(c.Nomad); err != nil {
		return err
	}
	if err := showPin(c.Nomad, "resnet"); err != nil {
		return err
	}
	if on := runsOn(c.Nomad, "resnet"); on != "" {
		say("\nresnet arrived with every GPU busy, so the matching had no free GPU to queue it on: the planner held it\nwhile it waited, then released it with the constraint above on the model the matching chose among the\nGPUs that were free (2D-LAS ranks it above the demoted jobs it may preempt), and it runs on %s.", on)
	}
	out, _ := caravan(c, "lanes")
	say("\n$ caravan lanes   (the small jobs share H100s, a quarter each)\n%s", strings.TrimRight(out, "\n"))
	explainJobs := []string{"resnet"}
	if victim := preemptedJob(c.Nomad, "long-1", "long-2", "long-3", "long-4"); victim != "" {
		explainJobs = append([]string{victim}, explainJobs...)
		say("\n%s was preempted by short: the planner held it and stopped its allocation, short ran and completed,\nand the planner released %s again with its attained service kept.", victim, victim)
	}
	for _, job := range explainJobs {
		out, _ = caravan(c, "explain", "-address", addr, job)
		say("\n$ caravan explain %s\n%s", job, strings.TrimRight(out, "\n"))
	}
	return nil
}

// waitPlaced waits until every one of jobs has a running or pending
// allocation.
func waitPlaced(ctx context.Context, client *api.Client, jobs []string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		left := 0
		for _, id := range jobs {
			allocs, _, err := client.Jobs().Allocations(id, false, nil)
			if err != nil {
				return err
			}
			placed := false
			for _, a := range allocs {
				placed = placed || a.DesiredStatus == "run" && (a.ClientStatus == "running" || a.ClientStatus == "pending")
			}
			if !placed {
				left++
			}
		}
		if left == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d jobs not placed after %s", left, len(jobs), timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// showPin prints the GPU request of a job as Nomad holds it, with the
// model constraint the planner wrote, and where the job runs.
func showPin(client *api.Client, id string) error {
	job, _, err := client.Jobs().Info(id, nil)
	if err != nil {
		return err
	}
	var devs []*api.RequestedDevice
	for _, tg := range job.TaskGroups {
		for _, task := range tg.Tasks {
			if task.Resources != nil {
				devs = append(devs, task.Resources.Devices...)
			}
		}
	}
	data, err := json.MarshalIndent(devs, "", "  ")
	if err != nil {
		return err
	}
	say("\n$ nomad job inspect %s   (its GPU request: the constraint is the planner's, recorded in meta %s=%q)\n%s",
		id, "caravan.planner.placement", job.Meta["caravan.planner.placement"], data)
	return nil
}

// runsOn returns the GPU model and device instance a job's live
// allocation holds, or "".
func runsOn(client *api.Client, id string) string {
	allocs, _, err := client.Jobs().Allocations(id, false, nil)
	if err != nil {
		return ""
	}
	for _, stub := range allocs {
		if stub.ClientStatus != "running" && stub.ClientStatus != "complete" {
			continue
		}
		alloc, _, err := client.Allocations().Info(stub.ID, nil)
		if err != nil || alloc.AllocatedResources == nil {
			continue
		}
		for _, task := range alloc.AllocatedResources.Tasks {
			for _, d := range task.Devices {
				if len(d.DeviceIDs) > 0 {
					return d.Name + " " + d.DeviceIDs[0]
				}
			}
		}
	}
	return ""
}

// preemptedJob returns the first of jobs with an allocation that Nomad
// preempted, or "".
func preemptedJob(client *api.Client, jobs ...string) string {
	for _, id := range jobs {
		allocs, _, err := client.Jobs().Allocations(id, true, nil)
		if err != nil {
			continue
		}
		for _, a := range allocs {
			if a.DesiredStatus == "stop" || a.DesiredStatus == "evict" || a.PreemptedByAllocation != "" {
				return id
			}
		}
	}
	return ""
}

func showGPUs(node *api.Node) {
	say("\nnode %s GPUs (device groups as Nomad sees them):", node.Name)
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "DEVICE\tINSTANCES\tHEALTHY\tMEMORY\tATTRIBUTES")
	devs := node.NodeResources.Devices
	sort.Slice(devs, func(i, j int) bool { return devs[i].ID() < devs[j].ID() })
	for _, d := range devs {
		healthy := 0
		for _, inst := range d.Instances {
			if inst.Healthy {
				healthy++
			}
		}
		var attrs []string
		memory := ""
		for k, v := range d.Attributes {
			if k == "memory" {
				memory = v.String()
				continue
			}
			if k == "lanes_per_gpu" || k == "lane_share" || k == "model" || k == "gpu_memory" {
				attrs = append(attrs, k+"="+v.String())
			}
		}
		sort.Strings(attrs)
		fmt.Fprintf(w, "%s\t%d\t%d\t%s\t%s\n", d.ID(), len(d.Instances), healthy, memory, strings.Join(attrs, " "))
	}
	w.Flush()
}

func showAllocations(client *api.Client) error {
	allocs, _, err := client.Allocations().List(nil)
	if err != nil {
		return err
	}
	sort.Slice(allocs, func(i, j int) bool { return allocs[i].JobID < allocs[j].JobID })
	say("\nallocations:")
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "JOB\tALLOC\tSTATUS\tDEVICES")
	for _, stub := range allocs {
		alloc, _, err := client.Allocations().Info(stub.ID, nil)
		if err != nil {
			return err
		}
		var devices []string
		if alloc.AllocatedResources != nil {
			for _, task := range alloc.AllocatedResources.Tasks {
				for _, d := range task.Devices {
					devices = append(devices, fmt.Sprintf("%s/%s/%s%v", d.Vendor, d.Type, d.Name, d.DeviceIDs))
				}
			}
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", stub.JobID, stub.ID[:8], stub.ClientStatus, strings.Join(devices, " "))
	}
	return w.Flush()
}

func say(format string, args ...any) { fmt.Printf(format+"\n", args...) }
