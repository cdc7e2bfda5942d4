// Package cluster reads the live cluster out of Nomad's objects: the GPU
// inventory that caravan-device fingerprints, and the managed jobs with their
// allocations and attained service. It decides nothing; the policies do.
package cluster

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"
)

// Meta keys a user sets on a job at submit time.
const (
	// MetaPolicy opts a job in and names the ordering policy it asks for.
	MetaPolicy = "caravan.policy"
	// MetaProfile names the job's throughput and sensitivity profile.
	MetaProfile = "caravan.profile"
	// MetaDuration is the job's expected run time on its fastest GPU model,
	// as a duration ("90s", "2h") or seconds: the remaining-time policies
	// (srtf, srsf, hare) and matching read it.
	MetaDuration = "caravan.duration"
	// MetaGPUMemory is the GPU memory the job needs, in MiB.
	MetaGPUMemory = "caravan.gpu_memory"
	// MetaWeight is the job's weight in total weighted JCT, a positive
	// number (default 1): Hare ranks a job of twice the weight as if it
	// were half as long.
	MetaWeight = "caravan.weight"
	// MetaGroup names the team or user a job belongs to (default: its
	// namespace): the predict policy expects a job to be like the recent
	// finished jobs of its group.
	MetaGroup = "caravan.group"
	// MetaManageService opts a service job in: "true" lets the planner
	// rewrite it, which starts a new deployment on every write.
	MetaManageService = "caravan.manage_service"
	// MetaPlacement records the constraints the planner added, so that it
	// replaces only its own and never a user's.
	MetaPlacement = "caravan.planner.placement"
	// MetaHeld marks a job the planner holds, so that a job it no longer
	// manages can be found from the job list and released.
	MetaHeld = "caravan.planner.held"
	// MetaResources records the CPU and memory a user wrote for each task
	// the planner sizes, so that they come back when it stops sizing them.
	MetaResources = "caravan.planner.resources"
)

// The hold is a job-level constraint that no node satisfies: while a job
// carries it Nomad places none of its allocations, and writing it onto a
// running job makes Nomad stop them all. The planner holds every managed job
// that its policy does not run now and removes the hold to start it, so
// jobs start in the policy's order and a multi-allocation job starts and
// stops whole. A job submitted with the hold waits for the planner from its
// first instant; one submitted without it may be placed before the first
// round sees it.
const (
	HoldAttribute = "${meta.caravan.planner.held}"
	HoldOperand   = "is_set"
)

// HoldConstraint returns a new hold constraint.
func HoldConstraint() *api.Constraint {
	return &api.Constraint{LTarget: HoldAttribute, Operand: HoldOperand}
}

// IsHold reports whether c is the planner's hold.
func IsHold(c *api.Constraint) bool {
	return c != nil && c.LTarget == HoldAttribute && c.Operand == HoldOperand
}

// Held reports whether job carries the hold.
func Held(job *api.Job) bool {
	if job == nil {
		return false
	}
	for _, c := range job.Constraints {
		if IsHold(c) {
			return true
		}
	}
	return false
}

// Device attribute targets that caravan-device fingerprints.
const (
	AttrModel = "${device.attr.model}"
	// AttrNodeID and AttrNodeName pin a group to nodes.
	AttrNodeID      = "${node.unique.id}"
	AttrNodeName    = "${node.unique.name}"
	AttrLanesPerGPU = "${device.attr.lanes_per_gpu}"
	AttrMemory      = "${device.attr.memory}"
	// AttrDeviceIDs is a device request's instance IDs: a constraint on
	// it picks the instances Nomad may hand out (not an attribute the
	// plugin fingerprints, but Nomad's own).
	AttrDeviceIDs = "${device.ids}"
)

// Instance is one device instance Nomad can hand out: a whole GPU or a lane.
type Instance struct {
	ID      string
	Healthy bool
	Health  string
	// AllocID holds the instance now, empty when free.
	AllocID string
}

