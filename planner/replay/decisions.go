package replay

import (
	"context"
	"sort"
	"time"

	"github.com/caravan-gpu/caravan/planner/plannerapi"
)

// DecisionsEvery is how often, while jobs run, the replay reads the
// planner's recent writes. The planner keeps its last 500; a replay's
// planner writes far fewer than that in a few seconds.
const DecisionsEvery = 2 * time.Second

// decisionLog gathers, from the planner's recent writes read again and
// again, when each replay job was written: the time of the round that
// decided the write, which is when the round read Nomad, before its
// policy ran and its writes went out.
type decisionLog struct {
	read   func(context.Context) ([]plannerapi.Decision, error)
	index  map[string]int
	rounds []map[int64]bool // per job, the rounds' unix nanoseconds
	last   time.Time
	failed bool
}

func newDecisionLog(read func(context.Context) ([]plannerapi.Decision, error), index map[string]int) *decisionLog {
	return &decisionLog{read: read, index: index, rounds: make([]map[int64]bool, len(index))}
}

// poll reads the planner's recent writes when DecisionsEvery has passed
// since the last read, or always when force. A planner that does not
// answer costs the split of the planner's part of a start, not the run.
func (d *decisionLog) poll(ctx context.Context, p *Plan, force bool) {
	if d == nil || d.read == nil || (!force && time.Since(d.last) < DecisionsEvery) {
		return
	}
	d.last = time.Now()
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	decisions, err := d.read(rctx)
	if err != nil {
		if !d.failed && ctx.Err() == nil {
			p.log.Warn("cannot read the planner's decisions; a start's planner part is not split into its round's delay and its writes", "error", err)
		}
		d.failed = true
		return
	}
	d.note(decisions)
}

// note records the written decisions of replay jobs.
func (d *decisionLog) note(decisions []plannerapi.Decision) {
	for _, dec := range decisions {
		i, ok := d.index[dec.Job]
		if !ok || dec.Outcome != "written" || dec.Time.IsZero() {
			continue
		}
		if d.rounds[i] == nil {
			d.rounds[i] = map[int64]bool{}
		}
		d.rounds[i][dec.Time.UnixNano()] = true
	}
}

// traceTimes returns each job's rounds in trace seconds, oldest first;
// nil when no decision was read.
func (d *decisionLog) traceTimes(c Clock) [][]float64 {
	if d == nil || d.read == nil {
		return nil
	}
	out := make([][]float64, len(d.rounds))
	for i, set := range d.rounds {
		ts := make([]float64, 0, len(set))
		for ns := range set {
			ts = append(ts, c.Trace(time.Unix(0, ns)))
		}
		sort.Float64s(ts)
		out[i] = ts
	}
	return out
}
