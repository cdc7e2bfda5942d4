package policy

import (
	"cmp"
	"fmt"
	"math"
	"sort"
	"strings"
)

// Config holds every knob a policy may read. The zero value gives the
// published defaults.
type Config struct {
	// QueueCuts are the 2D-LAS and 2D-Gittins thresholds in GPU-seconds
	// (default DefaultQueueCuts); len+1 queues.
	QueueCuts []float64
	// PromoteKnob K moves a pending job back to queue 0 when its wait is
	// at least K × its executed time; 0 turns it off.
	PromoteKnob float64
	// JobSizes is 2D-Gittins' size distribution; nil learns it from
	// Snapshot.CompletedSizes.
	JobSizes *SizeDistribution
	// GittinsDelta is the service quantum of the Gittins index
	// (default: the first queue cut).
	GittinsDelta float64
	// Fairness is AlloX's knob in [0,1].
	Fairness float64
	// Sensitivity feeds Synergy sizing.
	Sensitivity *Sensitivity
	// Colocation is lane packing's slowdown model (nil: default factor).
	Colocation *Colocation
	// Compat follows the arithmetic of Tiresias' reference simulator.
	Compat bool
	// MigrationCost is the run time in seconds a job loses when the
	// migrate step moves it to another GPU model (default
	// DefaultMigrationCost).
	MigrationCost float64
	// SynergyLease is the lease in seconds after which Synergy's sizer
	// places every running job again, as its reference does each round
	// (300 s there); leases end together at multiples of it. 0: running
	// jobs keep their GPUs.
	SynergyLease float64
	// RotationPeriod is Gavel's round in seconds (0: DefaultRotationPeriod):
	// the rotate step's period, and the least run time the blind steps
	// (migrate-blind, earliest-blind) expect a job to have left.
	RotationPeriod float64
	// PredictFloor is the least GPU-seconds predict expects of a job the
	// history cannot predict yet (0: DefaultPredictFloor). Such a job is
	// expected to use as much again as it has attained, so a running one
	// yields to a new job once it has attained runningBias times the
	// floor. It is a time, so a replay at time scale S sets it ÷ S.
	PredictFloor float64
}

// Default is the policy the planner and caravan sim run unless told
// otherwise: shortest predicted remaining GPU-time first, which beats
// 2D-LAS by 1.34× (64 nodes) and 1.53× (48 nodes) in average JCT on the
// Philly trace, with a lower p99; planner/sim's TestDefaultPolicyMatrix
// holds it against 2D-LAS on 17 traces and clusters (docs/simulator.md).
const Default = "predict"

// Shorthands are the policy names the CLI takes, as compositions.
var Shorthands = map[string]string{
	"fifo":    "fifo+count",
	"fjf":     "fjf+count",
	"srtf":    "srtf+count",
	"srsf":    "srsf+count",
	"las":     "las+count",
	"gittins": "gittins+count",
	"allox":   "fjf+match",
	"hare":    "hare+earliest",
	"synergy": "fjf+count+synergy",
	"pack":    "las+pack",
	"predict": "predict+count",
}

