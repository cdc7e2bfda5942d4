package task

import (
	"time"

	"github.com/hashicorp/nomad/plugins/drivers"
	pstructs "github.com/hashicorp/nomad/plugins/shared/structs"
)

// HandleVersion is the version of State this driver writes and understands.
const HandleVersion = 1

// State is what the driver stores with SetDriverState. It is everything
// RecoverTask needs to rebuild a handle after the plugin or the Nomad client
// restarts, including the budget, so that a recovered task stays enforced
// with the budget it started with rather than one re-read from its env.
type State struct {
	ReattachConfig *pstructs.ReattachConfig
	TaskConfig     *drivers.TaskConfig
	Pid            int
	StartedAt      time.Time
	Spec           Spec
}

// Spec is the GPU side of a task: its budget and its lane.
type Spec struct{}
