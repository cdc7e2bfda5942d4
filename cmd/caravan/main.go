// Command caravan is the operator CLI and the planner daemon.
package main

import (
	"os"

	"github.com/caravan-gpu/caravan/planner/command"
)

func main() {
	os.Exit(command.Run(os.Args[1:], os.Stdout, os.Stderr))
}
