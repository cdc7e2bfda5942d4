package harness

// This file writes the agents' configs.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// startConsul starts Consul on ports (http, grpc, serf lan and wan,
// server) and waits for its leader.
func (c *Cluster) startConsul(ctx context.Context, ports []int) error {
	c.ConsulAddr = fmt.Sprintf("127.0.0.1:%d", ports[0])
	consulHCL := fmt.Sprintf(`
data_dir   = %q
bind_addr  = "127.0.0.1"
client_addr = "127.0.0.1"
log_level  = "INFO"
ports {
  %s
  grpc     = %d
  grpc_tls = -1
  dns      = -1
  serf_lan = %d
  serf_wan = %d
  server   = %d
}
%s
%s
`, filepath.Join(c.Dir, "consul-data"), c.consulHTTPPorts(ports[0]), ports[1], ports[2], ports[3], ports[4], c.consulACL(), c.consulTLS())
	consulConfig := filepath.Join(c.Dir, "consul.hcl")
	if err := os.WriteFile(consulConfig, []byte(consulHCL), 0o644); err != nil {
		return err
	}
	c.opts.Logf("starting consul on %s", c.ConsulAddr)
	var err error
	if c.consul, err = c.spawn("consul", c.ConsulBin, "agent", "-dev", "-config-file", consulConfig); err != nil {
		return err
	}
	if err := c.waitHTTP(ctx, "consul", c.scheme()+c.ConsulAddr+"/v1/status/leader", func(body string) bool {
		return strings.Trim(strings.TrimSpace(body), `"`) != ""
	}); err != nil {
		return err
	}
	return nil
}

// writeServerConfig writes the Nomad server's agent config, on ports
// (http, rpc, serf).
func (c *Cluster) writeServerConfig(ports []int) error {
	// Server and client are separate agents: the client registers only once
	// the server's keyring exists (a combined agent waits a 15 s retry for
	// that), and a client restart leaves the server's state alone.
	c.serverConfig = filepath.Join(c.Dir, "nomad-server.hcl")
	serverHCL := fmt.Sprintf(`
data_dir   = %q
bind_addr  = "127.0.0.1"
log_level  = "DEBUG"
datacenter = "dc1"
name       = "caravan-server"

ports {
  http = %d
  rpc  = %d
  serf = %d
}

advertise {
  http = "127.0.0.1"
  rpc  = "127.0.0.1"
  serf = "127.0.0.1"
}

server {
  enabled          = true
  bootstrap_expect = 1
  # Every version of a job, not Nomad's last 6: a replay reads each hold
  # and release the planner wrote from them.
  job_tracked_versions = 1000
}

consul {
  address = %q
  token   = %q
%s
}

acl {
  enabled = %t
}
%s
`, filepath.Join(c.Dir, "nomad-server"), ports[0], ports[1], ports[2], c.ConsulAddr, c.ConsulToken, c.nomadConsulTLS(), c.opts.ACLs, c.nomadTLS())
	return os.WriteFile(c.serverConfig, []byte(serverHCL), 0o644)
}

