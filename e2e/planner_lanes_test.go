//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/caravan-gpu/caravan/e2e/harness"
	"github.com/caravan-gpu/caravan/planner/cluster"
	"github.com/shoenig/test/must"
)

// fourH100sInTwoLanes is four H100s, each cut into two lanes.
const (
	fourH100s = `{"gpus": [{"uuid": "GPU-h100", "count": 4, "model": "NVIDIA H100 80GB HBM3", "architecture": "hopper",
  "compute_capability": "9.0", "memory_mib": 81559, "sm_count": 132}]}`
	twoLanes = `
    partition {
      model = "NVIDIA H100*"
      lanes = 2
    }
`
)

// las+pack starts four one-GPU jobs, one after another, each on a GPU of
// its own while whole GPUs are free; fifo's count puts the second on the
// spare lane of the first one's GPU and the fourth beside the third. The
// planner pins each start to the lanes of the GPU its placer chose, and
// every job lands there. Left to Nomad, which hands out a free lane of the
// node at random, four such jobs land on four GPUs about one time in four
// (and pair up as fifo's count did about one time in 35), and a job shares
// a GPU (and its speed) that the policy counted as free.
func TestPlannerPinsLaneJobsToTheGPUTheirPlacerChose(t *testing.T) {
	for _, tc := range []struct {
		policy string
		shares func(i int) bool // job i joins the GPU of job i-1
	}{
		{"las+pack", func(int) bool { return false }},
		{"fifo", func(i int) bool { return i%2 == 1 }},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			c := harness.StartT(t, harness.Options{Fleet: fourH100s, DeviceConfig: twoLanes})
			startPlanner(t, c, "p1", fmt.Sprintf(`
  policy       = %q
  interval     = "1s"
  min_interval = "200ms"`, tc.policy))
			onGPU := map[string]string{}
			prev := ""
			for i := 0; i < 4; i++ {
				name := fmt.Sprintf("lane-%d", i)
				c.RunJobspec(t, c.Jobspec("planner-batch.nomad.hcl"), trainVars(c, name, 600, ""))
				allocs := c.WaitAllocs(t, name, 1, 90*time.Second, harness.Running)
				alloc, _, err := c.Nomad.Allocations().Info(allocs[0].ID, nil)
				must.NoError(t, err)
				id := allocDevice(t, alloc).DeviceIDs[0]
				gpu, _, ok := strings.Cut(id, ":lane")
				must.True(t, ok, must.Sprintf("%s runs on a lane, got device %s", name, id))
				if tc.shares(i) {
					must.Eq(t, prev, gpu, must.Sprintf("%s landed on %s, not beside %s", name, id, onGPU[prev]))
				} else {
					must.MapNotContainsKey(t, onGPU, gpu, must.Sprintf("%s landed on %s, the GPU of %s", name, id, onGPU[gpu]))
				}
				onGPU[gpu], prev = name, gpu

				job, _, err := c.Nomad.Jobs().Info(name, nil)
				must.NoError(t, err)
				var pin string
				for _, con := range job.TaskGroups[0].Tasks[0].Resources.Devices[0].Constraints {
					if con.LTarget == cluster.AttrDeviceIDs {
						pin = con.RTarget
					}
				}
				must.StrContains(t, pin, id, must.Sprintf("%s's pin names the lane it runs on", name))
				t.Logf("%s on %s, pinned to %s", name, id, pin)
			}
		})
	}
}
