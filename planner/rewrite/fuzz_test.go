package rewrite

import (
	"testing"

	"github.com/caravan-gpu/caravan/planner/cluster"
)

// The planner's meta keys live in jobs anyone can edit: whatever they hold,
// a rewrite neither crashes nor leaves a trace of the planner once it gives
// the job back.
func FuzzRewritePlannerMeta(f *testing.F) {
	f.Add("${device.attr.model}|=|Tesla T4;device|renamed from|nvidia/gpu", "train/train=100,64", "true")
	f.Add("a|b", "x=1", "")
	f.Add(";;|||", "g/t=-,-;=,", "yes")
	f.Fuzz(func(t *testing.T, placement, resources, held string) {
		job := gpuJob("j")
		job.Meta = map[string]string{cluster.MetaPlacement: placement, cluster.MetaResources: resources, cluster.MetaHeld: held}
		lane := true
		Rewrite(job, Target{Priority: 60, Placement: &Placement{Model: "T4", Lane: &lane, LaneRequest: true, CPU: 500}}, false)
		Rewrite(job, Target{Priority: 60, Hold: true}, true)
		Rewrite(job, Target{Restore: true}, false)
		if cluster.Held(job) {
			t.Fatalf("still held after a restore: %v", job.Constraints)
		}
		for k := range job.Meta {
			if k == cluster.MetaPlacement || k == cluster.MetaResources || k == cluster.MetaHeld {
				t.Fatalf("meta %s left after a restore: %q", k, job.Meta[k])
			}
		}
		if len(cluster.GPURequests(job.TaskGroups[0].Tasks[0])) != 1 {
			t.Fatalf("the GPU request is lost: %+v", job.TaskGroups[0].Tasks[0].Resources.Devices)
		}
	})
}
