package command

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/caravan-gpu/caravan/planner/plannerapi"
	"github.com/hashicorp/cli"
)

func init() {
	register("queue", func(ui cli.Ui) (cli.Command, error) { return &queueCommand{ui: ui}, nil })
}

type queueCommand struct{ ui cli.Ui }

func (c *queueCommand) Synopsis() string { return "Show the planner's queue of managed GPU jobs" }
func (c *queueCommand) Help() string {
	return helpText("caravan queue [-address PLANNER] [-planner-token TOKEN] [-json] [-watch] [-interval 2s]", `
Shows every managed job in the planner's order: queue and Nomad priority,
attained GPU time, waiting time and the planned GPU type.

Options:
  -address ADDR   the planner's HTTP API; else $CARAVAN_PLANNER_ADDR, a
                  caravan-planner service in Consul, or 127.0.0.1:4680
  -planner-token TOKEN
                  the planner's API token (http.token), when it has one;
                  else $CARAVAN_PLANNER_TOKEN
  -json           print the queue as JSON
  -watch          redraw until interrupted
  -interval D     how often -watch redraws (default 2s)`)
}

func (c *queueCommand) Run(args []string) int {
	fs := newFlags("queue")
	address := fs.String("address", "", "")
	token := fs.String("planner-token", "", "")
	asJSON := fs.Bool("json", false, "")
	watch := fs.Bool("watch", false, "")
	interval := fs.Duration("interval", 2*time.Second, "")
	if err := parse(fs, args); err != nil {
		return fail(c.ui, "queue", err)
	}
	if fs.NArg() > 0 {
		return fail(c.ui, "queue", usagef("unexpected arguments %q", fs.Args()))
	}
	if *interval <= 0 {
		return fail(c.ui, "queue", usagef("-interval must be positive, got %s", *interval))
	}
	ctx, stop := interruptContext()
	defer stop()
	client := plannerClient(ctx, *address, *token)
	for {
		q, err := client.Queue(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return exitOK
			}
			return fail(c.ui, "queue", plannerError(err))
		}
		if *asJSON {
			printJSON(c.ui, q)
		} else {
			if *watch {
				c.ui.Output("\033[H\033[2J" + time.Now().Format("15:04:05") + "  caravan queue (" + client.Address + ")\n")
			}
			c.ui.Output(formatQueue(q))
		}
		if !*watch {
			return exitOK
		}
		select {
		case <-ctx.Done():
			return exitOK
		case <-time.After(*interval):
		}
	}
}

func formatQueue(q *plannerapi.Queue) string {
	if len(q.Jobs) == 0 {
		return "No managed jobs."
	}
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "RANK\tJOB\tSTATE\tQUEUE\tPRIORITY\tGPUS\tATTAINED\tWAITING\tPLANNED GPU\tREASON")
	for _, j := range q.Jobs {
		job := j.Job
		if j.Namespace != "default" {
			job = j.Namespace + "/" + j.Job
		}
		planned := j.GPUModel
		if planned == "" {
			planned = "any"
		}
		if j.Lane {
			planned += " (lane)"
		}
		fmt.Fprintf(w, "%d\t%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\n", j.Rank, job, j.State, j.Queue, j.Priority, j.GPUs,
			gpuTime(j.Attained), (time.Duration(j.Waiting) * time.Second).String(), planned, j.Reason)
	}
	w.Flush()
	return strings.TrimRight(b.String(), "\n")
}

func gpuTime(s float64) string {
	if s < 3600 {
		return fmt.Sprintf("%.0f GPU-s", s)
	}
	return fmt.Sprintf("%.1f GPU-h", s/3600)
}

func interruptContext() (context.Context, context.CancelFunc) {
	return signalContext()
}
