package service

import (
	"fmt"
	"math"
	"net"
	"os"
	"strings"
	"time"

	"github.com/caravan-gpu/caravan/planner/plannerapi"
	"github.com/caravan-gpu/caravan/planner/policy"
	"github.com/caravan-gpu/caravan/planner/rewrite"
	"github.com/caravan-gpu/caravan/planner/trace"
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// Config is planner.hcl. Every field is optional; see docs/planner.md.
type Config struct {
	ID       string         `hcl:"id,optional"`
	LogLevel string         `hcl:"log_level,optional"`
	HTTP     *HTTPConfig    `hcl:"http,block"`
	Nomad    *NomadConfig   `hcl:"nomad,block"`
	Consul   *ConsulConfig  `hcl:"consul,block"`
	Planning *PlanningBlock `hcl:"planning,block"`
	UI       *UIConfig      `hcl:"ui,block"`
}

// UIConfig is the dashboard served at /ui/ on the API's address.
type UIConfig struct {
	// ResultsDir holds caravan sim and replay output folders that the
	// dashboard's Results view may draw; no folder outside it is read.
	ResultsDir string `hcl:"results_dir,optional"`
}

// HTTPConfig is the API listener.
type HTTPConfig struct {
	Address string `hcl:"address,optional"`
	// Advertise is the host:port registered in Consul; the listener's when
	// empty.
	Advertise string `hcl:"advertise,optional"`
	// Token, when set, is required on every route but /v1/health and the
	// dashboard's static files; $CARAVAN_PLANNER_TOKEN when empty.
	Token string `hcl:"token,optional"`
}

// NomadConfig says where Nomad is. The NOMAD_* environment applies first.
type NomadConfig struct {
	Address string `hcl:"address,optional"`
	Token   string `hcl:"token,optional"`
	// UnreachableAfter is how long Nomad may go unanswered before the
	// planner's health check fails, so that a leader that cannot reach
	// Nomad gives up the lock to one that can.
	UnreachableAfter string `hcl:"unreachable_after,optional"`
}

// ConsulConfig says where Consul is. The CONSUL_* environment applies
// first.
type ConsulConfig struct {
	Enabled       *bool  `hcl:"enabled,optional"`
	Address       string `hcl:"address,optional"`
	CheckInterval string `hcl:"check_interval,optional"`
}

// PlanningBlock is how the planner plans.
type PlanningBlock struct {
	Policy      string   `hcl:"policy,optional"`
	Namespaces  []string `hcl:"namespaces,optional"`
	Interval    string   `hcl:"interval,optional"`
	MinInterval string   `hcl:"min_interval,optional"`
	Settle      string   `hcl:"settle,optional"`
	// MigrationCost is what the migrate step charges a move, a duration.
	MigrationCost string `hcl:"migration_cost,optional"`
	// RotationPeriod is Gavel's round, a duration: the rotate step's
	// period and the least run time the blind steps expect a job to have
	// left.
	RotationPeriod string `hcl:"rotation_period,optional"`
	// PredictFloor is the default policy's floor, a duration of GPU
	// service (policy.Config.PredictFloor).
	PredictFloor string `hcl:"predict_floor,optional"`
	// CoreMHz is what one core of a sensitivity profile is worth in
	// Nomad's MHz, for Synergy's sizing; 0: each node's own, its CPU
	// bandwidth over its cores.
	CoreMHz float64 `hcl:"core_mhz,optional"`
	// SynergyLease is Synergy's lease, a duration: at each multiple of it
	// the sizer places every running job again; "" or "0s": none.
	SynergyLease string `hcl:"synergy_lease,optional"`
	// StopWait bounds how long a round that preempts waits for Nomad to
	// mark the stopped allocations stopped before it writes its starts.
	StopWait    string    `hcl:"stop_wait,optional"`
	QueueCuts   []float64 `hcl:"queue_cuts,optional"`
	PromoteKnob float64   `hcl:"promote_knob,optional"`
	// JobSizes is 2D-Gittins' fixed job-size sample, the file that
	// caravan sim -job-sizes takes; JobSizesScale multiplies its values.
	JobSizes      string   `hcl:"job_sizes,optional"`
	JobSizesScale float64  `hcl:"job_sizes_scale,optional"`
	MaxWrites     *float64 `hcl:"max_writes_per_second,optional"`
	WriteBurst    int      `hcl:"write_burst,optional"`
	Writers       int      `hcl:"write_workers,optional"`
	DryRun        bool     `hcl:"dry_run,optional"`
}

// Settings is Config validated and with defaults filled in.
type Settings struct {
	ID        string
	LogLevel  string
	HTTPAddr  string
	Advertise string
	// APIToken is what a request must carry to read the API; empty: no
	// token is asked for.
	APIToken      string
	NomadAddr     string
	NomadToken    string
	ConsulEnabled bool
	ConsulAddr    string
	CheckInterval time.Duration
	// NomadUnreachable is how long Nomad may go unanswered before the
	// health check fails.
	NomadUnreachable time.Duration
	Policy           string
	Namespaces       []string
	Interval         time.Duration
	MinInterval      time.Duration
	// Settle is how long Nomad must stay quiet after a change before a
	// round reads it, so that a burst of submissions is planned together.
	Settle time.Duration
	// MigrationCost is the run time a job moved to another GPU model loses
	// (the migrate step weighs it against the move's gain).
	MigrationCost time.Duration
	// RotationPeriod is Gavel's round (policy.Config.RotationPeriod).
	RotationPeriod time.Duration
	// PredictFloor is predict's floor (policy.Config.PredictFloor).
	PredictFloor time.Duration
	// CoreMHz is planning.core_mhz: the MHz one profiled core stands for;
	// 0: each node's bandwidth over its cores.
	CoreMHz float64
	// SynergyLease is planning.synergy_lease (policy.Config.SynergyLease);
	// 0: none.
	SynergyLease time.Duration
	// StopWait bounds a round's wait, after its preemptions, for Nomad to
	// mark the stopped allocations stopped (rewrite.Writer.StopWait).
	StopWait    time.Duration
	QueueCuts   []float64
	PromoteKnob float64
	// JobSizes, when set, is 2D-Gittins' fixed size distribution: the
	// planner then does not learn from completed jobs, as caravan sim
	// -job-sizes does not.
	JobSizes   *policy.SizeDistribution
	MaxWrites  float64
	WriteBurst int
	Writers    int
	DryRun     bool
	// UIResultsDir is the folder of output folders the dashboard draws;
	// empty for none.
	UIResultsDir string
}

// DefaultHTTPAddr is where the planner listens unless told otherwise.
const DefaultHTTPAddr = "127.0.0.1:4680"

// LoadConfig reads and validates a planner.hcl file.
func LoadConfig(path string) (*Settings, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("planner config: %w", err)
	}
	return ParseConfig(path, src)
}

