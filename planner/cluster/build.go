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
			Submitted: time.Unix(0, stub.SubmitTime), Modified: time.Unix(0, stub.SubmitTime), Profile: stub.Meta[MetaProfile],
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
// time. Executed is the length of the union of the job's run intervals, so
// a job of N allocations that ran together for an hour has executed an
// hour, not N hours; Attained is each allocation's run time × its GPU
// share over those intervals, which is the job's GPUs × that hour when
// they ran together.
//
// A job whose GPUs come in several allocations is a gang, as data-parallel
// training is: it makes no progress until all its workers run, so only the
// intervals in which every one of them runs count. Counted from each
// allocation's own start, a gang that Nomad placed in pieces, or whose
// tasks start a few seconds apart, would attain service, and lose its
// place in the queues, while it waits for its last worker.
func (j *Job) account(now time.Time) {
	var runs []allocRun
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
		runs = append(runs, allocRun{span{a.Started, end}, a.GPUShare, a.Model})
	}
	if workers := GPUAllocs(j.Spec); workers > 1 {
		runs = wholeGang(runs, workers)
	}
	var all []span
	byModel := map[string][]span{}
	for _, r := range runs {
		all = append(all, r.span)
		byModel[r.model] = append(byModel[r.model], r.span)
		j.Attained += r.to.Sub(r.from).Seconds() * r.share
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

// allocRun is one allocation's run: when, its GPU share and its model.
type allocRun struct {
	span
	share float64
	model string
}

// wholeGang keeps of a gang's runs the intervals in which at least workers
// of its GPU-holding allocations run together, each interval one run with
// the GPU share of all that run then, on the model most of them are on.
func wholeGang(runs []allocRun, workers int) []allocRun {
	type edge struct {
		at    time.Time
		start bool
		share float64
		model string
	}
	var edges []edge
	for _, r := range runs {
		if r.share <= 0 {
			continue
		}
		edges = append(edges, edge{r.from, true, r.share, r.model}, edge{r.to, false, r.share, r.model})
	}
	// Ends before starts at one instant: a worker replaced at that instant
	// does not overlap its replacement.
	sort.Slice(edges, func(i, k int) bool {
		if !edges[i].at.Equal(edges[k].at) {
			return edges[i].at.Before(edges[k].at)
		}
		return !edges[i].start && edges[k].start
	})
	var out []allocRun
	running, share := 0, 0.0
	models := map[string]int{}
	for i, e := range edges {
		if e.start {
			running, share = running+1, share+e.share
			models[e.model]++
		} else {
			running, share = running-1, share-e.share
			models[e.model]--
		}
		if i+1 < len(edges) && running >= workers && edges[i+1].at.After(e.at) {
			out = append(out, allocRun{span{e.at, edges[i+1].at}, share, mostOf(models)})
		}
	}
	return out
}

// mostOf is the model with the highest count, the first by name on a tie.
func mostOf(models map[string]int) string {
	best, n := "", 0
	for m, c := range models {
		if c > n || c == n && c > 0 && m < best {
			best, n = m, c
		}
	}
	return best
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
