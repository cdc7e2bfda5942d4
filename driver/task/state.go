package task

import (
	"strings"
	"time"

	"github.com/caravan-gpu/caravan/driver/budget"
	"github.com/caravan-gpu/caravan/driver/lane"

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
	// Cgroup is the directory of the cgroup the driver controls the task
	// through (v2, or the v1 freezer); empty when it falls back to signals.
	Cgroup    string
	StartedAt time.Time
	Spec      Spec
	// LaneStateFile is where the driver keeps the task's lane state (its
	// profile, whether it is suspended, what is checkpointed, whose turn it
	// is) as it changes, since Nomad stores State only once, at the start.
	LaneStateFile string
}

// Spec is the GPU side of a task: its budget and its lane. It is decided
// once, at StartTask, from the device plugin's grants and the task config.
type Spec struct {
	Budget budget.Budget
	// Lanes are the lanes the task shares, one per GPU; none when it shares
	// no lane.
	Lanes []LaneSpec
	// Lane is where state stored before tasks had several lanes keeps the
	// one lane; read it through AllLanes.
	Lane *LaneSpec
	// IterationFile is where the task marks its iteration boundaries.
	IterationFile string
	// User is the user the task runs as.
	User string
}

// AllLanes returns the task's lanes, from state of any version.
func (s Spec) AllLanes() []LaneSpec {
	if len(s.Lanes) == 0 && s.Lane != nil {
		return []LaneSpec{*s.Lane}
	}
	return s.Lanes
}

// LaneKeys names the task's lanes, "GPU-a/lane0,GPU-b/lane1".
func (s Spec) LaneKeys() string {
	var keys []string
	for _, l := range s.AllLanes() {
		keys = append(keys, l.Key.String())
	}
	return strings.Join(keys, ",")
}

// LaneSpec places a task in a lane.
type LaneSpec struct {
	Key       lane.Key
	MemoryMiB uint64
	Profile   lane.Profile
}