// ParseConfig parses and validates planner.hcl source. Errors name the file,
// line and field.
func ParseConfig(filename string, src []byte) (*Settings, error) {
	file, diags := hclsyntax.ParseConfig(src, filename, hcl.Pos{Line: 1, Column: 1})
	if diags.HasErrors() {
		return nil, fmt.Errorf("planner config: %s", diags.Error())
	}
	var c Config
	if diags := gohcl.DecodeBody(file.Body, nil, &c); diags.HasErrors() {
		return nil, fmt.Errorf("planner config: %s", diags.Error())
	}
	return c.Settings(filename)
}

// Settings validates c and fills in defaults.
func (c *Config) Settings(filename string) (*Settings, error) {
	bad := badField(func(field, format string, args ...any) error {
		return fmt.Errorf("planner config %s: %s: %s", filename, field, fmt.Sprintf(format, args...))
	})
	s := &Settings{ID: c.ID, LogLevel: strings.ToLower(c.LogLevel), HTTPAddr: DefaultHTTPAddr, ConsulEnabled: true,
		CheckInterval: time.Second, NomadUnreachable: 30 * time.Second, Policy: policy.Default, Interval: 10 * time.Second, MinInterval: time.Second,
		MigrationCost:  time.Duration(policy.DefaultMigrationCost * float64(time.Second)),
		RotationPeriod: time.Duration(policy.DefaultRotationPeriod * float64(time.Second)), StopWait: rewrite.DefaultStopWait,
		PredictFloor: time.Duration(policy.DefaultPredictFloor * float64(time.Second)),
		MaxWrites:    250, WriteBurst: 100, Writers: 16}
	if s.LogLevel == "" {
		s.LogLevel = "info"
	}
	switch s.LogLevel {
	case "trace", "debug", "info", "warn", "error":
	default:
		return nil, bad("log_level", "must be one of trace, debug, info, warn, error; got %q", c.LogLevel)
	}
	if h := c.HTTP; h != nil {
		if h.Address != "" {
			s.HTTPAddr = h.Address
		}
		s.Advertise = h.Advertise
		s.APIToken = h.Token
	}
	tokenField := "http.token"
	if s.APIToken == "" {
		s.APIToken, tokenField = os.Getenv(plannerapi.TokenEnv), "http.token (from $"+plannerapi.TokenEnv+")"
	}
	if err := validToken(s.APIToken); err != nil {
		return nil, bad(tokenField, "%v", err)
	}
	if _, _, err := net.SplitHostPort(s.HTTPAddr); err != nil {
		return nil, bad("http.address", "must be host:port: %v", err)
	}
	if s.Advertise != "" {
		if _, _, err := net.SplitHostPort(s.Advertise); err != nil {
			return nil, bad("http.advertise", "must be host:port: %v", err)
		}
	}
	if n := c.Nomad; n != nil {
		s.NomadAddr, s.NomadToken = n.Address, n.Token
		if n.UnreachableAfter != "" {
			d, err := time.ParseDuration(n.UnreachableAfter)
			if err != nil || d <= 0 {
				return nil, bad("nomad.unreachable_after", "must be a positive duration like \"30s\", got %q", n.UnreachableAfter)
			}
			s.NomadUnreachable = d
		}
	}
	if cc := c.Consul; cc != nil {
		if cc.Enabled != nil {
			s.ConsulEnabled = *cc.Enabled
		}
		s.ConsulAddr = cc.Address
		if cc.CheckInterval != "" {
			d, err := time.ParseDuration(cc.CheckInterval)
			if err != nil || d <= 0 {
				return nil, bad("consul.check_interval", "must be a positive duration like \"1s\", got %q", cc.CheckInterval)
			}
			s.CheckInterval = d
		}
	}
	if p := c.Planning; p != nil {
		if err := p.apply(s, bad); err != nil {
			return nil, err
		}
	}
	if u := c.UI; u != nil && u.ResultsDir != "" {
		st, err := os.Stat(u.ResultsDir)
		if err != nil {
			return nil, bad("ui.results_dir", "%v", err)
		}
		if !st.IsDir() {
			return nil, bad("ui.results_dir", "%s is not a directory", u.ResultsDir)
		}
		s.UIResultsDir = u.ResultsDir
	}
	if err := validPolicy(s); err != nil {
		return nil, bad("planning.policy", "%v", err)
	}
	if s.ID == "" {
		host, _ := os.Hostname()
		_, port, _ := net.SplitHostPort(s.HTTPAddr)
		s.ID = "caravan-planner-" + host + "-" + port
	}
	return s, nil
}

