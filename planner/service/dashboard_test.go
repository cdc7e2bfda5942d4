package service

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caravan-gpu/caravan/planner/nomadx/nomadxtest"
	"github.com/caravan-gpu/caravan/planner/plannerapi"
	"github.com/hashicorp/nomad/api"
	"github.com/hashicorp/nomad/helper/pointer"
	"github.com/shoenig/test/must"
)

func getJSON(t *testing.T, url string, out any) {
	t.Helper()
	resp, err := http.Get(url)
	must.NoError(t, err)
	defer resp.Body.Close()
	must.Eq(t, http.StatusOK, resp.StatusCode, must.Sprint(url))
	must.NoError(t, json.NewDecoder(resp.Body).Decode(out))
}

func getBody(t *testing.T, url string) (int, string, string) {
	t.Helper()
	resp, err := http.Get(url)
	must.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	must.NoError(t, err)
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
}

// The dashboard's JSON follows the rounds: the GPU map shows who holds
// each GPU and its memory in use, the timeline the writes and a user's
// override, the results a completion.
func TestDashboardFollowsTheRounds(t *testing.T) {
	fake := nomadxtest.New()
	fake.NodeSet = []*api.NodeListStub{gpuNode("n1", map[string]int{"T4": 1})}
	fake.Stats = map[string]*api.HostStats{"n1": {DeviceStats: []*api.DeviceGroupStats{{Vendor: "nvidia", Type: "gpu", Name: "T4",
		InstanceStats: map[string]*api.DeviceStats{"T4-0": {Summary: &api.StatValue{IntNumeratorVal: pointer.Of[int64](1234), IntDenominatorVal: pointer.Of[int64](40960)}}}}}}}
	fake.Submit(managedJob("long", 1, nil))
	fake.Update("default", "long", func(j *api.Job) {
		j.Status = str("running")
		j.SubmitTime = pointer.Of(time.Now().Add(-2 * time.Minute).UnixNano())
	})
	fake.Allocs = []*api.AllocationListStub{runningAlloc("long", "T4-0", time.Now().Add(-time.Minute))}
	fake.Submit(managedJob("short", 1, nil))

	p, err := New(settings(t, `planning { queue_cuts = [30] }`), fake, nil, nil)
	must.NoError(t, err)
	ctx := context.Background()
	_, err = p.Round(ctx)
	must.NoError(t, err)
	srv := httptest.NewServer(p.Handler())
	defer srv.Close()

	var gpus plannerapi.GPUMap
	getJSON(t, srv.URL+"/v1/gpus", &gpus)
	must.Len(t, 1, gpus.Lanes)
	must.Eq(t, "default/long", gpus.Lanes[0].Job)
	must.NotNil(t, gpus.Lanes[0].MemoryUsedMiB)
	must.Eq(t, uint64(1234), *gpus.Lanes[0].MemoryUsedMiB)
	must.Eq(t, 1, gpus.GPUs)
	must.Eq(t, 1.0, gpus.Busy)

	var decisions plannerapi.Decisions
	getJSON(t, srv.URL+"/v1/decisions", &decisions)
	must.Len(t, 2, decisions.Decisions, must.Sprint("long is preempted, short started"))
	actions := map[string]string{}
	for _, d := range decisions.Decisions {
		actions[d.Job] = d.Action
		must.Eq(t, "written", d.Outcome)
		must.NotEq(t, "", d.Reason)
	}
	must.Eq(t, "preempt", actions["long"])

	// A user registers short again with a priority of their own.
	short := fake.Get("default", "short")
	written := *short.Priority
	short.Priority = pointer.Of(10)
	fake.Submit(short)
	_, err = p.Round(ctx)
	must.NoError(t, err)
	getJSON(t, srv.URL+"/v1/decisions?limit=10", &decisions)
	var overridden *plannerapi.Decision
	for i, d := range decisions.Decisions {
		if d.Outcome == "overridden" {
			overridden = &decisions.Decisions[i]
		}
	}
	must.NotNil(t, overridden, must.Sprintf("%+v", decisions.Decisions))
	must.Eq(t, "short", overridden.Job)
	must.StrContains(t, overridden.Override, fmt.Sprintf("priority %d written by the planner is now 10", written))
	must.Eq(t, written, *fake.Get("default", "short").Priority, must.Sprint("the planner wrote its decision again"))

	// long completes.
	fake.Update("default", "long", func(j *api.Job) { j.Status = str("dead") })
	fake.Allocs[0].ClientStatus = "complete"
	fake.Allocs[0].TaskStates["train"].FinishedAt = time.Now()
	_, err = p.Round(ctx)
	must.NoError(t, err)
	var res plannerapi.Results
	getJSON(t, srv.URL+"/v1/results", &res)
	must.Eq(t, 1, res.Completed)
	must.Between(t, 110, res.MeanJCT, 130)
	must.Eq(t, []string{}, res.Folders)

	for _, name := range []string{"jct.svg", "util.svg"} {
		code, ctype, body := getBody(t, srv.URL+"/ui/plots/"+name)
		must.Eq(t, http.StatusOK, code)
		must.Eq(t, "image/svg+xml", ctype)
		must.StrContains(t, body, "live cluster")
	}
}

