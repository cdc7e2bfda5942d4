package service

import (
	"fmt"
	"sort"
	"strings"

	"github.com/caravan-gpu/caravan/planner/policy"
	"github.com/caravan-gpu/caravan/planner/profile"
)

// policyConfig is the shared policy package's configuration from the
// planner's settings and the profiles in Consul.
func policyConfig(s *Settings, profiles map[string]profile.Profile) (policy.Config, error) {
	cfg := policy.Config{QueueCuts: s.QueueCuts, PromoteKnob: s.PromoteKnob, JobSizes: s.JobSizes,
		MigrationCost: s.MigrationCost.Seconds(), RotationPeriod: s.RotationPeriod.Seconds(), PredictFloor: s.PredictFloor.Seconds(),
		SynergyLease: s.SynergyLease.Seconds()}
	var rows []policy.SensitivityRow
	names := make([]string, 0, len(profiles))
	for n := range profiles {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		for _, pt := range profiles[n].Sensitivity {
			rows = append(rows, policy.SensitivityRow{Model: n, GPUs: pt.GPUs, CPUsPerGPU: pt.CPUsPerGPU,
				MemGBPerGPU: pt.MemGBPerGPU, Throughput: pt.Throughput})
		}
	}
	if len(rows) > 0 {
		sens, err := policy.NewSensitivity(rows)
		if err != nil {
			return cfg, fmt.Errorf("sensitivity profiles: %w", err)
		}
		cfg.Sensitivity = sens
	}
	return cfg, nil
}

// newPolicy builds the configured policy. Synergy sizing needs sensitivity
// profiles; until some are imported the policy runs without its sizer.
func newPolicy(s *Settings, profiles map[string]profile.Profile) (pol *policy.Policy, sizingWaits bool, err error) {
	cfg, err := policyConfig(s, profiles)
	if err != nil {
		return nil, false, err
	}
	name := s.Policy
	if cfg.Sensitivity == nil {
		if stripped, ok := withoutSizer(name); ok {
			pol, err := policy.Parse(stripped, cfg)
			if err != nil {
				return nil, false, err
			}
			pol.Name = name
			return pol, true, nil
		}
	}
	pol, err = policy.Parse(name, cfg)
	return pol, false, err
}

// withoutSizer drops a synergy step from a policy name, expanding a
// shorthand first.
func withoutSizer(name string) (string, bool) {
	parts := strings.Split(strings.ToLower(strings.TrimSpace(name)), "+")
	if sh, ok := policy.Shorthands[parts[0]]; ok {
		parts = append(strings.Split(sh, "+"), parts[1:]...)
	}
	full := strings.Join(parts, "+")
	var kept []string
	dropped := false
	for _, part := range strings.Split(full, "+") {
		if strings.HasPrefix(part, "synergy") && len(kept) > 0 {
			dropped = true
			continue
		}
		kept = append(kept, part)
	}
	return strings.Join(kept, "+"), dropped
}

func validPolicy(s *Settings) error {
	_, _, err := newPolicy(s, nil)
	return err
}
