package plugin

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/caravan-gpu/caravan/gpu"
	log "github.com/hashicorp/go-hclog"
	"github.com/hashicorp/hcl"
	"github.com/hashicorp/hcl/hcl/ast"
	"github.com/hashicorp/nomad/helper/pluginutils/hclspecutils"
	"github.com/hashicorp/nomad/helper/pluginutils/hclutils"
	"github.com/hashicorp/nomad/helper/testlog"
	"github.com/hashicorp/nomad/plugins/base"
	"github.com/mitchellh/mapstructure"
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
	return encodeConfigBytes(body)
}

// encodeConfigBytes parses HCL as the agent parses its config file (HCL 1
// into a generic map), then decodes it with the plugin's spec.
func encodeConfigBytes(body string) ([]byte, error) {
	root, err := hcl.Parse("config {\n" + body + "\n}")
	if err != nil {
		return nil, err
	}
	var m map[string]interface{}
	if err := hcl.DecodeObject(&m, root.Node.(*ast.ObjectList).Items[0]); err != nil {
		return nil, err
	}
	var flat map[string]interface{}
	if err := mapstructure.WeakDecode(m, &flat); err != nil {
		return nil, err
	}
	var raw interface{} = map[string]interface{}{}
	if c, ok := flat["config"]; ok && c != nil {
		raw = c
	}
	spec, diags := hclspecutils.Convert(configSpec)
	if diags.HasErrors() {
		return nil, diags
	}
	val, diags, errs := hclutils.ParseHclInterface(raw, spec, nil)
	if diags.HasErrors() {
		return nil, errs[0]
	}
	return msgpack.Marshal(val, val.Type())
}

func openNothing(*settings, log.Logger) (gpu.Backend, error) {
	return nil, errors.New("no GPU backend here")
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
