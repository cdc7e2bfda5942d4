//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/caravan-gpu/caravan/e2e/harness"
	"github.com/caravan-gpu/caravan/planner/plannerapi"
	"github.com/chromedp/chromedp"
	consul "github.com/hashicorp/consul/api"
	"github.com/shoenig/test/must"
)

// statusOf GETs url with header and returns the status code and body.
func statusOf(t *testing.T, url string, header http.Header) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	must.NoError(t, err)
	req.Header = header
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	must.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	must.NoError(t, err)
	return resp.StatusCode, string(body)
}

// dataRoutes are the planner's routes that serve data: each needs the API
// token when one is configured.
var dataRoutes = []string{"/v1/status", "/v1/queue", "/v1/explain/default/long", "/v1/metrics", "/v1/gpus",
	"/v1/decisions", "/v1/results", "/ui/plots/jct.svg", "/ui/plots/util.svg"}

// A planner with http.token in planner.hcl: Consul's health check passes
// without the token (the planner leads, and Consul lists it passing), every
// data route refuses a request without it, and caravan queue and explain
// work with $CARAVAN_PLANNER_TOKEN, or -planner-token over a wrong one.
func TestPlannerACLAPIToken(t *testing.T) {
	c := harness.StartT(t, harness.Options{Fleet: oneT4})
	const token = "e2e-Planner-token.1"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// StartPlanner waits until the planner leads: its Consul session,
	// tied to the /v1/health check, must be healthy.
	p, err := c.StartPlanner(ctx, harness.PlannerOptions{Policy: "srtf", Token: token})
	must.NoError(t, err)
	defer p.Stop()

	cc, err := consul.NewClient(&consul.Config{Address: c.ConsulAddr, Token: c.ConsulToken})
	must.NoError(t, err)
	passing, _, err := cc.Health().Service("caravan-planner", "", true, nil)
	must.NoError(t, err)
	must.Len(t, 1, passing, must.Sprint("Consul's check of /v1/health passes without the token"))

	submit(t, c, "long", 100, 1, map[string]string{"duration": "30s"})
	waitFor(t, 30*time.Second, "the planner queues long", func() bool {
		q, err := plannerapi.NewClient(p.Addr, token).Queue(context.Background())
		return err == nil && len(q.Jobs) == 1
	})

	base := "http://" + p.Addr
	code, _ := statusOf(t, base+"/v1/health", http.Header{})
	must.Eq(t, http.StatusOK, code)
	for _, path := range dataRoutes {
		code, body := statusOf(t, base+path, http.Header{})
		must.Eq(t, http.StatusUnauthorized, code, must.Sprint(path))
		must.StrContains(t, body, "Authorization: Bearer <token>", must.Sprint(path))
		code, _ = statusOf(t, base+path, http.Header{plannerapi.TokenHeader: {"wrong"}})
		must.Eq(t, http.StatusForbidden, code, must.Sprint(path))
		code, _ = statusOf(t, base+path, http.Header{"Authorization": {"Bearer " + token}})
		must.Eq(t, http.StatusOK, code, must.Sprint(path))
	}

	addr := "CARAVAN_PLANNER_ADDR=" + p.Addr
	out, code := caravanCLIEnv(c, []string{addr, plannerapi.TokenEnv + "=" + token}, "queue")
	must.Eq(t, 0, code, must.Sprint(out))
	must.StrContains(t, out, "long")
	out, code = caravanCLIEnv(c, []string{addr, plannerapi.TokenEnv + "=" + token}, "explain", "long")
	must.Eq(t, 0, code, must.Sprint(out))
	must.StrContains(t, out, "default/long")
	out, code = caravanCLIEnv(c, []string{addr, plannerapi.TokenEnv + "=wrong"}, "queue", "-planner-token", token)
	must.Eq(t, 0, code, must.Sprint(out))
	must.StrContains(t, out, "long")

	out, code = caravanCLIEnv(c, []string{addr, plannerapi.TokenEnv + "="}, "queue")
	must.Eq(t, 1, code, must.Sprint(out))
	must.StrContains(t, out, "401")
	must.StrContains(t, out, "-planner-token, else $CARAVAN_PLANNER_TOKEN")
	out, code = caravanCLIEnv(c, []string{addr, plannerapi.TokenEnv + "=wrong"}, "explain", "long")
	must.Eq(t, 1, code, must.Sprint(out))
	must.StrContains(t, out, "403")
}

