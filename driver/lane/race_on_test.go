//go:build race

package lane

// raceEnabled: the race detector slows a switch (its /proc walk for
// processes outside a cgroup) several times over.
const raceEnabled = true
