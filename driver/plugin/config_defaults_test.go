package plugin

import (
	"testing"

	"github.com/hashicorp/nomad/helper/pluginutils/hclspecutils"
	"github.com/hashicorp/nomad/helper/pluginutils/hclutils"
	"github.com/hashicorp/nomad/plugins/base"
	"github.com/shoenig/test/must"
	"github.com/zclconf/go-cty/cty/msgpack"
)

// The defaults live twice: in the HCL spec a Nomad agent decodes the
// plugin block with, and in defaultConfig, which configs built in code
// (and the driver before SetConfig) start from. An empty plugin block,
// decoded as the agent decodes it, must give the same config.
func TestConfigSpecDefaultsAreDefaultConfig(t *testing.T) {
	spec, diags := hclspecutils.Convert(configSpec)
	must.False(t, diags.HasErrors(), must.Sprint(diags))
	val, diags, errs := hclutils.ParseHclInterface(map[string]interface{}{}, spec, nil)
	must.False(t, diags.HasErrors(), must.Sprint(errs))
	data, err := msgpack.Marshal(val, val.Type())
	must.NoError(t, err)
	var decoded Config
	must.NoError(t, base.MsgPackDecode(data, &decoded))
	must.Eq(t, defaultConfig(), decoded)
	// withDefaults fills every field left empty; a bool it cannot tell
	// from unset (dynamic_users) is the caller's.
	must.Eq(t, defaultConfig(), Config{DynamicUsers: true}.withDefaults())
}
