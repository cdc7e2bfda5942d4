// Package harness starts a real Consul dev agent and a real Nomad agent
// (server and client) on 127.0.0.1 with caravan's freshly built plugins and a
// simulated GPU fleet. The e2e tests and `make demo` both use it.
package harness

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/nomad/api"
)

// DefaultFleet is a small heterogeneous simulated fleet.
const DefaultFleet = `{
  "driver_version": "550.54.15",
  "cuda_version": "12.4",
  "gpus": [
    {"uuid": "GPU-h100", "count": 2, "model": "NVIDIA H100 80GB HBM3", "architecture": "hopper",
     "compute_capability": "9.0", "memory_mib": 81559, "sm_count": 132, "pci_bandwidth_mbps": 63015},
    {"uuid": "GPU-a100", "count": 2, "model": "NVIDIA A100-SXM4-40GB", "architecture": "ampere",
     "compute_capability": "8.0", "memory_mib": 40960, "sm_count": 108, "pci_bandwidth_mbps": 31507},
    {"uuid": "GPU-t4", "count": 4, "model": "Tesla T4", "architecture": "turing",
     "compute_capability": "7.5", "memory_mib": 15360, "sm_count": 40, "pci_bandwidth_mbps": 15753}
  ]
}`

// Options shape the cluster.
type Options struct {
	// Fleet is the sim fleet JSON; DefaultFleet when empty.
	Fleet string
	// Fleets runs one Nomad client agent per entry, each with that sim
	// fleet, its own data dir, ports, plugin state and part of the
	// driver's UID range; Fleet is then ignored. The first client is the
	// one Node, StateDir and FleetPath speak of.
	Fleets []string
	// DeviceConfig is extra HCL inside caravan-device's config block
	// (partition rules, mps, ...).
	DeviceConfig string
	// DriverConfig is extra HCL inside caravan-driver's config block.
	DriverConfig string
	// ClientConfig is extra HCL inside the Nomad client block.
	ClientConfig string
	// RepoRoot is found from the working directory when empty.
	RepoRoot string
	// Dir holds all state; a new temporary directory when empty.
	Dir string
	// Logf receives progress lines; silent when nil.
	Logf func(format string, args ...any)
	// ACLs turns on ACLs in Consul (default deny) and Nomad, bootstrapped
	// with the management tokens in Cluster.NomadToken and ConsulToken.
	ACLs bool
	// TLS serves Nomad's HTTP and RPC and Consul's HTTP over TLS only, with
	// a CA and certificate made for the cluster (Cluster.TLS); Env gives
	// the standard NOMAD_CACERT, CONSUL_CACERT, ... for them.
	TLS bool
	// PickPorts, when set, picks the n ports the agents bind in place of
	// FreePorts; it is called again for each start the harness retries.
	PickPorts func(n int) ([]int, error)
}

// Cluster is a running Consul and Nomad pair.
type Cluster struct {
	Nomad      *api.Client
	NomadAddr  string
	ConsulAddr string
	// Dir is the cluster's private directory; StateDir and FleetPath are the
	// sim GPU backend's state directory and fleet file inside it.
	Dir       string
	StateDir  string
	FleetPath string
	BinDir    string
	RepoRoot  string
	NomadBin  string
	ConsulBin string
	// NomadToken and ConsulToken are the management tokens when ACLs are
	// on, empty otherwise; c.Nomad and Env use them.
	NomadToken, ConsulToken string
	// TLS holds the CA, certificate and key when Options.TLS is set.
	TLS *TLSFiles

	opts         Options
	serverConfig string
	clients      []*clientAgent
	ownDir       bool

	mu          sync.Mutex
	nomadServer *exec.Cmd
	consul      *exec.Cmd
	exited      map[*exec.Cmd]chan struct{}
}

// clientAgent is one Nomad client agent of the cluster.
type clientAgent struct {
	name   string // the node's name
	config string
	addr   string
	// dir holds the client's data dir and driver state; stateDir and
	// fleetPath are its sim GPU backend's.
	dir, stateDir, fleetPath string
	cmd                      *exec.Cmd // guarded by Cluster.mu
}

// clientUIDRange is the part of the driver's default UID range that client
// i of n leases from, so that two clients on one host never hand the same
// UID to tasks of different allocations.
func clientUIDRange(i, n int) string {
	const lo, width = 70000, 10000
	part := width / n
	return fmt.Sprintf("%d-%d", lo+i*part, lo+(i+1)*part-1)
}

