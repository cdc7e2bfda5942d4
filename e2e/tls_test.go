//go:build e2e

package e2e

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/caravan-gpu/caravan/e2e/harness"
	"github.com/shoenig/test/must"
)

// With Nomad's HTTP and RPC and Consul's HTTP served over TLS only, the
// planner and the CLI reach both through the standard NOMAD_CACERT,
// NOMAD_CLIENT_CERT, NOMAD_CLIENT_KEY and CONSUL_* variables: caravan setup
// and lanes work, and the planner leads through Consul and releases a held
// job through Nomad.
func TestPlannerOverTLS(t *testing.T) {
	c := harness.StartT(t, harness.Options{Fleet: oneT4, TLS: true})
	must.StrHasPrefix(t, "https://", c.NomadAddr)
	resp, err := http.Get("http://" + strings.TrimPrefix(c.NomadAddr, "https://") + "/v1/status/leader")
	if err == nil {
		resp.Body.Close()
		must.NotEq(t, http.StatusOK, resp.StatusCode, must.Sprint("Nomad answers plain HTTP"))
	}

	out, code := caravanCLI(c, "setup")
	must.Eq(t, 0, code, must.Sprint(out))
	out, code = caravanCLI(c, "lanes")
	must.Eq(t, 0, code, must.Sprint(out))
	must.StrContains(t, out, "Tesla T4")

	p := startPlanner(t, c, "p1", `policy = "fifo"`+fastRounds)
	waitFor(t, 30*time.Second, "the planner leads through Consul over TLS", func() bool { s := p.status(t); return s != nil && s.Leader })
	submit(t, c, "over-tls", 5, 1, nil)
	c.WaitAllocs(t, "over-tls", 1, time.Minute, harness.Complete)
	s := p.status(t)
	must.NotNil(t, s)
	must.StrHasPrefix(t, "https://", s.NomadAddr)
}