// GPUGroup is the GPUs of a node of one model and lane layout: one Nomad
// device group, or for lanes the groups of every lane index of the layout.
type GPUGroup struct {
	Name string // Nomad's device name; the layout's name for lanes
	// Type is the device type: "gpu", or "lane" where the device plugin
	// offers lanes under a type of their own (a job asks "nvidia/lane").
	Type         string
	Model        string
	MemoryMiB    uint64 // of one instance: the lane's for a lane
	GPUMemoryMiB uint64 // of the physical GPU
	LanesPerGPU  int    // 1 for whole GPUs
	// Share is the fraction of a GPU that one instance is.
	Share     float64
	Slots     int
	Instances []*Instance
}

// Lanes reports whether the group's GPUs are cut into lanes.
func (g *GPUGroup) Lanes() bool { return g.LanesPerGPU > 1 }

// PerGPU is how many of the group's instances one physical GPU offers:
// one per lane and time slice, at least one.
func (g *GPUGroup) PerGPU() int { return max(g.LanesPerGPU, 1) * max(g.Slots, 1) }

// Node is a Nomad client with its GPUs.
type Node struct {
	ID, Name, Datacenter string
	Ready                bool
	CPUMHz               int
	CPUCores             int
	MemoryMB             int
	GPUs                 []*GPUGroup
}

// Alloc is one allocation of a managed job.
type Alloc struct {
	ID, NodeID   string
	ClientStatus string
	// DesiredStatus is what the server wants: "run", or "stop" and "evict"
	// once Nomad has decided to stop the allocation.
	DesiredStatus string
	// JobVersion is the version of the job the allocation runs.
	JobVersion uint64
	Started    time.Time
	Finished   time.Time
	// Modified is the allocation's last change on the server: for one told
	// to stop, when it was told.
	Modified time.Time
	// GPUShare is how many GPUs the allocation holds, a lane counting as its
	// share.
	GPUShare  float64
	DeviceIDs []string
	Model     string
}

// Running reports whether the allocation's tasks run.
func (a *Alloc) Running() bool { return a.ClientStatus == "running" }

// Live reports whether the allocation is placed, not yet terminal, and
// meant to keep running. One the server has told to stop no longer holds
// its GPUs as far as Nomad's scheduler is concerned, so it is not live.
func (a *Alloc) Live() bool {
	return (a.ClientStatus == "running" || a.ClientStatus == "pending") &&
		(a.DesiredStatus == "" || a.DesiredStatus == "run")
}

// Job is a managed job.
type Job struct {
	Namespace, ID  string
	Type           string
	Status         string
	Policy         string
	Profile        string
	Priority       int
	JobModifyIndex uint64
	// Version is the job's version, from its spec.
	Version   uint64
	Submitted time.Time
	// Modified is when the job's current version was submitted: the
	// planner's last release or hold, or a user's update.
	Modified time.Time
	// GPUs is the number of device instances the job asks for in all.
	GPUs         int
	GPUMemoryMiB uint64
	// Duration is the expected run time in seconds from MetaDuration; 0
	// when unknown.
	Duration float64
	// Weight is the job's weight from MetaWeight; 0 when unset (weight 1).
	Weight float64
	// Group is the team or user from MetaGroup, else the namespace.
	Group string
	// Warnings name the job's meta the planner could not read.
	Warnings []string
	Allocs   []*Alloc
	// Attained is the GPU-seconds of service the job has had so far.
	Attained float64
	// Executed is the wall time the job has run, in seconds: the time any
	// of its allocations ran, counted once however many ran together.
	Executed float64
	// ExecutedOn splits Executed by the GPU model the job ran on.
	ExecutedOn map[string]float64
	// Waiting is the time since submission spent not running, in seconds.
	Waiting float64
	// Spec is the full job as last read; nil when only the stub is known.
	Spec *api.Job
	// Held says the spec carries the planner's hold (see HoldConstraint).
	Held bool
}