// badField is an error that names a config field.
type badField func(field, format string, args ...any) error

// apply validates the planning block and sets what it gives on s.
func (p *PlanningBlock) apply(s *Settings, bad badField) error {
	if p.Policy != "" {
		s.Policy = p.Policy
	}
	s.Namespaces = p.Namespaces
	for i, ns := range p.Namespaces {
		if strings.TrimSpace(ns) == "" {
			return bad(fmt.Sprintf("planning.namespaces[%d]", i), "must not be empty")
		}
	}
	var err error
	if s.Interval, err = duration(p.Interval, s.Interval); err != nil || s.Interval <= 0 {
		return bad("planning.interval", "must be a positive duration like \"10s\", got %q", p.Interval)
	}
	if s.MinInterval, err = duration(p.MinInterval, s.MinInterval); err != nil || s.MinInterval < 0 {
		return bad("planning.min_interval", "must be a duration like \"1s\", got %q", p.MinInterval)
	}
	if s.MinInterval > s.Interval {
		return bad("planning.min_interval", "%s is longer than planning.interval %s", s.MinInterval, s.Interval)
	}
	if s.Settle, err = duration(p.Settle, s.Settle); err != nil || s.Settle < 0 {
		return bad("planning.settle", "must be a duration like \"100ms\", got %q", p.Settle)
	}
	if s.Settle > s.Interval {
		return bad("planning.settle", "%s is longer than planning.interval %s", s.Settle, s.Interval)
	}
	if s.MigrationCost, err = duration(p.MigrationCost, s.MigrationCost); err != nil || s.MigrationCost <= 0 {
		return bad("planning.migration_cost", "must be a positive duration like \"30s\", got %q", p.MigrationCost)
	}
	if s.RotationPeriod, err = duration(p.RotationPeriod, s.RotationPeriod); err != nil || s.RotationPeriod <= 0 {
		return bad("planning.rotation_period", "must be a positive duration like \"6m\", got %q", p.RotationPeriod)
	}
	if p.CoreMHz < 0 || math.IsNaN(p.CoreMHz) || math.IsInf(p.CoreMHz, 0) {
		return bad("planning.core_mhz", "must be a positive number of MHz (0: each node's own), got %g", p.CoreMHz)
	}
	s.CoreMHz = p.CoreMHz
	if s.SynergyLease, err = duration(p.SynergyLease, 0); err != nil || s.SynergyLease != 0 && s.SynergyLease < time.Second {
		return bad("planning.synergy_lease", "must be 0 (none) or a duration of at least a second like \"5m\", got %q", p.SynergyLease)
	}
	if _, sized := withoutSizer(s.Policy); s.SynergyLease > 0 && !sized {
		return bad("planning.synergy_lease", "policy %q has no synergy sizer to keep a lease", s.Policy)
	}
	if s.PredictFloor, err = duration(p.PredictFloor, s.PredictFloor); err != nil || s.PredictFloor <= 0 {
		return bad("planning.predict_floor", "must be a positive duration like \"1s\", got %q", p.PredictFloor)
	}
	if s.StopWait, err = duration(p.StopWait, s.StopWait); err != nil || s.StopWait <= 0 {
		return bad("planning.stop_wait", "must be a positive duration like \"5s\", got %q", p.StopWait)
	}
	for i, cut := range p.QueueCuts {
		if cut <= 0 || i > 0 && cut <= p.QueueCuts[i-1] {
			return bad("planning.queue_cuts", "must be positive GPU-seconds in increasing order, got %v", p.QueueCuts)
		}
	}
	s.QueueCuts = p.QueueCuts
	if p.PromoteKnob < 0 {
		return bad("planning.promote_knob", "must be >= 0, got %g", p.PromoteKnob)
	}
	s.PromoteKnob = p.PromoteKnob
	if p.JobSizesScale < 0 || math.IsNaN(p.JobSizesScale) || math.IsInf(p.JobSizesScale, 0) {
		return bad("planning.job_sizes_scale", "must be a positive factor, got %g", p.JobSizesScale)
	}
	if p.JobSizes != "" {
		sizes, err := trace.LoadJobSizeSample(p.JobSizes)
		if err != nil {
			return bad("planning.job_sizes", "%v", err)
		}
		if p.JobSizesScale > 0 {
			for i := range sizes {
				sizes[i] *= p.JobSizesScale
			}
		}
		s.JobSizes = policy.NewSizeDistribution(sizes)
	} else if p.JobSizesScale != 0 {
		return bad("planning.job_sizes_scale", "needs planning.job_sizes")
	}
	// A pointer, so that an explicit 0 (unlimited) differs from unset.
	if p.MaxWrites != nil {
		if *p.MaxWrites < 0 {
			return bad("planning.max_writes_per_second", "must be >= 0 (0: unlimited), got %g", *p.MaxWrites)
		}
		s.MaxWrites = *p.MaxWrites
	}
	if p.WriteBurst < 0 {
		return bad("planning.write_burst", "must be >= 0, got %d", p.WriteBurst)
	}
	if p.WriteBurst > 0 {
		s.WriteBurst = p.WriteBurst
	}
	if p.Writers < 0 || p.Writers > 64 {
		return bad("planning.write_workers", "must be between 1 and 64, got %d", p.Writers)
	}
	if p.Writers > 0 {
		s.Writers = p.Writers
	}
	s.DryRun = p.DryRun
	return nil
}

// validToken refuses a token that cannot travel in an HTTP header as it
// is: whitespace, control or non-ASCII characters.
func validToken(t string) error {
	for i, r := range t {
		if r <= ' ' || r > '~' {
			return fmt.Errorf("must be printable ASCII without whitespace; byte %d is %q", i+1, r)
		}
	}
	return nil
}

func duration(v string, def time.Duration) (time.Duration, error) {
	if v == "" {
		return def, nil
	}
	return time.ParseDuration(v)
}