// RepoRoot walks up from the working directory to caravan's go.mod.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(data, []byte("module github.com/caravan-gpu/caravan\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("cannot find caravan's go.mod above the working directory")
		}
		dir = parent
	}
}

// Start brings up Consul and Nomad and waits until both are healthy and
// caravan's driver and devices are fingerprinted. Call Stop when done.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	root := opts.RepoRoot
	if root == "" {
		var err error
		if root, err = RepoRoot(); err != nil {
			return nil, err
		}
	}
	// Ports are picked free and released before the agents bind them, so
	// another process can take one in between: Nomad then exits at start
	// with "address already in use". A fresh cluster on fresh ports is
	// started in its place, a few times at most.
	for attempt := 1; ; attempt++ {
		c, err := startOnce(ctx, opts, root)
		if err == nil {
			return c, nil
		}
		var lost *lostPortError
		if !errors.As(err, &lost) || attempt == 3 || ctx.Err() != nil {
			return nil, err
		}
		opts.Logf("%s lost a port to another process before binding it (%s); starting again on new ports", lost.agent, lost.line)
	}
}

// lostPortError is a start that failed because an agent found a port it
// was given already taken.
type lostPortError struct {
	agent, line string
	err         error
}

func (e *lostPortError) Error() string { return e.err.Error() }
func (e *lostPortError) Unwrap() error { return e.err }

func startOnce(ctx context.Context, opts Options, root string) (*Cluster, error) {
	c := &Cluster{
		RepoRoot:  root,
		BinDir:    filepath.Join(root, "bin"),
		NomadBin:  envOr("CARAVAN_NOMAD_BIN", filepath.Join(root, ".tools", "bin", "nomad")),
		ConsulBin: envOr("CARAVAN_CONSUL_BIN", filepath.Join(root, ".tools", "bin", "consul")),
		opts:      opts,
		exited:    map[*exec.Cmd]chan struct{}{},
	}
	for _, bin := range []string{c.NomadBin, c.ConsulBin,
		filepath.Join(c.BinDir, "caravan-device"), filepath.Join(c.BinDir, "caravan-driver")} {
		if _, err := os.Stat(bin); err != nil {
			return nil, fmt.Errorf("%s is missing: run `make tools build` first (%w)", bin, err)
		}
	}
	c.Dir = opts.Dir
	if c.Dir == "" {
		dir, err := os.MkdirTemp("", "caravan-e2e-")
		if err != nil {
			return nil, err
		}
		// Tasks run as an unprivileged user and must reach their alloc dirs.
		if err := os.Chmod(dir, 0o755); err != nil {
			return nil, err
		}
		c.Dir, c.ownDir = dir, true
	}
	if err := c.start(ctx); err != nil {
		err = fmt.Errorf("%w\n%s", err, c.logTails(60))
		// Only a cluster in a directory of its own can start again afresh.
		if agent, line := c.portTaken(); agent != "" && c.ownDir {
			err = &lostPortError{agent: agent, line: line, err: err}
		}
		c.Stop()
		return nil, err
	}
	return c, nil
}

// portTaken names the agent whose log says a port it was to bind was
// taken, and that line; "" when none says so.
func (c *Cluster) portTaken() (agent, line string) {
	for _, path := range c.LogPaths() {
		data, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(data), "\n") {
			if strings.Contains(l, "address already in use") {
				return strings.TrimSuffix(filepath.Base(path), ".log"), strings.TrimSpace(l)
			}
		}
	}
	return "", ""
}

