// Package replay plays a job trace on a real Nomad cluster under caravan's
// live planner, the fourth flow of the design: each trace job is submitted
// at its scaled arrival as a Nomad batch job that runs caravan-workload for
// its scaled duration, the planner orders, holds, starts and preempts the
// jobs, and each job's start and finish are read back from Nomad in trace
// seconds, so that the simulator's metrics can be computed for the live run
// and set beside the simulator's own on the same input.
//
// A trace job becomes a task group with count = its GPUs, each allocation
// asking for one nvidia/gpu device, so that the job occupies exactly the
// GPUs the simulator's count placement gives it. Every allocation runs
// caravan-workload with a checkpoint file, so a preempted job resumes
// where it stopped, as the simulator assumes.
package replay

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/hashicorp/nomad/helper/pointer"

	"github.com/caravan-gpu/caravan/driver/workload"
	"github.com/caravan-gpu/caravan/planner/cluster"
	"github.com/caravan-gpu/caravan/planner/policy"
	"github.com/caravan-gpu/caravan/planner/profile"
	"github.com/caravan-gpu/caravan/planner/trace"
)

// Group and task names of every replay job.
const (
	GroupName = "train"
	TaskName  = "train"
)

// MetaTraceID records the trace's own ID of a replay job.
const MetaTraceID = "caravan.replay.trace_id"

// Defaults of JobOptions.
const (
	DefaultIteration = 200 * time.Millisecond
	DefaultCPU       = 20 // MHz per allocation
	// DefaultCoreMHz is a profiled core in Nomad's MHz, in a replay with
	// a sensitivity table: the planner's planning.core_mhz there.
	DefaultCoreMHz  = 1000
	DefaultMemoryMB = 64
	// minIteration keeps a zero-length job a valid workload run.
	minIteration = time.Millisecond
)

// JobOptions shape the Nomad jobs of one replay.
type JobOptions struct {
	// Prefix starts every job ID, "replay-<run>-"; cleanup purges exactly
	// the jobs that carry it.
	Prefix string
	// TimeScale is how many trace seconds one real second stands for.
	TimeScale float64
	// Workload is the caravan-workload binary's path on the client nodes.
	Workload string
	// CheckpointDir holds one checkpoint file per allocation index of each
	// job; on several nodes it must be shared storage.
	CheckpointDir string
	// Held submits every job with the planner's hold, so that only the
	// planner starts it.
	Held bool
	// Iteration is the real time one workload iteration aims at: the
	// progress a preemption can lose (DefaultIteration when 0).
	Iteration time.Duration
	// CPU (MHz) and MemoryMB each allocation asks for.
	CPU, MemoryMB int
	// Datacenters to run in; Nomad's default ("*") when empty.
	Datacenters []string
	// SharedSpeed is the share of its speed a job keeps for each other
	// job on its GPU (caravan-workload -shared-speed): the simulator's
	// co-location factor, for a replay on GPUs cut into lanes. 0 leaves
	// the workload's speed alone.
	SharedSpeed float64
	// IndependentWorkers runs each allocation of a job of several GPUs on
	// its own course from its own start, with its own checkpoint, as
	// replays did before gangs (caravan replay -gangs=false).
	IndependentWorkers bool
}

func (o JobOptions) iteration() time.Duration {
	if o.Iteration <= 0 {
		return DefaultIteration
	}
	return o.Iteration
}

// Work is what one trace job asks of caravan-workload.
type Work struct {
	// Isolated is the job's run time in trace seconds on its fastest GPU
	// model (on any GPU when the trace gives a duration).
	Isolated float64
	// Real is Isolated in real time.
	Real time.Duration
	// Iterations of IterationTime each take Real on the fastest model.
	Iterations    int
	IterationTime time.Duration
	// Rates is the job's throughput in steps per second on each GPU model
	// of the cluster that has one; nil when the trace gives a duration.
	Rates map[string]float64
	// Speed is each model's rate over the fastest one (1 there).
	Speed map[string]float64
	// Profile names the throughput profile written for the job, "" without
	// rates.
	Profile string
	// Sensitivity is, for a job of a Synergy model, the model's profiled
	// points, written in its profile for the planner's sizer; Host makes
	// its workload as fast as its task's CPU and memory allow.
	Sensitivity []profile.SensitivityPoint
	Host        *workload.HostSpeed
}

