package plugin

import (
	"net"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/plugins/base"
)

// FuzzPartitionRule checks that any rule that validates cuts any GPU into
// lanes that fit in it, or says why not.
func FuzzPartitionRule(f *testing.F) {
	f.Add("NVIDIA H100*", "", 4, "", "512MiB", 2, uint64(81559))
	f.Add("", "GPU-1", 0, "20GiB", "", 1, uint64(40960))
	f.Add("[", "", 2, "", "", 0, uint64(1))
	f.Fuzz(func(t *testing.T, model, uuid string, lanes int, laneMem, reserved string, slots int, gpuMiB uint64) {
		r, err := PartitionRule{Model: model, UUID: uuid, Lanes: lanes, LaneMemory: laneMem,
			ReservedMemory: reserved, Slots: slots}.validate()
		if err != nil {
			return
		}
		if r.slots < 1 || r.slots > maxSlots {
			t.Fatalf("validated rule has %d slots", r.slots)
		}
		_ = r.matches("NVIDIA H100 80GB HBM3", "GPU-1")
		n, laneMiB, err := r.cut(gpuMiB)
		if err != nil {
			return
		}
		if n < 1 || n > maxLanes || laneMiB == 0 {
			t.Fatalf("cut %d MiB into %d lanes of %d MiB", gpuMiB, n, laneMiB)
		}
		if uint64(n)*(laneMiB+r.reservedMemoryMiB) > gpuMiB {
			t.Fatalf("%d lanes of %d+%d MiB overflow a %d MiB GPU", n, laneMiB, r.reservedMemoryMiB, gpuMiB)
		}
	})
}

// FuzzSetConfig feeds arbitrary bytes where the agent sends msgpack: a bad
// config must be an error, never a crash.
func FuzzSetConfig(f *testing.F) {
	for _, body := range []string{
		`backend = "sim"`,
		`backend = "nvml"
fingerprint_period = "5s"
partition {
  model = "*"
  lanes = 2
}`,
	} {
		data, err := encodeConfigBytes(body)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte{0x80})
	f.Fuzz(func(t *testing.T, data []byte) {
		d := New(testLogger(t))
		d.openBackend = openNothing
		_ = d.SetConfig(&base.Config{PluginConfig: data})
	})
}

// FuzzMetricsAddress: any metrics_address either validates to a host:port
// with a port, or fails naming the field.
func FuzzMetricsAddress(f *testing.F) {
	for _, s := range []string{"127.0.0.1:9465", ":9465", "[::1]:0", "127.0.0.1", "host:", "::::", "[::1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, addr string) {
		s, err := Config{MetricsAddress: addr}.validate()
		if err != nil {
			if !strings.HasPrefix(err.Error(), "metrics_address: ") {
				t.Fatalf("error does not name the field: %v", err)
			}
			return
		}
		if addr == "" {
			return
		}
		if _, port, err := net.SplitHostPort(s.metricsAddress); err != nil || port == "" {
			t.Fatalf("accepted %q without a port", addr)
		}
	})
}
