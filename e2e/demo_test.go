//go:build e2e

package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/caravan-gpu/caravan/e2e/harness"
	"github.com/shoenig/test/must"
)

// make demo in -once mode: the output shows the GPUs and their lanes, the
// allocations, the queue, the planner's decisions and a profiled job pinned
// to the model the matching chose, and the demo leaves no process behind,
// its planner included.
func TestDemoShowsPlannerAtWork(t *testing.T) {
	root, err := harness.RepoRoot()
	must.NoError(t, err)

	bin := filepath.Join(t.TempDir(), "demo")
	build := exec.Command("go", "build", "-o", bin, "./e2e/demo")
	build.Dir = root
	out, err := build.CombinedOutput()
	must.NoError(t, err, must.Sprint(string(out)))

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	demo := exec.CommandContext(ctx, bin, "-once")
	demo.Dir = root
	start := time.Now()
	data, err := demo.CombinedOutput()
	output := string(data)
	t.Logf("demo output (%s):\n%s", time.Since(start).Round(time.Second), output)
	must.NoError(t, err)
	m := regexp.MustCompile(`cluster state in (\S+)`).FindStringSubmatch(output)
	must.NotNil(t, m, must.Sprint("the demo names its state directory"))
	dir := m[1]

	for _, want := range []struct{ what, pattern string }{
		{"the GPU groups", `nvidia/gpu/Tesla T4\s+4\s+4`},
		{"the H100 lanes", `lanes_per_gpu=4`},
		{"caravan setup", `preemption is now on`},
		{"the dashboard's address", `the planner's dashboard: http://127\.0\.0\.1:\d+/ui/`},
		{"the profile import", `Imported 1 profile`},
		{"the queue", `RANK\s+JOB\s+STATE\s+QUEUE\s+PRIORITY`},
		{"a start", `planner decision: default/\S+\s+start\s+priority 50→80, release: Nomad may place it`},
		// A long job crossing the cut is demoted a band, with a preemption
		// when a job of the top band waits for its GPU at that moment.
		{"a demotion", `planner decision: default/long-\d\s+(priority|preempt)\s+priority 80→79`},
		{"a preemption by the planner", `planner decision: default/long-\d\s+preempt\s+hold: preempted, every allocation stops, stopped 1 allocation`},
		{"the allocations", `JOB\s+ALLOC\s+STATUS\s+DEVICES`},
		{"a job packed into an H100 lane", `small-\d\s+\w+\s+running\s+nvidia/lane/NVIDIA H100.*:lane\d`},
		{"the short job completing", `short\s+\w+\s+complete`},
		{"a preemption", `long-\d was preempted by short`},
		{"an orderly stop", `planner stopped[\s\S]*stopped; nothing left running`},
		// Matching: resnet waits held while every GPU is busy (the
		// matching has no free GPU to queue it on), then the planner
		// releases it with the model constraint of the free GPU the
		// matching chose, and it runs there.
		// The wait shows in a queue print or, when the planner matched
		// resnet before the first print, in the decision that held it.
		{"resnet waiting while every GPU is busy", `(?m)(^\d+\s+resnet\s+pending\s|planner decision: default/resnet\s).*waits: not enough free GPUs`},
		{"the planner releasing resnet pinned to its matched model", `planner decision: default/resnet\s+start\s+release: Nomad may place it, constraint \$\{device\.attr\.model\} = \S.*(matched to|backfills) `},
		{"the constraint in Nomad's copy of the job", `"LTarget": "\$\{device\.attr\.model\}",\s+"RTarget": "[^"]+"`},
		{"resnet running", `resnet\s+\w+\s+(running|complete)\s+nvidia/(gpu|lane)/`},
		{"the pin in resnet's decision history", `caravan explain resnet[\s\S]*written\s+priority \d+\s+release: Nomad may place it, constraint \$\{device\.attr\.model\} = `},
	} {
		must.RegexMatch(t, regexp.MustCompile(want.pattern), output, must.Sprintf("the demo output shows %s", want.what))
	}
	// Lane jobs keep their lanes: the queue never calls one preempted.
	must.False(t, regexp.MustCompile(`(?m)^\d+\s+(small|burst)-\d\s+running\s.*preempted`).MatchString(output),
		must.Sprint("an H100 lane job that keeps running is shown as preempted"))
	must.Len(t, 0, harness.ProcessesUnder(dir), must.Sprint("processes left behind by the demo"))
}
