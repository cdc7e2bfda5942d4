//go:build cgo

// runc's specconv needs cgo (its user namespace mappings).

package devices

import (
	"testing"

	"github.com/opencontainers/cgroups/devices/config"
	"github.com/opencontainers/runc/libcontainer/specconv"
	"github.com/shoenig/test/must"
)

func TestDefaultRulesAreRuncs(t *testing.T) {
	var runc []*config.Rule
	for _, d := range specconv.AllowedDevices {
		r := d.Rule
		runc = append(runc, &r)
	}
	must.Eq(t, ruleStrings(t, runc), ruleStrings(t, DefaultRules()))
	// A new slice every call: a caller may change what it gets.
	DefaultRules()[0].Permissions = "rwm"
	must.Eq(t, config.Permissions("m"), DefaultRules()[0].Permissions)
}