// The dashboard of a planner whose token comes from $CARAVAN_PLANNER_TOKEN:
// the page loads without it and asks for it, then draws every view with
// it, charts included, while its data endpoints still refuse a request
// without it; a wrong token is refused, and the token never travels in a
// URL or a cookie.
func TestDashboardWithToken(t *testing.T) {
	b := newBrowser(t)
	c := harness.StartT(t, harness.Options{Fleet: oneT4})
	shots := screenshotDir(t)
	const token = "dashboard-Token-42"
	p := startPlanner(t, c, "p1", `policy = "srtf"`+fastRounds, plannerapi.TokenEnv+"="+token)
	waitFor(t, 30*time.Second, "the planner leads", func() bool { s := p.status(t); return s != nil && s.Leader })
	submit(t, c, "long", 100, 1, map[string]string{"duration": "60s"})
	c.WaitAllocs(t, "long", 1, time.Minute, harness.Running)

	ui := "http://" + p.addr + "/ui/"
	must.NoError(t, b.run(30*time.Second, chromedp.Navigate(ui+"#gpus")))
	b.waitJS(10*time.Second, "the page asks for the token", `!document.getElementById('login').hidden`)
	why := mustEval[string](b, `document.getElementById('login-why').textContent`)
	must.StrContains(t, why, "Authorization: Bearer <token>")
	must.Eq(t, 0, mustEval[int](b, `document.querySelectorAll('#gpus [data-instance]').length`), must.Sprint("no data without the token"))
	b.screenshot(shots, "dashboard-token.png")

	login := func(tok string) {
		t.Helper()
		must.True(t, mustEval[bool](b, fmt.Sprintf(`(() => { document.getElementById('token').value = %q; document.getElementById('login').requestSubmit(); return true; })()`, tok)))
	}
	login(token)
	b.waitJS(15*time.Second, "long holds the GPU on the map", `document.querySelector('#gpus [data-job="default/long"]') !== null`)
	must.True(t, mustEval[bool](b, `document.getElementById('login').hidden`))

	// A reload in the same tab keeps the token.
	must.NoError(t, b.run(30*time.Second, chromedp.Navigate(ui+"#queue")))
	b.waitJS(15*time.Second, "the queue shows long", `document.querySelector('#queue tr[data-job="default/long"]') !== null`)
	must.NoError(t, b.run(30*time.Second, chromedp.Navigate(ui+"#decisions")))
	b.waitJS(15*time.Second, "the timeline shows long's start", `document.querySelector('#decisions tr[data-job="default/long"]') !== null`)
	must.NoError(t, b.run(30*time.Second, chromedp.Navigate(ui+"#results")))
	for _, img := range []string{"plot-jct", "plot-util"} {
		b.waitJS(15*time.Second, img+" is drawn", fmt.Sprintf(`(() => { const i = document.getElementById(%q); return i.src.startsWith("blob:") && i.complete && i.naturalWidth > 0; })()`, img))
	}
	b.screenshot(shots, "dashboard-token-results.png")

	// The browser sent the token in headers only.
	urls := mustEval[[]string](b, `[location.href, ...performance.getEntriesByType('resource').map(e => e.name)]`)
	must.SliceNotEmpty(t, urls)
	for _, u := range urls {
		must.StrNotContains(t, u, token)
	}
	must.Eq(t, "", mustEval[string](b, `document.cookie`))

	// The data endpoints the page reads still refuse a request without
	// the token.
	for _, path := range dataRoutes {
		code, _ := statusOf(t, "http://"+p.addr+path, http.Header{})
		must.Eq(t, http.StatusUnauthorized, code, must.Sprint(path))
	}

	// A wrong token is refused, and the page says so.
	must.True(t, mustEval[bool](b, `(() => { document.getElementById('forget').click(); return true; })()`))
	b.waitJS(10*time.Second, "the page asks for the token again", `!document.getElementById('login').hidden`)
	login("wrong")
	b.waitJS(10*time.Second, "the wrong token is refused", `!document.getElementById('login').hidden && document.getElementById('login-why').textContent.includes('refused')`)
}
