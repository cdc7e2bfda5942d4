package plugin

import (
	"bytes"
	"os"
	"strconv"
	"strings"

	"github.com/caravan-gpu/caravan/device/reservation"
)

// processGrants finds which instances a process was granted by reading the
// CARAVAN_DEV_ variables of its environment, which it inherits from the task
// that Reserve set up. It caches per process for one stats round.
type processGrants struct {
	byPID map[int][]reservation.Grant
}

func newProcessGrants() *processGrants {
	return &processGrants{byPID: map[int][]reservation.Grant{}}
}

// readEnviron is a variable so tests can count reads.
var readEnviron = func(pid int) ([]byte, error) {
	return os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
}

// instancesOn returns the IDs of the instances on gpuUUID that pid holds.
func (p *processGrants) instancesOn(pid int, gpuUUID string) []string {
	grants, ok := p.byPID[pid]
	if !ok {
		grants = grantsOf(pid)
		p.byPID[pid] = grants
	}
	var ids []string
	for _, g := range grants {
		if g.GPUUUID == gpuUUID {
			ids = append(ids, g.InstanceID)
		}
	}
	return ids
}

func grantsOf(pid int) []reservation.Grant {
	data, err := readEnviron(pid)
	if err != nil {
		return nil // gone, or not ours to read
	}
	env := map[string]string{}
	for _, kv := range bytes.Split(data, []byte{0}) {
		k, v, ok := strings.Cut(string(kv), "=")
		if ok && strings.HasPrefix(k, reservation.EnvPrefix) {
			env[k] = v
		}
	}
	grants, err := reservation.FromEnv(env)
	if err != nil {
		return nil
	}
	return grants
}
