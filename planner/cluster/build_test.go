package cluster

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

func everyJob(string, map[string]string) (string, bool) { return "las", true }

func alloc(job, client, desired string, from, to time.Time, devices ...string) *api.AllocationListStub {
	ts := &api.TaskState{StartedAt: from, FinishedAt: to}
	return &api.AllocationListStub{ID: job + from.String(), JobID: job, Namespace: "default",
		ClientStatus: client, DesiredStatus: desired, TaskStates: map[string]*api.TaskState{"t": ts},
		AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{
			"t": {Devices: []*api.AllocatedDeviceResource{{Vendor: "nvidia", Type: "gpu", DeviceIDs: devices}}}}}}
}

// A job of two allocations that ran together for 100 s executed 100 s and
// attained 200 GPU-s; a later allocation after a preemption adds its own
// time once.
func TestBuildCountsRunTimeOnce(t *testing.T) {
	now := time.Unix(10_000, 0)
	t0 := now.Add(-1000 * time.Second)
	stub := &api.JobListStub{ID: "gang", Namespace: "default", Type: "batch", Status: "running", SubmitTime: t0.UnixNano()}
	allocs := []*api.AllocationListStub{
		alloc("gang", "complete", "stop", t0, t0.Add(100*time.Second), "g0"),
		alloc("gang", "complete", "stop", t0.Add(time.Second), t0.Add(100*time.Second), "g1"),
		alloc("gang", "running", "run", now.Add(-50*time.Second), time.Time{}, "g0"),
		alloc("gang", "running", "run", now.Add(-50*time.Second), time.Time{}, "g1"),
	}
	s := Build(Inputs{Now: now, Jobs: []*api.JobListStub{stub}, Allocs: allocs}, everyJob)
	must.Len(t, 1, s.Jobs)
	j := s.Jobs[0]
	must.Eq(t, 150.0, j.Executed)
	must.Eq(t, 100+99+50+50.0, j.Attained)
	must.Eq(t, 850.0, j.Waiting)
}

// A job whose GPUs come in several allocations is a gang: its service
// counts only while all its workers run, not from each one's start.
func TestBuildCountsAGangWhileAllItsWorkersRun(t *testing.T) {
	now := time.Unix(10_000, 0)
	t0 := now.Add(-1000 * time.Second)
	gang := func(id string, count int) (*api.JobListStub, *api.Job) {
		stub := &api.JobListStub{ID: id, Namespace: "default", Type: "batch", Status: "running", SubmitTime: t0.UnixNano()}
		spec := &api.Job{ID: &id, TaskGroups: []*api.TaskGroup{{Count: &count, Tasks: []*api.Task{{
			Resources: &api.Resources{Devices: []*api.RequestedDevice{{Name: "nvidia/gpu"}}}}}}}}
		return stub, spec
	}
	whole, wholeSpec := gang("whole", 2)
	pieces, piecesSpec := gang("pieces", 4)
	allocs := []*api.AllocationListStub{
		// whole: its second worker started 1 s after the first; a second
		// run of both, its first worker replaced at the instant it ended.
		alloc("whole", "complete", "stop", t0, t0.Add(100*time.Second), "g0"),
		alloc("whole", "complete", "stop", t0.Add(time.Second), t0.Add(100*time.Second), "g1"),
		alloc("whole", "complete", "stop", now.Add(-50*time.Second), now.Add(-20*time.Second), "g0"),
		alloc("whole", "running", "run", now.Add(-20*time.Second), time.Time{}, "g2"),
		alloc("whole", "running", "run", now.Add(-50*time.Second), time.Time{}, "g1"),
		// pieces: two of its four workers placed and running, two not.
		alloc("pieces", "running", "run", now.Add(-30*time.Second), time.Time{}, "g3"),
		alloc("pieces", "running", "run", now.Add(-30*time.Second), time.Time{}, "g4"),
	}
	s := Build(Inputs{Now: now, Jobs: []*api.JobListStub{whole, pieces}, Allocs: allocs,
		Specs: map[string]*api.Job{Key("default", "whole"): wholeSpec, Key("default", "pieces"): piecesSpec}}, everyJob)
	must.Len(t, 2, s.Jobs)
	w, p := s.Jobs[0], s.Jobs[1]
	if w.ID != "whole" {
		w, p = p, w
	}
	must.Eq(t, 99+50.0, w.Executed)
	must.Eq(t, 2*99+2*50.0, w.Attained)
	must.Eq(t, 0.0, p.Executed, must.Sprint("a gang without all its workers makes no progress"))
	must.Eq(t, 0.0, p.Attained)
	must.Eq(t, 1000.0, p.Waiting)

	// Without the spec the planner cannot tell a gang: each allocation
	// counts from its own start.
	s = Build(Inputs{Now: now, Jobs: []*api.JobListStub{pieces}, Allocs: allocs[5:]}, everyJob)
	must.Eq(t, 60.0, s.Jobs[0].Attained)
}

