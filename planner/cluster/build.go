package cluster

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"
)

// Inputs are Nomad's objects at one instant.
type Inputs struct {
	Now    time.Time
	Nodes  []*api.NodeListStub
	Jobs   []*api.JobListStub
	Allocs []*api.AllocationListStub
	// Specs holds full job specs by Key; jobs without one are built from
	// their stub alone.
	Specs map[string]*api.Job
	// Arrivals holds first-seen times by Key. A job's SubmitTime moves with
	// every new version, the planner's own writes included, so the earliest
	// time known wins.
	Arrivals map[string]time.Time
}

// Selector says whether a job is managed and under which policy.
type Selector func(namespace string, meta map[string]string) (policy string, managed bool)

// Build reads the cluster state out of Nomad's objects. Only jobs that select
// accepts are kept; stopped and dead jobs are left out.
func Build(in Inputs, selectJob Selector) *State {
	s := &State{Time: in.Now}
	for _, stub := range in.Nodes {
		s.Nodes = append(s.Nodes, NodeFrom(stub))
	}
	sort.Slice(s.Nodes, func(i, j int) bool { return s.Nodes[i].Name < s.Nodes[j].Name })
	instances := s.Instances()

	allocsByJob := map[string][]*api.AllocationListStub{}
	for _, a := range in.Allocs {
		k := Key(a.Namespace, a.JobID)
		allocsByJob[k] = append(allocsByJob[k], a)
	}
	for _, stub := range in.Jobs {
		if stub.Stop || stub.Status == "dead" || !Manageable(stub) {
			continue
		}
		ns := stub.Namespace
		if ns == "" {
			ns = "default"
		}
		policy, ok := selectJob(ns, stub.Meta)
		if !ok {
			continue
		}
		j := &Job{
			Namespace: ns, ID: stub.ID, Type: stub.Type, Status: stub.Status,
			Policy: policy, Priority: stub.Priority, JobModifyIndex: stub.JobModifyIndex,
			Submitted: time.Unix(0, stub.SubmitTime), Profile: stub.Meta[MetaProfile],
		}
		if v := stub.Meta[MetaGPUMemory]; strings.TrimSpace(v) != "" {
			if n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64); err == nil {
				j.GPUMemoryMiB = n
			} else {
				j.Warnings = append(j.Warnings, fmt.Sprintf("meta %s = %q: must be MiB as a whole number", MetaGPUMemory, v))
			}
		}
		if v := stub.Meta[MetaDuration]; strings.TrimSpace(v) != "" {
			if d, err := ParseDuration(v); err == nil {
				j.Duration = d
			} else {
				j.Warnings = append(j.Warnings, err.Error())
			}
		}
		j.Group = strings.TrimSpace(stub.Meta[MetaGroup])
		if j.Group == "" {
			j.Group = j.Namespace
		}
		if v := stub.Meta[MetaWeight]; strings.TrimSpace(v) != "" {
			if w, err := ParseWeight(v); err == nil {
				j.Weight = w
			} else {
				j.Warnings = append(j.Warnings, err.Error())
			}
		}
		if spec := in.Specs[j.Key()]; spec != nil {
			j.Spec = spec
			j.GPUs = RequestedGPUs(spec)
			j.Held = Held(spec)
			j.Version = nomadVersion(spec)
		}
		if t, ok := in.Arrivals[j.Key()]; ok && t.Before(j.Submitted) {
			j.Submitted = t
		}
		for _, a := range allocsByJob[j.Key()] {
			if j.Spec == nil {
				// Without the spec, the newest version an allocation runs.
				j.Version = max(j.Version, a.JobVersion)
			}
			j.Allocs = append(j.Allocs, allocFrom(a, instances, in.Now))
			if created := time.Unix(0, a.CreateTime); a.CreateTime > 0 && created.Before(j.Submitted) {
				j.Submitted = created
			}
		}
		j.account(in.Now)
		s.Jobs = append(s.Jobs, j)
	}
	// Holders of device instances, for `caravan lanes`.
	for _, j := range s.Jobs {
		for _, a := range j.Allocs {
			if !a.Live() {
				continue
			}
			for _, id := range a.DeviceIDs {
				if g := instances[id]; g != nil {
					for _, in := range g.Instances {
						if in.ID == id {
							in.AllocID = a.ID
						}
					}
				}
			}
		}
	}
	sort.Slice(s.Jobs, func(i, j int) bool {
		if !s.Jobs[i].Submitted.Equal(s.Jobs[j].Submitted) {
			return s.Jobs[i].Submitted.Before(s.Jobs[j].Submitted)
		}
		return s.Jobs[i].Key() < s.Jobs[j].Key()
	})
	return s
}