// PlanWork works out what caravan-workload runs for trace job j on a
// cluster of the given GPU models, with the simulator's rules: a job given
// in steps of a Gavel job type runs at its measured throughput on each
// model (models without a measurement are left out), a job given as a
// duration runs that long on any model.
func PlanWork(j trace.Job, models []string, tputs *trace.Throughputs, o JobOptions) (Work, error) {
	if !(o.TimeScale > 0) || math.IsInf(o.TimeScale, 0) {
		return Work{}, fmt.Errorf("time scale must be a positive number, got %g", o.TimeScale)
	}
	gpus := max(j.GPUs, 1)
	var w Work
	switch {
	case j.Steps > 0 && j.JobType != "" && tputs != nil:
		w.Rates = map[string]float64{}
		best := 0.0
		for _, m := range models {
			if r := tputs.Solo(m, j.JobType, gpus); r > 0 {
				w.Rates[m] = r
				best = max(best, r)
			}
		}
		if best == 0 {
			return Work{}, fmt.Errorf("trace job %s: no throughput for %q on %d GPUs on any model of the cluster (%s)",
				j.ID, j.JobType, gpus, strings.Join(models, ", "))
		}
		w.Speed = map[string]float64{}
		for m, r := range w.Rates {
			w.Speed[m] = r / best
		}
		w.Isolated = j.Steps / best
		w.Profile = ProfileName(j.JobType, gpus)
	case j.Duration > 0:
		w.Isolated = j.Duration
	case j.Steps > 0:
		return Work{}, fmt.Errorf("trace job %s is given in steps of %q: it needs -throughputs", j.ID, j.JobType)
	}
	w.Real = time.Duration(w.Isolated / o.TimeScale * float64(time.Second))
	w.Iterations = max(1, int(math.Round(float64(w.Real)/float64(o.iteration()))))
	w.IterationTime = max(w.Real/time.Duration(w.Iterations), minIteration)
	return w, nil
}

var nonSlug = regexp.MustCompile(`[^a-z0-9]+`)

// ProfileName is the throughput profile of a job type on gpus GPUs, e.g.
// "replay-resnet-50-batch-size-64-x2".
func ProfileName(jobType string, gpus int) string {
	slug := strings.Trim(nonSlug.ReplaceAllString(strings.ToLower(jobType), "-"), "-")
	return "replay-" + slug + "-x" + strconv.Itoa(gpus)
}