// The page and its assets come from the binary; everything is read-only.
func TestDashboardPageAndMethods(t *testing.T) {
	p, err := New(settings(t, ``), nomadxtest.New(), nil, nil)
	must.NoError(t, err)
	srv := httptest.NewServer(p.Handler())
	defer srv.Close()
	cases := []struct {
		path, ctype, want string
	}{
		{"/ui/", "text/html", "GPU map"},
		{"/ui", "text/html", "Decisions"}, // redirected
		{"/ui/app.js", "javascript", "v1/queue"},
		{"/ui/style.css", "text/css", ".slot"},
	}
	for _, tc := range cases {
		code, ctype, body := getBody(t, srv.URL+tc.path)
		must.Eq(t, http.StatusOK, code, must.Sprint(tc.path))
		must.StrContains(t, ctype, tc.ctype)
		must.StrContains(t, body, tc.want)
	}
	for _, path := range []string{"/ui/", "/v1/gpus", "/v1/decisions", "/v1/results"} {
		resp, err := http.Post(srv.URL+path, "text/plain", strings.NewReader("x"))
		must.NoError(t, err)
		resp.Body.Close()
		must.Eq(t, http.StatusMethodNotAllowed, resp.StatusCode, must.Sprint(path))
	}
	code, _, _ := getBody(t, srv.URL+"/v1/decisions?limit=-1")
	must.Eq(t, http.StatusBadRequest, code)
	code, _, _ = getBody(t, srv.URL+"/ui/plots/results.svg?folder=x")
	must.Eq(t, http.StatusNotFound, code, must.Sprint("no ui.results_dir"))
}

// Only output folders under ui.results_dir are drawn: no path, not even a
// symbolic link, leads out of it.
func TestDashboardResultsStayInTheirFolder(t *testing.T) {
	base := t.TempDir()
	dir, outside := filepath.Join(base, "results"), filepath.Join(base, "outside")
	writeOutput := func(d string) {
		must.NoError(t, os.MkdirAll(d, 0o755))
		must.NoError(t, os.WriteFile(filepath.Join(d, "summary.json"), []byte(`{"gpus": 2, "policies": [{"policy": "las"}]}`), 0o644))
		must.NoError(t, os.WriteFile(filepath.Join(d, "las.jobs.csv"), []byte("job_id,jct\nj,12\n"), 0o644))
		must.NoError(t, os.WriteFile(filepath.Join(d, "las.util.csv"), []byte("t,busy_gpus,gpus\n0,2,2\n12,0,2\n"), 0o644))
	}
	writeOutput(filepath.Join(dir, "runs", "a"))
	writeOutput(outside)
	must.NoError(t, os.Symlink(outside, filepath.Join(dir, "escape")))

	p, err := New(settings(t, fmt.Sprintf("ui {\n results_dir = %q\n}\n", dir)), nomadxtest.New(), nil, nil)
	must.NoError(t, err)
	srv := httptest.NewServer(p.Handler())
	defer srv.Close()
	var res plannerapi.Results
	getJSON(t, srv.URL+"/v1/results", &res)
	must.Eq(t, []string{"runs/a"}, res.Folders)

	cases := []struct {
		folder string
		code   int
	}{
		{"runs/a", http.StatusOK},
		{"runs", http.StatusNotFound},
		{"../outside", http.StatusNotFound},
		{"escape", http.StatusNotFound},
		{outside, http.StatusNotFound},
	}
	for _, tc := range cases {
		code, _, body := getBody(t, srv.URL+"/ui/plots/results.svg?folder="+tc.folder)
		must.Eq(t, tc.code, code, must.Sprintf("%s: %s", tc.folder, body))
		if tc.code == http.StatusOK {
			must.StrContains(t, body, ">las<")
		}
	}

	_, err = ParseConfig("planner.hcl", []byte(`ui { results_dir = "/nonexistent/results" }`))
	must.ErrorContains(t, err, "ui.results_dir")
}

// A write that raced a user's edit is on the timeline with the edit kept.
func TestDecisionsRecordWritesThatRacedAUserEdit(t *testing.T) {
	fake := nomadxtest.New()
	fake.NodeSet = []*api.NodeListStub{gpuNode("n1", map[string]int{"T4": 1})}
	fake.Submit(managedJob("j", 1, nil))
	edited := false
	fake.BeforeRegister = func(*api.Job) {
		if !edited {
			edited = true
			user := fake.Get("default", "j")
			user.Meta["user.edit"] = "kept"
			fake.Submit(user)
		}
	}
	p, err := New(settings(t, ``), fake, nil, nil)
	must.NoError(t, err)
	_, err = p.Round(context.Background())
	must.NoError(t, err)
	d := p.Decisions(0).Decisions
	must.Len(t, 1, d)
	must.Eq(t, "written", d[0].Outcome)
	must.Eq(t, 1, d[0].Conflicts)
	must.StrContains(t, d[0].Override, "1 user edit(s) landed between the planner's read and its write")
	must.Eq(t, "kept", fake.Get("default", "j").Meta["user.edit"])
}