func (c *Cluster) start(ctx context.Context) error {
	fleets := c.opts.Fleets
	if len(fleets) == 0 {
		fleet := c.opts.Fleet
		if fleet == "" {
			fleet = DefaultFleet
		}
		fleets = []string{fleet}
	}
	pluginDir := filepath.Join(c.Dir, "plugins")
	if err := c.layout(fleets, pluginDir); err != nil {
		return err
	}

	pick := c.opts.PickPorts
	if pick == nil {
		pick = FreePorts
	}
	ports, err := pick(8 + 3*len(c.clients))
	if err != nil {
		return err
	}
	if c.opts.TLS {
		f, err := writeTLS(filepath.Join(c.Dir, "tls"))
		if err != nil {
			return fmt.Errorf("make TLS certificates: %w", err)
		}
		c.TLS = &f
	}
	if err := c.startConsul(ctx, ports[:5]); err != nil {
		return err
	}

	if c.opts.ACLs {
		c.NomadToken = newUUID()
	}
	c.NomadAddr = fmt.Sprintf("%s127.0.0.1:%d", c.scheme(), ports[5])
	if err := c.writeServerConfig(ports[5:8]); err != nil {
		return err
	}
	for i, cl := range c.clients {
		if err := c.writeClientConfig(i, cl, pluginDir, ports[8+3*i:11+3*i], ports[6]); err != nil {
			return err
		}
	}
	cfg := api.DefaultConfig()
	cfg.Address = c.NomadAddr
	cfg.SecretID = c.NomadToken
	if c.TLS != nil {
		cfg.TLSConfig = &api.TLSConfig{CACert: c.TLS.CA, ClientCert: c.TLS.Cert, ClientKey: c.TLS.Key}
	}
	if c.Nomad, err = api.NewClient(cfg); err != nil {
		return err
	}

	c.opts.Logf("starting nomad server on %s", c.NomadAddr)
	start := time.Now()
	if err := c.spawnServer(); err != nil {
		return err
	}
	if err := c.bootstrapACLs(ctx); err != nil {
		return err
	}
	if err := c.waitServerKeyring(ctx); err != nil {
		return err
	}
	c.opts.Logf("nomad server has a leader and a keyring after %s", time.Since(start).Round(time.Millisecond))
	return c.startClients(ctx)
}

// layout makes the cluster's directories, each client's fleet file, and
// the plugin directory with copies of the plugins.
func (c *Cluster) layout(fleets []string, pluginDir string) error {
	// The first client keeps the paths a one-client cluster always had.
	c.clients = nil
	for i := range fleets {
		cl := &clientAgent{name: "caravan-client", dir: c.Dir}
		if i > 0 {
			cl.name = fmt.Sprintf("caravan-client-%d", i+1)
			cl.dir = filepath.Join(c.Dir, cl.name)
		}
		cl.stateDir, cl.fleetPath = filepath.Join(cl.dir, "gpu-state"), filepath.Join(cl.dir, "fleet.json")
		c.clients = append(c.clients, cl)
	}
	c.StateDir, c.FleetPath = c.clients[0].stateDir, c.clients[0].fleetPath
	for _, d := range []string{pluginDir, filepath.Join(c.Dir, "nomad-server"), filepath.Join(c.Dir, "consul-data")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	for i, cl := range c.clients {
		for _, d := range []string{cl.stateDir, filepath.Join(cl.dir, "nomad-client")} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return err
			}
		}
		if err := os.WriteFile(cl.fleetPath, []byte(fleets[i]), 0o644); err != nil {
			return err
		}
	}
	// Copies, not links: Nomad runs the plugin_dir's files, and a rebuild of
	// bin/ during a run must not change them underneath the agent.
	for _, name := range []string{"caravan-device", "caravan-driver"} {
		if err := copyFile(filepath.Join(c.BinDir, name), filepath.Join(pluginDir, name)); err != nil {
			return err
		}
	}
	return nil
}