func nomadVersion(job *api.Job) uint64 {
	if job.Version == nil {
		return 0
	}
	return *job.Version
}

// Manageable says whether the planner may manage a job of this kind at all.
// Periodic and parameterized parents never run anything themselves: their
// children are the jobs, and inherit the parent's meta. System jobs run
// everywhere by definition. A service job is managed only when it opts in
// itself (ServiceOptIn), since any rewrite of a service job starts a new
// deployment.
func Manageable(stub *api.JobListStub) bool {
	switch {
	case stub.Periodic || stub.ParameterizedJob:
		return false
	case stub.Type == "system" || stub.Type == "sysbatch":
		return false
	case stub.Type == "service":
		return ServiceOptIn(stub.Meta)
	}
	return true
}

func allocFrom(a *api.AllocationListStub, instances map[string]*GPUGroup, now time.Time) *Alloc {
	out := &Alloc{ID: a.ID, NodeID: a.NodeID, ClientStatus: a.ClientStatus, DesiredStatus: a.DesiredStatus,
		JobVersion: a.JobVersion}
	if a.ModifyTime > 0 {
		out.Modified = time.Unix(0, a.ModifyTime)
	}
	for _, ts := range a.TaskStates {
		if ts == nil {
			continue
		}
		if !ts.StartedAt.IsZero() && (out.Started.IsZero() || ts.StartedAt.Before(out.Started)) {
			out.Started = ts.StartedAt
		}
		if !ts.FinishedAt.IsZero() && ts.FinishedAt.After(out.Finished) {
			out.Finished = ts.FinishedAt
		}
	}
	if a.AllocatedResources != nil {
		for _, task := range a.AllocatedResources.Tasks {
			if task == nil {
				continue
			}
			for _, d := range task.Devices {
				if d == nil || d.Vendor != "nvidia" || !IsGPUType(d.Type) {
					continue
				}
				for _, id := range d.DeviceIDs {
					out.DeviceIDs = append(out.DeviceIDs, id)
					share := 1.0
					if g := instances[id]; g != nil {
						share = g.Share
						out.Model = g.Model
					}
					out.GPUShare += share
				}
			}
		}
	}
	sort.Strings(out.DeviceIDs)
	return out
}

// account sets the job's executed time, attained GPU-seconds and waiting
// time. Executed is the length of the union of the allocations' run
// intervals, so a job of N allocations that ran together for an hour has
// executed an hour, not N hours; Attained is each allocation's run time ×
// its GPU share, which is the job's GPUs × that hour when they ran together.
func (j *Job) account(now time.Time) {
	var all []span
	byModel := map[string][]span{}
	for _, a := range j.Allocs {
		if a.Started.IsZero() {
			continue
		}
		end := now
		switch {
		case !a.Live() && !a.Finished.IsZero():
			end = a.Finished
		case !a.Live() && !a.Modified.IsZero() && a.Modified.Before(now):
			// Told to stop, and its tasks not yet reported gone: its work
			// since is lost to the preemption, as in the simulator.
			end = a.Modified
		}
		if !end.After(a.Started) {
			continue
		}
		sp := span{a.Started, end}
		all = append(all, sp)
		byModel[a.Model] = append(byModel[a.Model], sp)
		j.Attained += end.Sub(a.Started).Seconds() * a.GPUShare
	}
	j.Executed = unionSeconds(all)
	for m, spans := range byModel {
		if j.ExecutedOn == nil {
			j.ExecutedOn = map[string]float64{}
		}
		j.ExecutedOn[m] = unionSeconds(spans)
	}
	if !j.Submitted.IsZero() {
		j.Waiting = now.Sub(j.Submitted).Seconds() - j.Executed
		if j.Waiting < 0 {
			j.Waiting = 0
		}
	}
}

type span struct{ from, to time.Time }

// unionSeconds is the length of the union of spans.
func unionSeconds(spans []span) float64 {
	sort.Slice(spans, func(i, k int) bool { return spans[i].from.Before(spans[k].from) })
	total := 0.0
	var cur span
	for k, sp := range spans {
		switch {
		case k == 0:
			cur = sp
		case sp.from.After(cur.to):
			total += cur.to.Sub(cur.from).Seconds()
			cur = sp
		case sp.to.After(cur.to):
			cur.to = sp.to
		}
	}
	if len(spans) > 0 {
		total += cur.to.Sub(cur.from).Seconds()
	}
	return total
}