// writeClientConfig writes client i's agent config: its own data dir,
// ports (http, rpc, serf), sim GPUs and, with several clients, its own
// part of the driver's UID range.
func (c *Cluster) writeClientConfig(i int, cl *clientAgent, pluginDir string, ports []int, serverRPC int) error {
	cl.config = filepath.Join(cl.dir, "nomad-client.hcl")
	cl.addr = fmt.Sprintf("%s127.0.0.1:%d", c.scheme(), ports[0])
	driverConfig := c.opts.DriverConfig
	if len(c.clients) > 1 && !strings.Contains(driverConfig, "uid_range") {
		driverConfig = fmt.Sprintf("    uid_range = %q\n%s", clientUIDRange(i, len(c.clients)), driverConfig)
	}
	clientHCL := fmt.Sprintf(`
data_dir   = %q
plugin_dir = %q
bind_addr  = "127.0.0.1"
log_level  = "DEBUG"
datacenter = "dc1"
name       = %q

ports {
  http = %d
  rpc  = %d
  serf = %d
}

advertise {
  http = "127.0.0.1"
  rpc  = "127.0.0.1"
  serf = "127.0.0.1"
}

client {
  enabled = true
  servers = ["127.0.0.1:%d"]
  options {
    "fingerprint.denylist" = "env_aws,env_gce,env_azure,env_digitalocean"
    "driver.allowlist"     = "caravan,raw_exec"
  }
%s
}

consul {
  address = %q
  token   = %q
%s
}

acl {
  enabled = %t
}
%s

plugin "raw_exec" {
  config {
    enabled = true
  }
}

plugin "caravan-device" {
  config {
    backend            = "sim"
    fingerprint_period = "1s"
    sim {
      fleet_file = %q
      state_dir  = %q
    }
%s
  }
}

plugin "caravan-driver" {
  config {
    allow_root  = true
    state_dir   = %q
    gpu_backend = "sim"
    sim {
      fleet_file = %q
      state_dir  = %q
    }
%s
  }
}
`, filepath.Join(cl.dir, "nomad-client"), pluginDir, cl.name, ports[0], ports[1], ports[2], serverRPC, c.opts.ClientConfig,
		c.ConsulAddr, c.ConsulToken, c.nomadConsulTLS(), c.opts.ACLs, c.nomadTLS(), cl.fleetPath, cl.stateDir, c.opts.DeviceConfig, filepath.Join(cl.dir, "driver-state"), cl.fleetPath, cl.stateDir, driverConfig)
	return os.WriteFile(cl.config, []byte(clientHCL), 0o644)
}

func (c *Cluster) scheme() string {
	if c.opts.TLS {
		return "https://"
	}
	return "http://"
}

// consulHTTPPorts serves Consul's API on port, over TLS only when TLS is on.
func (c *Cluster) consulHTTPPorts(port int) string {
	if c.TLS != nil {
		return fmt.Sprintf("http = -1\n  https = %d", port)
	}
	return fmt.Sprintf("http = %d\n  https = -1", port)
}

func (c *Cluster) consulTLS() string {
	if c.TLS == nil {
		return ""
	}
	return fmt.Sprintf(`
tls {
  defaults {
    ca_file         = %q
    cert_file       = %q
    key_file        = %q
    verify_incoming = false
    verify_outgoing = true
  }
}
`, c.TLS.CA, c.TLS.Cert, c.TLS.Key)
}

// nomadConsulTLS is what a Nomad agent needs inside its consul block to
// reach Consul over TLS.
func (c *Cluster) nomadConsulTLS() string {
	if c.TLS == nil {
		return ""
	}
	return fmt.Sprintf("  ssl = true\n  ca_file = %q\n  cert_file = %q\n  key_file = %q", c.TLS.CA, c.TLS.Cert, c.TLS.Key)
}

func (c *Cluster) nomadTLS() string {
	if c.TLS == nil {
		return ""
	}
	return fmt.Sprintf(`
tls {
  http                   = true
  rpc                    = true
  ca_file                = %q
  cert_file              = %q
  key_file               = %q
  verify_server_hostname = true
  verify_https_client    = false
}
`, c.TLS.CA, c.TLS.Cert, c.TLS.Key)
}

// consulACL is Consul's acl block: default deny, with the management token
// also the agent's own.
func (c *Cluster) consulACL() string {
	if !c.opts.ACLs {
		return ""
	}
	c.ConsulToken = newUUID()
	return fmt.Sprintf(`
acl {
  enabled        = true
  default_policy = "deny"
  tokens {
    initial_management = %q
    agent              = %q
  }
}
`, c.ConsulToken, c.ConsulToken)
}

// bootstrapACLs makes c.NomadToken Nomad's management token once the
// server has a leader.
func (c *Cluster) bootstrapACLs(ctx context.Context) error {
	if !c.opts.ACLs {
		return nil
	}
	if err := c.waitHTTP(ctx, "nomad server", c.NomadAddr+"/v1/status/leader", func(body string) bool {
		return strings.Trim(strings.TrimSpace(body), `"`) != ""
	}); err != nil {
		return err
	}
	var last error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		if _, _, last = c.Nomad.ACLTokens().BootstrapOpts(c.NomadToken, nil); last == nil {
			c.opts.Logf("nomad ACLs bootstrapped")
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	return fmt.Errorf("bootstrap nomad ACLs: %w", last)
}