// ParseDuration reads MetaDuration: a Go duration or a number of seconds.
func ParseDuration(v string) (float64, error) {
	v = strings.TrimSpace(v)
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		if f < 0 || math.IsInf(f, 0) || math.IsNaN(f) {
			return 0, fmt.Errorf("meta %s = %q: must be a positive duration", MetaDuration, v)
		}
		return f, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("meta %s = %q: must be a duration like \"90s\" or \"2h\", or seconds", MetaDuration, v)
	}
	return d.Seconds(), nil
}

// ParseWeight reads MetaWeight: a positive, finite number.
func ParseWeight(v string) (float64, error) {
	v = strings.TrimSpace(v)
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || !(f > 0) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("meta %s = %q: must be a positive number", MetaWeight, v)
	}
	return f, nil
}

// ServiceOptIn reports whether a service job's meta lets the planner manage
// it.
func ServiceOptIn(meta map[string]string) bool {
	v, _ := strconv.ParseBool(meta[MetaManageService])
	return v
}

// Finishing reports whether an allocation of the job completed on its own.
// Any new version of a batch job makes Nomad run the completed allocations
// of older versions again, so such a job must not be rewritten.
//
// Only allocations of the job's current version count: Nomad ignores the
// completed allocations of older versions anyway.
func (j *Job) Finishing() bool {
	for _, a := range j.Allocs {
		if a.JobVersion == j.Version && a.ClientStatus == "complete" && (a.DesiredStatus == "" || a.DesiredStatus == "run") {
			return true
		}
	}
	return false
}

// Done reports whether the job has finished in all but name: allocations
// of its version completed and none still runs, while Nomad has not yet
// marked the job dead. It needs no GPUs and must not be written.
func (j *Job) Done() bool { return j.Finishing() && !j.Running() }

// Key is namespace/id.
func (j *Job) Key() string { return Key(j.Namespace, j.ID) }

// Key joins a namespace and a job ID.
func Key(namespace, id string) string { return namespace + "/" + id }

// Running reports whether any allocation of the job runs or is placed.
func (j *Job) Running() bool {
	for _, a := range j.Allocs {
		if a.Live() {
			return true
		}
	}
	return false
}

// LiveModel is the GPU model the job's live allocations run on: "" when
// none is live, or they run on several models.
func (j *Job) LiveModel() string {
	model := ""
	for _, a := range j.Allocs {
		if !a.Live() || a.Model == "" {
			continue
		}
		if model != "" && a.Model != model {
			return ""
		}
		model = a.Model
	}
	return model
}

// State is the cluster at one instant.
type State struct {
	Time  time.Time
	Nodes []*Node
	Jobs  []*Job
}

// Instances indexes every device instance by ID, with its group.
func (s *State) Instances() map[string]*GPUGroup {
	out := map[string]*GPUGroup{}
	for _, n := range s.Nodes {
		for _, g := range n.GPUs {
			for _, in := range g.Instances {
				out[in.ID] = g
			}
		}
	}
	return out
}

// Models lists the GPU models in the cluster, sorted.
func (s *State) Models() []string {
	seen := map[string]bool{}
	var out []string
	for _, n := range s.Nodes {
		for _, g := range n.GPUs {
			if !seen[g.Model] {
				seen[g.Model] = true
				out = append(out, g.Model)
			}
		}
	}
	sort.Strings(out)
	return out
}

