package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/caravan-gpu/caravan/planner/plannerapi"
)

// PlannerOptions shape a `caravan planner run` beside the cluster.
type PlannerOptions struct {
	// ID is the planner's Consul service ID ("caravan-planner-e2e" when
	// empty).
	ID string
	// Policy is planning.policy.
	Policy string
	// QueueCuts and PromoteKnob are planning.queue_cuts and promote_knob;
	// the planner's defaults when empty or 0.
	QueueCuts   []float64
	PromoteKnob float64
	// MigrationCost is planning.migration_cost; the planner's default
	// when 0.
	MigrationCost time.Duration
	// RotationPeriod is planning.rotation_period; the planner's default
	// when 0.
	RotationPeriod time.Duration
	// PredictFloor is planning.predict_floor; the planner's default when
	// 0.
	PredictFloor time.Duration
	// CoreMHz is planning.core_mhz; each node's own when 0.
	CoreMHz float64
	// SynergyLease is planning.synergy_lease; none when 0.
	SynergyLease time.Duration
	// JobSizes and JobSizesScale are planning.job_sizes and
	// job_sizes_scale: 2D-Gittins' fixed size sample.
	JobSizes      string
	JobSizesScale float64
	// Interval and MinInterval are planning.interval and min_interval;
	// DefaultInterval and DefaultMinInterval when 0.
	Interval, MinInterval time.Duration
	// Settle is planning.settle; off when 0.
	Settle time.Duration
	// LogLevel is the planner's log_level (info when empty).
	LogLevel string
	// Token is http.token, the API token; none when empty.
	Token string
}

// Planner is bin/caravan planner run as a child process.
type Planner struct {
	// Addr is the planner's HTTP API, host:port.
	Addr string
	// ConfigPath and LogPath are its planner.hcl and its log.
	ConfigPath, LogPath string
	cmd                 *exec.Cmd
	done                chan struct{}
}

// DefaultInterval and DefaultMinInterval are the planner's interval and
// min_interval unless PlannerOptions says otherwise: short, so that rounds
// follow events quickly.
const (
	DefaultInterval    = time.Second
	DefaultMinInterval = 200 * time.Millisecond
)

// Config renders o as planner.hcl with the API on addr.
func (o PlannerOptions) Config(addr string) string {
	id := o.ID
	if id == "" {
		id = "caravan-planner-e2e"
	}
	level := o.LogLevel
	if level == "" {
		level = "info"
	}
	interval, minInterval := o.Interval, o.MinInterval
	if interval <= 0 {
		interval = DefaultInterval
	}
	if minInterval <= 0 {
		minInterval = DefaultMinInterval
	}
	var b strings.Builder
	fmt.Fprintf(&b, "id = %q\nlog_level = %q\nhttp {\n  address = %q\n", id, level, addr)
	if o.Token != "" {
		fmt.Fprintf(&b, "  token   = %q\n", o.Token)
	}
	b.WriteString("}\nplanning {\n")
	fmt.Fprintf(&b, "  policy       = %q\n  interval     = %q\n  min_interval = %q\n", o.Policy, interval, minInterval)
	if o.Settle > 0 {
		fmt.Fprintf(&b, "  settle       = %q\n", o.Settle)
	}
	if len(o.QueueCuts) > 0 {
		cuts := make([]string, len(o.QueueCuts))
		for i, c := range o.QueueCuts {
			cuts[i] = fmt.Sprintf("%g", c)
		}
		fmt.Fprintf(&b, "  queue_cuts   = [%s]\n", strings.Join(cuts, ", "))
	}
	if o.PromoteKnob > 0 {
		fmt.Fprintf(&b, "  promote_knob = %g\n", o.PromoteKnob)
	}
	if o.MigrationCost > 0 {
		fmt.Fprintf(&b, "  migration_cost = %q\n", o.MigrationCost)
	}
	if o.RotationPeriod > 0 {
		fmt.Fprintf(&b, "  rotation_period = %q\n", o.RotationPeriod)
	}
	if o.PredictFloor > 0 {
		fmt.Fprintf(&b, "  predict_floor = %q\n", o.PredictFloor)
	}
	if o.CoreMHz > 0 {
		fmt.Fprintf(&b, "  core_mhz = %g\n", o.CoreMHz)
	}
	if o.SynergyLease > 0 {
		fmt.Fprintf(&b, "  synergy_lease = %q\n", o.SynergyLease)
	}
	if o.JobSizes != "" {
		fmt.Fprintf(&b, "  job_sizes    = %q\n", o.JobSizes)
		if o.JobSizesScale > 0 {
			fmt.Fprintf(&b, "  job_sizes_scale = %g\n", o.JobSizesScale)
		}
	}
	b.WriteString("}\n")
	return b.String()
}

// StartPlanner writes a planner.hcl into the cluster's directory and runs
// bin/caravan planner run on it against the cluster's Nomad and Consul,
// and waits until the planner leads. Call Stop when done; the cluster's
// Stop does not stop it.
func (c *Cluster) StartPlanner(ctx context.Context, o PlannerOptions) (*Planner, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	l.Close()
	p := &Planner{Addr: addr, ConfigPath: filepath.Join(c.Dir, "planner.hcl"), LogPath: filepath.Join(c.Dir, "planner.log"),
		done: make(chan struct{})}
	if err := os.WriteFile(p.ConfigPath, []byte(o.Config(addr)), 0o644); err != nil {
		return nil, err
	}
	logFile, err := os.Create(p.LogPath)
	if err != nil {
		return nil, err
	}
	p.cmd = exec.Command(filepath.Join(c.BinDir, "caravan"), "planner", "run", "-config", p.ConfigPath)
	p.cmd.Env = c.Env()
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	// Its own process group: Ctrl-C reaches the caller, which stops the
	// planner before the cluster.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start the planner: %w", err)
	}
	go func() {
		_ = p.cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		s, err := plannerapi.NewClient(addr, o.Token).Status(sctx)
		cancel()
		if err == nil && s.Leader {
			return p, nil
		}
		select {
		case <-ctx.Done():
			p.Stop()
			return nil, ctx.Err()
		case <-p.done:
			return nil, fmt.Errorf("the planner exited; see %s", p.LogPath)
		case <-time.After(200 * time.Millisecond):
		}
	}
	p.Stop()
	return nil, errors.New("the planner did not lead within 30s; see " + p.LogPath)
}

// Stop sends SIGTERM, and SIGKILL if the planner has not exited in 10 s.
func (p *Planner) Stop() {
	StopProcess(p.cmd, p.done, syscall.SIGTERM)
}

// StopProcess sends cmd's process sig, and SIGKILL if it has not exited in
// 10 s; done is closed once cmd.Wait has returned. It returns at once when
// the process has already exited.
func StopProcess(cmd *exec.Cmd, done <-chan struct{}, sig os.Signal) {
	select {
	case <-done:
		return
	default:
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}
