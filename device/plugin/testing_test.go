package plugin

import (
	"os"
	"path/filepath"
	"testing"

	log "github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/helper/pluginutils/hclspecutils"
	"github.com/hashicorp/nomad/helper/pluginutils/hclutils"
	"github.com/hashicorp/nomad/helper/testlog"
	"github.com/hashicorp/nomad/plugins/base"
	"github.com/shoenig/test/must"
	"github.com/zclconf/go-cty/cty/msgpack"
)

// testFleet is a heterogeneous simulated fleet: two H100s, two A100s (one in
// MIG mode) and four T4s.
const testFleet = `{
  "driver_version": "550.54.15",
  "cuda_version": "12.4",
  "gpus": [
    {"uuid": "GPU-h100", "count": 2, "model": "NVIDIA H100 80GB HBM3", "architecture": "hopper",
     "compute_capability": "9.0", "memory_mib": 81559, "sm_count": 132, "pci_bandwidth_mbps": 63015},
    {"uuid": "GPU-a100-0", "model": "NVIDIA A100-SXM4-40GB", "architecture": "ampere",
     "compute_capability": "8.0", "memory_mib": 40960, "sm_count": 108, "pci_bus_id": "00000000:41:00.0"},
    {"uuid": "GPU-a100-mig", "model": "NVIDIA A100-SXM4-40GB", "architecture": "ampere",
     "compute_capability": "8.0", "memory_mib": 40960, "sm_count": 108,
     "mig": [{"profile": "3g.20gb", "memory_mib": 20096, "sm_count": 42},
             {"profile": "3g.20gb", "memory_mib": 20096, "sm_count": 42}]},
    {"uuid": "GPU-t4", "count": 4, "model": "Tesla T4", "architecture": "turing",
     "compute_capability": "7.5", "memory_mib": 15360, "sm_count": 40, "pci_bandwidth_mbps": 15753}
  ]
}`

// simFiles writes fleet to a temporary fleet file and returns it with a
// state directory.
func simFiles(t testing.TB, fleet string) (fleetPath, stateDir string) {
	t.Helper()
	dir := t.TempDir()
	fleetPath = filepath.Join(dir, "fleet.json")
	stateDir = filepath.Join(dir, "state")
	must.NoError(t, os.WriteFile(fleetPath, []byte(fleet), 0o644))
	return fleetPath, stateDir
}

// encodeConfig turns the body of a plugin "config" block into what the Nomad
// agent sends to SetConfig, through the same hclspec path the agent takes.
func encodeConfig(t *testing.T, body string) ([]byte, error) {
	t.Helper()
	raw := hclutils.HclConfigToInterface(t, "config {\n"+body+"\n}")
	if raw == nil {
		raw = map[string]interface{}{}
	}
	spec, diags := hclspecutils.Convert(configSpec)
	must.False(t, diags.HasErrors(), must.Sprint(diags))
	val, diags, errs := hclutils.ParseHclInterface(raw, spec, nil)
	if diags.HasErrors() {
		return nil, errs[0]
	}
	return msgpack.Marshal(val, val.Type())
}

// newSimDevice returns the plugin configured with body on top of a sim
// backend for fleet.
func newSimDevice(t *testing.T, fleet, body string) (*Device, string) {
	t.Helper()
	fleetPath, stateDir := simFiles(t, fleet)
	d := New(testLogger(t))
	data, err := encodeConfig(t, simConfig(fleetPath, stateDir)+body)
	must.NoError(t, err)
	must.NoError(t, d.SetConfig(&base.Config{PluginConfig: data}))
	return d, stateDir
}

func simConfig(fleetPath, stateDir string) string {
	return `backend = "sim"
fingerprint_period = "100ms"
sim {
  fleet_file = "` + fleetPath + `"
  state_dir  = "` + stateDir + `"
}
`
}

func testLogger(t *testing.T) log.Logger { return testlog.HCLogger(t) }