// startClients starts every client agent together and waits for each.
func (c *Cluster) startClients(ctx context.Context) error {
	errs := make([]error, len(c.clients))
	var wg sync.WaitGroup
	for i, cl := range c.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.startClient(ctx, cl)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (c *Cluster) startClient(ctx context.Context, cl *clientAgent) error {
	c.opts.Logf("starting nomad client %s", cl.name)
	cmd, err := c.spawn(logName(cl), c.NomadBin, "agent", "-config", cl.config)
	if err != nil {
		return err
	}
	c.mu.Lock()
	cl.cmd = cmd
	c.mu.Unlock()
	start := time.Now()
	// After a restart the server still shows the node ready from before, so
	// first wait for the new client agent itself.
	if err := c.waitHTTP(ctx, "nomad client", cl.addr+"/v1/agent/health?type=client", nil); err != nil {
		return err
	}
	if err := c.waitDriverFingerprintSince(ctx, cl.name, start); err != nil {
		return err
	}
	if _, err = c.waitNodeReady(ctx, cl.name); err != nil {
		return err
	}
	c.opts.Logf("nomad client %s ready with caravan's driver and GPUs in %s", cl.name, time.Since(start).Round(time.Millisecond))
	return nil
}

// logName is the base name of a client agent's log file.
func logName(cl *clientAgent) string {
	if cl.name == "caravan-client" {
		return "nomad-client"
	}
	return "nomad-" + strings.TrimPrefix(cl.name, "caravan-")
}

// waitDriverFingerprintSince waits until the server holds a caravan driver
// fingerprint taken after since, proof that the (re)started client reported in.
func (c *Cluster) waitDriverFingerprintSince(ctx context.Context, name string, since time.Time) error {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if err := c.agentExited(); err != nil {
			return err
		}
		if node, err := c.node(name); err == nil {
			if d := node.Drivers["caravan"]; d != nil && d.UpdateTime.After(since) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	return errors.New("the restarted nomad client did not report a caravan driver fingerprint within 60s")
}

// WaitNodeReady waits until the (first) Nomad client node is ready, the
// caravan driver is healthy and at least one caravan GPU is fingerprinted.
func (c *Cluster) WaitNodeReady(ctx context.Context) (*api.Node, error) {
	return c.waitNodeReady(ctx, c.clients[0].name)
}

func (c *Cluster) waitNodeReady(ctx context.Context, name string) (*api.Node, error) {
	var last string
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		if err := c.agentExited(); err != nil {
			return nil, err
		}
		node, err := c.node(name)
		switch {
		case err != nil:
			last = err.Error()
		case node.Status != "ready":
			last = "node status " + node.Status
		case node.Drivers["caravan"] == nil || !node.Drivers["caravan"].Healthy:
			last = "caravan driver not healthy yet"
		case !hasCaravanGPU(node):
			last = "no caravan GPU fingerprinted yet"
		default:
			return node, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	return nil, fmt.Errorf("nomad node %s not ready after 90s: %s", name, last)
}

func hasCaravanGPU(n *api.Node) bool {
	if n.NodeResources == nil {
		return false
	}
	for _, d := range n.NodeResources.Devices {
		if d.Vendor == "nvidia" && (d.Type == "gpu" || d.Type == "lane") && len(d.Instances) > 0 {
			return true
		}
	}
	return false
}

// node returns the client node called name; a restarted client registers
// again under the same node ID.
func (c *Cluster) node(name string) (*api.Node, error) {
	stubs, _, err := c.Nomad.Nodes().List(nil)
	if err != nil {
		return nil, err
	}
	for _, stub := range stubs {
		if stub.Name == name {
			node, _, err := c.Nomad.Nodes().Info(stub.ID, nil)
			return node, err
		}
	}
	return nil, fmt.Errorf("no Nomad node %s registered yet", name)
}

// Node returns the (first) client node.
func (c *Cluster) Node() (*api.Node, error) { return c.node(c.clients[0].name) }

// NodeIDs returns every client's node ID, in the order of Options.Fleets.
func (c *Cluster) NodeIDs() ([]string, error) {
	ids := make([]string, len(c.clients))
	for i, cl := range c.clients {
		node, err := c.node(cl.name)
		if err != nil {
			return nil, err
		}
		ids[i] = node.ID
	}
	return ids, nil
}

// RestartClient stops the (first) Nomad client agent gracefully and starts
// it again on the same data directory. Tasks keep running across the
// restart, as they do when an operator restarts a client, and the driver
// must recover them.
func (c *Cluster) RestartClient(ctx context.Context) error {
	cl := c.clients[0]
	c.mu.Lock()
	cmd := cl.cmd
	c.mu.Unlock()
	if cmd != nil {
		c.stopProcess(cmd, syscall.SIGINT, 30*time.Second, false)
	}
	return c.startClient(ctx, cl)
}

// KillServer kills the Nomad server agent with SIGKILL, as a crash would,
// and starts it again on the same data directory; it returns once the
// server leads again and has its keyring. The client and its tasks stay.
func (c *Cluster) KillServer(ctx context.Context) error {
	c.mu.Lock()
	cmd := c.nomadServer
	c.mu.Unlock()
	if cmd != nil {
		c.stopProcess(cmd, syscall.SIGKILL, 10*time.Second, true)
	}
	if err := c.spawnServer(); err != nil {
		return err
	}
	return c.waitServerKeyring(ctx)
}

// spawnServer starts the Nomad server agent on its config.
func (c *Cluster) spawnServer() error {
	cmd, err := c.spawn("nomad-server", c.NomadBin, "agent", "-config", c.serverConfig)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.nomadServer = cmd
	c.mu.Unlock()
	return nil
}

// waitServerKeyring waits until the server leads and has its keyring,
// which clients need before they register.
func (c *Cluster) waitServerKeyring(ctx context.Context) error {
	return c.waitHTTP(ctx, "nomad server", c.NomadAddr+"/v1/operator/keyring/keys", func(body string) bool {
		return strings.Contains(body, "KeyID")
	})
}

func newUUID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// FreePorts picks n ports that are free now, on 127.0.0.1.
func FreePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func copyFile(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, data, 0o755)
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
