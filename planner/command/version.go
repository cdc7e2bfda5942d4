package command

import (
	"fmt"

	"github.com/hashicorp/cli"
)

func init() {
	register("version", func(ui cli.Ui) (cli.Command, error) { return &versionCommand{ui: ui}, nil })
}

type versionCommand struct{ ui cli.Ui }

func (c *versionCommand) Synopsis() string { return "Print caravan's version" }
func (c *versionCommand) Help() string     { return "Usage: caravan version" }
func (c *versionCommand) Run(args []string) int {
	if len(args) > 0 {
		c.ui.Error(fmt.Sprintf("version takes no arguments, got %q", args))
		return 2
	}
	c.ui.Output("caravan v" + Version)
	return 0
}
