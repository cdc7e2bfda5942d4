package plugin

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/shoenig/test/must"

	"github.com/caravan-gpu/caravan/driver/workload"
	"github.com/caravan-gpu/caravan/gpu/reservation"
)

func laneGrant(slot int) reservation.Grant {
	return reservation.Grant{InstanceID: "GPU-test:lane0:slot" + string(rune('0'+slot)), GPUUUID: "GPU-test",
		Lane: 0, Slot: slot, Slots: 2, MemoryMiB: 8192, SharePercent: 100}
}

func TestCoLocatedTasksThatDoNotFitAlternateAndBothComplete(t *testing.T) {
	conf, _ := simConfig(t)
	conf.TimeSliceQuantum = "300ms"
	conf.IterationGrace = "200ms"
	h, _ := newHarness(t, conf)
	events := collectEvents(t, h)
	w := workload.Config{Iterations: 8, IterationTime: 100 * time.Millisecond, PersistentMiB: 5000, EphemeralMiB: 1000}
	profile := TaskConfig{MemoryProfile: MemoryProfile{Persistent: "5000MiB", Ephemeral: "1000MiB"}}
	a := workloadTask(t, h, "a", w, profile, grantEnv(laneGrant(0)))
	b := workloadTask(t, h, "b", w, profile, grantEnv(laneGrant(1)))
	_, _, err := h.StartTask(a)
	must.NoError(t, err)
	_, _, err = h.StartTask(b)
	must.NoError(t, err)

	ra := waitExit(t, h, a.ID, 30*time.Second)
	rb := waitExit(t, h, b.ID, 30*time.Second)
	must.Eq(t, 0, ra.ExitCode)
	must.Eq(t, 0, rb.ExitCode)
	// 2 x 5000 persistent + 1000 ephemeral > 8192: they must have taken turns.
	must.SliceNotEmpty(t, waitEvents(events, a.ID, "take turns", 5*time.Second))
	// Each task is checkpointed on the simulated GPU and frozen the way the
	// host allows, as the fingerprint says.
	via := "suspended in GPU-test/lane0 via cuda-checkpoint (sim, " + processControl() + ")"
	suspends := len(events(a.ID, via)) + len(events(b.ID, via))
	must.Greater(t, 1, suspends)
	must.SliceNotEmpty(t, waitEvents(events, b.ID, "resumed in GPU-test/lane0", 5*time.Second))
	d := h.Impl().(*Driver)
	must.Positive(t, testutil.CollectAndCount(d.metrics.SwitchSeconds))
}

func TestCoLocatedTasksThatFitRunConcurrently(t *testing.T) {
	conf, _ := simConfig(t)
	conf.TimeSliceQuantum = "200ms"
	h, _ := newHarness(t, conf)
	events := collectEvents(t, h)
	w := workload.Config{Iterations: 5, IterationTime: 100 * time.Millisecond, PersistentMiB: 3000, EphemeralMiB: 1000}
	profile := TaskConfig{MemoryProfile: MemoryProfile{Persistent: "3000MiB", Ephemeral: "1000MiB"}}
	a := workloadTask(t, h, "a", w, profile, grantEnv(laneGrant(0)))
	b := workloadTask(t, h, "b", w, profile, grantEnv(laneGrant(1)))
	_, _, err := h.StartTask(a)
	must.NoError(t, err)
	_, _, err = h.StartTask(b)
	must.NoError(t, err)
	must.Eq(t, 0, waitExit(t, h, a.ID, 20*time.Second).ExitCode)
	must.Eq(t, 0, waitExit(t, h, b.ID, 20*time.Second).ExitCode)
	must.SliceNotEmpty(t, waitEvents(events, b.ID, "run concurrently", 5*time.Second))
	must.SliceEmpty(t, events(a.ID, "suspended in"))
}

// While two tasks share a lane concurrently, each is held to its share of
// the lane (in proportion to their profiles), not the whole lane: one that
// reaches past its share, into what its neighbour was admitted with, is a
// breach, and the neighbour runs on.
func TestConcurrentTasksAreHeldToTheirShares(t *testing.T) {
	conf, _ := simConfig(t)
	conf.TimeSliceQuantum = "200ms"
	h, _ := newHarness(t, conf)
	events := collectEvents(t, h)
	profile := TaskConfig{MemoryProfile: MemoryProfile{Persistent: "3000MiB", Ephemeral: "1000MiB"}}
	a := workloadTask(t, h, "a", workload.Config{Iterations: 10, IterationTime: 100 * time.Millisecond, PersistentMiB: 3000, EphemeralMiB: 1000}, profile, grantEnv(laneGrant(0)))
	// b declares what a does, so each has 4096 MiB of the 8192 MiB lane,
	// and then takes 6500 MiB in its iterations: within the lane, past its
	// share.
	b := workloadTask(t, h, "b", workload.Config{Iterations: 50, IterationTime: 100 * time.Millisecond, PersistentMiB: 3000, EphemeralMiB: 3500}, profile, grantEnv(laneGrant(1)))
	_, _, err := h.StartTask(a)
	must.NoError(t, err)
	_, _, err = h.StartTask(b)
	must.NoError(t, err)
	rb := waitExit(t, h, b.ID, 20*time.Second)
	must.NotEq(t, 0, rb.ExitCode+int(rb.Signal), must.Sprint("b must have been ended"))
	must.SliceNotEmpty(t, waitEvents(events, b.ID, "its share of lane 0's 8192 MiB while the lane's tasks run concurrently", 5*time.Second))
	must.Eq(t, 0, waitExit(t, h, a.ID, 20*time.Second).ExitCode)
	must.SliceEmpty(t, events(a.ID, "budget exceeded"))
}
