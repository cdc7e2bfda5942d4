// Command replay runs `caravan replay` on a cluster of its own: it builds
// caravan's binaries, starts a Consul and a Nomad agent with caravan on a
// simulated GPU fleet matching the -cluster spec, runs the planner with
// the -policy (queue cuts scaled by -time-scale, a round at least every
// second and at most every 200 ms), replays the trace, prints what
// `caravan replay` prints and tears everything down, Ctrl-C included.
//
//	go run ./e2e/replay -trace FILE -cluster SPEC -policy P -time-scale S [-clients N] [-lanes N] [-settle D] [-json] [caravan replay flags]
//
// -clients N runs the fleet as N Nomad client agents, each with its own
// data dir, ports and simulated GPUs: the spec's nodes, in the order the
// replay simulates them (by model name), are spread over the clients in equal runs, so
// that n4g4 with -clients 4 is four clients of 4 GPUs each, as the
// simulator sees it. Without it one client holds every GPU.
//
// -lanes N (also caravan replay's) cuts every GPU of the fleet into N lanes
// with the device plugin's partition rule, as caravan replay's simulator
// cuts them.
//
// -settle D is the planner's planning.settle (default 50ms; 0 turns it
// off): a round waits until Nomad has been quiet for D, so that jobs the
// trace submits at one time, which reach Nomad one register call after
// another, are planned in one round, as the simulator plans them.
//
// Every other flag is `caravan replay`'s (see caravan replay -help),
// except -workload, -address and -planner, which it sets. Nomad and
// Consul come from `make tools` (.tools/bin).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/caravan-gpu/caravan/e2e/harness"
	"github.com/caravan-gpu/caravan/planner/command"
	"github.com/caravan-gpu/caravan/planner/policy"
	plannerreplay "github.com/caravan-gpu/caravan/planner/replay"
	"github.com/caravan-gpu/caravan/planner/trace"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	for _, a := range args {
		if a == "-h" || a == "-help" || a == "--help" {
			fmt.Fprintln(os.Stderr, "usage: go run ./e2e/replay -trace FILE -cluster SPEC -policy P -time-scale S [caravan replay flags]")
			fmt.Fprintln(os.Stderr, "Starts Consul, Nomad and a planner on a simulated fleet matching SPEC, runs caravan replay, tears down.")
			return command.Run([]string{"replay", "-help"}, os.Stdout, os.Stderr)
		}
	}
	opts, args, err := scan(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, "replay:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code, err := replay(ctx, args, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "replay:", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// options are the few flags the cluster and the planner depend on.
type options struct {
	cluster     trace.Cluster
	policy      string
	timeScale   float64
	queueCuts   []float64
	promoteKnob float64
	// migrationCost is -migration-cost, trace seconds.
	migrationCost float64
	// rotationPeriod is -rotation-period, trace seconds.
	rotationPeriod float64
	jobSizes       string
	profiles       bool // the trace needs profiles (-throughputs, -sensitivity)
	// synergyLease is -synergy-lease, trace seconds; 0: none.
	synergyLease float64
	// coreMHz is -core-mhz where -sensitivity sizes jobs: each client
	// then has its node's cores of that many MHz, and its memory.
	coreMHz float64
	clients int // Nomad client agents; 1 unless -clients
	lanes   int // -lanes: every GPU of the fleet cut into that many lanes
	// settle is -settle, the planner's planning.settle.
	settle time.Duration
}

// defaultSettle is -settle's default: a trace's jobs of one arrival time
// reach Nomad one register call after another (20 jobs over 46 to 150 ms
// on a loaded 2-core machine), and a round that read the first alone
// planned it apart from the rest, which the simulator never does.
const defaultSettle = 50 * time.Millisecond

// maxSettle is the planner's own bound: planning.settle may not pass
// planning.interval.
const maxSettle = harness.DefaultInterval

// scan reads the flags it needs from caravan replay's arguments, leaving
// their checking to caravan replay itself where it can. It returns the
// arguments without its own -clients and -settle.
func scan(args []string) (options, []string, error) {
	o, err := scanReplay(args)
	if err != nil {
		return o, nil, err
	}
	o.clients, o.settle = 1, defaultSettle
	var rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, v, ok := "", "", false
		for _, own := range []string{"clients", "settle"} {
			switch {
			case a == "-"+own || a == "--"+own:
				if i+1 >= len(args) {
					return o, nil, fmt.Errorf("flag -%s needs a value", own)
				}
				name, v, ok = own, args[i+1], true
				i++
			case strings.HasPrefix(a, "-"+own+"=") || strings.HasPrefix(a, "--"+own+"="):
				name, v, ok = own, a[strings.Index(a, "=")+1:], true
			}
		}
		if !ok {
			rest = append(rest, a)
			continue
		}
		if name == "settle" {
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 || d > maxSettle {
				return o, nil, fmt.Errorf("flag -settle: want a duration from 0 to %s, like 50ms, got %q", maxSettle, v)
			}
			o.settle = d
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return o, nil, fmt.Errorf("flag -clients: want a whole number of client agents, 1 or more, got %q", v)
		}
		if nodes := specNodes(o.cluster); n > len(nodes) {
			return o, nil, fmt.Errorf("flag -clients: %d clients for the %d nodes of cluster %s; each client needs a node of its own", n, len(nodes), o.cluster.Name)
		}
		o.clients = n
	}
	return o, rest, nil
}