// An allocation the server has told to stop no longer holds its GPUs.
func TestBuildStoppingAllocIsNotLive(t *testing.T) {
	now := time.Unix(10_000, 0)
	stub := &api.JobListStub{ID: "pre", Namespace: "default", Type: "batch", Status: "running", SubmitTime: now.Add(-time.Minute).UnixNano()}
	s := Build(Inputs{Now: now, Jobs: []*api.JobListStub{stub},
		Allocs: []*api.AllocationListStub{alloc("pre", "running", "stop", now.Add(-30*time.Second), time.Time{}, "g0")}}, everyJob)
	must.False(t, s.Jobs[0].Running())
}

// An allocation told to stop whose client has not yet reported it gone has
// run until it was told, not until now: its service never grows past the
// preemption and then shrinks when the client reports.
func TestBuildStoppingAllocRanUntilTold(t *testing.T) {
	now := time.Unix(10_000, 0)
	stub := &api.JobListStub{ID: "pre", Namespace: "default", Type: "batch", Status: "running", SubmitTime: now.Add(-time.Minute).UnixNano()}
	a := alloc("pre", "running", "stop", now.Add(-60*time.Second), time.Time{}, "g0")
	a.ModifyTime = now.Add(-10 * time.Second).UnixNano()
	s := Build(Inputs{Now: now, Jobs: []*api.JobListStub{stub}, Allocs: []*api.AllocationListStub{a}}, everyJob)
	must.Eq(t, 50.0, s.Jobs[0].Executed)
}

func TestBuildLeavesParentsSystemAndServiceJobsAlone(t *testing.T) {
	stubs := []*api.JobListStub{
		{ID: "nightly", Type: "batch", Status: "running", Periodic: true},
		{ID: "nightly/periodic-1700000000", ParentID: "nightly", Type: "batch", Status: "pending"},
		{ID: "infer", Type: "batch", Status: "running", ParameterizedJob: true},
		{ID: "infer/dispatch-1-abc", ParentID: "infer", Type: "batch", Status: "pending"},
		{ID: "web", Type: "service", Status: "running"},
		{ID: "notebook", Type: "service", Status: "running", Meta: map[string]string{MetaManageService: "true"}},
		{ID: "agent", Type: "system", Status: "running"},
		{ID: "train", Type: "batch", Status: "pending"},
	}
	s := Build(Inputs{Now: time.Now(), Jobs: stubs}, everyJob)
	var ids []string
	for _, j := range s.Jobs {
		ids = append(ids, j.ID)
	}
	must.SliceContainsAll(t, []string{"nightly/periodic-1700000000", "infer/dispatch-1-abc", "notebook", "train"}, ids)
}

func TestGPUTasks(t *testing.T) {
	job := api.NewBatchJob("j", "j", "global", 50)
	gpu := api.NewTask("train", "caravan")
	gpu.Require(&api.Resources{Devices: []*api.RequestedDevice{{Name: "nvidia/gpu"}}})
	side := api.NewTask("log", "caravan")
	job.AddTaskGroup(api.NewTaskGroup("workers", 3).AddTask(gpu).AddTask(side))
	must.Eq(t, 3, GPUTasks(job))
	must.Eq(t, 3, RequestedGPUs(job))
	must.Eq(t, 0, GPUTasks(nil))
}

func TestIsGPURequest(t *testing.T) {
	for name, want := range map[string]bool{
		"gpu": true, "nvidia/gpu": true, "nvidia/gpu/Tesla T4": true,
		"lane": true, "nvidia/lane": true, "nvidia/lane/NVIDIA H100 80GB HBM3 [4 lanes x 20389 MiB]": true,
		"fpga": false, "amd/gpu": false, "nvidia/fpga": false,
	} {
		must.Eq(t, want, IsGPURequest(name), must.Sprint(name))
	}
}

