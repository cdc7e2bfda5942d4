// Command caravan-device is the Nomad device plugin that offers NVIDIA GPUs
// whole or cut into lanes. Nomad starts it from its plugin_dir.
package main

import (
	"github.com/caravan-gpu/caravan/device/plugin"
	log "github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/plugins"
)

func main() {
	plugins.Serve(func(logger log.Logger) interface{} { return plugin.New(logger) })
}