func scanReplay(args []string) (options, error) {
	var o options
	val := func(name string) (string, bool) {
		for i, a := range args {
			for _, p := range []string{"-" + name, "--" + name} {
				if a == p && i+1 < len(args) {
					return args[i+1], true
				}
				if strings.HasPrefix(a, p+"=") {
					return a[len(p)+1:], true
				}
			}
		}
		return "", false
	}
	for _, own := range []string{"workload", "address", "planner"} {
		if _, ok := val(own); ok {
			return o, fmt.Errorf("flag -%s is set by this command; leave it out", own)
		}
	}
	spec, ok := val("cluster")
	if !ok {
		return o, errors.New("flag -cluster is required")
	}
	var err error
	if o.cluster, err = trace.LoadCluster(spec); err != nil {
		return o, fmt.Errorf("flag -cluster: %w", err)
	}
	if o.policy, ok = val("policy"); !ok {
		return o, errors.New("flag -policy is required")
	}
	s, ok := val("time-scale")
	if !ok {
		return o, errors.New("flag -time-scale is required")
	}
	if o.timeScale, err = strconv.ParseFloat(s, 64); err != nil || !(o.timeScale > 0) {
		return o, fmt.Errorf("flag -time-scale: want a positive number, got %q", s)
	}
	o.queueCuts = []float64{3250, 7200}
	if v, ok := val("queue-cuts"); ok {
		o.queueCuts = nil
		for _, p := range strings.Split(v, ",") {
			c, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
			if err != nil || c <= 0 {
				return o, fmt.Errorf("flag -queue-cuts: want positive GPU-seconds, got %q", v)
			}
			o.queueCuts = append(o.queueCuts, c)
		}
	}
	if v, ok := val("promote-knob"); ok {
		if o.promoteKnob, err = strconv.ParseFloat(v, 64); err != nil || o.promoteKnob < 0 {
			return o, fmt.Errorf("flag -promote-knob: want a number >= 0, got %q", v)
		}
	}
	o.migrationCost = policy.DefaultMigrationCost
	if v, ok := val("migration-cost"); ok {
		if o.migrationCost, err = strconv.ParseFloat(v, 64); err != nil || !(o.migrationCost > 0) {
			return o, fmt.Errorf("flag -migration-cost: want a positive number of seconds, got %q", v)
		}
	}
	o.rotationPeriod = policy.DefaultRotationPeriod
	if v, ok := val("rotation-period"); ok {
		if o.rotationPeriod, err = strconv.ParseFloat(v, 64); err != nil || !(o.rotationPeriod > 0) || math.IsInf(o.rotationPeriod, 0) {
			return o, fmt.Errorf("flag -rotation-period: want a positive number of seconds, got %q", v)
		}
	}
	if v, ok := val("lanes"); ok {
		if o.lanes, err = strconv.Atoi(v); err != nil || o.lanes < 0 {
			return o, fmt.Errorf("flag -lanes: want a whole number of lanes per GPU, got %q", v)
		}
	}
	if _, ok := val("lane-memory"); ok {
		return o, errors.New("flag -lane-memory: the fleet here is cut by -lanes alone (its device plugin takes lanes or lane_memory, not both)")
	}
	o.jobSizes, _ = val("job-sizes")
	_, o.profiles = val("throughputs")
	if v, ok := val("synergy-lease"); ok {
		if o.synergyLease, err = strconv.ParseFloat(v, 64); err != nil || o.synergyLease < 0 || math.IsInf(o.synergyLease, 0) {
			return o, fmt.Errorf("flag -synergy-lease: want trace seconds, got %q", v)
		}
	}
	if _, ok := val("sensitivity"); ok {
		o.profiles, o.coreMHz = true, plannerreplay.DefaultCoreMHz
		if v, ok := val("core-mhz"); ok {
			if o.coreMHz, err = strconv.ParseFloat(v, 64); err != nil || !(o.coreMHz > 0) || math.IsInf(o.coreMHz, 0) {
				return o, fmt.Errorf("flag -core-mhz: want a positive number of MHz, got %q", v)
			}
		}
	}
	return o, nil
}