// NodeFrom reads a node's GPUs from caravan-device's fingerprint: device
// groups with vendor nvidia and type gpu.
func NodeFrom(stub *api.NodeListStub) *Node {
	n := &Node{ID: stub.ID, Name: stub.Name, Datacenter: stub.Datacenter,
		Ready: stub.Status == "ready" && stub.SchedulingEligibility != "ineligible" && !stub.Drain}
	res := stub.NodeResources
	if res == nil {
		return n
	}
	n.CPUMHz = int(res.Cpu.CpuShares)
	n.CPUCores = int(res.Cpu.TotalCpuCores)
	n.MemoryMB = int(res.Memory.MemoryMB)
	// caravan-device offers a lane layout as one device group per lane
	// index (so that N lanes of one request are N GPUs); the planner sees
	// the layout whole, its groups merged by their layout attribute.
	byLayout := map[string]*GPUGroup{}
	for _, d := range res.Devices {
		if d.Vendor != "nvidia" || !IsGPUType(d.Type) {
			continue
		}
		name := d.Name
		if v, ok := attrString(d.Attributes, "layout"); ok && v != "" {
			name = v
		}
		g := byLayout[d.Type+"/"+name]
		if g == nil {
			g = &GPUGroup{Name: name, Type: d.Type, Model: name, LanesPerGPU: 1, Share: 1, Slots: 1}
			if v, ok := attrString(d.Attributes, "model"); ok {
				g.Model = v
			}
			g.MemoryMiB = attrMiB(d.Attributes, "memory")
			g.GPUMemoryMiB = attrMiB(d.Attributes, "gpu_memory")
			if g.GPUMemoryMiB == 0 {
				g.GPUMemoryMiB = g.MemoryMiB
			}
			if v := attrInt(d.Attributes, "lanes_per_gpu"); v > 1 {
				g.LanesPerGPU = int(v)
			}
			if v := attrFloat(d.Attributes, "lane_share"); v > 0 && v <= 100 {
				g.Share = v / 100
			} else if g.LanesPerGPU > 1 {
				g.Share = 1 / float64(g.LanesPerGPU)
			}
			if v := attrInt(d.Attributes, "slots"); v > 1 {
				g.Slots = int(v)
			}
			byLayout[d.Type+"/"+name] = g
			n.GPUs = append(n.GPUs, g)
		}
		for _, inst := range d.Instances {
			g.Instances = append(g.Instances, &Instance{ID: inst.ID, Healthy: inst.Healthy, Health: inst.HealthDescription})
		}
	}
	for _, g := range n.GPUs {
		sort.Slice(g.Instances, func(i, j int) bool { return g.Instances[i].ID < g.Instances[j].ID })
	}
	sort.Slice(n.GPUs, func(i, j int) bool { return n.GPUs[i].Name < n.GPUs[j].Name })
	return n
}

func attrString(attrs map[string]*api.Attribute, key string) (string, bool) {
	a := attrs[key]
	if a == nil {
		return "", false
	}
	if a.StringVal != nil {
		return *a.StringVal, true
	}
	return a.String(), true
}

func attrFloat(attrs map[string]*api.Attribute, key string) float64 {
	a := attrs[key]
	switch {
	case a == nil:
		return 0
	case a.FloatVal != nil:
		return *a.FloatVal
	case a.IntVal != nil:
		return float64(*a.IntVal)
	case a.StringVal != nil:
		f, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(*a.StringVal), "%"), 64)
		return f
	}
	return 0
}

func attrInt(attrs map[string]*api.Attribute, key string) int64 {
	return int64(attrFloat(attrs, key))
}

// attrMiB reads a memory attribute in MiB whatever unit it carries.
func attrMiB(attrs map[string]*api.Attribute, key string) uint64 {
	a := attrs[key]
	if a == nil {
		return 0
	}
	v := attrFloat(attrs, key)
	unit := a.Unit
	if a.StringVal != nil {
		// "40 GiB" as a string attribute.
		fields := strings.Fields(*a.StringVal)
		if len(fields) == 2 {
			v, _ = strconv.ParseFloat(fields[0], 64)
			unit = fields[1]
		}
	}
	switch strings.ToLower(unit) {
	case "kib":
		v /= 1024
	case "gib":
		v *= 1024
	case "tib":
		v *= 1024 * 1024
	case "b":
		v /= 1024 * 1024
	case "kb":
		v = v * 1000 / (1 << 20)
	case "mb":
		v = v * 1e6 / (1 << 20)
	case "gb":
		v = v * 1e9 / (1 << 20)
	}
	return uint64(v + 0.5)
}

