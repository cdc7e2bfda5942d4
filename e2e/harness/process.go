package harness

// This file runs the agents' processes: spawning, watching and stopping them.

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Stop purges every job, stops both agents and kills anything they left
// behind, so that no process outlives the cluster.
func (c *Cluster) Stop() {
	start := time.Now()
	defer func() { c.opts.Logf("cluster stopped in %s", time.Since(start).Round(time.Millisecond)) }()
	if c.Nomad != nil && c.nomadRunning() {
		if jobs, _, err := c.Nomad.Jobs().List(nil); err == nil {
			for _, j := range jobs {
				_, _, _ = c.Nomad.Jobs().Deregister(j.ID, true, nil)
			}
			c.waitAllocsTerminal(20 * time.Second)
		}
	}
	c.mu.Lock()
	var clients []*exec.Cmd
	for _, cl := range c.clients {
		if cl.cmd != nil {
			clients = append(clients, cl.cmd)
		}
	}
	server, consul := c.nomadServer, c.consul
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, cmd := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.stopProcess(cmd, syscall.SIGINT, 20*time.Second, true)
		}()
	}
	wg.Wait()
	if server != nil {
		c.stopProcess(server, syscall.SIGINT, 20*time.Second, true)
	}
	if consul != nil {
		c.stopProcess(consul, syscall.SIGINT, 10*time.Second, true)
	}
	if c.Dir != "" {
		killLeftovers(c.Dir)
		unmountUnder(c.Dir)
	}
	if c.ownDir && os.Getenv("CARAVAN_E2E_KEEP") == "" {
		_ = os.RemoveAll(c.Dir)
	}
}

func (c *Cluster) nomadRunning() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.nomadServer == nil {
		return false
	}
	select {
	case <-c.exited[c.nomadServer]:
		return false
	default:
		return true
	}
}

func (c *Cluster) waitAllocsTerminal(timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		allocs, _, err := c.Nomad.Allocations().List(nil)
		if err != nil {
			return
		}
		running := 0
		for _, a := range allocs {
			if a.ClientStatus == "running" || a.ClientStatus == "pending" {
				running++
			}
		}
		if running == 0 {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// logTails returns the last lines of each agent log.
func (c *Cluster) logTails(lines int) string {
	var b strings.Builder
	for _, path := range c.LogPaths() {
		data, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		all := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(all) > lines {
			all = all[len(all)-lines:]
		}
		fmt.Fprintf(&b, "==== last lines of %s ====\n%s\n", path, strings.Join(all, "\n"))
	}
	return b.String()
}

// LogPaths returns the agents' log files.
func (c *Cluster) LogPaths() []string {
	paths := []string{filepath.Join(c.Dir, "consul.log"), filepath.Join(c.Dir, "nomad-server.log")}
	for _, cl := range c.clients {
		paths = append(paths, filepath.Join(c.Dir, logName(cl)+".log"))
	}
	return paths
}

func (c *Cluster) spawn(name, bin string, args ...string) (*exec.Cmd, error) {
	logFile, err := os.OpenFile(filepath.Join(c.Dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Dir = c.Dir
	// Its own process group, so that teardown reaches the plugins it starts.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Env = agentEnv()
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	done := make(chan struct{})
	c.mu.Lock()
	c.exited[cmd] = done
	c.mu.Unlock()
	go func() {
		_ = cmd.Wait()
		logFile.Close()
		close(done)
	}()
	return cmd, nil
}

// agentEnv keeps the agents away from any real cluster the caller's
// environment points at.
func agentEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		// The caller's planner address and API token are not this
		// cluster's either.
		if strings.HasPrefix(kv, "NOMAD_") || strings.HasPrefix(kv, "CONSUL_") || strings.HasPrefix(kv, "CARAVAN_PLANNER_") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// isClient reports whether cmd is a current client agent; c.mu is held.
func (c *Cluster) isClient(cmd *exec.Cmd) bool {
	for _, cl := range c.clients {
		if cl.cmd == cmd {
			return true
		}
	}
	return false
}

func (c *Cluster) agentExited() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for cmd, done := range c.exited {
		if cmd != c.nomadServer && cmd != c.consul && !c.isClient(cmd) {
			continue
		}
		select {
		case <-done:
			return fmt.Errorf("%s exited early: %v; see %s", filepath.Base(cmd.Path), cmd.ProcessState, c.Dir)
		default:
		}
	}
	return nil
}

// stopProcess signals cmd and waits for it to exit, killing it after grace.
// With killGroup it then kills what is left of its process group; a client
// restart must not, because logmon and the task executors live in that group
// and survive a restart, as they do under systemd's KillMode=process.
func (c *Cluster) stopProcess(cmd *exec.Cmd, sig syscall.Signal, grace time.Duration, killGroup bool) {
	c.mu.Lock()
	done := c.exited[cmd]
	c.mu.Unlock()
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(grace):
		_ = cmd.Process.Kill()
		<-done
	}
	if killGroup {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}

func (c *Cluster) waitHTTP(ctx context.Context, name, url string, ok func(string) bool) error {
	client := &http.Client{Timeout: 2 * time.Second}
	if c.TLS != nil {
		var err error
		if client, err = c.TLS.httpClient(2 * time.Second); err != nil {
			return err
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		if err := c.agentExited(); err != nil {
			return err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if c.NomadToken != "" { // Consul ignores Nomad's header
			req.Header.Set("X-Nomad-Token", c.NomadToken)
		}
		resp, err := client.Do(req)
		if err == nil {
			var buf bytes.Buffer
			_, _ = buf.ReadFrom(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 && (ok == nil || ok(buf.String())) {
				return nil
			}
			last = fmt.Sprintf("%s: %s", resp.Status, strings.TrimSpace(buf.String()))
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s not healthy after 60s: %s", name, last)
}
