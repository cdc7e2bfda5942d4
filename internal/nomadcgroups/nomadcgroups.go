// Package nomadcgroups sets up the cgroup tree a Nomad client makes when it
// starts, for tests that run tasks without one. On a host where no Nomad
// client has ever run, the executor cannot put a task in Nomad's cpuset
// cgroup until its cpuset.cpus and cpuset.mems are set.
package nomadcgroups

import (
	"fmt"
	"os"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/client/lib/cgroupslib"
	"github.com/hashicorp/nomad/client/lib/numalib"
)

// Init makes Nomad's cgroups (cgroupslib.Init, with the cores a client
// would find usable) and says why it could not, in words for a test's skip;
// empty when they are ready, or when the host has no cgroups to set up (the
// driver then runs tasks without them).
func Init() (notReady string) {
	if cgroupslib.GetMode() == cgroupslib.OFF {
		return ""
	}
	if os.Geteuid() != 0 {
		return "Nomad's cgroups can only be set up as root"
	}
	cores := numalib.Scan(numalib.PlatformScanners(true)).UsableCores().String()
	if err := cgroupslib.Init(hclog.NewNullLogger(), cores); err != nil {
		return fmt.Sprintf("setting up Nomad's cgroups as a Nomad client would failed: %v", err)
	}
	return ""
}
