package enact

import (
	"testing"

	"github.com/caravan-gpu/caravan/planner/policy"
	"github.com/caravan-gpu/caravan/planner/target"
	"github.com/shoenig/test/must"
)

func TestPlan(t *testing.T) {
	one := Inventory{Offers: map[string]Offer{"T4": {Whole: true}}, MHzPerCore: 2000,
		Smallest: map[string]Capacity{"": {CPUs: 8, MemoryGB: 32}, "T4": {CPUs: 8, MemoryGB: 32}}}
	mixed := Inventory{Offers: map[string]Offer{"T4": {Whole: true}, "H100": {Lanes: true, Whole: true}}, MHzPerCore: 1000,
		Smallest: map[string]Capacity{"": {CPUs: 4, MemoryGB: 16}, "T4": {CPUs: 4, MemoryGB: 16}, "H100": {CPUs: 16, MemoryGB: 64}}}
	typed := Inventory{Offers: map[string]Offer{"T4": {Whole: true}, "H100": {Lanes: true, LanesTyped: true}}, MHzPerCore: 1000}
	pinned := Inventory{Offers: map[string]Offer{"T4": {Whole: true}}, NodeIDs: []string{"node-a", "node-b", "node-c"}}
	lanes := Inventory{Offers: map[string]Offer{"H100": {Lanes: true, LanesTyped: true}}, NodeIDs: []string{"node-a"},
		Devices: [][][]string{{{"GPU-0-lane0", "GPU-0-lane1"}, {"GPU-1-lane0", "GPU-1-lane1"}}}}
	bothWays := Inventory{Offers: map[string]Offer{"H100": {Lanes: true, Whole: true}}, NodeIDs: []string{"node-a"},
		Devices: [][][]string{{{"GPU-0"}, {"GPU-1-lane0", "GPU-1-lane1"}}}}
	lane, whole := true, false
	cases := []struct {
		name string
		inv  Inventory
		job  Job
		d    policy.Decision
		want *Change // nil: no write
	}{
		{name: "pending job the policy does not run is held",
			inv: one, job: Job{Priority: 80}, d: policy.Decision{},
			want: &Change{Action: Hold, Target: target.Target{Priority: 80, Hold: true}}},
		{name: "held job that still waits is left alone",
			inv: one, job: Job{Priority: 80, Held: true}, d: policy.Decision{}},
		{name: "held job that waits changes band",
			inv: one, job: Job{Priority: 80, Held: true}, d: policy.Decision{Band: 1},
			want: &Change{Action: Reprioritize, Target: target.Target{Priority: 79, Hold: true}}},
		{name: "running job the policy preempts is held",
			inv: one, job: Job{Priority: 80, Live: true}, d: policy.Decision{Band: 1},
			want: &Change{Action: Preempt, Target: target.Target{Priority: 79, Hold: true}}},
		{name: "job whose allocations are finishing is never rewritten",
			inv: one, job: Job{Priority: 80, Live: true, Finishing: true}, d: policy.Decision{Band: 2}},
		{name: "held job still running that the policy runs is released, placement untouched",
			inv: mixed, job: Job{Priority: 80, Held: true, Live: true}, d: policy.Decision{Run: true, GPUModel: "T4"},
			want: &Change{Action: Start, Target: target.Target{Priority: 80}}},
		{name: "running job that keeps running is left alone",
			inv: one, job: Job{Priority: 80, Live: true}, d: policy.Decision{Run: true}},
		{name: "running job the policy migrates is held, which stops it",
			inv: mixed, job: Job{Priority: 80, Live: true, Model: "H100"}, d: policy.Decision{Run: true, Migrate: true, GPUModel: "T4"},
			want: &Change{Action: Migrate, Target: target.Target{Priority: 80, Hold: true}}},
		{name: "migrating job held and still stopping is left to stop, not released",
			inv: mixed, job: Job{Priority: 80, Live: true, Held: true, Model: "H100"}, d: policy.Decision{Run: true, Migrate: true, GPUModel: "T4"}},
		{name: "migrating job once stopped is started pinned to its new model",
			inv: mixed, job: Job{Priority: 80, Held: true}, d: policy.Decision{Run: true, Migrate: true, GPUModel: "T4"},
			want: &Change{Action: Start, Target: target.Target{Priority: 80, Placement: &target.Placement{Model: "T4"}}}},
		{name: "re-sized on its own model (Synergy's): held to restart",
			inv: one, job: Job{Priority: 80, Live: true, Model: "T4", TaskCPU: 12000, TaskMemoryMB: 8192},
			d:    policy.Decision{Run: true, Migrate: true, GPUModel: "T4", CPUs: 4, MemoryGB: 8},
			want: &Change{Action: Migrate, Target: target.Target{Priority: 80, Hold: true}}},
		{name: "restart on its own model that keeps its size and nodes: left alone",
			inv: one, job: Job{Priority: 80, Live: true, Model: "T4", TaskCPU: 8000, TaskMemoryMB: 8192},
			d: policy.Decision{Run: true, Migrate: true, GPUModel: "T4", CPUs: 4, MemoryGB: 8}},
		{name: "moved to another node of its model at its lease's end: held to restart",
			inv: pinned, job: Job{Priority: 80, Live: true, Model: "T4", Nodes: []string{"node-a"}},
			d:    policy.Decision{Run: true, Migrate: true, GPUModel: "T4", Slots: []policy.Slot{{Node: 1, GPU: 0, Lane: -1}}},
			want: &Change{Action: Migrate, Target: target.Target{Priority: 80, Hold: true}}},
		{name: "moved to other GPUs of its node: Nomad pins no GPU, left alone",
			inv: pinned, job: Job{Priority: 80, Live: true, Model: "T4", Nodes: []string{"node-a"}},
			d: policy.Decision{Run: true, Migrate: true, GPUModel: "T4", Slots: []policy.Slot{{Node: 0, GPU: 1, Lane: -1}}}},
		{name: "held to restart and still stopping: the hold stays, though the policy runs it as it is",
			inv: one, job: Job{Priority: 80, Live: true, Held: true, Restarting: true, Model: "T4"}, d: policy.Decision{Run: true, GPUModel: "T4"}},
		{name: "migrated job running on its new model is left alone",
			inv: mixed, job: Job{Priority: 80, Live: true, Model: "T4"}, d: policy.Decision{Run: true, Migrate: true, GPUModel: "T4"}},
		{name: "held job the policy runs is released, no pin on one model",
			inv: one, job: Job{Priority: 50, Held: true}, d: policy.Decision{Run: true, GPUModel: "T4"},
			want: &Change{Action: Start, Target: target.Target{Priority: 80, Placement: &target.Placement{}}}},
		{name: "released on a mixed cluster: pinned to the decided model",
			inv: mixed, job: Job{Priority: 80, Held: true}, d: policy.Decision{Run: true, GPUModel: "T4"},
			want: &Change{Action: Start, Target: target.Target{Priority: 80, Placement: &target.Placement{Model: "T4"}}}},
		{name: "released on a model offered as lanes and whole: lane pinned too",
			inv: mixed, job: Job{Priority: 80, Held: true}, d: policy.Decision{Run: true, GPUModel: "H100", Lane: true},
			want: &Change{Action: Start, Target: target.Target{Priority: 80, Placement: &target.Placement{Model: "H100", Lane: &lane}}}},
		{name: "released onto a lane offered under its own device type: asks for that type",
			inv: typed, job: Job{Priority: 80, Held: true}, d: policy.Decision{Run: true, GPUModel: "H100", Lane: true},
			want: &Change{Action: Start, Target: target.Target{Priority: 80, Placement: &target.Placement{Model: "H100", LaneRequest: true}}}},
		{name: "released onto a model that comes only as typed lanes: asks for that type whatever the decision says",
			inv: typed, job: Job{Priority: 80, Held: true}, d: policy.Decision{Run: true, GPUModel: "H100"},
			want: &Change{Action: Start, Target: target.Target{Priority: 80, Placement: &target.Placement{Model: "H100", LaneRequest: true}}}},
		{name: "released whole where lanes have their own type: a plain GPU request",
			inv: typed, job: Job{Priority: 80, Held: true}, d: policy.Decision{Run: true, GPUModel: "T4"},
			want: &Change{Action: Start, Target: target.Target{Priority: 80, Placement: &target.Placement{Model: "T4"}}}},
		{name: "released with no model on a cluster of lanes and whole GPUs: whole pinned",
			inv: mixed, job: Job{Priority: 80, Held: true}, d: policy.Decision{Run: true},
			want: &Change{Action: Start, Target: target.Target{Priority: 80, Placement: &target.Placement{Lane: &whole}}}},
		{name: "user's own model is never pinned",
			inv: mixed, job: Job{Priority: 80, Held: true, UserModel: true}, d: policy.Decision{Run: true, GPUModel: "T4"},
			want: &Change{Action: Start, Target: target.Target{Priority: 80, Placement: &target.Placement{Lane: &whole}}}},
		{name: "sized per task: the job's CPUs and memory split over its 2 tasks",
			inv: mixed, job: Job{Priority: 80, Held: true, Tasks: 2}, d: policy.Decision{Run: true, GPUModel: "H100", CPUs: 12, MemoryGB: 40},
			want: &Change{Action: Start, Target: target.Target{Priority: 80, Placement: &target.Placement{Model: "H100", Lane: &whole, CPU: 6000, MemoryMB: 20480}}}},
		{name: "sized never past the smallest node with the model",
			inv: mixed, job: Job{Priority: 80, Held: true, Tasks: 1}, d: policy.Decision{Run: true, GPUModel: "T4", CPUs: 16, MemoryGB: 64},
			want: &Change{Action: Start, Target: target.Target{Priority: 80, Placement: &target.Placement{Model: "T4", CPU: 4000, MemoryMB: 16384}}}},
		{name: "unheld job the policy runs that Nomad may place any moment: no write",
			inv: mixed, job: Job{Priority: 80}, d: policy.Decision{Run: true, GPUModel: "T4"}},
		{name: "unheld job that waited past the grace: placement written",
			inv: mixed, job: Job{Priority: 80, Settled: true}, d: policy.Decision{Run: true, GPUModel: "T4"},
			want: &Change{Action: Place, Target: target.Target{Priority: 80, Placement: &target.Placement{Model: "T4"}}}},
		{name: "unheld settled job with nothing to pin: priority only",
			inv: one, job: Job{Priority: 50, Settled: true}, d: policy.Decision{Run: true, GPUModel: "T4"},
			want: &Change{Action: Reprioritize, Target: target.Target{Priority: 80}}},
		{name: "released onto the node its placer chose: pinned there",
			inv: pinned, job: Job{Priority: 80, Held: true}, d: policy.Decision{Run: true, Slots: []policy.Slot{{Node: 1, GPU: 0, Lane: -1}, {Node: 1, GPU: 1, Lane: -1}}},
			want: &Change{Action: Start, Target: target.Target{Priority: 80, Placement: &target.Placement{Nodes: []string{"node-b"}}}}},
		{name: "a gang the placer spread over two nodes: pinned to both, each once",
			inv: pinned, job: Job{Priority: 80, Held: true}, d: policy.Decision{Run: true, Slots: []policy.Slot{{Node: 2, Lane: -1}, {Node: 0, Lane: -1}, {Node: 2, GPU: 1, Lane: -1}}},
			want: &Change{Action: Start, Target: target.Target{Priority: 80, Placement: &target.Placement{Nodes: []string{"node-c", "node-a"}}}}},
		{name: "unheld settled job the placer put on a node: that pin alone is written",
			inv: pinned, job: Job{Priority: 80, Settled: true}, d: policy.Decision{Run: true, Slots: []policy.Slot{{Node: 0, Lane: -1}}},
			want: &Change{Action: Place, Target: target.Target{Priority: 80, Placement: &target.Placement{Nodes: []string{"node-a"}}}}},
		{name: "a slot naming no node the inventory knows pins nothing",
			inv: pinned, job: Job{Priority: 80, Held: true}, d: policy.Decision{Run: true, Slots: []policy.Slot{{Node: 7, Lane: -1}}},
			want: &Change{Action: Start, Target: target.Target{Priority: 80, Placement: &target.Placement{}}}},
		{name: "released onto a lane of the GPU its placer chose: pinned to that GPU's lanes",
			inv: lanes, job: Job{Priority: 80, Held: true}, d: policy.Decision{Run: true, GPUModel: "H100", Lane: true, Slots: []policy.Slot{{Node: 0, GPU: 1, Lane: 0}}},
			want: &Change{Action: Start, Target: target.Target{Priority: 80, Placement: &target.Placement{LaneRequest: true, Nodes: []string{"node-a"},
				Devices: []string{"GPU-1-lane0", "GPU-1-lane1"}}}}},
		{name: "a whole GPU of a model that comes only as lanes: pinned to that GPU's lanes, or two such jobs could share one",
			inv: lanes, job: Job{Priority: 80, Held: true}, d: policy.Decision{Run: true, GPUModel: "H100", Slots: []policy.Slot{{Node: 0, GPU: 1, Lane: -1}}},
			want: &Change{Action: Start, Target: target.Target{Priority: 80, Placement: &target.Placement{LaneRequest: true, Nodes: []string{"node-a"},
				Devices: []string{"GPU-1-lane0", "GPU-1-lane1"}}}}},
		{name: "a whole GPU of a model that also comes whole is not pinned to its instances",
			inv: bothWays, job: Job{Priority: 80, Held: true}, d: policy.Decision{Run: true, GPUModel: "H100", Slots: []policy.Slot{{Node: 0, GPU: 1, Lane: -1}}},
			want: &Change{Action: Start, Target: target.Target{Priority: 80, Placement: &target.Placement{Lane: &whole, Nodes: []string{"node-a"}}}}},
		{name: "a gang of a model that comes only as lanes is not pinned to instances",
			inv: lanes, job: Job{Priority: 80, Held: true}, d: policy.Decision{Run: true, GPUModel: "H100", Slots: []policy.Slot{{Node: 0, GPU: 0, Lane: -1}, {Node: 0, GPU: 1, Lane: -1}}},
			want: &Change{Action: Start, Target: target.Target{Priority: 80, Placement: &target.Placement{LaneRequest: true, Nodes: []string{"node-a"}}}}},
		{name: "a lane on a GPU the inventory does not know pins no instances",
			inv: lanes, job: Job{Priority: 80, Held: true}, d: policy.Decision{Run: true, GPUModel: "H100", Lane: true, Slots: []policy.Slot{{Node: 0, GPU: 5, Lane: 0}}},
			want: &Change{Action: Start, Target: target.Target{Priority: 80, Placement: &target.Placement{LaneRequest: true, Nodes: []string{"node-a"}}}}},
		{name: "released job that Nomad has not placed yet and the policy still runs: no write",
			inv: one, job: Job{Priority: 80}, d: policy.Decision{Run: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.job.Key = "default/j"
			got := Plan(tc.inv, []Job{tc.job}, []policy.Decision{tc.d}).All()
			if tc.want == nil {
				must.SliceEmpty(t, got)
				return
			}
			tc.want.Key = "default/j"
			must.Len(t, 1, got)
			must.Eq(t, *tc.want, got[0])
		})
	}
}

