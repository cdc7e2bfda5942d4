//go:build tools

// Package tools pins the Consul version that e2e and the demo run.
package tools

import _ "github.com/hashicorp/consul"
