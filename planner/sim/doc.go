// Package sim is a deterministic discrete-event simulator of a GPU cluster
// running a job trace under a policy from planner/policy. Events are job
// arrivals, completions and the policy's own wake-ups (queue demotion,
// starvation promotion); at each it hands the policy a Snapshot, exactly
// as the live planner would, and carries out the decisions.
//
// # Two paths, one outcome
//
// The plain path plans every round with Policy.Plan on the whole Snapshot
// (round.go). It is the reference: what the live planner runs, and what
// every result must equal.
//
// The fast paths give the same results, bit for bit, with less work. The
// simulator takes one of them where the policy says it may (the
// predicates in policy's shortcuts.go), on a cluster of one GPU model with
// whole GPUs:
//   - The arrival shortcut (sim.go: startArrivals, queuedBehind) starts
//     jobs that just arrived without a round, when a round could only
//     start them.
//   - The arrival queue (arrival.go) carries out the rounds of orders that
//     start jobs in arrival order and never preempt (fifo, fjf).
//   - The keyed queue (keyed*.go) carries out the rounds of orders that
//     rank by a key of each job, or by queue and the last round's order in
//     it (2D-LAS, 2D-Gittins, srtf, srsf). It keeps the waiting jobs in one
//     heap per GPU count and the running ones in the last round's order,
//     so a round (keyedQueue.round) visits the running jobs and only the
//     waiting jobs that start, rather than sorting every job. Its phases
//     are relearn, admitArrivals, runningInOrder, walk and carryOut. Jobs
//     that keep running in the last queue (the tail, keyed_tail.go) are
//     visited only where their order decides something, and jobs that
//     rest or wait are settled lazily (keyed_lazy.go), at the same times
//     and with the same arithmetic as the rounds would have. The
//     simulator hands a job to the queue when it waits, starts, finishes
//     or is caught up (the s.keyed hooks in sim.go and round.go).
//
// The keyed queue ranks with policy.RankOf's Before, the comparator Plan
// sorts by, and every heap is internal/minheap's, whose pops of equal
// elements are container/heap's: the two paths meet the same ties in the
// same order.
//
// # The tests that tie them
//
// TestShortcutsChangeNothing (synthetic traces, every order) and
// TestShortcutsChangeNothingOnPhilly (the Philly trace, when ../shared/data
// is present) run each policy with and without the fast paths: every job
// must end the same. TestKeyedRoundsAreFullRoundsBitForBit runs random
// traces (bursts, zero and huge jobs, jobs larger than the cluster) with
// keyed rounds and with full rounds and compares every job's figures as
// float bits, the summary, the number of rounds and the utilisation
// series; TestKeyedRoundsChangeNothing does so with start costs and
// preemption costs. TestKeptSnapshotMatchesACopy compares the Snapshot the
// simulator keeps up to date with a fresh one every round. A change to
// either path that moves one bit fails them.
package sim
