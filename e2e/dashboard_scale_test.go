//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/caravan-gpu/caravan/planner/nomadx/nomadxtest"
	"github.com/caravan-gpu/caravan/planner/plannerapi"
	"github.com/caravan-gpu/caravan/planner/service"
	"github.com/chromedp/chromedp"
	"github.com/shoenig/test/must"
)

// notFrozen bounds how long a view of the dashboard at scale may take to
// draw: far above what it takes, it only catches a page that hangs.
const notFrozen = 10 * time.Second

// The dashboard in headless Chromium over a planner managing 10,000 jobs
// on 64 nodes of 8 GPUs (in-process Nomad fake): each view draws within
// notFrozen, the GPU map as one collapsible entry per node, the queue one
// page at a time with working paging and filter, and the JCT CDF with no
// two x-axis tick labels overlapping as the browser lays them out.
func TestDashboardBrowserAtScale(t *testing.T) {
	const nodes, gpusPerNode, jobs, completed = 64, 8, 10000, 256
	b := newBrowser(t)
	shots := screenshotDir(t)

	// The first 512 jobs run; the oldest 256 of them then complete, with
	// run times from a minute to three hours, for the live JCT CDF. That
	// leaves 10,000 managed jobs, 256 of them running.
	start := time.Now().Add(-4 * time.Hour)
	fake := nomadxtest.NewGPUFleet("fifo", nodes, gpusPerNode, jobs+completed, start, time.Second)
	// fifo keeps the oldest jobs running; no write limit, so that the first
	// round's 10,000 holds do not take 40 s.
	cfg, err := service.ParseConfig("planner.hcl", []byte(`consul {
  enabled = false
}
planning {
  policy                = "fifo"
  max_writes_per_second = 0
}
`))
	must.NoError(t, err)
	p, err := service.New(cfg, fake, nil, nil)
	must.NoError(t, err)
	ctx := context.Background()
	began := time.Now()
	_, err = p.Round(ctx)
	must.NoError(t, err)
	for i := range completed {
		runTime := time.Duration(60 * math.Pow(180, float64(i)/(completed-1)) * float64(time.Second))
		fake.Complete("default", fmt.Sprintf("job-%04d", i), start.Add(time.Duration(i)*time.Second+runTime))
	}
	_, err = p.Round(ctx)
	must.NoError(t, err)
	t.Logf("two rounds over %d jobs in %s", jobs+completed, time.Since(began).Round(time.Millisecond))

	srv := httptest.NewServer(p.Handler())
	t.Cleanup(srv.Close)
	var results plannerapi.Results
	readJSON(t, srv.URL+"/v1/results", &results)
	must.Eq(t, completed, results.Completed)
	var all plannerapi.Queue
	readJSON(t, srv.URL+"/v1/queue?limit=1", &all)
	must.Eq(t, jobs, all.Total)

	must.NoError(t, b.run(30*time.Second, chromedp.Navigate(srv.URL+"/ui/#gpus")))
	// From the navigation's start, by the page's clock.
	took := b.until("the GPU map lists every node", "",
		fmt.Sprintf(`document.querySelectorAll('#gpus details.node').length === %d && document.querySelectorAll('#gpus .gpu').length > 0`, nodes))
	t.Logf("page loaded with the GPU map drawn in %s", took)

	t.Run("GPU map", func(t *testing.T) {
		b.t = t
		// The first nodes are open with their GPUs; the rest show only
		// their summary until opened.
		open := mustEval[[]string](b, `[...document.querySelectorAll('#gpus details.node[open]')].map(d => d.dataset.node)`)
		must.Eq(t, []string{"n00", "n01", "n02", "n03"}, open)
		must.Eq(t, len(open)*gpusPerNode, mustEval[int](b, `document.querySelectorAll('#gpus .gpu').length`))
		must.Eq(t, "n00 · 0/8 GPUs busy", mustEval[string](b, `document.querySelector('#gpus details[data-node="n00"] > summary').textContent`),
			must.Sprint("n00's jobs completed"))
		must.Eq(t, "n40 · 8/8 GPUs busy", mustEval[string](b, `document.querySelector('#gpus details[data-node="n40"] > summary').textContent`))

		took := b.until("n40 opens with its GPUs", `document.querySelector('#gpus details[data-node="n40"] > summary').click()`,
			`document.querySelectorAll('#gpus details[data-node="n40"] .gpu').length === 8`)
		t.Logf("node n40 opened in %s", took)
		jobsOnN40 := mustEval[[]string](b, `[...document.querySelectorAll('#gpus details[data-node="n40"] [data-instance]')].map(e => e.dataset.instance + " " + e.dataset.job)`)
		var want []string
		for i := range gpusPerNode {
			want = append(want, fmt.Sprintf("n40-T4-%d default/job-%04d", i, 40*gpusPerNode+i))
		}
		must.Eq(t, want, jobsOnN40)
		// The next polls keep it open.
		time.Sleep(1500 * time.Millisecond)
		must.True(t, mustEval[bool](b, `document.querySelector('#gpus details[data-node="n40"]').open`))
		must.Eq(t, 5*gpusPerNode, mustEval[int](b, `document.querySelectorAll('#gpus .gpu').length`))
		b.screenshot(shots, "dashboard-scale-gpus.png")
	})

	t.Run("queue", func(t *testing.T) {
		b.t = t
		page := func(query string) []string {
			var q plannerapi.Queue
			readJSON(t, srv.URL+"/v1/queue?"+query, &q)
			var keys []string
			for _, j := range q.Jobs {
				keys = append(keys, j.Namespace+"/"+j.Job)
			}
			return keys
		}
		rows := func() []string {
			return mustEval[[]string](b, `[...document.querySelectorAll('#queue tr[data-job]')].map(r => r.dataset.job)`)
		}
		rangeText := `document.getElementById('queue-range').textContent`

		took := b.until("the queue's first page is drawn", `document.querySelector('nav a[data-view="queue"]').click()`,
			rangeText+` === "rows 1–100 of 10000"`)
		t.Logf("queue view drawn in %s", took)
		must.Eq(t, page("offset=0&limit=100"), rows(), must.Sprint("one page, not 10,000 rows"))
		must.StrContains(t, mustEval[string](b, `document.getElementById('queue-summary').textContent`), "10000 managed jobs, 256 running")

		took = b.until("the next page is drawn", `document.getElementById('queue-next').click()`,
			rangeText+` === "rows 101–200 of 10000"`)
		t.Logf("next page drawn in %s", took)
		must.Eq(t, page("offset=100&limit=100"), rows())
		b.until("the first page is drawn again", `document.getElementById('queue-prev').click()`, rangeText+` === "rows 1–100 of 10000"`)
		must.True(t, mustEval[bool](b, `document.getElementById('queue-prev').disabled`))

		// The filter asks the planner once typing pauses, and starts at
		// the first page.
		b.until("the next page is drawn", `document.getElementById('queue-next').click()`, rangeText+` === "rows 101–200 of 10000"`)
		took = b.until("the filter finds 10 jobs",
			`(() => { const f = document.getElementById('queue-filter'); f.value = 'JOB-999'; f.dispatchEvent(new Event('input')); })()`,
			rangeText+` === "rows 1–10 of 10"`)
		t.Logf("filtered queue drawn in %s (with the filter's 300 ms pause)", took)
		must.Eq(t, page("filter=job-999"), rows())
		must.Len(t, 10, rows())
		must.True(t, mustEval[bool](b, `document.getElementById('queue-next').disabled`))
		b.screenshot(shots, "dashboard-scale-queue.png")
		b.until("the whole queue is back",
			`(() => { const f = document.getElementById('queue-filter'); f.value = ''; f.dispatchEvent(new Event('input')); })()`,
			rangeText+` === "rows 1–100 of 10000"`)
	})

	t.Run("decisions", func(t *testing.T) {
		b.t = t
		took := b.until("the timeline is drawn", `document.querySelector('nav a[data-view="decisions"]').click()`,
			`document.querySelectorAll('#decisions tr[data-job]').length === 200`)
		t.Logf("decisions view drawn in %s", took)
	})

	t.Run("results", func(t *testing.T) {
		b.t = t
		drawn := func(id string) string {
			return fmt.Sprintf(`(() => { const i = document.getElementById(%q); return i.src.startsWith("blob:") && i.complete && i.naturalWidth > 0; })()`, id)
		}
		took := b.until("both live plots are drawn", `document.querySelector('nav a[data-view="results"]').click()`,
			drawn("plot-jct")+" && "+drawn("plot-util"))
		t.Logf("results view drawn in %s", took)
		must.StrContains(t, mustEval[string](b, `document.getElementById('results-summary').textContent`), "completed jobs: 256")

		ticks := jctTickLabels(b)
		t.Logf("JCT CDF x-axis tick labels: %v", ticks.Labels)
		must.SliceLen(t, len(ticks.Labels), ticks.Widths)
		must.GreaterEq(t, 3, len(ticks.Labels), must.Sprint("the axis spans two decades"))
		for i, w := range ticks.Widths {
			must.Greater(t, 0, w, must.Sprintf("label %q is laid out", ticks.Labels[i]))
		}
		must.SliceEmpty(t, ticks.Overlaps, must.Sprintf("overlapping labels: %v", ticks.Overlaps))
		// The check sees an overlap when there is one.
		must.SliceNotEmpty(t, ticks.ForcedOverlaps)
		b.screenshot(shots, "dashboard-scale-results.png")
	})
}

