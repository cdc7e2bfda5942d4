package plugin

import (
	"testing"

	"github.com/caravan-gpu/caravan/driver/budget"
	"github.com/caravan-gpu/caravan/gpu/reservation"
	"github.com/hashicorp/nomad/plugins/drivers"
)

// A task's config block and the grants Reserve put in its environment are
// outside input: planning a task from them errors or gives a budget no
// larger than what was granted, never a crash.
func FuzzPlanSpec(f *testing.F) {
	grant := reservation.Grant{InstanceID: "GPU-x:lane0:slot0", GPUUUID: "GPU-x", Lane: 0, Slots: 1, MemoryMiB: 20389, SharePercent: 25}
	f.Add("10GiB", "kill", 1, "9GiB", "2GiB", grant.EnvName(), grant.EnvValue())
	f.Add("", "warn", 3, "", "", grant.EnvName(), "v1;id=GPU-x:lane0:slot0;gpu=GPU-x;lane=0;slot=0;slots=1;memory_mib=-1;share=25")
	f.Add("1TB", "bogus", -1, "x", "1e400", "CARAVAN_DEV_", "v9")
	s, err := Config{}.parse()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, gpuMemory, policy string, processes int, persistent, ephemeral, envName, envValue string) {
		cfg := &drivers.TaskConfig{DeviceEnv: map[string]string{envName: envValue}}
		tc := TaskConfig{Command: "/bin/true", GPUMemory: gpuMemory, GPUMemoryPolicy: policy, GPUProcesses: processes,
			MemoryProfile: MemoryProfile{Persistent: persistent, Ephemeral: ephemeral}}
		spec, grants, err := planSpec(s, cfg, tc)
		if err != nil {
			return
		}
		granted := map[string]uint64{}
		for _, g := range grants {
			granted[g.GPUUUID] += g.MemoryMiB
		}
		if n := spec.Budget.ProcessCount(); n < 1 || n > budget.MaxProcesses {
			t.Fatalf("gpu_processes %d accepted as %d", processes, n)
		}
		for _, g := range spec.Budget.GPUs {
			// "*" is the budget of a task given no grants: its own word.
			if g.UUID != "*" && g.LimitMiB > granted[g.UUID] {
				t.Fatalf("budget %d MiB on %s is more than the %d MiB granted", g.LimitMiB, g.UUID, granted[g.UUID])
			}
		}
	})
}

// uid_range is plugin config: any text errors or gives a range of at most
// maxUIDRange UIDs, none of them a system user's or root's.
func FuzzParseUIDRange(f *testing.F) {
	for _, seed := range []string{DefaultUIDRange, "none", "", "0-10", "70000", "5-4", "1000-1000", " 2000 - 3000 ", "-1-5", "1000-99999999999999999999"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, v string) {
		r, err := parseUIDRange(v)
		if err != nil {
			return
		}
		if !r.set() {
			if v != "none" {
				t.Fatalf("%q parsed as no range", v)
			}
			return
		}
		if r.min < 1000 || r.max < r.min || r.max-r.min >= maxUIDRange || r.max > 1<<31-2 {
			t.Fatalf("%q accepted as %d-%d", v, r.min, r.max)
		}
	})
}
