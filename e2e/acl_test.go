//go:build e2e

package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/caravan-gpu/caravan/e2e/harness"
	"github.com/caravan-gpu/caravan/planner/plannerapi"
	consul "github.com/hashicorp/consul/api"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// docPolicies reads the ACL policies docs/planner.md prescribes: each
// ```hcl block whose first line is "# <name>.policy.hcl" (Nomad) or
// "# <name>.consul.hcl" (Consul), by name.
func docPolicies(t *testing.T, c *harness.Cluster) map[string]string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(c.RepoRoot, "docs", "planner.md"))
	must.NoError(t, err)
	out := map[string]string{}
	for _, m := range regexp.MustCompile("(?s)```hcl\n# (caravan-[a-z]+\\.(?:policy|consul)\\.hcl)\n(.*?)```").FindAllStringSubmatch(string(data), -1) {
		out[m[1]] = m[2]
	}
	return out
}

// With ACLs on in Nomad and Consul (default deny), the planner, caravan
// setup, lanes and profile import each work with exactly the policy
// docs/planner.md gives them, and a token without the rule a call needs
// gets an error naming that rule. The planner runs SRTF on one GPU, so its
// token must hold, release and preempt (stop an allocation).
func TestPlannerACLsLeastPrivilege(t *testing.T) {
	c := harness.StartT(t, harness.Options{Fleet: oneT4, ACLs: true})
	policies := docPolicies(t, c)
	for _, name := range []string{"caravan-planner.policy.hcl", "caravan-planner.consul.hcl", "caravan-setup.policy.hcl",
		"caravan-lanes.policy.hcl", "caravan-profile.consul.hcl"} {
		must.MapContainsKey(t, policies, name, must.Sprint("docs/planner.md gives no ", name))
	}
	nomadToken := func(file string) string {
		name := strings.TrimSuffix(file, ".policy.hcl")
		_, err := c.Nomad.ACLPolicies().Upsert(&api.ACLPolicy{Name: name, Rules: policies[file]}, nil)
		must.NoError(t, err, must.Sprint(file))
		tok, _, err := c.Nomad.ACLTokens().Create(&api.ACLToken{Name: name, Type: "client", Policies: []string{name}}, nil)
		must.NoError(t, err)
		return tok.SecretID
	}
	cc, err := consul.NewClient(&consul.Config{Address: c.ConsulAddr, Token: c.ConsulToken})
	must.NoError(t, err)
	consulToken := func(file string) string {
		name := strings.TrimSuffix(file, ".consul.hcl")
		_, _, err := cc.ACL().PolicyCreate(&consul.ACLPolicy{Name: name, Rules: policies[file]}, nil)
		must.NoError(t, err, must.Sprint(file))
		tok, _, err := cc.ACL().TokenCreate(&consul.ACLToken{Policies: []*consul.ACLTokenPolicyLink{{Name: name}}}, nil)
		must.NoError(t, err)
		return tok.SecretID
	}
	planner, setup, lanes := nomadToken("caravan-planner.policy.hcl"), nomadToken("caravan-setup.policy.hcl"), nomadToken("caravan-lanes.policy.hcl")
	plannerConsul, profileConsul := consulToken("caravan-planner.consul.hcl"), consulToken("caravan-profile.consul.hcl")

	t.Run("setup", func(t *testing.T) {
		out, code := caravanCLIEnv(c, []string{"NOMAD_TOKEN=" + lanes}, "setup")
		must.NotEq(t, 0, code, must.Sprint(out))
		must.StrContains(t, out, `the Nomad token cannot`)
		must.StrContains(t, out, `operator { policy = `)
		out, code = caravanCLIEnv(c, []string{"NOMAD_TOKEN=" + setup}, "setup")
		must.Eq(t, 0, code, must.Sprint(out))
	})

	t.Run("profile import", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "p.json")
		must.NoError(t, os.WriteFile(file, []byte(`{"profiles": [{"name": "acl", "throughput": {"Tesla T4": 1}}]}`), 0o644))
		out, code := caravanCLIEnv(c, []string{"CONSUL_HTTP_TOKEN=" + plannerConsul}, "profile", "import", file)
		must.Eq(t, 0, code, must.Sprint(out))
		out, code = caravanCLIEnv(c, []string{"CONSUL_HTTP_TOKEN=" + profileConsul}, "profile", "import", file)
		must.Eq(t, 0, code, must.Sprint(out))
		out, code = caravanCLIEnv(c, []string{"CONSUL_HTTP_TOKEN=anonymous"}, "profile", "import", file)
		must.NotEq(t, 0, code, must.Sprint(out))
		must.StrContains(t, out, `key_prefix "caravan/" { policy = "write" }`)
	})

	t.Run("planner", func(t *testing.T) {
		p := startPlanner(t, c, "p1", `policy = "srtf"`+fastRounds, "NOMAD_TOKEN="+planner, "CONSUL_HTTP_TOKEN="+plannerConsul)
		waitFor(t, 30*time.Second, "the planner leads with its own tokens", func() bool { s := p.status(t); return s != nil && s.Leader })
		submit(t, c, "long", 100, 1, map[string]string{"duration": "20s"})
		c.WaitAllocs(t, "long", 1, time.Minute, harness.Running)
		submit(t, c, "short", 10, 1, map[string]string{"duration": "2s"})
		waitFor(t, 20*time.Second, "long is preempted", func() bool {
			for _, a := range allocsOf(t, c, "long") {
				if a.DesiredStatus == "stop" {
					return true
				}
			}
			return false
		})
		c.WaitAllocs(t, "short", 1, time.Minute, harness.Complete)
		s := p.status(t)
		must.NotNil(t, s)
		must.SliceEmpty(t, s.Warnings, must.Sprintf("the planner's token lacks nothing: %q", s.Warnings))
		// The dashboard's GPU map reads the nodes' statistics with the
		// same token.
		body, err := httpGet("http://" + p.addr + "/v1/gpus")
		must.NoError(t, err)
		var gpus plannerapi.GPUMap
		must.NoError(t, json.Unmarshal(body, &gpus))
		must.Eq(t, "", gpus.StatsError)
		must.SliceNotEmpty(t, gpus.Lanes)

		out, code := caravanCLIEnv(c, []string{"NOMAD_TOKEN=" + lanes}, "lanes")
		must.Eq(t, 0, code, must.Sprint(out))
		must.StrContains(t, out, "Tesla T4")
		out, code = caravanCLIEnv(c, []string{"NOMAD_TOKEN=" + lanes, "CARAVAN_PLANNER_ADDR=" + p.addr}, "queue")
		must.Eq(t, 0, code, must.Sprint(out))
		must.StrContains(t, out, "long")
	})
}
