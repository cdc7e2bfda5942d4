package backend

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caravan-gpu/caravan/gpu"
	"github.com/caravan-gpu/caravan/gpu/sim"
	"github.com/hashicorp/go-hclog"
	"github.com/shoenig/test/must"
)

func TestOpen(t *testing.T) {
	dir := t.TempDir()
	fleet := filepath.Join(dir, "fleet.json")
	must.NoError(t, os.WriteFile(fleet, []byte(`{"gpus":[{"uuid":"GPU-a","model":"Tesla T4","memory_mib":15360}]}`), 0o644))
	noNVML := func(hclog.Logger) (gpu.Backend, error) { return nil, errors.New("nvml: libnvidia-ml.so.1 not found") }
	logger := hclog.NewNullLogger()

	t.Run("sim opens the fleet", func(t *testing.T) {
		b, none, err := Open(Config{Kind: Sim, FleetFile: fleet, StateDir: filepath.Join(dir, "state")}, logger)
		must.NoError(t, err)
		must.Eq(t, "", none)
		t.Cleanup(func() { _ = b.Close() })
		_, isSim := b.(*sim.Backend)
		must.True(t, isSim)
		devs, err := b.Devices()
		must.NoError(t, err)
		must.Len(t, 1, devs)
	})
	t.Run("sim without its fleet fails", func(t *testing.T) {
		_, _, err := Open(Config{Kind: Sim, FleetFile: filepath.Join(dir, "absent.json"), StateDir: dir}, logger)
		must.Error(t, err)
	})
	t.Run("nvml that does not load fails", func(t *testing.T) {
		b, _, err := Open(Config{Kind: NVML, OpenNVML: noNVML}, logger)
		must.ErrorContains(t, err, "libnvidia-ml")
		must.Nil(t, b)
	})
	t.Run("auto without nvml is none, and says why", func(t *testing.T) {
		b, none, err := Open(Config{Kind: Auto, OpenNVML: noNVML}, logger)
		must.NoError(t, err)
		must.Nil(t, b)
		must.StrContains(t, none, `"auto" found no NVML (nvml: libnvidia-ml.so.1 not found)`)
	})
	t.Run("none", func(t *testing.T) {
		b, none, err := Open(Config{Kind: None}, logger)
		must.NoError(t, err)
		must.Nil(t, b)
		must.Eq(t, `"none"`, none)
	})
	t.Run("an unknown kind names the choices", func(t *testing.T) {
		_, _, err := Open(Config{Kind: "cuda"}, logger)
		must.Error(t, err)
		must.True(t, strings.Contains(err.Error(), `"cuda"`) && strings.Contains(err.Error(), `"sim"`))
	})
}
