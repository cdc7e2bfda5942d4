// Command caravan-driver is the caravan Nomad task driver plugin. Nomad starts
// it from its plugin_dir; it also serves Nomad's executor subcommand, which
// keeps tasks and their logs alive across driver restarts, and the
// caravan-run-as subcommand, which starts a task as a dynamic workload user
// (driver/runas).
package main

import (
	"context"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/plugins"

	"github.com/caravan-gpu/caravan/driver/plugin"
)

func main() {
	plugins.Serve(func(log hclog.Logger) interface{} {
		return plugin.New(context.Background(), log)
	})
}
