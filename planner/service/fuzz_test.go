package service

import (
	"net/url"
	"testing"
)

// planner.hcl is outside input: whatever it holds, parsing errors or gives
// settings the planner can run with.
func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(``))
	f.Add([]byte(`planning { policy = "las+match" interval = "5s" min_interval = "100ms" queue_cuts = [100, 200] }`))
	f.Add([]byte(`nomad { unreachable_after = "10s" } consul { check_interval = "2s" }`))
	f.Add([]byte(`planning { policy = "allox+migrate+synergy" }`))
	f.Add([]byte(`planning { max_writes_per_second = 0 write_workers = 64 job_sizes_scale = 1 }`))
	f.Add([]byte("http {\n  address = \"127.0.0.1:4680\"\n  token = \"s3cret\"\n}\n"))
	f.Add([]byte("http {\n  token = \"a b\"\n}\n"))
	f.Fuzz(func(t *testing.T, src []byte) {
		s, err := ParseConfig("planner.hcl", src)
		if err != nil {
			return
		}
		if s.Interval <= 0 || s.MinInterval < 0 || s.MinInterval > s.Interval || s.CheckInterval <= 0 ||
			s.NomadUnreachable <= 0 || s.Writers < 1 || s.MaxWrites < 0 {
			t.Fatalf("accepted settings the planner cannot run with: %+v", s)
		}
		if validToken(s.APIToken) != nil {
			t.Fatalf("accepted an API token that cannot travel in a header: %q", s.APIToken)
		}
		if _, err := New(s, nil, nil, nil); err != nil {
			t.Fatalf("accepted config, but the policy does not build: %v", err)
		}
	})
}

// GET /v1/queue's query string is outside input: whatever it holds, it is
// refused or gives a page the planner can serve.
func FuzzParseQueueQuery(f *testing.F) {
	for _, q := range []string{"", "offset=0&limit=100", "limit=1000&filter=job-1", "offset=-1", "limit=0", "limit=99999999999999999999", "filter=%zz"} {
		f.Add(q)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		v, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		q, err := parseQueueQuery(v)
		if err != nil {
			return
		}
		if q.Offset < 0 || q.Limit < 0 || q.Limit > queuePageMax {
			t.Fatalf("accepted a page the planner cannot serve: %+v from %q", q, raw)
		}
	})
}