// RequestedGPUs counts the GPU device instances a job asks for: every task
// group's count times its tasks' nvidia/gpu requests.
func RequestedGPUs(job *api.Job) int {
	total := 0
	for _, tg := range job.TaskGroups {
		count := groupCount(tg)
		per := 0
		for _, t := range tg.Tasks {
			for _, d := range GPURequests(t) {
				if d.Count != nil {
					per += int(*d.Count)
				} else {
					per++
				}
			}
		}
		total += count * per
	}
	return total
}

// GPUTasks counts the tasks that ask for a GPU over all of a job's
// allocations: every task group's count times its GPU tasks.
func GPUTasks(job *api.Job) int {
	if job == nil {
		return 0
	}
	total := 0
	for _, tg := range job.TaskGroups {
		total += groupCount(tg) * gpuTasksIn(tg)
	}
	return total
}

// GPUTaskResources is what the job's GPU tasks hold each, as its spec has
// it now: the first GPU task's CPU (MHz), reserved cores and memory (MB),
// since the planner sizes every GPU task alike. All 0 for nil or none.
func GPUTaskResources(job *api.Job) (cpuMHz, cores, memoryMB int) {
	if job == nil {
		return 0, 0, 0
	}
	for _, tg := range job.TaskGroups {
		for _, t := range tg.Tasks {
			if len(GPURequests(t)) == 0 || t.Resources == nil {
				continue
			}
			r := t.Resources
			return derefInt(r.CPU), derefInt(r.Cores), derefInt(r.MemoryMB)
		}
	}
	return 0, 0, 0
}

func derefInt(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

// GPUAllocs counts the allocations of a job that hold GPUs when all of it
// runs: the counts of its task groups that ask for a GPU. 0 for nil.
func GPUAllocs(job *api.Job) int {
	if job == nil {
		return 0
	}
	total := 0
	for _, tg := range job.TaskGroups {
		if gpuTasksIn(tg) > 0 {
			total += groupCount(tg)
		}
	}
	return total
}

// groupCount is a task group's count, 1 when unset.
func groupCount(tg *api.TaskGroup) int {
	if tg.Count == nil {
		return 1
	}
	return *tg.Count
}

// gpuTasksIn counts a task group's tasks that ask for a GPU.
func gpuTasksIn(tg *api.TaskGroup) int {
	n := 0
	for _, t := range tg.Tasks {
		if len(GPURequests(t)) > 0 {
			n++
		}
	}
	return n
}

// PlannerMeta reports whether a job's meta shows that the planner changed
// it: a hold, a constraint or a task size of its own.
func PlannerMeta(meta map[string]string) bool {
	for _, k := range []string{MetaHeld, MetaPlacement, MetaResources} {
		if _, ok := meta[k]; ok {
			return true
		}
	}
	return false
}

// GPURequests returns a task's device requests that caravan GPUs satisfy.
func GPURequests(t *api.Task) []*api.RequestedDevice {
	if t.Resources == nil {
		return nil
	}
	var out []*api.RequestedDevice
	for _, d := range t.Resources.Devices {
		if IsGPURequest(d.Name) {
			out = append(out, d)
		}
	}
	return out
}

// IsGPURequest reports whether a device request name ("gpu", "nvidia/gpu",
// "nvidia/gpu/<model>", or the same with "lane") asks for an NVIDIA GPU or
// lanes of one.
func IsGPURequest(name string) bool {
	parts := strings.Split(name, "/")
	switch len(parts) {
	case 1:
		return IsGPUType(parts[0])
	default:
		return parts[0] == "nvidia" && IsGPUType(parts[1])
	}
}

// LaneType is the device type caravan-device offers lanes as, unless its
// lanes_as_gpus setting offers them as "gpu".
const LaneType = "lane"

// IsGPUType reports whether a device type is one of caravan-device's.
func IsGPUType(t string) bool { return t == "gpu" || t == LaneType }

// LaneRequest is the device request name for lanes of any model.
const LaneRequest = "nvidia/" + LaneType
