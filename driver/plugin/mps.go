package plugin

import (
	"fmt"
	"os/user"
	"sort"
	"strconv"
	"strings"

	"github.com/caravan-gpu/caravan/driver/budget"
	"github.com/caravan-gpu/caravan/gpu"
	"github.com/caravan-gpu/caravan/gpu/mpsctl"
	"github.com/caravan-gpu/caravan/gpu/reservation"
	"github.com/caravan-gpu/caravan/gpu/sim"
)

// mpsServers is what sets the limits of this node's MPS servers: the
// simulated backend's model of the control daemon, or the real one.
func mpsServers(s *settings) gpu.MPSServers {
	if s.GPUBackend == "sim" {
		return sim.MPSDaemon{StateDir: s.Sim.StateDir, PipeDir: s.MPSPipeDirectory}
	}
	return mpsctl.Daemon{Bin: s.MPSControlBin, PipeDir: mpsPipeDir(s)}
}

// mpsPipeDir is where the node's MPS control daemon listens.
func mpsPipeDir(s *settings) string {
	if s.MPSPipeDirectory == "" {
		return sim.DefaultMPSPipeDir
	}
	return s.MPSPipeDirectory
}

// limitMPSServer sets the limits of the MPS server of the task's user
// before the task runs: a client's environment can lower its server's
// limit but not raise it, so what the task does to its own environment
// cannot take it past its share. It returns what it set, for the task's
// events; empty when MPS does not serve the node or the task has no
// budget. An error means the task must not start.
func limitMPSServer(s *settings, servers gpu.MPSServers, grants []reservation.Grant, b budget.Budget, runAs string) (string, error) {
	if !mpsActive(s) {
		return "", nil
	}
	limits := budget.MPSClientLimits(grants, b)
	if len(limits) == 0 {
		return "", nil
	}
	uid, err := userID(runAs)
	if err != nil {
		return "", fmt.Errorf("mps: cannot limit the MPS server of user %q: %w", runAs, err)
	}
	if err := servers.LimitServer(uid, limits); err != nil {
		return "", fmt.Errorf("mps: cannot limit the MPS server of uid %d, so the task's MPS clients would be held only by their own environment (set mps = \"off\" to rely on the watchdog alone): %w", uid, err)
	}
	parts := make([]string, 0, len(limits))
	for u, mib := range limits {
		parts = append(parts, fmt.Sprintf("%d MiB on %s", mib, u))
	}
	sort.Strings(parts)
	return fmt.Sprintf("the MPS server of uid %d holds each of its clients to %s", uid, strings.Join(parts, ", ")), nil
}

// userID is the UID the task runs as: a dynamic workload user's from its
// name, anyone else's from the user database.
func userID(name string) (uint32, error) {
	if uid, _, ok := dynamicUser(name); ok {
		return uint32(uid), nil
	}
	u, err := user.Lookup(name)
	if err != nil {
		return 0, err
	}
	id, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("user %q has uid %q: %w", name, u.Uid, err)
	}
	return uint32(id), nil
}
