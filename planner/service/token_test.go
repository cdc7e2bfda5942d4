package service

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/caravan-gpu/caravan/planner/nomadx/nomadxtest"
	"github.com/caravan-gpu/caravan/planner/plannerapi"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

const testToken = "s3cret-Token_1"

// tokenServer serves the API of a planner whose http.token is testToken,
// after one round over a managed job "a".
func tokenServer(t *testing.T) *httptest.Server {
	t.Helper()
	fake := nomadxtest.New()
	fake.NodeSet = []*api.NodeListStub{gpuNode("n1", map[string]int{"T4": 1})}
	fake.Submit(managedJob("a", 1, nil))
	p, err := New(settings(t, `http { token = "`+testToken+`" }`), fake, nil, nil)
	must.NoError(t, err)
	_, err = p.Round(context.Background())
	must.NoError(t, err)
	srv := httptest.NewServer(p.Handler())
	t.Cleanup(srv.Close)
	return srv
}

func getWith(t *testing.T, url string, header http.Header) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	must.NoError(t, err)
	req.Header = header
	resp, err := http.DefaultClient.Do(req)
	must.NoError(t, err)
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// With http.token set, every data route answers 401 without a token, 403
// with a wrong one and 200 with the right one in either header; the health
// check and the dashboard's static files answer without one.
func TestAPITokenGuardsEveryDataRoute(t *testing.T) {
	srv := tokenServer(t)
	guarded := []string{"/v1/status", "/v1/queue", "/v1/explain/default/a", "/v1/metrics", "/v1/gpus",
		"/v1/decisions?limit=5", "/v1/results", "/ui/plots/jct.svg", "/ui/plots/util.svg"}
	open := []string{"/v1/health", "/ui/", "/ui", "/ui/index.html", "/ui/app.js", "/ui/style.css"}
	headers := []struct {
		name   string
		header http.Header
		code   int
	}{
		{"none", http.Header{}, http.StatusUnauthorized},
		{"another scheme", http.Header{"Authorization": {"Basic " + testToken}}, http.StatusUnauthorized},
		{"empty bearer", http.Header{"Authorization": {"Bearer "}}, http.StatusUnauthorized},
		{"wrong bearer", http.Header{"Authorization": {"Bearer nope"}}, http.StatusForbidden},
		{"bearer with the token as a prefix", http.Header{"Authorization": {"Bearer " + testToken + "x"}}, http.StatusForbidden},
		{"wrong X-Caravan-Token", http.Header{plannerapi.TokenHeader: {testToken[:5]}}, http.StatusForbidden},
		{"bearer", http.Header{"Authorization": {"Bearer " + testToken}}, http.StatusOK},
		{"bearer, scheme in lower case", http.Header{"Authorization": {"bearer " + testToken}}, http.StatusOK},
		{"X-Caravan-Token", http.Header{plannerapi.TokenHeader: {testToken}}, http.StatusOK},
	}
	for _, h := range headers {
		t.Run(h.name, func(t *testing.T) {
			for _, path := range guarded {
				resp := getWith(t, srv.URL+path, h.header.Clone())
				must.Eq(t, h.code, resp.StatusCode, must.Sprint(path))
				if h.code == http.StatusOK {
					continue
				}
				must.StrContains(t, resp.Header.Get("Content-Type"), "application/json")
				var e plannerapi.Error
				must.NoError(t, json.NewDecoder(resp.Body).Decode(&e), must.Sprint(path))
				must.StrContains(t, e.Error, "Authorization: Bearer <token>", must.Sprint(path))
				must.StrContains(t, e.Error, "X-Caravan-Token: <token>", must.Sprint(path))
				if h.code == http.StatusUnauthorized {
					must.StrContains(t, resp.Header.Get("WWW-Authenticate"), "Bearer")
				}
			}
			for _, path := range open {
				resp := getWith(t, srv.URL+path, h.header.Clone())
				must.Eq(t, http.StatusOK, resp.StatusCode, must.Sprint(path))
			}
		})
	}
}

// Paths that are not a route, or that lead to one only after the mux cleans
// them, get no data without the token.
func TestAPITokenGuardsOddPaths(t *testing.T) {
	srv := tokenServer(t)
	for _, path := range []string{"/v1/nope", "/ui/../v1/queue", "/ui//plots/jct.svg", "/v1/health/../queue", "/"} {
		resp := getWith(t, srv.URL+path, http.Header{})
		must.Eq(t, http.StatusUnauthorized, resp.StatusCode, must.Sprint(path))
	}
	resp, err := http.Post(srv.URL+"/v1/health", "text/plain", nil)
	must.NoError(t, err)
	resp.Body.Close()
	must.Eq(t, http.StatusUnauthorized, resp.StatusCode, must.Sprint("only GET /v1/health is open"))
}

// The client sends its token, and tells a missing token from a wrong one.
func TestClientSendsTheAPIToken(t *testing.T) {
	srv := tokenServer(t)
	ctx := context.Background()
	st, err := plannerapi.NewClient(srv.URL, testToken).Status(ctx)
	must.NoError(t, err)
	must.Eq(t, int64(1), st.Rounds)
	q, err := plannerapi.NewClient(srv.URL, testToken).Queue(ctx)
	must.NoError(t, err)
	must.Len(t, 1, q.Jobs)
	for token, code := range map[string]int{"": http.StatusUnauthorized, "wrong": http.StatusForbidden} {
		_, err := plannerapi.NewClient(srv.URL, token).Queue(ctx)
		var auth *plannerapi.AuthError
		must.ErrorAs(t, err, &auth, must.Sprintf("token %q", token))
		must.Eq(t, code, auth.Code)
		must.StrContains(t, auth.Error(), "X-Caravan-Token: <token>")
	}
}

// Without http.token nothing asks for one, as before.
func TestNoAPITokenAsksForNone(t *testing.T) {
	t.Setenv(plannerapi.TokenEnv, "")
	p, err := New(settings(t, ``), nomadxtest.New(), nil, nil)
	must.NoError(t, err)
	srv := httptest.NewServer(p.Handler())
	defer srv.Close()
	for _, path := range []string{"/v1/status", "/v1/queue", "/v1/gpus", "/ui/plots/jct.svg"} {
		resp := getWith(t, srv.URL+path, http.Header{})
		must.Eq(t, http.StatusOK, resp.StatusCode, must.Sprint(path))
	}
}

// http.token comes from planner.hcl, else from $CARAVAN_PLANNER_TOKEN; a
// token that cannot travel in a header is refused naming where it came
// from.
func TestAPITokenConfig(t *testing.T) {
	cases := []struct {
		name, src, env, want, err string
	}{
		{name: "none", src: ``},
		{name: "config", src: `http { token = "abc" }`, want: "abc"},
		{name: "env", src: ``, env: "from-env", want: "from-env"},
		{name: "config over env", src: `http { token = "abc" }`, env: "from-env", want: "abc"},
		{name: "space", src: `http { token = "a b" }`, err: "http.token: must be printable ASCII without whitespace; byte 2"},
		{name: "newline", src: `http { token = "ab\n" }`, err: "http.token"},
		{name: "non-ASCII", src: `http { token = "abé" }`, err: "http.token"},
		{name: "env with a tab", src: ``, env: "a\tb", err: "http.token (from $CARAVAN_PLANNER_TOKEN)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(plannerapi.TokenEnv, tc.env)
			s, err := ParseConfig("planner.hcl", []byte(tc.src))
			if tc.err != "" {
				must.ErrorContains(t, err, tc.err)
				return
			}
			must.NoError(t, err)
			must.Eq(t, tc.want, s.APIToken)
		})
	}
}
