package command

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/caravan-gpu/caravan/planner/plannerapi"
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