// clientConfig is what each client holds besides its GPUs. Every
// allocation asks a little CPU and memory, so a client holds one per GPU
// whatever the machine has. Where jobs are sized (-sensitivity), each
// client is one node of the spec with its cores, of coreMHz each, and its
// memory, so that the planner's sizer sees the simulator's servers.
func clientConfig(o options, gpus []int) (string, error) {
	most := slices.Max(gpus)
	cpu, mem := max(20000, 100*most), max(16384, 128*most)
	if o.coreMHz > 0 {
		nodes := specNodes(o.cluster)
		if o.clients != len(nodes) {
			return "", fmt.Errorf("flag -sensitivity: Synergy sizes each server, so each of the %d nodes of cluster %s needs a client of its own (-clients %d), got %d",
				len(nodes), o.cluster.Name, len(nodes), o.clients)
		}
		var cpus, memGB float64
		for _, g := range o.cluster.Groups {
			if g.GPUs <= 0 {
				continue
			}
			if cpus != 0 && (g.CPUs != cpus || g.MemoryGB != memGB) {
				return "", fmt.Errorf("flag -sensitivity: the nodes of cluster %s differ in cores or memory; the clients share one configuration", o.cluster.Name)
			}
			cpus, memGB = g.CPUs, g.MemoryGB
		}
		cpu, mem = int(math.Round(cpus*o.coreMHz)), int(math.Round(memGB*1024))
	}
	return fmt.Sprintf("  cpu_total_compute = %d\n  memory_total_mb   = %d\n", cpu, mem), nil
}

