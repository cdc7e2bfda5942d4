package consulx

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/shoenig/test/must"
)

// A call Consul refuses for the token's policy names the rule it needs and
// keeps Consul's own words.
func TestDeniedCallsNameTheRuleTheyNeed(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `Permission denied: token with AccessorID 'x' lacks permission 'key:write' on "caravan/profiles/a"`, http.StatusForbidden)
	}))
	defer srv.Close()
	a, err := New(strings.TrimPrefix(srv.URL, "http://"))
	must.NoError(t, err)
	ctx := context.Background()
	cases := []struct {
		name string
		call func() error
		want string
	}{
		{"put", func() error { return a.Put(ctx, "caravan/profiles/a", []byte("{}")) }, `key_prefix "caravan/" { policy = "write" }`},
		{"list", func() error { _, err := a.List(ctx, "caravan/profiles/"); return err }, `key_prefix "caravan/" { policy = "read" }`},
		{"register", func() error { return a.Register(ctx, Registration{ID: "p", Address: "127.0.0.1", Port: 1}) }, `service "caravan-planner" { policy = "write" }`},
		{"session", func() error { _, _, err := a.Lead(ctx, LockKey, nil, "c"); return err }, `session_prefix "" { policy = "write" }`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			must.True(t, errors.Is(err, ErrPermission), must.Sprint(err))
			must.ErrorContains(t, err, tc.want)
			must.ErrorContains(t, err, "lacks permission")
		})
	}
}
