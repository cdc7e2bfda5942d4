package plugin

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/caravan-gpu/caravan/gpu"
	nvmlbackend "github.com/caravan-gpu/caravan/gpu/nvml"
	"github.com/caravan-gpu/caravan/gpu/nvml/nvmltest"
	"github.com/caravan-gpu/caravan/gpu/reservation"
	"github.com/caravan-gpu/caravan/gpu/sim"
	log "github.com/hashicorp/go-hclog"
)

// benchSettings cuts every GPU into four lanes.
func benchSettings() *settings {
	return &settings{
		backend: "sim",
		rules:   []rule{{model: "*", lanes: 4, slots: 1}},
		ignored: map[string]bool{},
	}
}

func benchSimBackend(b *testing.B) gpu.Backend {
	b.Helper()
	dir := b.TempDir()
	fleet := `{"gpus":[{"uuid":"GPU-h100","count":8,"model":"NVIDIA H100 80GB HBM3","architecture":"hopper",
"compute_capability":"9.0","memory_mib":81559,"sm_count":132,"pci_bandwidth_mbps":63015}]}`
	path := filepath.Join(dir, "fleet.json")
	if err := os.WriteFile(path, []byte(fleet), 0o644); err != nil {
		b.Fatal(err)
	}
	backend, err := sim.New(path, filepath.Join(dir, "state"))
	if err != nil {
		b.Fatal(err)
	}
	return backend
}

func benchNVMLBackend(b *testing.B) gpu.Backend {
	b.Helper()
	var configs []gpus.Config
	for i := 0; i < 8; i++ {
		configs = append(configs, gpus.H100_SXM5_80GB)
	}
	backend, err := nvmlbackend.NewWithLibrary(nvmltest.New(configs...), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = backend.Close() })
	return backend
}

// BenchmarkFingerprint measures one fingerprint round of 8 GPUs cut into 4
// lanes each (32 device instances): list, lay out, read health, group.
func BenchmarkFingerprint(b *testing.B) {
	for _, bc := range []struct {
		name    string
		backend func(*testing.B) gpu.Backend
	}{
		{"sim-8x4", benchSimBackend},
		{"nvml-mock-8x4", benchNVMLBackend},
	} {
		b.Run(bc.name, func(b *testing.B) {
			d := New(log.NewNullLogger())
			s := benchSettings()
			backend := bc.backend(b)
			groups, err := d.fingerprintGroups(s, backend)
			if err != nil || len(groups) != 1 || len(groups[0].Devices) != 32 {
				b.Fatalf("want one group of 32 lanes, got %v (%v)", groups, err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := d.fingerprintGroups(s, backend); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkReserve measures Reserve for one lane and for four lanes on two
// GPUs, on a fingerprinted 8x4 fleet.
func BenchmarkReserve(b *testing.B) {
	d := New(log.NewNullLogger())
	d.settings = benchSettings()
	d.backend = benchSimBackend(b)
	if _, err := d.fingerprintGroups(d.settings, d.backend); err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{1, 4} {
		var ids []string
		for i := 0; i < n; i++ {
			ids = append(ids, reservation.LaneInstanceID(fmt.Sprintf("GPU-h100-%02d", i/2), i%4, 0))
		}
		b.Run(fmt.Sprintf("%d-lanes", n), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				res, err := d.Reserve(ids)
				if err != nil || len(res.Envs) != 2+n {
					b.Fatalf("reserve: %v %v", res, err)
				}
			}
		})
	}
}
