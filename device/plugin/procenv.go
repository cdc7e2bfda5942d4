package plugin

import (
	"bytes"
	"os"
	"strconv"
	"strings"

	"github.com/caravan-gpu/caravan/gpu/reservation"
)

// processGrants finds which instances a process was granted. For a process
// of a task the caravan driver runs it goes by the process's cgroup, which
// the driver records with the task's grants (reservation.GrantsDir) and a
// task cannot choose; only for a process in no recorded task's cgroup (a task
// of another driver) does it read the CARAVAN_DEV_ variables of the
// process's environment, which that task could forge. It caches per process
// for one stats round.
type processGrants struct {
	byPID map[int][]reservation.Grant
	// byCgroup is the driver's record, read once per round.
	byCgroup map[string][]reservation.Grant
}

// grantsDir is a variable so tests can point it elsewhere.
var grantsDir = reservation.GrantsDir

func newProcessGrants() *processGrants {
	recorded, err := reservation.ReadTaskGrants(grantsDir, os.Geteuid())
	if err != nil {
		recorded = nil
	}
	return &processGrants{byPID: map[int][]reservation.Grant{}, byCgroup: recorded}
}

// readEnviron and readCgroup are variables so tests can count reads.
var readEnviron = func(pid int) ([]byte, error) {
	return os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
}

var readCgroup = func(pid int) ([]byte, error) {
	return os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
}

// instancesOn returns the IDs of the instances on gpuUUID that pid holds.
func (p *processGrants) instancesOn(pid int, gpuUUID string) []string {
	grants, ok := p.byPID[pid]
	if !ok {
		grants = p.grantsOf(pid)
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

func (p *processGrants) grantsOf(pid int) []reservation.Grant {
	if len(p.byCgroup) > 0 {
		if data, err := readCgroup(pid); err == nil {
			for _, name := range reservation.CgroupNames(string(data)) {
				if grants, ok := p.byCgroup[name]; ok {
					return grants
				}
			}
		}
	}
	return environGrants(pid)
}

func environGrants(pid int) []reservation.Grant {
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