// Names lists the shorthand policy names.
func Names() []string {
	var out []string
	for n := range Shorthands {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Steps lists the names each composition slot accepts.
func Steps() (orders, placers, sizers []string) {
	return []string{"fifo", "fjf", "srtf", "srsf", "las", "gittins", "hare", "predict"},
		[]string{"count", "consolidated", "fastest", "earliest", earliestBlindPlacer, "match", "pack"},
		[]string{"synergy", "synergy-tune", "synergy-greedy"}
}

// migrateStep is the composition step that adds a Migration; it goes after
// the placer, e.g. "las+migrate" or "fjf+match+migrate".
const migrateStep = "migrate"

// earliestBlindPlacer is the earliest placer that never reads remaining
// work.
const earliestBlindPlacer = "earliest-blind"

// migrateBlindStep adds a Migration that never reads remaining work.
const migrateBlindStep = "migrate-blind"

// rotateStep adds a Rotation, the agnostic baseline's re-allocation every
// round, e.g. "las+rotate"; it excludes migrateStep.
const rotateStep = "rotate"

// Parse builds a policy from a name: a shorthand (see Shorthands) or a
// composition ORDER[+PLACER][+migrate|+migrate-blind|+rotate][+SIZER], for example
// "las+match+synergy", "gittins+pack", "las+migrate" or "las+rotate". The placer defaults
// to count.
func Parse(name string, cfg Config) (*Policy, error) {
	if !(cfg.PredictFloor >= 0) || math.IsInf(cfg.PredictFloor, 1) {
		return nil, fmt.Errorf("predict floor: want 0 (the default) or a positive number of GPU-seconds, got %v", cfg.PredictFloor)
	}
	if !(cfg.RotationPeriod >= 0) || math.IsInf(cfg.RotationPeriod, 1) {
		return nil, fmt.Errorf("rotation period: want 0 (a Gavel round) or a positive number of seconds, got %v", cfg.RotationPeriod)
	}
	full := strings.ToLower(strings.TrimSpace(name))
	parts := strings.Split(full, "+")
	// A shorthand may lead a composition too: "allox+migrate".
	if sh, ok := Shorthands[parts[0]]; ok {
		parts = append(strings.Split(sh, "+"), parts[1:]...)
	}
	p := &Policy{Name: strings.ToLower(strings.TrimSpace(name))}
	q := newQueues(cfg.QueueCuts, cfg.PromoteKnob, cfg.Compat)
	switch parts[0] {
	case "fifo":
		p.Order, p.Blocking = fifoOrder{}, true
	case "fjf":
		p.Order = fifoOrder{}
	case "srtf":
		p.Order = shortestRemainingOrder{}
	case "srsf":
		p.Order = shortestRemainingOrder{gpuTime: true}
	case "las":
		p.Order = lasOrder{q: q}
	case "gittins":
		p.Order = newGittinsOrder(q, cfg.JobSizes, cfg.GittinsDelta)
	case "hare":
		p.Order = hareOrder{}
	case "predict":
		p.Order = predictOrder{floor: cmp.Or(cfg.PredictFloor, DefaultPredictFloor)}
	default:
		return nil, fmt.Errorf("policy %q: unknown order %q (want one of %s, or a shorthand: %s)",
			name, parts[0], strings.Join(first(Steps()), ", "), strings.Join(Names(), ", "))
	}
	p.Place = countPlacer{}
	for _, part := range parts[1:] {
		switch part {
		case "count":
			p.Place = countPlacer{}
		case "consolidated", "cons":
			p.Place = consolidatedPlacer{}
		case "fastest":
			p.Place = fastestPlacer{}
		case "earliest":
			p.Place = earliestPlacer{}
		case earliestBlindPlacer:
			p.Place = earliestPlacer{blind: true, horizon: cfg.RotationPeriod}
		case "match", "allox":
			p.Place = matchPlacer{fairness: cfg.Fairness}
		case "pack":
			p.Place = packPlacer{coloc: cfg.Colocation}
		case migrateStep, migrateBlindStep:
			if p.Rotate != nil || p.Migrate != nil {
				return nil, fmt.Errorf("policy %q: %s, %s and %s each move running jobs between models; take one", name, migrateStep, migrateBlindStep, rotateStep)
			}
			p.Migrate = &Migration{Cost: cfg.MigrationCost, Blind: part == migrateBlindStep, Horizon: cfg.RotationPeriod}
		case rotateStep:
			if p.Migrate != nil {
				return nil, fmt.Errorf("policy %q: %s, %s and %s each move running jobs between models; take one", name, migrateStep, migrateBlindStep, rotateStep)
			}
			p.Rotate = &Rotation{Period: cfg.RotationPeriod}
		case "synergy", "synergy-tune", "synergy-greedy":
			if cfg.Sensitivity == nil {
				return nil, fmt.Errorf("policy %q: %s sizing needs a sensitivity table", name, part)
			}
			if l := cfg.SynergyLease; l != 0 && !(l >= 1) || math.IsInf(l, 0) {
				return nil, fmt.Errorf("policy %q: the Synergy lease must be 0 (none) or at least 1 second (got %g)", name, l)
			}
			p.Size = synergySizer{sens: cfg.Sensitivity, tune: part != "synergy-greedy", lease: cfg.SynergyLease}
		default:
			_, placers, sizers := Steps()
			return nil, fmt.Errorf("policy %q: unknown step %q (placers: %s; sizers: %s; or %s, %s, %s)",
				name, part, strings.Join(placers, ", "), strings.Join(sizers, ", "), migrateStep, migrateBlindStep, rotateStep)
		}
	}
	if p.Rotate != nil && p.Size != nil {
		return nil, fmt.Errorf("policy %q: %s draws running jobs' models blind, where the %s sizer places them itself; take one", name, rotateStep, p.Size.Name())
	}
	return p, nil
}

func first(a, _, _ []string) []string { return a }
