package command

import (
	"errors"
	"fmt"
	"strings"

	"github.com/caravan-gpu/caravan/planner/plannerapi"
	"github.com/hashicorp/cli"
)

func init() {
	register("explain", func(ui cli.Ui) (cli.Command, error) { return &explainCommand{ui: ui}, nil })
}

type explainCommand struct{ ui cli.Ui }

func (c *explainCommand) Synopsis() string { return "Explain a job's priority and placement" }
func (c *explainCommand) Help() string {
	return helpText("caravan explain [-address PLANNER] [-planner-token TOKEN] [-json] JOB", `
Says why the planner gave JOB (an ID, or NAMESPACE/ID) its priority and
placement, and lists the decisions it applied, newest last.
Exit code 1 when the planner does not manage the job.

Options:
  -address ADDR   the planner's HTTP API (see caravan queue -help)
  -planner-token TOKEN
                  the planner's API token; else $CARAVAN_PLANNER_TOKEN
  -json           print the explanation as JSON`)
}

func (c *explainCommand) Run(args []string) int {
	fs := newFlags("explain")
	address := fs.String("address", "", "")
	token := fs.String("planner-token", "", "")
	asJSON := fs.Bool("json", false, "")
	if err := parse(fs, args); err != nil {
		return fail(c.ui, "explain", err)
	}
	if fs.NArg() != 1 {
		return fail(c.ui, "explain", usagef("want exactly one JOB argument, got %d", fs.NArg()))
	}
	ctx, stop := signalContext()
	defer stop()
	client := plannerClient(ctx, *address, *token)
	e, err := client.Explain(ctx, fs.Arg(0))
	var nf *plannerapi.NotFoundError
	if errors.As(err, &nf) {
		return fail(c.ui, "explain", errors.New(nf.Msg))
	}
	if err != nil {
		return fail(c.ui, "explain", plannerError(err))
	}
	if *asJSON {
		printJSON(c.ui, e)
		return exitOK
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Job         %s/%s (%s, policy %s)\n", e.Namespace, e.Job, e.State, e.Policy)
	fmt.Fprintf(&b, "Rank        %d, queue %d, band %d → Nomad priority %d\n", e.Rank, e.Queue, e.Band, e.Priority)
	fmt.Fprintf(&b, "Why         %s\n", e.Reason)
	fmt.Fprintf(&b, "Service     %s attained, %.0fs executed, %.0fs waiting\n", gpuTime(e.Attained), e.Executed, e.Waiting)
	planned := e.GPUModel
	if planned == "" {
		planned = "any model"
	}
	if e.Lane {
		planned += ", on a lane"
	}
	fmt.Fprintf(&b, "Placement   run now: %v; %s; %s\n", e.Run, planned, e.Placement)
	if e.CPUs > 0 || e.MemoryGB > 0 {
		fmt.Fprintf(&b, "Sizing      %.1f CPUs, %.1f GB host memory\n", e.CPUs, e.MemoryGB)
	}
	if len(e.History) == 0 {
		b.WriteString("Decisions   none applied yet\n")
	} else {
		b.WriteString("Decisions\n")
		for _, r := range e.History {
			line := fmt.Sprintf("  %s  %-9s priority %d", r.Time.Format("15:04:05"), r.Outcome, r.Priority)
			if len(r.Changes) > 0 {
				line += "  " + strings.Join(r.Changes, ", ")
			}
			if r.Conflicts > 0 {
				line += fmt.Sprintf("  (%d CAS conflicts retried)", r.Conflicts)
			}
			if r.Error != "" {
				line += "  error: " + r.Error
			}
			b.WriteString(line + "\n")
		}
	}
	c.ui.Output(strings.TrimRight(b.String(), "\n"))
	return exitOK
}
