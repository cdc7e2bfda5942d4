package command

import (
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/caravan-gpu/caravan/planner/cluster"
	"github.com/hashicorp/cli"
)

func init() {
	register("lanes", func(ui cli.Ui) (cli.Command, error) { return &lanesCommand{ui: ui}, nil })
}

type lanesCommand struct{ ui cli.Ui }

func (c *lanesCommand) Synopsis() string {
	return "Show each node's GPUs, lanes and the allocations holding them"
}
func (c *lanesCommand) Help() string {
	return helpText("caravan lanes [-address NOMAD_ADDR] [-token NOMAD_TOKEN] [-json]", `
Lists every GPU device instance caravan-device fingerprinted (a whole GPU or
a lane), per node: model, instance memory, lane share, health and the
allocation holding it. Reads Nomad directly; no planner needed.

Options:
  -address ADDR  Nomad's HTTP address (default $NOMAD_ADDR)
  -token TOKEN   Nomad ACL token (default $NOMAD_TOKEN)
  -json          print as JSON`)
}

type laneRow struct {
	Node      string  `json:"node"`
	Group     string  `json:"device"`
	Model     string  `json:"model"`
	Instance  string  `json:"instance"`
	MemoryMiB uint64  `json:"memory_mib"`
	Share     float64 `json:"gpu_share"`
	Healthy   bool    `json:"healthy"`
	Health    string  `json:"health,omitempty"`
	AllocID   string  `json:"alloc_id,omitempty"`
	Job       string  `json:"job,omitempty"`
}

func (c *lanesCommand) Run(args []string) int {
	fs := newFlags("lanes")
	var nf nomadFlags
	nf.register(fs)
	asJSON := fs.Bool("json", false, "")
	if err := parse(fs, args); err != nil {
		return fail(c.ui, "lanes", err)
	}
	if fs.NArg() > 0 {
		return fail(c.ui, "lanes", usagef("unexpected arguments %q", fs.Args()))
	}
	nomad, err := nf.client()
	if err != nil {
		return fail(c.ui, "lanes", err)
	}
	ctx, stop := signalContext()
	defer stop()
	nodes, err := nomad.Nodes(ctx)
	if err != nil {
		return fail(c.ui, "lanes", err)
	}
	allocs, err := nomad.Allocations(ctx)
	if err != nil {
		return fail(c.ui, "lanes", err)
	}
	holder := map[string][2]string{} // instance → alloc, job
	for _, a := range allocs {
		if a.ClientStatus != "running" && a.ClientStatus != "pending" || a.AllocatedResources == nil {
			continue
		}
		for _, t := range a.AllocatedResources.Tasks {
			if t == nil {
				continue
			}
			for _, d := range t.Devices {
				for _, id := range d.DeviceIDs {
					holder[a.NodeID+"/"+id] = [2]string{a.ID, cluster.Key(orDefault(a.Namespace), a.JobID)}
				}
			}
		}
	}
	var rows []laneRow
	for _, stub := range nodes {
		n := cluster.NodeFrom(stub)
		for _, g := range n.GPUs {
			for _, in := range g.Instances {
				h := holder[n.ID+"/"+in.ID]
				rows = append(rows, laneRow{Node: n.Name, Group: g.Name, Model: g.Model, Instance: in.ID,
					MemoryMiB: g.MemoryMiB, Share: g.Share, Healthy: in.Healthy, Health: in.Health, AllocID: h[0], Job: h[1]})
			}
		}
	}
	sort.SliceStable(rows, func(i, j int) bool {
		if rows[i].Node != rows[j].Node {
			return rows[i].Node < rows[j].Node
		}
		return rows[i].Instance < rows[j].Instance
	})
	if *asJSON {
		printJSON(c.ui, rows)
		return exitOK
	}
	if len(rows) == 0 {
		c.ui.Output("No caravan GPUs fingerprinted (no nvidia/gpu devices on any node).")
		return exitOK
	}
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NODE\tINSTANCE\tMODEL\tMEMORY\tSHARE\tHEALTHY\tALLOCATION\tJOB")
	for _, r := range rows {
		alloc := "-"
		if r.AllocID != "" {
			alloc = r.AllocID[:min(8, len(r.AllocID))]
		}
		job := r.Job
		if job == "" {
			job = "-"
		}
		healthy := fmt.Sprint(r.Healthy)
		if !r.Healthy && r.Health != "" {
			healthy += " (" + r.Health + ")"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%d MiB\t%.0f%%\t%s\t%s\t%s\n", r.Node, r.Instance, r.Model, r.MemoryMiB, r.Share*100, healthy, alloc, job)
	}
	w.Flush()
	c.ui.Output(strings.TrimRight(b.String(), "\n"))
	return exitOK
}

func orDefault(ns string) string {
	if ns == "" {
		return "default"
	}
	return ns
}
