package cluster

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// The caravan.* meta the planner reads is written by users: whatever it
// holds, building the cluster state neither crashes nor takes a bad value,
// and every value it cannot read is named in the job's warnings.
func FuzzBuildJobMeta(f *testing.F) {
	f.Add("las", "3600", "40960", "resnet", "true")
	f.Add("", "soon", "lots", "", "maybe")
	f.Add("fifo", "-1s", "-5", "a/b", "")
	f.Fuzz(func(t *testing.T, policy, duration, gpuMemory, profile, manageService string) {
		meta := map[string]string{MetaPolicy: policy, MetaDuration: duration, MetaGPUMemory: gpuMemory,
			MetaProfile: profile, MetaManageService: manageService}
		for _, typ := range []string{"batch", "service"} {
			stub := &api.JobListStub{ID: "j", Type: typ, Status: "pending", Meta: meta}
			s := Build(Inputs{Now: time.Now(), Jobs: []*api.JobListStub{stub}}, everyJob)
			for _, j := range s.Jobs {
				if j.Duration < 0 || math.IsNaN(j.Duration) || math.IsInf(j.Duration, 0) {
					t.Fatalf("duration %q read as %v", duration, j.Duration)
				}
				if j.Duration == 0 && strings.TrimSpace(duration) != "" && len(j.Warnings) == 0 {
					if d, err := ParseDuration(duration); err != nil || d != 0 {
						t.Fatalf("duration %q dropped without a warning", duration)
					}
				}
			}
		}
	})
}