// Lanes offered under their own device type are GPUs to the planner, and
// keep their type.
func TestNodeFromReadsLaneGroups(t *testing.T) {
	model, lanes := "H100", int64(4)
	attrs := map[string]*api.Attribute{"model": {StringVal: &model}, "lanes_per_gpu": {IntVal: &lanes}}
	n := NodeFrom(&api.NodeListStub{ID: "n", Status: "ready", NodeResources: &api.NodeResources{Devices: []*api.NodeDeviceResource{
		{Vendor: "nvidia", Type: "lane", Name: "H100 [4 lanes]", Attributes: attrs, Instances: []*api.NodeDevice{{ID: "GPU-0:lane0:slot0", Healthy: true}}},
		{Vendor: "nvidia", Type: "gpu", Name: "Tesla T4", Instances: []*api.NodeDevice{{ID: "GPU-1", Healthy: true}}},
		{Vendor: "nvidia", Type: "fpga", Name: "other"},
	}}})
	must.Len(t, 2, n.GPUs)
	must.Eq(t, "lane", n.GPUs[0].Type)
	must.True(t, n.GPUs[0].Lanes())
	must.Eq(t, "gpu", n.GPUs[1].Type)
}

// caravan-device offers a layout as a group per lane index; the planner
// sees one group of the layout's GPUs, with every lane of them.
func TestNodeFromMergesTheLaneGroupsOfALayout(t *testing.T) {
	model, layout, lanes := "H100", "H100 [2 lanes x 40000 MiB]", int64(2)
	var groups []*api.NodeDeviceResource
	for l := range 2 {
		lane := int64(l)
		attrs := map[string]*api.Attribute{"model": {StringVal: &model}, "lanes_per_gpu": {IntVal: &lanes},
			"layout": {StringVal: &layout}, "lane": {IntVal: &lane}}
		g := &api.NodeDeviceResource{Vendor: "nvidia", Type: "lane", Name: fmt.Sprintf("%s lane %d", layout, l), Attributes: attrs}
		for _, gpu := range []string{"GPU-1", "GPU-0"} {
			g.Instances = append(g.Instances, &api.NodeDevice{ID: fmt.Sprintf("%s:lane%d:slot0", gpu, l), Healthy: true})
		}
		groups = append(groups, g)
	}
	n := NodeFrom(&api.NodeListStub{ID: "n", Status: "ready", NodeResources: &api.NodeResources{Devices: groups}})
	must.Len(t, 1, n.GPUs)
	g := n.GPUs[0]
	must.Eq(t, layout, g.Name)
	must.Eq(t, 2, g.LanesPerGPU)
	var ids []string
	for _, in := range g.Instances {
		ids = append(ids, in.ID)
	}
	must.Eq(t, []string{"GPU-0:lane0:slot0", "GPU-0:lane1:slot0", "GPU-1:lane0:slot0", "GPU-1:lane1:slot0"}, ids)
}

func TestParseDuration(t *testing.T) {
	for in, want := range map[string]float64{"90": 90, "90s": 90, "2h": 7200, " 1.5 ": 1.5, "0": 0} {
		got, err := ParseDuration(in)
		must.NoError(t, err, must.Sprint(in))
		must.Eq(t, want, got)
	}
	for _, in := range []string{"", "soon", "-5", "-1s", "NaN", "Inf"} {
		_, err := ParseDuration(in)
		must.ErrorContains(t, err, MetaDuration, must.Sprint(in))
	}
}

func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"90", "2h", "1e3", "-1", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDuration(s)
		if err == nil && (d < 0 || d != d) {
			t.Fatalf("%q gave %v", s, d)
		}
	})
}

// Bad meta is named in the job's warnings, not dropped in silence.
func TestBuildWarnsOfBadMeta(t *testing.T) {
	stub := &api.JobListStub{ID: "j", Type: "batch", Status: "pending",
		Meta: map[string]string{MetaDuration: "soon", MetaGPUMemory: "lots", MetaWeight: "-2"}}
	s := Build(Inputs{Now: time.Now(), Jobs: []*api.JobListStub{stub}}, everyJob)
	must.Len(t, 3, s.Jobs[0].Warnings)
	must.StrContains(t, s.Jobs[0].Warnings[0], MetaGPUMemory)
	must.StrContains(t, s.Jobs[0].Warnings[1], MetaDuration)
	must.StrContains(t, s.Jobs[0].Warnings[2], MetaWeight)
	must.Eq(t, 0.0, s.Jobs[0].Weight)
}

