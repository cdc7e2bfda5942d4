package simout

import (
	"strings"
	"testing"
)

// The dashboard reads these files from a configured folder; no content may
// crash it.
func FuzzParseJobs(f *testing.F) {
	f.Add("job_id,jct\nj1,10\nj2,NaN\n")
	f.Add("jct\n\"1e3\"\n")
	f.Fuzz(func(t *testing.T, src string) {
		_, _ = ParseJobs(strings.NewReader(src))
	})
}

func FuzzParseUtil(f *testing.F) {
	f.Add("t,busy_gpus,gpus\n0,2,4\n10,0,4\n")
	f.Fuzz(func(t *testing.T, src string) {
		_, _ = ParseUtil(strings.NewReader(src))
	})
}