// Holds and preemptions come before starts, so that the GPUs they free are
// free when Nomad evaluates the jobs started in their place.
func TestPlanStopsFirst(t *testing.T) {
	inv := Inventory{Offers: map[string]Offer{"T4": {Whole: true}}}
	jobs := []Job{{Key: "a", Held: true}, {Key: "b", Live: true}, {Key: "c"}, {Key: "d", Held: true}}
	ds := []policy.Decision{{Run: true}, {}, {}, {Run: true}}
	phases := Plan(inv, jobs, ds)
	must.Eq(t, []string{"b:preempt", "c:hold"}, actions(phases.Stops))
	must.Eq(t, []string{"a:start", "d:start"}, actions(phases.Rest))
	got := phases.All()
	must.Eq(t, []string{"b:preempt", "c:hold", "a:start", "d:start"}, actions(got))
	must.Eq(t, 3, got[3].Job, must.Sprint("Job indexes the input"))
}

// A migration stops its job's allocations as a preemption does: a round
// that migrates one job and holds another writes both before any start.
// (When the service worked the first phase out again from the changes'
// order, counting only preemptions and holds, a plan that began with a
// migration wrote its hold together with the starts.)
func TestPlanPutsAMigrationWithTheStops(t *testing.T) {
	inv := Inventory{Offers: map[string]Offer{"T4": {Whole: true}, "V100": {Whole: true}}}
	jobs := []Job{{Key: "m", Live: true, Model: "T4"}, {Key: "h"}, {Key: "s", Held: true}}
	ds := []policy.Decision{{Run: true, Migrate: true, GPUModel: "V100"}, {}, {Run: true, GPUModel: "T4"}}
	phases := Plan(inv, jobs, ds)
	must.Eq(t, []string{"m:migrate", "h:hold"}, actions(phases.Stops))
	must.Eq(t, []string{"s:start"}, actions(phases.Rest))
}

func actions(cs []Change) []string {
	out := []string{}
	for _, c := range cs {
		out = append(out, c.Key+":"+string(c.Action))
	}
	return out
}

func TestGive(t *testing.T) {
	c := Give("default/x")
	must.Eq(t, Restore, c.Action)
	must.True(t, c.Target.Restore)
	must.Eq(t, -1, c.Job)
}