func TestBuildReadsWeight(t *testing.T) {
	stub := &api.JobListStub{ID: "j", Type: "batch", Status: "pending", Meta: map[string]string{MetaWeight: " 2.5 "}}
	s := Build(Inputs{Now: time.Now(), Jobs: []*api.JobListStub{stub}}, everyJob)
	must.Len(t, 0, s.Jobs[0].Warnings)
	must.Eq(t, 2.5, s.Jobs[0].Weight)
}

func TestBuildReadsGroup(t *testing.T) {
	cases := []struct {
		name, namespace, meta, want string
	}{
		{"meta", "research", " vision ", "vision"},
		{"namespace when unset", "research", "", "research"},
		{"default namespace", "", "", "default"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			stub := &api.JobListStub{ID: "j", Namespace: tc.namespace, Type: "batch", Status: "pending", Meta: map[string]string{MetaGroup: tc.meta}}
			s := Build(Inputs{Now: time.Now(), Jobs: []*api.JobListStub{stub}}, everyJob)
			must.Eq(t, tc.want, s.Jobs[0].Group)
		})
	}
}

func TestParseWeight(t *testing.T) {
	cases := []struct {
		in   string
		want float64
		err  bool
	}{
		{"1", 1, false}, {" 2.5 ", 2.5, false}, {"1e3", 1000, false},
		{"", 0, true}, {"0", 0, true}, {"-1", 0, true}, {"heavy", 0, true},
		{"NaN", 0, true}, {"Inf", 0, true}, {"1e400", 0, true},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseWeight(tc.in)
			if tc.err {
				must.ErrorContains(t, err, MetaWeight)
				return
			}
			must.NoError(t, err)
			must.Eq(t, tc.want, got)
		})
	}
}

func FuzzParseWeight(f *testing.F) {
	for _, s := range []string{"1", "0.5", "-1", "NaN", "1e309", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		w, err := ParseWeight(s)
		if err == nil && (!(w > 0) || math.IsInf(w, 0)) {
			t.Fatalf("%q gave %v", s, w)
		}
		if err != nil && w != 0 {
			t.Fatalf("%q gave %v with an error", s, w)
		}
	})
}

// A job whose allocations of its current version completed is done, even
// before Nomad marks it dead; completions of older versions do not count,
// since Nomad runs those allocations again.
func TestBuildFinishingAndDone(t *testing.T) {
	now := time.Unix(10_000, 0)
	spec := func(v uint64) map[string]*api.Job {
		return map[string]*api.Job{"default/j": {ID: pointerTo("j"), Version: &v}}
	}
	stub := &api.JobListStub{ID: "j", Namespace: "default", Type: "batch", Status: "running"}
	done := alloc("j", "complete", "run", now.Add(-time.Minute), now.Add(-time.Second), "g0")
	done.JobVersion = 3
	live := alloc("j", "running", "run", now.Add(-time.Minute), time.Time{}, "g1")
	live.JobVersion = 3

	j := Build(Inputs{Now: now, Jobs: []*api.JobListStub{stub}, Allocs: []*api.AllocationListStub{done, live}, Specs: spec(3)}, everyJob).Jobs[0]
	must.True(t, j.Finishing())
	must.False(t, j.Done(), must.Sprint("one allocation still runs"))

	j = Build(Inputs{Now: now, Jobs: []*api.JobListStub{stub}, Allocs: []*api.AllocationListStub{done}, Specs: spec(3)}, everyJob).Jobs[0]
	must.True(t, j.Done())

	// The user submitted it again: version 4 runs afresh.
	j = Build(Inputs{Now: now, Jobs: []*api.JobListStub{stub}, Allocs: []*api.AllocationListStub{done}, Specs: spec(4)}, everyJob).Jobs[0]
	must.False(t, j.Finishing())
	must.False(t, j.Done())

	// Stopped by the planner is not completed.
	stopped := alloc("j", "complete", "stop", now.Add(-time.Minute), now.Add(-time.Second), "g0")
	stopped.JobVersion = 3
	j = Build(Inputs{Now: now, Jobs: []*api.JobListStub{stub}, Allocs: []*api.AllocationListStub{stopped}, Specs: spec(3)}, everyJob).Jobs[0]
	must.False(t, j.Finishing())
}

func pointerTo[T any](v T) *T { return &v }