func replay(ctx context.Context, args []string, o options) (int, error) {
	root, err := harness.RepoRoot()
	if err != nil {
		return 1, err
	}
	say("building caravan's binaries into bin/ ...")
	build := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(root, "bin")+string(filepath.Separator), "./cmd/...")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return 1, fmt.Errorf("go build ./cmd/...: %v\n%s", err, out)
	}
	fleets, gpus, err := Fleets(o.cluster, o.clients)
	if err != nil {
		return 1, err
	}
	if o.clients == 1 {
		say("starting Consul and Nomad with one client holding %s ...", fleetSummary(o.cluster))
	} else {
		say("starting Consul and Nomad with %d clients holding %s between them ...", o.clients, fleetSummary(o.cluster))
	}
	if o.lanes > 1 {
		say("  every GPU cut into %d lanes", o.lanes)
	}
	clientHCL, err := clientConfig(o, gpus)
	if err != nil {
		return 2, err
	}
	c, err := harness.Start(ctx, harness.Options{
		Fleets:       fleets,
		ClientConfig: clientHCL,
		DeviceConfig: partition(o.lanes),
		Logf:         func(f string, a ...any) { say("  "+f, a...) },
	})
	if err != nil {
		return 1, err
	}
	say("  cluster state in %s", c.Dir)
	defer func() {
		say("stopping Consul and Nomad ...")
		c.Stop()
	}()
	os.Setenv("NOMAD_ADDR", c.NomadAddr)
	os.Setenv("CONSUL_HTTP_ADDR", c.ConsulAddr)
	os.Unsetenv("NOMAD_TOKEN")
	os.Unsetenv("NOMAD_NAMESPACE")
	os.Unsetenv("CARAVAN_PLANNER_ADDR")
	os.Unsetenv("CARAVAN_PLANNER_TOKEN")
	if code := command.Run([]string{"setup"}, os.Stderr, os.Stderr); code != 0 {
		return code, errors.New("caravan setup failed")
	}
	// The planner reads profiles when it starts.
	if o.profiles {
		pre := append(append([]string{"replay"}, args...), "-prepare-only")
		if code := command.Run(pre, os.Stderr, os.Stderr); code != 0 {
			return code, errors.New("writing the replay's profiles to Consul failed")
		}
	}
	cuts := make([]float64, len(o.queueCuts))
	for i, v := range o.queueCuts {
		cuts[i] = v / o.timeScale
	}
	say("starting the planner: policy %s, queue cuts %v real GPU-seconds (the trace's ÷ %g), settle %s", o.policy, cuts, o.timeScale, o.settle)
	// The planner's clock is real: a migration costs the trace's ÷ S, a
	// Gavel round lasts the trace's ÷ S, and so does predict's floor of
	// service.
	popts := harness.PlannerOptions{Policy: o.policy, QueueCuts: cuts, PromoteKnob: o.promoteKnob, Settle: o.settle,
		MigrationCost:  time.Duration(o.migrationCost / o.timeScale * float64(time.Second)),
		RotationPeriod: max(time.Duration(o.rotationPeriod/o.timeScale*float64(time.Second)), time.Millisecond),
		PredictFloor:   max(time.Duration(policy.DefaultPredictFloor/o.timeScale*float64(time.Second)), time.Microsecond),
		CoreMHz:        o.coreMHz,
		SynergyLease:   plannerLease(o)}
	if o.jobSizes != "" {
		// 2D-Gittins' fixed sample, in real GPU-seconds, as caravan sim
		// -job-sizes gives it to the simulator: neither learns from
		// completed jobs.
		if popts.JobSizes, err = filepath.Abs(o.jobSizes); err != nil {
			return 1, err
		}
		popts.JobSizesScale = 1 / o.timeScale
	}
	p, err := c.StartPlanner(ctx, popts)
	if err != nil {
		return 1, err
	}
	defer p.Stop()
	full := append(append([]string{"replay"}, args...),
		"-workload", filepath.Join(c.BinDir, "caravan-workload"), "-planner", p.Addr, "-address", c.NomadAddr)
	code := command.Run(full, os.Stdout, os.Stderr)
	if code != 0 {
		say("the planner's log: %s (kept with CARAVAN_E2E_KEEP=1)", p.LogPath)
	}
	return code, nil
}

// partition is the device plugin's rule that cuts every GPU into lanes,
// as the simulator's -lanes does; none for whole GPUs.
func partition(lanes int) string {
	if lanes < 2 {
		return ""
	}
	return fmt.Sprintf("    partition {\n      model = \"*\"\n      lanes = %d\n    }\n", lanes)
}

// specNode is one node of a cluster spec, as the simulator builds it.
type specNode struct {
	model string
	gpus  int
}

// specNodes lists the spec's nodes with GPUs in the simulator's order.
func specNodes(c trace.Cluster) []specNode {
	var nodes []specNode
	for _, g := range c.Groups {
		for k := 0; k < g.Count; k++ {
			if g.GPUs > 0 {
				nodes = append(nodes, specNode{g.GPUModel, g.GPUs})
			}
		}
	}
	return nodes
}

