package plugin

import (
	"errors"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/caravan-gpu/caravan/driver/budget"
	"github.com/caravan-gpu/caravan/gpu/reservation"
)

// recordingServers stands in for the MPS control daemon, at the GPU seam.
type recordingServers struct {
	uid    uint32
	limits map[string]uint64
	err    error
}

func (r *recordingServers) LimitServer(uid uint32, limits map[string]uint64) error {
	r.uid, r.limits = uid, limits
	return r.err
}

// The task's server gets each GPU's per-process share before the task
// runs; a server that cannot be limited keeps the task from starting.
func TestLimitMPSServer(t *testing.T) {
	grants := []reservation.Grant{
		{InstanceID: "GPU-a", GPUUUID: "GPU-a", Lane: -1, Slots: 1, MemoryMiB: 8192},
		{InstanceID: "GPU-b", GPUUUID: "GPU-b", Lane: -1, Slots: 1, MemoryMiB: 4096},
	}
	b := budget.Budget{GPUs: []budget.GPU{{UUID: "GPU-a", LimitMiB: 8192, Lane: -1}, {UUID: "GPU-b", LimitMiB: 4096, Lane: -1}}, Processes: 2}
	cases := []struct {
		name    string
		mps     string
		budget  budget.Budget
		user    string
		err     error
		want    string
		wantErr string
		limits  map[string]uint64
		uid     uint32
	}{
		{name: "MPS off", mps: "off", budget: b, user: "nomad-70001"},
		{name: "no budget", mps: "on", user: "nomad-70001"},
		{name: "dynamic user", mps: "on", budget: b, user: "nomad-70001",
			want:   "the MPS server of uid 70001 holds each of its clients to 2048 MiB on GPU-b, 4096 MiB on GPU-a",
			limits: map[string]uint64{"GPU-a": 4096, "GPU-b": 2048}, uid: 70001},
		{name: "user of the user database", mps: "on", budget: b, user: "root",
			want:   "the MPS server of uid 0 holds",
			limits: map[string]uint64{"GPU-a": 4096, "GPU-b": 2048}, uid: 0},
		{name: "unknown user", mps: "on", budget: b, user: "no-such-user-here", wantErr: `cannot limit the MPS server of user "no-such-user-here"`},
		{name: "daemon refuses", mps: "on", budget: b, user: "nomad-70001", err: errors.New("start_server: refused"),
			wantErr: "cannot limit the MPS server of uid 70001", limits: map[string]uint64{"GPU-a": 4096, "GPU-b": 2048}, uid: 70001},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := &settings{Config: Config{MPS: tc.mps}}
			rec := &recordingServers{err: tc.err}
			got, err := limitMPSServer(s, rec, grants, tc.budget, tc.user)
			if tc.wantErr != "" {
				must.ErrorContains(t, err, tc.wantErr)
			} else {
				must.NoError(t, err)
				if tc.want == "" {
					must.Eq(t, "", got)
				} else {
					must.StrContains(t, got, tc.want)
				}
			}
			must.Eq(t, tc.limits, rec.limits)
			must.Eq(t, tc.uid, rec.uid)
		})
	}
}
