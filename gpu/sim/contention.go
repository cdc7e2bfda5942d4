package sim

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
)

// Sharers counts the processes other than pid that run on the GPU uuid
// now: those with a record of memory held there (procs/<uuid>), whose
// process still runs. On a real GPU they contend with pid for its compute;
// a workload that models a job's speed (caravan-workload -shared-speed)
// runs slower beside them. A checkpointed process holds no compute and is
// not counted. The records of other tasks' processes, each readable by its
// own user alone, are counted by their names, while the process lives.
// It only reads the records: accounting for exited processes and removing
// their records is the backend's (Processes).
func Sharers(stateDir, uuid string, pid int) (int, error) {
	dir := filepath.Join(stateDir, "procs", uuid)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range entries {
		other, err := strconv.Atoi(e.Name())
		if err != nil || other == pid {
			continue
		}
		h, ok := readHeld(filepath.Join(dir, e.Name()))
		if !ok {
			// Another task's record is its own to read (mode 0600):
			// that its process still runs is what tells.
			if alive(other) {
				n++
			}
			continue
		}
		h.pid = other
		if running(h) {
			n++
		}
	}
	return n, nil
}
