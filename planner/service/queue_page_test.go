package service

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/caravan-gpu/caravan/planner/cluster"
	"github.com/caravan-gpu/caravan/planner/nomadx/nomadxtest"
	"github.com/caravan-gpu/caravan/planner/plannerapi"
	"github.com/shoenig/test/must"
)

// GET /v1/queue pages and filters the queue on request, counts what the
// filter matches, and answers the whole queue to a request without
// parameters, as before it could page.
func TestQueuePaging(t *testing.T) {
	// 10 jobs on 4 GPUs (4 run), and one of the group "Vision".
	fake := nomadxtest.NewGPUFleet("las", 2, 2, 10, time.Now().Add(-time.Hour), time.Second)
	fake.Submit(managedJob("detector", 1, map[string]string{cluster.MetaGroup: "Vision"}))
	p, err := New(settings(t, ``), fake, nil, nil)
	must.NoError(t, err)
	_, err = p.Round(context.Background())
	must.NoError(t, err)
	srv := httptest.NewServer(p.Handler())
	defer srv.Close()

	var ranked []string
	for _, j := range p.Queue().Jobs {
		ranked = append(ranked, j.Job)
	}
	must.Len(t, 11, ranked)

	cases := []struct {
		query          string
		jobs           []string
		total, running int
		offset, limit  int
		badParam       string
	}{
		{query: "", jobs: ranked, total: 11, running: 4},
		{query: "?limit=3", jobs: ranked[:3], total: 11, running: 4, limit: 3},
		{query: "?offset=3&limit=3", jobs: ranked[3:6], total: 11, running: 4, offset: 3, limit: 3},
		{query: "?offset=9&limit=5", jobs: ranked[9:], total: 11, running: 4, offset: 9, limit: 5},
		{query: "?offset=4", jobs: ranked[4:], total: 11, running: 4, offset: 4},
		{query: "?offset=50&limit=10", total: 11, running: 4, offset: 50, limit: 10},
		{query: "?limit=1000", jobs: ranked, total: 11, running: 4, limit: 1000},
		{query: "?filter=JOB-000", jobs: without(ranked, "detector"), total: 10, running: 4},
		{query: "?filter=default/job-0003", jobs: []string{"job-0003"}, total: 1, running: 1},
		{query: "?filter=vision", jobs: []string{"detector"}, total: 1, running: 0},
		{query: "?filter=%20Vision%20&limit=1", jobs: []string{"detector"}, total: 1, running: 0, limit: 1},
		{query: "?filter=nothing-matches", total: 0, running: 0},
		{query: "?filter=job&offset=8&limit=5", jobs: without(ranked, "detector")[8:], total: 10, running: 4, offset: 8, limit: 5},
		{query: "?offset=-1", badParam: "offset"},
		{query: "?offset=two", badParam: "offset"},
		{query: "?offset=1.5", badParam: "offset"},
		{query: "?offset=99999999999999999999", badParam: "offset"},
		{query: "?limit=0", badParam: "limit"},
		{query: "?limit=-5", badParam: "limit"},
		{query: "?limit=1001", badParam: "limit"},
		{query: "?limit=all", badParam: "limit"},
		{query: "?offset=0&limit=ten", badParam: "limit"},
	}
	for _, tc := range cases {
		t.Run(tc.query, func(t *testing.T) {
			resp, err := http.Get(srv.URL + "/v1/queue" + tc.query)
			must.NoError(t, err)
			defer resp.Body.Close()
			if tc.badParam != "" {
				must.Eq(t, http.StatusBadRequest, resp.StatusCode)
				var e plannerapi.Error
				must.NoError(t, json.NewDecoder(resp.Body).Decode(&e))
				must.StrContains(t, e.Error, tc.badParam)
				return
			}
			must.Eq(t, http.StatusOK, resp.StatusCode)
			var q plannerapi.Queue
			must.NoError(t, json.NewDecoder(resp.Body).Decode(&q))
			var jobs []string
			for _, j := range q.Jobs {
				jobs = append(jobs, j.Job)
			}
			must.Eq(t, tc.jobs, jobs)
			must.Eq(t, tc.total, q.Total)
			must.Eq(t, tc.running, q.Running)
			must.Eq(t, tc.offset, q.Offset)
			must.Eq(t, tc.limit, q.Limit)
			must.True(t, q.Leader)
		})
	}

	// Without parameters the answer is the queue as the planner keeps it,
	// each job with its group.
	var q plannerapi.Queue
	getJSON(t, srv.URL+"/v1/queue", &q)
	want := p.Queue()
	for i, j := range want.Jobs {
		want.Jobs[i].Group = "default"
		if j.Job == "detector" {
			want.Jobs[i].Group = "Vision"
		}
	}
	must.Eq(t, want.Jobs, q.Jobs)
	must.True(t, want.Time.Equal(q.Time))

	var e plannerapi.Explain
	getJSON(t, srv.URL+"/v1/explain/detector", &e)
	must.Eq(t, "Vision", e.Group)

	// A job the last round did not see may be unmanaged or newer than the
	// round: the answer says both.
	resp, err := http.Get(srv.URL + "/v1/explain/newcomer")
	must.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	must.NoError(t, err)
	must.Eq(t, http.StatusNotFound, resp.StatusCode)
	must.StrContains(t, string(body), "job newcomer is not in the planner's last round")
	must.StrContains(t, string(body), "registered since that round")
}

func without(jobs []string, drop string) []string {
	var out []string
	for _, j := range jobs {
		if j != drop {
			out = append(out, j)
		}
	}
	return out
}
