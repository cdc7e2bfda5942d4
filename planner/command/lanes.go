package command

import (
	"fmt"
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
allocation holding it, and whether the task in a lane is suspended or
checkpointed while another has its turn. Reads Nomad directly; no planner needed.

Options:
  -address ADDR  Nomad's HTTP address (default $NOMAD_ADDR)
  -token TOKEN   Nomad ACL token (default $NOMAD_TOKEN)
  -json          print as JSON`)
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
	rows := cluster.Lanes(nodes, allocs)
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
	fmt.Fprintln(w, "NODE\tINSTANCE\tMODEL\tMEMORY\tSHARE\tHEALTHY\tALLOCATION\tJOB\tTASK")
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
		task := "-"
		if r.Task != "" {
			task = r.Task
			if r.TaskState != "" && r.TaskState != "running" {
				task += " (" + r.TaskState + ")"
			}
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%d MiB\t%.0f%%\t%s\t%s\t%s\t%s\n", r.Node, r.Instance, r.Model, r.MemoryMiB, r.Share*100, healthy, alloc, job, task)
	}
	w.Flush()
	c.ui.Output(strings.TrimRight(b.String(), "\n"))
	return exitOK
}
