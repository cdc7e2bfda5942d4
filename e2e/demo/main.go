// Command demo starts a local Consul and Nomad with caravan's plugins on a
// simulated heterogeneous GPU fleet, submits the sample jobs and shows what
// happened. Ctrl-C stops everything. `make demo` runs it.
package main

import (
	"context"
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
	once := flag.Bool("once", false, "show the cluster and the jobs' outcome, then stop (for tests)")
	flag.Parse()
	if err := run(*once); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(once bool) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	say("starting Consul and Nomad with caravan on a simulated GPU fleet ...")
	c, err := harness.Start(ctx, harness.Options{
		Fleet:        demoFleet,
		DeviceConfig: demoPartitions,
		Logf:         func(f string, a ...any) { say("  "+f, a...) },
	})
	if err != nil {
		return err
	}
	defer func() {
		say("stopping Consul and Nomad ...")
		c.Stop()
		say("stopped; nothing left running")
	}()

	node, err := c.Node()
	if err != nil {
		return err
	}
	showGPUs(node)

	jobs, err := filepath.Glob(filepath.Join(c.RepoRoot, "jobspecs", "demo-*.nomad.hcl"))
	if err != nil {
		return err
	}
	jobs = append([]string{c.Jobspec("hello.nomad.hcl")}, jobs...)
	vars := map[string]string{"workload": filepath.Join(c.BinDir, "caravan-workload")}
	for _, path := range jobs {
		job, err := c.ParseJobspec(path, usedVars(path, vars))
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if _, _, err := c.Nomad.Jobs().Register(job, nil); err != nil {
			return fmt.Errorf("register %s: %w", path, err)
		}
		say("submitted %s (%s)", *job.ID, filepath.Base(path))
	}

	select {
	case <-ctx.Done():
		return nil
	case <-time.After(8 * time.Second):
	}
	if err := showAllocations(c.Nomad); err != nil {
		return err
	}

	out, _ := c.NomadCommand("node", "status", "-verbose", node.ID)
	say("\n$ nomad node status -verbose %s (devices)\n%s", node.ID[:8], deviceSection(out))

	say("\nThe cluster is yours to explore:\n  export NOMAD_ADDR=%s CONSUL_HTTP_ADDR=%s\n  nomad node status -verbose\n  nomad job status\n  nomad alloc logs <alloc-id>\nNomad's HTTP API is at %s (the web UI needs a Nomad built with its UI assets).",
		c.NomadAddr, c.ConsulAddr, c.NomadAddr)
	if once {
		return nil
	}
	say("\nPress Ctrl-C to stop.")
	<-ctx.Done()
	return nil
}

// usedVars passes only the variables a jobspec declares, since Nomad rejects
// values for undeclared ones.
func usedVars(path string, vars map[string]string) map[string]string {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	out := map[string]string{}
	for k, v := range vars {
		if strings.Contains(string(src), fmt.Sprintf("variable %q", k)) {
			out[k] = v
		}
	}
	return out
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

// deviceSection cuts the device part out of `nomad node status -verbose`.
func deviceSection(out string) string {
	i := strings.Index(out, "Device Resource Utilization")
	if i < 0 {
		i = strings.Index(out, "Device Group Attributes")
	}
	if i < 0 {
		return out
	}
	return out[i:]
}

func say(format string, args ...any) { fmt.Printf(format+"\n", args...) }
