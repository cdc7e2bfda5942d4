package command

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/caravan-gpu/caravan/planner/consulx"
	"github.com/caravan-gpu/caravan/planner/profile"
	"github.com/caravan-gpu/caravan/planner/service"
	"github.com/hashicorp/cli"
)

func init() {
	register("profile", func(ui cli.Ui) (cli.Command, error) { return &profileCommand{}, nil })
	register("profile import", func(ui cli.Ui) (cli.Command, error) { return &profileImportCommand{ui: ui}, nil })
	register("profile show", func(ui cli.Ui) (cli.Command, error) { return &profileShowCommand{ui: ui}, nil })
}

type profileCommand struct{}

func (c *profileCommand) Synopsis() string { return "Manage throughput and sensitivity profiles" }
func (c *profileCommand) Help() string {
	return helpText("caravan profile <import|show>", `
Profiles give each network's throughput per GPU model (for speedup
matching) and its sensitivity to CPU and memory (for Synergy sizing). A job
names its profile with job meta caravan.profile. They live in Consul KV
under caravan/profiles/.`)
}
func (c *profileCommand) Run([]string) int { return cli.RunResultHelp }

type profileImportCommand struct{ ui cli.Ui }

func (c *profileImportCommand) Synopsis() string {
	return "Import profiles from a JSON or CSV file into Consul KV"
}
func (c *profileImportCommand) Help() string {
	return helpText("caravan profile import [-address CONSUL] [-token TOKEN] FILE", `
FILE is JSON, {"profiles": [{"name": "resnet50", "throughput": {"Tesla T4": 1.0,
"NVIDIA H100 80GB HBM3": 5.2}, "sensitivity": [{"gpus": 1, "cpus_per_gpu": 4,
"mem_gb_per_gpu": 16, "throughput": 1.0}]}]}, or CSV with the header
profile,gpu_model,throughput. Each profile is written to
caravan/profiles/<name>, replacing an older one of that name.

Options:
  -address ADDR  Consul's HTTP address (default $CONSUL_HTTP_ADDR)
  -token TOKEN   Consul ACL token with key write on caravan/profiles/`)
}

func (c *profileImportCommand) Run(args []string) int {
	fs := newFlags("profile import")
	var cf consulFlags
	cf.register(fs)
	if err := parse(fs, args); err != nil {
		return fail(c.ui, "profile import", err)
	}
	if fs.NArg() != 1 {
		return fail(c.ui, "profile import", usagef("want exactly one FILE argument, got %d", fs.NArg()))
	}
	data, err := os.ReadFile(fs.Arg(0))
	if err != nil {
		return fail(c.ui, "profile import", usagef("%v", err))
	}
	profiles, err := profile.Parse(fs.Arg(0), data)
	if err != nil {
		return fail(c.ui, "profile import", usagef("%v", err))
	}
	consul, err := cf.client()
	if err != nil {
		return fail(c.ui, "profile import", err)
	}
	ctx, stop := signalContext()
	defer stop()
	for _, p := range profiles {
		value, _ := json.Marshal(p)
		if err := consul.Put(ctx, consulx.ProfilesPrefix+p.Name, value); err != nil {
			return fail(c.ui, "profile import", err)
		}
	}
	c.ui.Output(fmt.Sprintf("Imported %d profile(s) into Consul KV %s", len(profiles), consulx.ProfilesPrefix))
	return exitOK
}

type profileShowCommand struct{ ui cli.Ui }

func (c *profileShowCommand) Synopsis() string {
	return "Show the throughput matrix and sensitivity profiles"
}
func (c *profileShowCommand) Help() string {
	return helpText("caravan profile show [-address CONSUL] [-token TOKEN] [-json] [NAME]", `
Prints the throughput matrix (profiles × GPU models) and the sensitivity
points, for all profiles or one. Exit code 1 when NAME is not found.`)
}

func (c *profileShowCommand) Run(args []string) int {
	fs := newFlags("profile show")
	var cf consulFlags
	cf.register(fs)
	asJSON := fs.Bool("json", false, "")
	if err := parse(fs, args); err != nil {
		return fail(c.ui, "profile show", err)
	}
	if fs.NArg() > 1 {
		return fail(c.ui, "profile show", usagef("want at most one NAME argument, got %d", fs.NArg()))
	}
	consul, err := cf.client()
	if err != nil {
		return fail(c.ui, "profile show", err)
	}
	ctx, stop := signalContext()
	defer stop()
	all, err := service.LoadProfiles(ctx, consul)
	if err != nil {
		return fail(c.ui, "profile show", err)
	}
	var names []string
	for n := range all {
		if fs.NArg() == 0 || n == fs.Arg(0) {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	if fs.NArg() == 1 && len(names) == 0 {
		return fail(c.ui, "profile show", fmt.Errorf("no profile %q in Consul KV %s", fs.Arg(0), consulx.ProfilesPrefix))
	}
	if *asJSON {
		out := []profile.Profile{}
		for _, n := range names {
			out = append(out, all[n])
		}
		printJSON(c.ui, profile.File{Profiles: out})
		return exitOK
	}
	if len(names) == 0 {
		c.ui.Output("No profiles; add some with caravan profile import.")
		return exitOK
	}
	modelSet := map[string]bool{}
	for _, n := range names {
		for m := range all[n].Throughput {
			modelSet[m] = true
		}
	}
	var models []string
	for m := range modelSet {
		models = append(models, m)
	}
	sort.Strings(models)
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "PROFILE\t"+strings.Join(models, "\t"))
	for _, n := range names {
		row := []string{n}
		for _, m := range models {
			if v, ok := all[n].Throughput[m]; ok {
				row = append(row, fmt.Sprintf("%g", v))
			} else {
				row = append(row, "-")
			}
		}
		fmt.Fprintln(w, strings.Join(row, "\t"))
	}
	w.Flush()
	for _, n := range names {
		for _, pt := range all[n].Sensitivity {
			fmt.Fprintf(&b, "sensitivity %s: %d GPU(s), %g CPUs/GPU, %g GB/GPU → %g\n", n, pt.GPUs, pt.CPUsPerGPU, pt.MemGBPerGPU, pt.Throughput)
		}
	}
	c.ui.Output(strings.TrimRight(b.String(), "\n"))
	return exitOK
}
