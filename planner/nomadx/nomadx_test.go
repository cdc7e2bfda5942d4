package nomadx

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// A call Nomad refuses for the token's policy names the rule it needs.
func TestDeniedCallsNameTheRuleTheyNeed(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "Permission denied", http.StatusForbidden)
	}))
	defer srv.Close()
	a, err := New(srv.URL, "a-token")
	must.NoError(t, err)
	ctx := context.Background()
	id, ns := "train", "default"
	cases := []struct {
		name string
		call func() error
		want string
	}{
		{"nodes", func() error { _, err := a.Nodes(ctx); return err }, `node { policy = "read" }`},
		{"jobs", func() error { _, err := a.Jobs(ctx); return err }, `"list-jobs"`},
		{"job", func() error { _, err := a.Job(ctx, ns, id); return err }, `"read-job"`},
		{"allocations", func() error { _, err := a.Allocations(ctx); return err }, `"read-job"`},
		{"register", func() error {
			_, err := a.RegisterJob(ctx, &api.Job{ID: &id, Namespace: &ns}, 1)
			return err
		}, `"submit-job"`},
		{"stop", func() error { return a.StopAllocation(ctx, ns, "a1") }, `"alloc-lifecycle"`},
		{"scheduler read", func() error { _, err := a.SchedulerConfig(ctx); return err }, `operator { policy = "read" }`},
		{"scheduler write", func() error { _, err := a.SetSchedulerConfig(ctx, &api.SchedulerConfiguration{}); return err }, `operator { policy = "write" }`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			must.True(t, errors.Is(err, ErrPermission), must.Sprint(err))
			must.ErrorContains(t, err, tc.want)
			must.ErrorContains(t, err, "docs/planner.md")
		})
	}
}
