package lane

// This file answers what the driver asks of its lanes: a task's status,
// its share of a lane, a lane's members.

import (
	"sort"
)

// Status returns a member's status in its first lane.
func (c *Coordinator) Status(taskID string) (Status, bool) {
	all := c.Statuses(taskID)
	if len(all) == 0 {
		return Status{}, false
	}
	return all[0], true
}

// Statuses is the task's view in each of its lanes, in the order it joined
// them.
func (c *Coordinator) Statuses(taskID string) []Status {
	c.mu.Lock()
	keys := append([]Key(nil), c.members[taskID]...)
	lanes := make([]*laneState, len(keys))
	for i, key := range keys {
		lanes[i] = c.lanes[key]
	}
	c.mu.Unlock()
	var out []Status
	for i, l := range lanes {
		if l == nil {
			continue
		}
		if s, ok := l.status(keys[i], taskID); ok {
			out = append(out, s)
		}
	}
	return out
}

func (l *laneState) status(key Key, taskID string) (Status, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range l.members {
		if m.TaskID == taskID {
			s := Status{Lane: key, Mode: l.mode, Suspended: m.suspended, Profile: m.Profile, Switches: m.switches,
				LastSuspend: m.lastSuspend, LastResume: m.lastResume, LaneMemoryMiB: l.memMiB}
			if m.Iterations != nil {
				s.Iterations = m.Iterations.Count()
			}
			return s, true
		}
	}
	return Status{}, false
}

// Lanes lists the lanes with members, for metrics.
func (c *Coordinator) Lanes() map[Key]int {
	c.mu.Lock()
	ls := make([]*laneState, 0, len(c.lanes))
	for _, l := range c.lanes {
		ls = append(ls, l)
	}
	c.mu.Unlock()
	out := map[Key]int{}
	for _, l := range ls {
		l.mu.Lock()
		out[l.key] = len(l.members)
		l.mu.Unlock()
	}
	return out
}

// Share is a task's budget in lane key while the lane runs its members
// concurrently: the lane divided in proportion to their profiles'
// persistent + ephemeral memory, which gives each at least its own and
// adds up to the lane, so that none can take a neighbour's memory. ok is
// false while the task is alone in the lane or takes turns: while it runs
// then, the lane is its own.
func (c *Coordinator) Share(taskID string, key Key) (mib uint64, ok bool) {
	c.mu.Lock()
	l := c.lanes[key]
	c.mu.Unlock()
	if l == nil {
		return 0, false
	}
	shares := l.shares.Load()
	if shares == nil {
		return 0, false
	}
	mib, ok = (*shares)[taskID]
	return mib, ok
}

// sharesOf divides laneMiB among members in proportion to what their
// profiles need (equally where none needs anything).
func sharesOf(members []*member, laneMiB uint64) map[string]uint64 {
	var total uint64
	for _, m := range members {
		total += m.Profile.PersistentMiB + m.Profile.EphemeralMiB
	}
	out := make(map[string]uint64, len(members))
	for _, m := range members {
		if total == 0 {
			out[m.TaskID] = laneMiB / uint64(len(members))
			continue
		}
		out[m.TaskID] = laneMiB * (m.Profile.PersistentMiB + m.Profile.EphemeralMiB) / total
	}
	return out
}

// Members lists the task IDs in key, sorted.
func (c *Coordinator) Members(key Key) []string {
	c.mu.Lock()
	l := c.lanes[key]
	c.mu.Unlock()
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, m := range l.members {
		out = append(out, m.TaskID)
	}
	sort.Strings(out)
	return out
}
