package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/caravan-gpu/caravan/e2e/harness"
	"github.com/caravan-gpu/caravan/planner/plannerapi"
)

// demoProfiles is the throughput profile `caravan profile import` loads:
// resnet runs 6× faster on an H100 than on a T4, so the matching prefers
// the H100 when one is free.
const demoProfiles = `{"profiles": [{"name": "resnet", "throughput":
  {"NVIDIA H100 80GB HBM3": 6, "NVIDIA A100-SXM4-40GB": 3, "Tesla T4": 1}}]}`

// plannerChild is `caravan planner run` as a child process of the demo.
type plannerChild struct {
	cmd  *exec.Cmd
	addr string
	done chan struct{}
}

// startPlanner writes jobspecs/planner.hcl into the cluster's directory with
// a free port, short queue cuts and a short interval, so that decisions come
// within seconds, and runs the planner on it. Applied decisions are echoed;
// the full log goes to planner.log.
func startPlanner(c *harness.Cluster) (*plannerChild, error) {
	src, err := os.ReadFile(c.Jobspec("planner.hcl"))
	if err != nil {
		return nil, err
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	cfg := string(src)
	for _, r := range []struct{ old, new string }{
		{`address = "127.0.0.1:4680"`, fmt.Sprintf("address = %q", addr)},
		{`queue_cuts   = [30, 120]`, `queue_cuts   = [5, 120]`},
		{`interval     = "10s"`, `interval     = "2s"`},
		{`min_interval = "1s"`, `min_interval = "500ms"`},
		{`results_dir = ""`, fmt.Sprintf("results_dir = %q", resultsDir(c))},
	} {
		if !strings.Contains(cfg, r.old) {
			return nil, fmt.Errorf("%s no longer holds %s; update the demo", c.Jobspec("planner.hcl"), r.old)
		}
		cfg = strings.Replace(cfg, r.old, r.new, 1)
	}
	path := filepath.Join(c.Dir, "planner.hcl")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	logFile, err := os.Create(filepath.Join(c.Dir, "planner.log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(filepath.Join(c.BinDir, "caravan"), "planner", "run", "-config", path)
	cmd.Env = c.Env()
	// Its own process group: Ctrl-C reaches the demo, which stops the
	// planner in order before the cluster.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &plannerChild{cmd: cmd, addr: addr, done: make(chan struct{})}
	go func() {
		echoDecisions(out, logFile)
		_ = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	say("$ caravan planner run -config %s   (jobspecs/planner.hcl; API on %s, pid %d)", path, addr, cmd.Process.Pid)
	return p, nil
}

var (
	decisionLine = regexp.MustCompile(`decision applied: job=(\S+) action=(\S+) priority=(\d+) changes="([^"]*)" reason="([^"]*)"`)
	leaderLine   = regexp.MustCompile(`(?i)acquired leadership|now leads|became leader`)
)

// echoDecisions copies the planner's log to w and prints each applied
// decision as one readable line.
func echoDecisions(r io.Reader, w io.Writer) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		fmt.Fprintln(w, line)
		if m := decisionLine.FindStringSubmatch(line); m != nil {
			say("  planner decision: %-18s %-8s %s  (%s)", m[1], m[2], m[4], m[5])
		} else if leaderLine.MatchString(line) || strings.Contains(line, "[ERROR]") {
			say("  planner: %s", line[strings.Index(line, "]")+1:])
		}
	}
}

// waitReady waits until the planner serves its API and leads.
func (p *plannerChild) waitReady(ctx context.Context, c *harness.Cluster) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if s, err := plannerapi.NewClient(p.addr, "").Status(ctx); err == nil && s.Leader {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-p.done:
			return fmt.Errorf("the planner exited; see %s", filepath.Join(c.Dir, "planner.log"))
		case <-time.After(300 * time.Millisecond):
		}
	}
	return fmt.Errorf("the planner did not lead within 30s; see %s", filepath.Join(c.Dir, "planner.log"))
}

// stop sends SIGTERM, and SIGKILL if the planner has not exited in 10 s.
func (p *plannerChild) stop() {
	harness.StopProcess(p.cmd, p.done, syscall.SIGTERM)
	say("planner stopped")
}

// caravan runs bin/caravan against the cluster.
func caravan(c *harness.Cluster, args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(c.BinDir, "caravan"), args...)
	cmd.Env = c.Env()
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// resultsDir holds the demo's caravan sim output, for the dashboard's
// Results view.
func resultsDir(c *harness.Cluster) string { return filepath.Join(c.Dir, "results") }

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
