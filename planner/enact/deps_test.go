package enact

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/shoenig/test/must"
)

// The change layer is a pure function: deciding a round's writes needs no
// Nomad client, no network and no I/O, so that it can be table-tested and
// run anywhere the policy runs.
func TestEnactImportsNoNetworking(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool to list the imports with")
	}
	out, err := exec.Command(goTool, "list", "-deps", ".").Output()
	must.NoError(t, err)
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"net", "net/http", "os/exec", "github.com/hashicorp/nomad/api", "github.com/caravan-gpu/caravan/planner/nomadx", "github.com/caravan-gpu/caravan/planner/rewrite"} {
			must.NotEq(t, banned, dep, must.Sprintf("planner/enact depends on %s", dep))
		}
	}
}
