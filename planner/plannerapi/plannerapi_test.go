package plannerapi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/shoenig/test/must"
)

// The client sends its token as a bearer token, and no Authorization
// header at all without one.
func TestClientAuthorizationHeader(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Header.Values("Authorization")...)
		_, _ = w.Write([]byte(`{"id": "p1"}`))
	}))
	defer srv.Close()
	cases := []struct {
		token string
		want  []string
	}{
		{"", nil},
		{"t0ken", []string{"Bearer t0ken"}},
	}
	for _, tc := range cases {
		got = nil
		st, err := NewClient(srv.URL, tc.token).Status(context.Background())
		must.NoError(t, err)
		must.Eq(t, "p1", st.ID)
		must.Eq(t, tc.want, got, must.Sprintf("token %q", tc.token))
	}
}
