// Package command holds caravan's operator CLI. Each command lives in its own
// file and registers itself, so cmd/caravan stays a thin main.
package command

import (
	"fmt"
	"io"
	"os"
	"sort"

	"github.com/hashicorp/cli"
)

// Version is caravan's version, set at build time with -ldflags.
var Version = "0.1.0-dev"

// factories holds every command by its full name ("planner run", "sim").
var factories = map[string]func(ui cli.Ui) (cli.Command, error){}

// register adds a command; command files call it from init.
func register(name string, f func(ui cli.Ui) (cli.Command, error)) {
	if _, dup := factories[name]; dup {
		panic("command registered twice: " + name)
	}
	factories[name] = f
}

// Names lists the registered commands.
func Names() []string {
	var names []string
	for n := range factories {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Run runs the CLI with args (without the program name) and returns the exit
// code: 0 success, 1 error, 2 bad usage.
func Run(args []string, stdout, stderr io.Writer) int {
	ui := &cli.BasicUi{Reader: os.Stdin, Writer: stdout, ErrorWriter: stderr}
	commands := map[string]cli.CommandFactory{}
	for name, f := range factories {
		f := f
		commands[name] = func() (cli.Command, error) { return f(ui) }
	}
	c := &cli.CLI{
		Name:                       "caravan",
		Version:                    Version,
		Args:                       args,
		Commands:                   commands,
		HelpWriter:                 stdout,
		ErrorWriter:                stderr,
		Autocomplete:               false,
		HiddenCommands:             nil,
		AutocompleteNoDefaultFlags: true,
	}
	code, err := c.Run()
	if err != nil {
		fmt.Fprintf(stderr, "caravan: %v\n", err)
		return 1
	}
	return code
}