// readJSON decodes the JSON at url into out.
func readJSON(t *testing.T, url string, out any) {
	t.Helper()
	body, err := httpGet(url)
	must.NoError(t, err)
	must.NoError(t, json.Unmarshal(body, out))
}

// until runs startJS in the page, then waits until readyJS holds there, and
// returns how long that took by the page's clock: from startJS, or from
// the navigation's start without one. It fails the test after notFrozen.
func (b *browser) until(what, startJS, readyJS string) time.Duration {
	b.t.Helper()
	base := "performance.now()"
	if startJS == "" {
		base, startJS = "0", "undefined"
	}
	expr := fmt.Sprintf(`new Promise((resolve, reject) => {
  const t0 = %s;
  (%s);
  const check = () => {
    let ok = false;
    try { ok = (%s); } catch (e) { /* not drawn yet */ }
    const ms = performance.now() - t0;
    if (ok) resolve(ms);
    else if (ms > %d) reject(new Error("not within %s"));
    else setTimeout(check, 10);
  };
  check();
})`, base, startJS, readyJS, notFrozen.Milliseconds(), notFrozen)
	ctx, cancel := context.WithTimeout(b.ctx, notFrozen+10*time.Second)
	defer cancel()
	ms, err := chromedp.Run(ctx, chromedp.Evaluate[float64](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		text, _ := evalJS[string](b, `document.querySelector("main").innerText.slice(0, 2000)`)
		b.t.Fatalf("%s: %v; the page reads:\n%s", what, err, text)
	}
	return time.Duration(ms * float64(time.Millisecond)).Round(time.Millisecond)
}

// tickLabels are the x-axis tick labels of a plot as the browser lays them
// out, left to right, with the pairs whose boxes overlap; ForcedOverlaps
// are those once the second label is moved onto the first.
type tickLabels struct {
	Labels         []string
	Widths         []float64
	Overlaps       []string
	ForcedOverlaps []string
}

// jctTickLabels lays out the JCT CDF the page shows, as a document of its
// own in a frame (as an <img> draws it, untouched by the page's style), and
// compares the boxes of its x-axis tick labels: the labels that share one
// baseline.
func jctTickLabels(b *browser) tickLabels {
	b.t.Helper()
	const expr = `new Promise((resolve, reject) => {
  const frame = document.createElement("iframe");
  frame.style.cssText = "position: absolute; left: -5000px; top: 0; width: 1200px; height: 600px; border: 0";
  frame.onerror = () => reject(new Error("the plot does not load"));
  frame.onload = () => {
    const doc = frame.contentDocument;
    const byBaseline = new Map();
    for (const text of doc.querySelectorAll("text")) {
      if (!/^[0-9.]+[kMG]?$/.test(text.textContent.trim())) continue;
      const y = text.getAttribute("y");
      if (!byBaseline.has(y)) byBaseline.set(y, []);
      byBaseline.get(y).push(text);
    }
    const axis = [...byBaseline.values()].reduce((a, b) => (b.length > a.length ? b : a), []);
    const overlaps = () => {
      const boxes = axis.map((e) => ({ label: e.textContent.trim(), box: e.getBBox() })).sort((a, b) => a.box.x - b.box.x);
      const out = [];
      for (let i = 1; i < boxes.length; i++) {
        const a = boxes[i - 1], b = boxes[i];
        if (a.box.x + a.box.width > b.box.x) out.push(a.label + " overlaps " + b.label);
      }
      return { boxes, out };
    };
    const laid = overlaps();
    const result = { Labels: laid.boxes.map((x) => x.label), Widths: laid.boxes.map((x) => x.box.width), Overlaps: laid.out };
    if (axis.length > 1) axis[1].setAttribute("x", axis[0].getAttribute("x"));
    result.ForcedOverlaps = overlaps().out;
    frame.remove();
    resolve(result);
  };
  frame.src = document.getElementById("plot-jct").src;
  document.body.append(frame);
})`
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	ticks, err := chromedp.Run(ctx, chromedp.Evaluate[tickLabels](expr, chromedp.EvalAwaitPromise))
	must.NoError(b.t, err)
	return ticks
}
