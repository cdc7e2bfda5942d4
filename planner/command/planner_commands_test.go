package command

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/caravan-gpu/caravan/planner/nomadx/nomadxtest"
	"github.com/caravan-gpu/caravan/planner/plannerapi"
	"github.com/caravan-gpu/caravan/planner/service"
	"github.com/hashicorp/nomad/api"
	"github.com/hashicorp/nomad/helper/pointer"
	"github.com/shoenig/test/must"
)

func runCLI(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := Run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestPlannerCommandsRejectBadInput(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "planner.hcl")
	must.NoError(t, os.WriteFile(bad, []byte("planning {\n  interval = \"often\"\n}\n"), 0o644))
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"queue", "-bogus"}, "-bogus"},
		{[]string{"queue", "-interval", "0s"}, "-interval"},
		{[]string{"explain"}, "JOB"},
		{[]string{"planner", "run", "-config", filepath.Join(dir, "missing.hcl")}, "missing.hcl"},
		{[]string{"planner", "run", "-config", bad}, "planning.interval"},
		{[]string{"profile", "import"}, "FILE"},
		{[]string{"profile", "import", bad}, "line 1"},
		{[]string{"setup", "extra"}, "unexpected arguments"},
		{[]string{"lanes", "-json=maybe"}, "-json"},
	}
	for _, tc := range cases {
		code, _, stderr := runCLI(tc.args...)
		must.Eq(t, exitUsage, code, must.Sprintf("%v: %s", tc.args, stderr))
		must.StrContains(t, stderr, tc.want, must.Sprintf("%v", tc.args))
	}
}

func TestQueueAndExplainAgainstPlannerAPI(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/queue", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(plannerapi.Queue{Leader: true, Jobs: []plannerapi.QueueEntry{
			{Namespace: "default", Job: "short", State: "running", Priority: 80, GPUs: 1, Reason: "queue 0"},
			{Namespace: "default", Job: "long", State: "pending", Queue: 1, Priority: 70, GPUs: 1, Attained: 4000, GPUModel: "Tesla T4", Reason: "queue 1"},
		}})
	})
	mux.HandleFunc("/v1/explain/", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "job nope is not managed by the planner", http.StatusNotFound)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	code, out, stderr := runCLI("queue", "-address", srv.URL)
	must.Eq(t, exitOK, code, must.Sprint(stderr))
	must.StrContains(t, out, "short")
	must.StrContains(t, out, "Tesla T4")
	must.StrContains(t, out, "1.1 GPU-h")

	code, out, _ = runCLI("queue", "-address", srv.URL, "-json")
	must.Eq(t, exitOK, code)
	var q plannerapi.Queue
	must.NoError(t, json.Unmarshal([]byte(out), &q))
	must.Len(t, 2, q.Jobs)

	code, _, stderr = runCLI("explain", "-address", srv.URL, "nope")
	must.Eq(t, exitError, code)
	must.StrContains(t, stderr, "not managed")

	// A planner that is not there is a runtime error, not a usage error.
	srv.Close()
	code, _, _ = runCLI("queue", "-address", srv.URL)
	must.Eq(t, exitError, code)
}

// queue and explain send the planner's API token: -planner-token, else
// $CARAVAN_PLANNER_TOKEN.
func TestQueueAndExplainSendThePlannerToken(t *testing.T) {
	fake := nomadxtest.New()
	fake.NodeSet = []*api.NodeListStub{{ID: "n1", Name: "n1", Status: "ready", SchedulingEligibility: "eligible",
		NodeResources: &api.NodeResources{Devices: []*api.NodeDeviceResource{{Vendor: "nvidia", Type: "gpu", Name: "T4",
			Instances: []*api.NodeDevice{{ID: "T4-0", Healthy: true}}}}}}}
	fake.Submit(&api.Job{ID: pointer.Of("a"), Name: pointer.Of("a"), Namespace: pointer.Of("default"), Type: pointer.Of("batch"),
		Status: pointer.Of("pending"), Priority: pointer.Of(50), Meta: map[string]string{"caravan.policy": "las"},
		TaskGroups: []*api.TaskGroup{{Name: pointer.Of("g"), Count: pointer.Of(1), Tasks: []*api.Task{{Name: "train",
			Resources: &api.Resources{Devices: []*api.RequestedDevice{{Name: "nvidia/gpu", Count: pointer.Of[uint64](1)}}}}}}}})
	settings, err := service.ParseConfig("planner.hcl", []byte("http {\n  token = \"right\"\n}\n"))
	must.NoError(t, err)
	p, err := service.New(settings, fake, nil, nil)
	must.NoError(t, err)
	_, err = p.Round(context.Background())
	must.NoError(t, err)
	srv := httptest.NewServer(p.Handler())
	defer srv.Close()

	cases := []struct {
		name, env, flag string
		code            int
		want            string
	}{
		{name: "env", env: "right", code: exitOK, want: "las"},
		{name: "flag", flag: "right", code: exitOK, want: "las"},
		{name: "flag over env", env: "wrong", flag: "right", code: exitOK, want: "las"},
		{name: "wrong flag over env", env: "right", flag: "wrong", code: exitError, want: "403"},
		{name: "none", code: exitError, want: "-planner-token, else $CARAVAN_PLANNER_TOKEN"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(plannerapi.TokenEnv, tc.env)
			for _, cmd := range [][]string{{"queue", "-json"}, {"explain"}} {
				args := append(cmd, "-address", srv.URL)
				if tc.flag != "" {
					args = append(args, "-planner-token", tc.flag)
				}
				if cmd[0] == "explain" {
					args = append(args, "default/a")
				}
				code, out, stderr := runCLI(args...)
				must.Eq(t, tc.code, code, must.Sprintf("%v: %s", args, stderr))
				must.StrContains(t, out+stderr, tc.want, must.Sprint(args))
			}
		})
	}
}
