package command

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/caravan-gpu/caravan/planner/consulx"
	"github.com/caravan-gpu/caravan/planner/nomadx"
	"github.com/caravan-gpu/caravan/planner/service"
	"github.com/hashicorp/cli"
	"github.com/hashicorp/go-hclog"
)

func init() {
	register("planner run", func(ui cli.Ui) (cli.Command, error) { return &plannerRunCommand{ui: ui}, nil })
	register("planner", func(ui cli.Ui) (cli.Command, error) { return &plannerCommand{}, nil })
}

type plannerCommand struct{}

func (c *plannerCommand) Synopsis() string { return "Run the live planner" }
func (c *plannerCommand) Help() string {
	return helpText("caravan planner <subcommand>", "Subcommands:\n    run    Run the planner daemon")
}
func (c *plannerCommand) Run([]string) int { return cli.RunResultHelp }

type plannerRunCommand struct{ ui cli.Ui }

// nomadDiscoveryTimeout bounds how long the planner waits for Consul to list
// a passing nomad service when NOMAD_ADDR is unset.
const nomadDiscoveryTimeout = 2 * time.Minute

func (c *plannerRunCommand) Synopsis() string { return "Run the planner daemon" }
func (c *plannerRunCommand) Help() string {
	return helpText("caravan planner run [-config planner.hcl] [-address NOMAD_ADDR] [-token NOMAD_TOKEN]", `
Runs the live planner. Each round it reads Nomad, runs the configured policy
(the same code as caravan sim) and sets the priority and, for jobs not yet
placed, the GPU model, lane and CPU/memory of every managed job.

Jobs opt in with job meta caravan.policy, or by running in a namespace listed
in planning.namespaces. With Consul (the default) the planner registers the
service caravan-planner, and only the replica holding the lock
caravan/planner/leader writes. See docs/planner.md for the config reference.

Options:
  -config FILE   planner.hcl; every setting has a default, so it may be omitted
  -address ADDR  Nomad's HTTP address; else nomad.address, $NOMAD_ADDR, or
                 Consul's "nomad" service
  -token TOKEN   Nomad ACL token; else nomad.token or $NOMAD_TOKEN

The API token its readers must send (caravan queue -planner-token, the
dashboard) is http.token, else $CARAVAN_PLANNER_TOKEN; none when both are
empty. /v1/health, Consul's check, needs none.`)
}

func (c *plannerRunCommand) Run(args []string) int {
	fs := newFlags("planner run")
	configPath := fs.String("config", "", "")
	var nf nomadFlags
	nf.register(fs)
	if err := parse(fs, args); err != nil {
		return fail(c.ui, "planner run", err)
	}
	if fs.NArg() > 0 {
		return fail(c.ui, "planner run", usagef("unexpected arguments %q", fs.Args()))
	}
	var settings *service.Settings
	var err error
	if *configPath != "" {
		settings, err = service.LoadConfig(*configPath)
	} else {
		settings, err = (&service.Config{}).Settings("(defaults)")
	}
	if err != nil {
		return fail(c.ui, "planner run", usagef("%v", err))
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "caravan-planner", Level: hclog.LevelFromString(settings.LogLevel), Output: os.Stderr})

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var consul *consulx.API
	if settings.ConsulEnabled {
		if consul, err = consulx.New(settings.ConsulAddr); err != nil {
			return fail(c.ui, "planner run", err)
		}
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := consul.Ping(pctx)
		cancel()
		if err != nil {
			return fail(c.ui, "planner run", fmt.Errorf("consul is unreachable (%v); set CONSUL_HTTP_ADDR or consul.address, or consul { enabled = false } to run one planner without Consul", err))
		}
	}

	address, token := nf.address, nf.token
	if address == "" {
		address = settings.NomadAddr
	}
	if token == "" {
		token = settings.NomadToken
	}
	if address == "" && os.Getenv("NOMAD_ADDR") == "" && consul != nil {
		// Nomad's service may not pass its check yet when the planner starts
		// beside it, so keep looking for a while before giving up.
		var found string
		var err error
		deadline := time.Now().Add(nomadDiscoveryTimeout)
		for {
			found, err = consul.ServiceAddress(ctx, "nomad", "http")
			if err == nil || ctx.Err() != nil || time.Now().After(deadline) {
				break
			}
			log.Warn("waiting for a passing nomad service in Consul", "error", err)
			select {
			case <-ctx.Done():
			case <-time.After(2 * time.Second):
			}
		}
		if err != nil {
			return fail(c.ui, "planner run", fmt.Errorf("NOMAD_ADDR is unset and Consul knows no passing nomad service after %s: %w", nomadDiscoveryTimeout, err))
		}
		address = "http://" + found
		log.Info("found Nomad through Consul", "address", address)
	}
	nomad, err := nomadx.New(address, token)
	if err != nil {
		return fail(c.ui, "planner run", err)
	}

	var consulClient consulx.Client
	if consul != nil {
		consulClient = consul
	}
	// Rounds read the mirror, which Nomad's event stream keeps current,
	// rather than listing every job and allocation each time.
	p, err := service.New(settings, nomadx.NewMirror(nomad, nomad, log.Named("mirror")), consulClient, log)
	if err != nil {
		return fail(c.ui, "planner run", usagef("%v", err))
	}
	p.SetNomadAddr(nomad.Address())
	p.SetVersion(Version)
	ln, err := net.Listen("tcp", settings.HTTPAddr)
	if err != nil {
		return fail(c.ui, "planner run", fmt.Errorf("http.address %s: %w", settings.HTTPAddr, err))
	}
	if err := p.Run(ctx, ln); err != nil {
		return fail(c.ui, "planner run", err)
	}
	return exitOK
}