// Fleets is one sim fleet file per client, and each client's GPU count.
// One client holds every GPU: the simulator's count placement counts free
// GPUs per model across nodes, so one node of 16 V100s plays n4g4 for it.
// Several clients each take an equal run of the spec's nodes, in the
// order caravan replay simulates them (by model name, as a client lists
// its GPUs), with GPU UUIDs of their own.
func Fleets(c trace.Cluster, clients int) ([]string, []int, error) {
	nodes := specNodes(c.ByModelName())
	if clients < 1 || clients > len(nodes) {
		return nil, nil, fmt.Errorf("cluster %s: %d clients for %d nodes with GPUs", c.Name, clients, len(nodes))
	}
	var fleets []string
	var gpus []int
	for i := 0; i < clients; i++ {
		perModel := map[string]int{}
		for _, n := range nodes[i*len(nodes)/clients : (i+1)*len(nodes)/clients] {
			perModel[n.model] += n.gpus
		}
		prefix := "GPU-"
		if clients > 1 {
			prefix = fmt.Sprintf("GPU-c%d-", i+1)
		}
		fleet, n, err := fleetFile(c.Name, prefix, perModel)
		if err != nil {
			return nil, nil, err
		}
		fleets, gpus = append(fleets, fleet), append(gpus, n)
	}
	return fleets, gpus, nil
}

// fleetFile is a sim fleet file of one node with perModel GPUs, their
// UUIDs starting with prefix; it returns the GPU count.
func fleetFile(cluster, prefix string, perModel map[string]int) (string, int, error) {
	models := make([]string, 0, len(perModel))
	for m := range perModel {
		models = append(models, m)
	}
	sort.Strings(models)
	type gpu struct {
		UUID         string `json:"uuid"`
		Count        int    `json:"count"`
		Model        string `json:"model"`
		Architecture string `json:"architecture"`
		MemoryMiB    uint64 `json:"memory_mib"`
		SMCount      int    `json:"sm_count"`
	}
	fleet := struct {
		DriverVersion string `json:"driver_version"`
		CUDAVersion   string `json:"cuda_version"`
		GPUs          []gpu  `json:"gpus"`
	}{DriverVersion: "550.54.15", CUDAVersion: "12.4"}
	total := 0
	for _, m := range models {
		n := perModel[m]
		if n > 1024 {
			return "", 0, fmt.Errorf("cluster %s: %d %s GPUs is more than one simulated node holds (1024)", cluster, n, m)
		}
		mem, arch := modelMemory(m)
		fleet.GPUs = append(fleet.GPUs, gpu{UUID: prefix + slug(m), Count: n, Model: m, Architecture: arch, MemoryMiB: mem, SMCount: 80})
		total += n
	}
	data, err := json.MarshalIndent(fleet, "", "  ")
	return string(data), total, err
}

// modelMemory guesses a model's memory and architecture for the fleet
// file; only the name matters to the replay.
func modelMemory(model string) (uint64, string) {
	m := strings.ToLower(model)
	switch {
	case strings.Contains(m, "k80"):
		return 12288, "kepler"
	case strings.Contains(m, "p100"):
		return 16384, "pascal"
	case strings.Contains(m, "v100m32"):
		return 32768, "volta"
	case strings.Contains(m, "v100"):
		return 16384, "volta"
	case strings.Contains(m, "t4"):
		return 15360, "turing"
	case strings.Contains(m, "a100"):
		return 40960, "ampere"
	case strings.Contains(m, "h100"):
		return 81559, "hopper"
	}
	return 16384, "unknown"
}

var nonSlug = regexp.MustCompile(`[^A-Za-z0-9]+`)

func slug(s string) string { return strings.Trim(nonSlug.ReplaceAllString(s, "-"), "-") }

func fleetSummary(c trace.Cluster) string {
	perModel := map[string]int{}
	for _, g := range c.Groups {
		perModel[g.GPUModel] += g.Count * g.GPUs
	}
	var parts []string
	for m, n := range perModel {
		parts = append(parts, fmt.Sprintf("%d %s", n, m))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ") + " GPUs"
}

func say(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }

// plannerLease is -synergy-lease in real time, the planner's
// planning.synergy_lease; 0 for none.
func plannerLease(o options) time.Duration {
	return time.Duration(o.synergyLease / o.timeScale * float64(time.Second))
}
