package command

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/caravan-gpu/caravan/planner/consulx"
	"github.com/caravan-gpu/caravan/planner/nomadx"
	"github.com/caravan-gpu/caravan/planner/plannerapi"
	"github.com/hashicorp/cli"
)

// Exit codes shared by caravan's commands, as Nomad's CLI uses them.
const (
	exitOK    = 0
	exitError = 1 // the request failed
	exitUsage = 2 // bad flags, arguments or config
)

// usageError marks an error in what the user typed.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{msg: fmt.Sprintf(format, args...)} }

// fail prints err and returns its exit code.
func fail(ui cli.Ui, name string, err error) int {
	ui.Error(fmt.Sprintf("caravan %s: %v", name, err))
	var u *usageError
	if errors.As(err, &u) {
		return exitUsage
	}
	return exitError
}

// newFlags returns a flag set that reports errors instead of exiting.
func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// parse parses args and wraps flag errors as usage errors naming the flag.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return usagef("%v (see -help)", err)
	}
	return nil
}

// nomadFlags are the -address and -token of commands that talk to Nomad;
// the NOMAD_* environment applies when they are unset.
type nomadFlags struct{ address, token string }

func (n *nomadFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&n.address, "address", "", "Nomad's HTTP address (default $NOMAD_ADDR)")
	fs.StringVar(&n.token, "token", "", "Nomad ACL token (default $NOMAD_TOKEN)")
}

func (n *nomadFlags) client() (*nomadx.API, error) { return nomadx.New(n.address, n.token) }

// consulFlags are the -address and -token of commands that talk to Consul.
type consulFlags struct{ address, token string }

func (c *consulFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.address, "address", "", "Consul's HTTP address (default $CONSUL_HTTP_ADDR)")
	fs.StringVar(&c.token, "token", "", "Consul ACL token (default $CONSUL_HTTP_TOKEN)")
}

func (c *consulFlags) client() (*consulx.API, error) {
	if c.token != "" {
		os.Setenv("CONSUL_HTTP_TOKEN", c.token)
	}
	return consulx.New(c.address)
}

// plannerAddress finds the planner's HTTP API: the -address flag, then
// $CARAVAN_PLANNER_ADDR, then a passing caravan-planner instance in Consul,
// then the default listener.
func plannerAddress(ctx context.Context, flagValue string) string {
	if flagValue != "" {
		return flagValue
	}
	if v := os.Getenv("CARAVAN_PLANNER_ADDR"); v != "" {
		return v
	}
	if os.Getenv("CONSUL_HTTP_ADDR") != "" {
		if c, err := consulx.New(""); err == nil {
			if addr, err := c.ServiceAddress(ctx, consulx.ServiceName, ""); err == nil {
				return addr
			}
		}
	}
	return "127.0.0.1:4680"
}

// plannerClient is a client for the planner's API at address (see
// plannerAddress) with its API token: the -planner-token flag, else
// $CARAVAN_PLANNER_TOKEN.
func plannerClient(ctx context.Context, address, token string) *plannerapi.Client {
	if token == "" {
		token = os.Getenv(plannerapi.TokenEnv)
	}
	return plannerapi.NewClient(plannerAddress(ctx, address), token)
}

// plannerError adds to a refused token where the CLI takes it from.
func plannerError(err error) error {
	var auth *plannerapi.AuthError
	if errors.As(err, &auth) {
		return fmt.Errorf("%w (the CLI sends -planner-token, else $%s)", err, plannerapi.TokenEnv)
	}
	return err
}

func printJSON(ui cli.Ui, v any) {
	data, _ := json.MarshalIndent(v, "", "  ")
	ui.Output(string(data))
}

func helpText(usage, body string) string {
	return strings.TrimSpace("Usage: " + usage + "\n\n" + strings.TrimSpace(body))
}
