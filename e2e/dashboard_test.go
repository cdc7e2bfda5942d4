//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/caravan-gpu/caravan/e2e/harness"
	"github.com/caravan-gpu/caravan/planner/plannerapi"
	"github.com/chromedp/chromedp"
	"github.com/shoenig/test/must"
)

// chromiumPath finds a Chromium or Chrome binary (`make chromium` installs
// one); empty when there is none.
func chromiumPath() string {
	if p := os.Getenv("CARAVAN_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// screenshotDir is where the views' screenshots go:
// $CARAVAN_E2E_SCREENSHOTS, else the test's own temporary folder.
func screenshotDir(t *testing.T) string {
	if d := os.Getenv("CARAVAN_E2E_SCREENSHOTS"); d != "" {
		must.NoError(t, os.MkdirAll(d, 0o755))
		return d
	}
	return t.TempDir()
}

// browser is headless Chromium on one tab.
type browser struct {
	t   *testing.T
	ctx context.Context
}

func newBrowser(t *testing.T) *browser {
	path := chromiumPath()
	if path == "" {
		t.Skip("no chromium binary (make chromium installs one): the dashboard's browser test is skipped")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.WindowSize(1440, 1000))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	// The first call starts the browser, which lives as long as ctx: no
	// timeout on it.
	must.NoError(t, chromedp.Do(ctx), must.Sprintf("start %s", path))
	return &browser{t: t, ctx: ctx}
}

// run runs steps with a timeout.
func (b *browser) run(timeout time.Duration, steps ...chromedp.Action[chromedp.Void]) error {
	ctx, cancel := context.WithTimeout(b.ctx, timeout)
	defer cancel()
	return chromedp.Do(ctx, steps...)
}

// evalJS evaluates expr in the page.
func evalJS[T any](b *browser, expr string) (T, error) {
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	return chromedp.Run(ctx, chromedp.Evaluate[T](expr))
}

// mustEval evaluates expr in the page and fails the test on an error.
func mustEval[T any](b *browser, expr string) T {
	b.t.Helper()
	v, err := evalJS[T](b, expr)
	must.NoError(b.t, err, must.Sprint(expr))
	return v
}

// waitJS waits until the expression is true in the page.
func (b *browser) waitJS(timeout time.Duration, what, expr string) {
	b.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, err := evalJS[bool](b, expr)
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			text, _ := evalJS[string](b, `document.querySelector("main").innerText`)
			b.t.Fatalf("timed out after %s waiting until %s (%s; err %v); the page reads:\n%s", timeout, what, expr, err, text)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (b *browser) screenshot(dir, name string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	must.NoError(b.t, err)
	path := filepath.Join(dir, name)
	must.NoError(b.t, os.WriteFile(path, png, 0o644))
	b.t.Logf("screenshot %s", path)
}

// The dashboard, driven in headless Chromium against a planner on real
// agents: the GPU map shows every GPU instance Nomad has and the job in
// each, the queue every managed job, a decision reaches the timeline
// within two rounds, and the results view draws the live cluster and a
// caravan sim output folder.
func TestDashboard(t *testing.T) {
	b := newBrowser(t)
	c := harness.StartT(t, harness.Options{Fleet: deviceFleet, DeviceConfig: h100Lanes})
	shots := screenshotDir(t)

	results := t.TempDir()
	out, code := caravanCLI(c, "sim", "-cluster", "n1g4", "-policy", "fifo,las", "-jobs", "40", "-load", "30",
		"-out", filepath.Join(results, "sim-fifo-las"))
	must.Eq(t, 0, code, must.Sprint(out))
	out, code = caravanCLI(c, "setup")
	must.Eq(t, 0, code, must.Sprint(out))

	const interval = time.Second
	p := startPlannerHCL(t, c, "p1", fmt.Sprintf(`planning {
  policy       = "las"
  queue_cuts   = [4]
  interval     = %q
  min_interval = "200ms"
}
ui {
  results_dir = %q
}
`, interval, results))
	waitFor(t, 20*time.Second, "the planner leads", func() bool { s := p.status(t); return s != nil && s.Leader })

	c.RunJobspec(t, c.Jobspec("planner-batch.nomad.hcl"), trainVars(c, "long", 600, ""))
	c.WaitAllocs(t, "long", 1, time.Minute, harness.Running)
	waitFor(t, 30*time.Second, "long is demoted to priority 79", func() bool { return jobPriority(t, c, "long") == 79 })

	ui := "http://" + p.addr + "/ui/"
	t.Run("GPU map", func(t *testing.T) {
		b.t = t
		must.NoError(t, b.run(30*time.Second, chromedp.Navigate(ui+"#gpus")))
		b.waitJS(10*time.Second, "long holds a GPU on the map", `document.querySelector('#gpus [data-job="default/long"]') !== null`)

		// Every device instance Nomad fingerprinted is on the map, held
		// by the allocation Nomad says holds it.
		want := map[string]string{}
		nodes, _, err := c.Nomad.Nodes().List(nil)
		must.NoError(t, err)
		for _, stub := range nodes {
			node, _, err := c.Nomad.Nodes().Info(stub.ID, nil)
			must.NoError(t, err)
			for _, d := range node.NodeResources.Devices {
				for _, in := range d.Instances {
					want[in.ID] = ""
				}
			}
		}
		allocs, _, err := c.Nomad.Jobs().Allocations("long", false, nil)
		must.NoError(t, err)
		for _, a := range allocs {
			if a.ClientStatus != "running" {
				continue
			}
			full, _, err := c.Nomad.Allocations().Info(a.ID, nil)
			must.NoError(t, err)
			for _, task := range full.AllocatedResources.Tasks {
				for _, d := range task.Devices {
					for _, id := range d.DeviceIDs {
						want[id] = "default/long"
					}
				}
			}
		}
		shown := mustEval[map[string]string](b, `Object.fromEntries([...document.querySelectorAll('#gpus [data-instance]')].map(e => [e.dataset.instance, e.dataset.job]))`)
		must.Eq(t, want, shown)
		lanes := mustEval[int](b, `document.querySelectorAll('#gpus .lane-name').length`)
		must.Greater(t, len(nodes), lanes, must.Sprint("the H100s' lanes are drawn"))
		b.screenshot(shots, "dashboard-gpus.png")
	})

	t.Run("queue", func(t *testing.T) {
		b.t = t
		c.RunJobspec(t, c.Jobspec("planner-batch.nomad.hcl"), trainVars(c, "short", 20, ""))
		must.NoError(t, b.run(30*time.Second, chromedp.Navigate(ui+"#queue")))
		b.waitJS(15*time.Second, "both jobs are queued", `document.querySelector('#queue tr[data-job="default/short"]') !== null && document.querySelector('#queue tr[data-job="default/long"]') !== null`)
		q, err := p.api.Queue(context.Background())
		must.NoError(t, err)
		rows := mustEval[[]string](b, `[...document.querySelectorAll('#queue tr[data-job]')].map(r => r.dataset.job)`)
		var want []string
		for _, j := range q.Jobs {
			want = append(want, j.Namespace+"/"+j.Job)
		}
		must.SliceContainsAll(t, want, rows, must.Sprint("the page shows the planner's queue"))
		reason := mustEval[string](b, `document.querySelector('#queue tr[data-job="default/long"] td.reason').textContent`)
		must.StrContains(t, reason, "queue", must.Sprint("the planner's reason in words"))
		b.screenshot(shots, "dashboard-queue.png")
	})

	t.Run("decisions", func(t *testing.T) {
		b.t = t
		must.NoError(t, b.run(30*time.Second, chromedp.Navigate(ui+"#decisions")))
		b.waitJS(10*time.Second, "the timeline shows long's demotion", `document.querySelector('#decisions tr[data-job="default/long"]') !== null`)
		// A new job's start is written in the round that sees it; two
		// rounds and the page's poll bound when it shows.
		c.RunJobspec(t, c.Jobspec("planner-batch.nomad.hcl"), trainVars(c, "next", 20, ""))
		submitted := time.Now()
		b.waitJS(2*interval+2*time.Second, "next's decision is on the timeline", `document.querySelector('#decisions tr[data-job="default/next"]') !== null`)
		t.Logf("next's decision shown %s after submission", time.Since(submitted).Round(10*time.Millisecond))
		text := mustEval[string](b, `document.querySelector('#decisions tr[data-job="default/next"]').innerText`)
		must.StrContains(t, text, "written")
		b.screenshot(shots, "dashboard-decisions.png")
	})

	t.Run("results", func(t *testing.T) {
		b.t = t
		c.WaitAllocs(t, "short", 1, 2*time.Minute, harness.Complete)
		waitFor(t, 10*time.Second, "the planner counts short's completion", func() bool {
			body, err := httpGet("http://" + p.addr + "/v1/results")
			var r plannerapi.Results
			return err == nil && json.Unmarshal(body, &r) == nil && r.Completed >= 1
		})
		must.NoError(t, b.run(30*time.Second, chromedp.Navigate(ui+"#results")))
		for _, img := range []string{"plot-jct", "plot-util", "plot-folder"} {
			b.waitJS(15*time.Second, img+" is drawn", fmt.Sprintf(`(() => { const i = document.getElementById(%q); return !i.hidden && i.complete && i.naturalWidth > 0; })()`, img))
		}
		summary := mustEval[string](b, `document.getElementById('results-summary').textContent`)
		must.RegexMatch(t, regexp.MustCompile(`completed jobs: [1-9]`), summary)
		folder := mustEval[string](b, `document.getElementById('folders').value`)
		must.Eq(t, "sim-fifo-las", folder)
		svg, err := httpGet("http://" + p.addr + "/ui/plots/results.svg?folder=sim-fifo-las")
		must.NoError(t, err)
		for _, want := range []string{">fifo<", ">las<", "JCT CDF", "GPU utilisation"} {
			must.StrContains(t, string(svg), want)
		}
		live, err := httpGet("http://" + p.addr + "/ui/plots/jct.svg")
		must.NoError(t, err)
		must.False(t, strings.Contains(string(live), "no completed jobs yet"))
		b.screenshot(shots, "dashboard-results.png")
	})
}

// Two jobs that take turns in one lane: the GPU map marks the one frozen
// while the other has its turn.
func TestDashboardMarksSuspendedTasks(t *testing.T) {
	b := newBrowser(t)
	c := harness.StartT(t, harness.Options{
		Fleet:        laneFleet,
		DeviceConfig: oneLaneTwoSlots,
		DriverConfig: timeSlicing("1s"),
	})
	shots := screenshotDir(t)
	p := startPlanner(t, c, "p1", fastRounds)
	vars := workloadVars(c)
	vars["iterations"] = "100"
	a := c.RunJobspec(t, c.Jobspec("driver-lane-a.nomad.hcl"), vars)
	bj := c.RunJobspec(t, c.Jobspec("driver-lane-b.nomad.hcl"), vars)
	c.WaitAllocs(t, *a.ID, 1, time.Minute, harness.Running)
	c.WaitAllocs(t, *bj.ID, 1, time.Minute, harness.Running)

	must.NoError(t, b.run(30*time.Second, chromedp.Navigate("http://"+p.addr+"/ui/#gpus")))
	b.waitJS(30*time.Second, "one of the two tasks is marked suspended",
		`document.querySelectorAll('#gpus .slot.held').length === 2 && document.querySelector('#gpus .slot.suspended, #gpus .slot.checkpointed') !== null`)
	jobs := mustEval[[]string](b, `[...document.querySelectorAll('#gpus .slot.held')].map(e => e.dataset.job).sort()`)
	must.Eq(t, []string{"default/" + *a.ID, "default/" + *bj.ID}, jobs)
	b.screenshot(shots, "dashboard-gpus-lane.png")
}