// Profiles returns the throughput profiles the works name, one per name,
// sorted by name.
func Profiles(works []Work) ([]profile.Profile, error) {
	byName := map[string]profile.Profile{}
	for _, w := range works {
		if w.Profile == "" {
			continue
		}
		p := profile.Profile{Name: w.Profile, Throughput: w.Rates, Sensitivity: w.Sensitivity}
		if err := p.Validate(); err != nil {
			return nil, fmt.Errorf("profile %s: %w", w.Profile, err)
		}
		byName[w.Profile] = p
	}
	out := make([]profile.Profile, 0, len(byName))
	for _, p := range byName {
		out = append(out, p)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out, nil
}

var nonJobID = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// JobIDs gives each trace job its Nomad job ID: the prefix and the trace's
// ID with any character Nomad might refuse replaced, made unique with the
// job's position when two trace IDs clash.
func JobIDs(prefix string, jobs []trace.Job) []string {
	ids := make([]string, len(jobs))
	seen := map[string]bool{}
	for i, j := range jobs {
		id := nonJobID.ReplaceAllString(j.ID, "-")
		if id == "" {
			id = "job"
		}
		id = prefix + id
		if seen[id] {
			id += "-" + strconv.Itoa(i)
		}
		seen[id] = true
		ids[i] = id
	}
	return ids
}

// CheckpointPath is the checkpoint file of one allocation index of a job,
// with Nomad's ${NOMAD_ALLOC_INDEX} left for the client to fill in: a
// preempted allocation's replacement keeps its index, and so its file.
func CheckpointPath(dir, jobID string) string {
	return filepath.Join(dir, jobID+"-${NOMAD_ALLOC_INDEX}.json")
}

// GangCheckpoints are the checkpoint files of every allocation of a job of
// count allocations, in index order.
func GangCheckpoints(dir, jobID string, count int) []string {
	out := make([]string, count)
	for i := range out {
		out[i] = filepath.Join(dir, jobID+"-"+strconv.Itoa(i)+".json")
	}
	return out
}

// JobSpec is the Nomad job that plays trace job j with work w under the
// ID id. A job of several GPUs is a synchronous gang, as data-parallel
// training is: its workers make progress only once all have started, and
// share one state (caravan-workload -gang-checkpoints), as the simulator
// runs a gang from its last task's start.
func JobSpec(o JobOptions, id string, j trace.Job, w Work) *api.Job {
	args := []string{
		"-iterations", strconv.Itoa(w.Iterations),
		"-iteration-time", w.IterationTime.String(),
		"-steps", "1",
		"-persistent-mib", "256",
		"-ephemeral-mib", "64",
		"-checkpoint", CheckpointPath(o.CheckpointDir, id),
	}
	if j.GPUs > 1 && !o.IndependentWorkers {
		args = append(args, "-gang-checkpoints", strings.Join(GangCheckpoints(o.CheckpointDir, id, j.GPUs), ","))
	}
	if len(w.Speed) > 0 {
		args = append(args, "-speed", workload.FormatSpeeds(w.Speed))
	}
	if o.SharedSpeed > 0 {
		args = append(args, "-shared-speed", strconv.FormatFloat(o.SharedSpeed, 'g', -1, 64))
	}
	if w.Host != nil {
		host, _ := json.Marshal(w.Host)
		args = append(args, "-host-speed", string(host))
	}
	meta := map[string]string{
		cluster.MetaPolicy:   "default",
		cluster.MetaDuration: strconv.FormatFloat(w.Real.Seconds(), 'f', -1, 64),
		MetaTraceID:          j.ID,
	}
	if w.Profile != "" {
		meta[cluster.MetaProfile] = w.Profile
	}
	// The simulator shares GPUs among the trace's groups under fair
	// policies; the live planner must see the same groups.
	if j.Group != "" {
		meta[cluster.MetaGroup] = j.Group
	}
	cpu, mem := o.CPU, o.MemoryMB
	if cpu <= 0 {
		cpu = DefaultCPU
	}
	if mem <= 0 {
		mem = DefaultMemoryMB
	}
	job := &api.Job{
		ID:          pointer.Of(id),
		Name:        pointer.Of(id),
		Type:        pointer.Of(api.JobTypeBatch),
		Priority:    pointer.Of(50),
		Datacenters: o.Datacenters,
		Meta:        meta,
		TaskGroups: []*api.TaskGroup{{
			Name:  pointer.Of(GroupName),
			Count: pointer.Of(max(j.GPUs, 1)),
			// A failed run is not retried in place; rescheduling places it
			// again after 5 s (Nomad's shortest delay), and its checkpoint
			// lets it resume.
			RestartPolicy: &api.RestartPolicy{Attempts: pointer.Of(0), Mode: pointer.Of("fail")},
			ReschedulePolicy: &api.ReschedulePolicy{Attempts: pointer.Of(3), Interval: pointer.Of(time.Hour),
				Delay: pointer.Of(5 * time.Second), DelayFunction: pointer.Of("constant"), Unlimited: pointer.Of(false)},
			// Small disk and logs: a node holds one allocation per GPU.
			EphemeralDisk: &api.EphemeralDisk{SizeMB: pointer.Of(16)},
			Tasks: []*api.Task{{
				Name:   TaskName,
				Driver: "caravan",
				Config: map[string]any{"command": o.Workload, "args": args},
				Resources: &api.Resources{CPU: pointer.Of(cpu), MemoryMB: pointer.Of(mem),
					Devices: []*api.RequestedDevice{{Name: "nvidia/gpu", Count: pointer.Of(uint64(1))}}},
				KillTimeout: pointer.Of(5 * time.Second),
				LogConfig:   &api.LogConfig{MaxFiles: pointer.Of(2), MaxFileSizeMB: pointer.Of(4)},
			}},
		}},
	}
	if o.Held {
		job.Constraints = []*api.Constraint{cluster.HoldConstraint()}
	}
	return job
}

// Fit checks that every job can run on the cluster: the simulator places a
// job on one GPU model, so a job needs that many GPUs of one model (of one
// it has a throughput on). The error names the first job that cannot.
func Fit(jobs []trace.Job, works []Work, c trace.Cluster) error {
	perModel := map[string]int{}
	for _, g := range c.Groups {
		perModel[g.GPUModel] += g.Count * g.GPUs
	}
	for i, j := range jobs {
		best, where := 0, ""
		for m, n := range perModel {
			if i < len(works) && works[i].Rates != nil && works[i].Rates[m] == 0 {
				continue
			}
			if n > best || n == best && m < where {
				best, where = n, m
			}
		}
		if gpus := max(j.GPUs, 1); gpus > best {
			if where == "" {
				return fmt.Errorf("trace job %s: no GPU model of cluster %s can run it", j.ID, c.Name)
			}
			return fmt.Errorf("trace job %s asks for %d GPUs, but cluster %s has at most %d of one model (%s), and a job runs on one model",
				j.ID, gpus, c.Name, best, where)
		}
	}
	return nil
}

// ErrNoJobs is returned for an empty trace.
var ErrNoJobs = errors.New("the trace has no jobs")

// SensitiveWork makes w a Synergy job's: its profile is its model's (named
// after the model, as the planner's sizer looks it up), throughput 1 on
// every model of the cluster, with the model's sensitivity, and its
// workload runs as fast as its task's CPU and memory allow relative to
// share, the cores and GB per GPU of the cluster's proportional share, a
// core worth coreMHz. A job with no model, or one the table lacks (the
// sizer gives it the proportional share, at which it runs as fast), is
// left as it is.
func SensitiveWork(w *Work, j trace.Job, models []string, sens *policy.Sensitivity, share [2]float64, coreMHz float64) error {
	if sens == nil || j.Model == "" {
		return nil
	}
	grid := sens.Grid(j.Model, max(j.GPUs, 1))
	if grid == nil {
		return nil
	}
	if len(w.Rates) > 0 {
		return fmt.Errorf("trace job %s: a job with throughputs and a Synergy model names two profiles", j.ID)
	}
	w.Profile = j.Model
	w.Rates = map[string]float64{}
	for _, m := range models {
		w.Rates[m] = 1
	}
	w.Sensitivity = nil
	for _, r := range sens.Rows(j.Model) {
		w.Sensitivity = append(w.Sensitivity, profile.SensitivityPoint{GPUs: r.GPUs, CPUsPerGPU: r.CPUsPerGPU, MemGBPerGPU: r.MemGBPerGPU, Throughput: r.Throughput})
	}
	w.Host = &workload.HostSpeed{CoreMHz: coreMHz, Share: share, Points: grid}
	return nil
}
