package command

import (
	"errors"

	"github.com/hashicorp/cli"
)

func init() {
	register("setup", func(ui cli.Ui) (cli.Command, error) { return &setupCommand{ui: ui}, nil })
}

type setupCommand struct{ ui cli.Ui }

func (c *setupCommand) Synopsis() string {
	return "Turn on Nomad's preemption for batch and service jobs"
}
func (c *setupCommand) Help() string {
	return helpText("caravan setup [-address NOMAD_ADDR] [-token NOMAD_TOKEN] [-json]", `
The planner orders jobs by Nomad priority bands 10 apart; Nomad enforces that
order only when its scheduler may preempt lower-priority batch and service
jobs, which is off by default. setup turns it on through the operator API
(compare-and-set, so a concurrent change is not lost) and leaves the other
scheduler settings as they are. It needs an operator:write token.

Options:
  -address ADDR  Nomad's HTTP address (default $NOMAD_ADDR)
  -token TOKEN   Nomad ACL token (default $NOMAD_TOKEN)
  -json          print the resulting preemption settings as JSON`)
}

func (c *setupCommand) Run(args []string) int {
	fs := newFlags("setup")
	var nf nomadFlags
	nf.register(fs)
	asJSON := fs.Bool("json", false, "")
	if err := parse(fs, args); err != nil {
		return fail(c.ui, "setup", err)
	}
	if fs.NArg() > 0 {
		return fail(c.ui, "setup", usagef("unexpected arguments %q", fs.Args()))
	}
	nomad, err := nf.client()
	if err != nil {
		return fail(c.ui, "setup", err)
	}
	ctx, stop := signalContext()
	defer stop()
	changed := false
	for attempt := 0; ; attempt++ {
		cfg, err := nomad.SchedulerConfig(ctx)
		if err != nil {
			return fail(c.ui, "setup", err)
		}
		pc := &cfg.PreemptionConfig
		if pc.BatchSchedulerEnabled && pc.ServiceSchedulerEnabled {
			if *asJSON {
				printJSON(c.ui, map[string]any{"changed": changed, "preemption": pc})
			} else if changed {
				c.ui.Output("Nomad's preemption is now on for batch and service jobs (system and sysbatch unchanged).")
			} else {
				c.ui.Output("Nomad's preemption is already on for batch and service jobs; nothing to do.")
			}
			return exitOK
		}
		if attempt == 5 {
			return fail(c.ui, "setup", errors.New("the scheduler configuration kept changing underneath; try again"))
		}
		pc.BatchSchedulerEnabled, pc.ServiceSchedulerEnabled = true, true
		ok, err := nomad.SetSchedulerConfig(ctx, cfg)
		if err != nil {
			return fail(c.ui, "setup", err)
		}
		changed = changed || ok
	}
}
