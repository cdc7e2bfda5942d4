package plugin

import "github.com/caravan-gpu/caravan/driver/metrics"

// taskLanes is the lane state of every co-located task, for the driver's
// Prometheus metrics. Nomad's driver protocol carries only CPU and memory
// for a task, so lane state and GPU memory reach the operator there (and in
// task events), not in `nomad alloc status -stats`.
func (d *Driver) taskLanes() []metrics.TaskLane {
	d.mu.RLock()
	coord := d.coord
	d.mu.RUnlock()
	if coord == nil {
		return nil
	}
	var out []metrics.TaskLane
	for _, h := range d.tasks.All() {
		// A task on several GPUs has a series per lane.
		for _, st := range coord.Statuses(h.Config.ID) {
			out = append(out, metrics.TaskLane{
				AllocID: h.Config.AllocID, Task: h.Config.Name, Lane: st.Lane.String(),
				Suspended: st.Suspended, Switches: st.Switches, Iterations: st.Iterations,
				LastSuspend: st.LastSuspend, LastResume: st.LastResume,
			})
		}
	}
	return out
}
