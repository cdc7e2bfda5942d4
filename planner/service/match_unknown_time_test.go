package service

import (
	"testing"

	"github.com/caravan-gpu/caravan/planner/policy"
	"github.com/shoenig/test/must"
)

// A pending job whose run time is unknown (Remaining -1, no RemainingWork,
// as every live job without a throughput profile is) must still start when
// GPUs are free: las+match once left it unplaced, since matching could not
// cost it and the backfill skipped jobs in the matching window.
func TestMatchPlacesJobWithUnknownRunTimeOnFreeGPUs(t *testing.T) {
	pol, err := policy.Parse("las+match", policy.Config{})
	must.NoError(t, err)
	snap := &policy.Snapshot{
		Now: 100,
		Nodes: []policy.Node{{ID: "n1", Healthy: true, CPUs: 16, MemoryGB: 64, GPUs: []policy.GPU{
			{Model: "NVIDIA H100 80GB HBM3", MemoryMB: 81559, Healthy: true},
			{Model: "Tesla T4", MemoryMB: 15360, Healthy: true},
		}}},
		Jobs: []policy.Job{{ID: "default/unprofiled", Arrival: 90, GPUs: 1, Wait: 10,
			Remaining: -1, PrevQueue: -1, PrevRank: -1}},
	}
	r := pol.Plan(snap, nil)
	d := r.Decisions[0]
	must.True(t, d.Run, must.Sprintf("two free GPUs and one pending job, yet it waits: %q", d.Reason))
}
