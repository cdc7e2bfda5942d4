package sim

import (
	"testing"

	"github.com/shoenig/test/must"
)

func TestParseFleet(t *testing.T) {
	cases := []struct {
		name    string
		fleet   string
		devices int
		err     string
	}{
		{"counted GPUs get numbered UUIDs", `{"gpus":[{"uuid":"GPU-t4","count":3,"model":"Tesla T4","memory_mib":15360}]}`, 3, ""},
		{"MIG instances are devices", `{"gpus":[{"model":"A100","memory_mib":40960,"mig":[{"profile":"3g.20gb","memory_mib":20096}]}]}`, 2, ""},
		{"process listings", `{"gpus":[{"model":"X","memory_mib":1,"mps_clients":true,"process_memory_not_available":true}]}`, 1, ""},
		{"checkpoint timing", `{"gpus":[{"model":"X","memory_mib":1,"checkpoint_timing":{"checkpoint_ms":410,"checkpoint_ms_per_gib":515,"restore_ms":255,"restore_ms_per_gib":200}}]}`, 1, ""},
		{"checkpoint timing too long", `{"gpus":[{"model":"X","memory_mib":1,"checkpoint_timing":{"restore_ms_per_gib":600001}}]}`, 0, "gpus[0].checkpoint_timing.restore_ms_per_gib: must be at most 600000 ms, got 600001"},
		{"no GPUs", `{"gpus":[]}`, 0, "gpus: at least one GPU is required"},
		{"unknown field", `{"gpus":[{"model":"X","memory_mib":1,"colour":"green"}]}`, 0, "unknown field"},
		{"no memory", `{"gpus":[{"model":"X"}]}`, 0, "gpus[0].memory_mib: must be > 0"},
		{"MIG too big", `{"gpus":[{"model":"X","memory_mib":10,"mig":[{"memory_mib":11}]}]}`, 0, "gpus[0].mig: MIG instances need 11 MiB"},
		{"duplicate UUID", `{"gpus":[{"uuid":"GPU-a","model":"X","memory_mib":1},{"uuid":"GPU-a","model":"X","memory_mib":1}]}`, 0, `duplicate UUID "GPU-a"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, err := ParseFleet([]byte(tc.fleet))
			if tc.err != "" {
				must.ErrorContains(t, err, tc.err)
				return
			}
			must.NoError(t, err)
			must.Len(t, tc.devices, f.Devices())
		})
	}
}

// FuzzParseFleet checks that a fleet that parses expands into devices with
// unique UUIDs whose MIG instances fit in their GPU.
func FuzzParseFleet(f *testing.F) {
	f.Add([]byte(`{"driver_version":"550","gpus":[{"uuid":"GPU-h100","count":2,"model":"H100","memory_mib":81559,"sm_count":132}]}`))
	f.Add([]byte(`{"gpus":[{"model":"A100","memory_mib":40960,"unhealthy":"Xid 79","mig":[{"profile":"1g.5gb","memory_mib":4864,"sm_count":14}]}]}`))
	f.Add([]byte(`{"gpus":[{"uuid":"GPU-x-00","model":"X","memory_mib":1},{"uuid":"GPU-x","count":2,"model":"X","memory_mib":1}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		fleet, err := ParseFleet(data)
		if err != nil {
			return
		}
		seen := map[string]bool{}
		memory := map[string]uint64{}
		for _, d := range fleet.Devices() {
			if seen[d.UUID] {
				t.Fatalf("duplicate UUID %q in a fleet that parsed", d.UUID)
			}
			seen[d.UUID] = true
			if d.IsMIG() {
				memory[d.ParentUUID] += d.MemoryMiB
			} else {
				memory[d.UUID] = memory[d.UUID] // present
			}
		}
		for _, d := range fleet.Devices() {
			if !d.IsMIG() && memory[d.UUID] > d.MemoryMiB {
				t.Fatalf("MIG instances of %s need %d MiB of %d", d.UUID, memory[d.UUID], d.MemoryMiB)
			}
		}
	})
}
