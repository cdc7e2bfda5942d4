package command

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shoenig/test/must"
)

func runReplay(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Run(append([]string{"replay"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

func writeTrace(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "trace.csv")
	must.NoError(t, os.WriteFile(path, []byte(body), 0o644))
	return path
}

func TestReplayUsageErrors(t *testing.T) {
	tr := writeTrace(t, "job_id,num_gpu,submit_time,duration\n0,1,0,100\n")
	base := []string{"-trace", tr, "-cluster", "n1g4", "-policy", "las", "-time-scale", "10", "-workload", "/bin/caravan-workload"}
	without := func(flag string) []string {
		var out []string
		for i := 0; i < len(base); i += 2 {
			if base[i] != flag {
				out = append(out, base[i], base[i+1])
			}
		}
		return out
	}
	cases := []struct {
		args []string
		want string
	}{
		{without("-time-scale"), "flag -time-scale is required"},
		{append(base, "-time-scale", "-1"), "flag -time-scale is required and must be a positive number"},
		{without("-workload"), "flag -workload is required"},
		{append(without("-workload"), "-workload", "bin/caravan-workload"), "flag -workload: want an absolute path"},
		{without("-cluster"), "flag -cluster is required"},
		{without("-policy"), "flag -policy is required"},
		{append(without("-policy"), "-policy", "las,fifo"), "flag -policy: the live planner runs one policy"},
		{append(without("-policy"), "-policy", "teleport"), "flag -policy"},
		{append(base, "-migration-cost", "0"), "flag -migration-cost must be a positive number of seconds"},
		{append(base, "-run", "Bad_ID"), "flag -run"},
		{append(base, "-seed-history"), "flag -seed-history needs -job-sizes"},
		{append(base, "-iteration", "0s"), "flag -iteration"},
		{append(base, "-log-level", "loud"), "flag -log-level"},
		{append(base, "-start-latency", "-2"), "flag -start-latency"},
		{append(base, "-run-overhead", "NaN"), "flag -run-overhead"},
		{append(base, "-stop-latency", "-2"), "flag -stop-latency"},
		{append(base, "-round-delay", "-0.5"), "flag -round-delay"},
		{append(base, "-completion-lag", "NaN"), "flag -completion-lag"},
		{append(base, "-unblock-latency", "NaN"), "flag -unblock-latency"},
		{append(base, "-abort-latency", "Inf"), "flag -abort-latency"},
		{append(base, "-start-jitter", "1"), "flag -start-jitter"},
		{append(base, "-start-jitter", "-0.1"), "flag -start-jitter"},
		{append(base, "-start-jitter", "NaN"), "flag -start-jitter"},
		{append(base, "-start-spread", "-3"), "flag -start-spread"},
		{append(base, "-gang-spread", "-0.5"), "flag -gang-spread"},
		{append(base, "-start-model", "fifo"), "flag -start-model"},
		{append(base, "-lanes", "-2"), "flags -lanes and -lane-memory must not be negative"},
		{append(base, "-lanes", "2", "-throughputs", "t.json"), "flag -lanes: the replay's workload slows beside a partner"},
		{append(base, "-max-gpus", "-1"), "flag -max-gpus"},
		{append(base, "-bogus"), "bogus"},
		{append(base, "extra"), `unexpected argument "extra"`},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, _, stderr := runReplay(t, tc.args...)
			must.Eq(t, exitUsage, code, must.Sprint(stderr))
			must.StrContains(t, stderr, tc.want)
		})
	}
}

// Bad input is refused before anything is submitted, with an error naming
// the job, the file or Nomad's address.
func TestReplayRuntimeErrors(t *testing.T) {
	tooBig := writeTrace(t, "job_id,num_gpu,submit_time,duration\n0,1,0,100\n9,8,5,100\n")
	ok := writeTrace(t, "job_id,num_gpu,submit_time,duration\n0,1,0,100\n")
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"a job larger than the cluster",
			[]string{"-trace", tooBig, "-cluster", "n1g4", "-policy", "las", "-time-scale", "10", "-workload", "/bin/w"},
			"trace job 9 asks for 8 GPUs, but cluster n1g4 has at most 4 of one model (V100)"},
		{"a missing trace",
			[]string{"-trace", "/nonexistent/t.csv", "-format", "tiresias", "-cluster", "n1g4", "-policy", "las", "-time-scale", "10", "-workload", "/bin/w"},
			"/nonexistent/t.csv"},
		{"an unreachable Nomad",
			[]string{"-trace", ok, "-cluster", "n1g4", "-policy", "las", "-time-scale", "10", "-workload", "/bin/w", "-address", "http://127.0.0.1:1"},
			"cannot reach Nomad at http://127.0.0.1:1 (set -address or NOMAD_ADDR)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runReplay(t, tc.args...)
			must.Eq(t, exitError, code, must.Sprint(stderr))
			must.StrContains(t, stderr, tc.want)
		})
	}
}

func TestReplayHelp(t *testing.T) {
	c := &replayCommand{}
	for _, want := range []string{"-time-scale S", "-workload PATH", "-checkpoint-dir DIR", "-held=false", `{"live": ..., "sim": ...}`} {
		must.StrContains(t, c.Help(), want)
	}
}
