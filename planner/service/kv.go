package service

// What the planner reads from Consul KV: job sizes and throughput profiles.

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/caravan-gpu/caravan/planner/consulx"
	"github.com/caravan-gpu/caravan/planner/profile"
)

// LoadKV reads the throughput profiles and the completed-job history from
// Consul KV.
func (p *Planner) LoadKV(ctx context.Context) error {
	if p.consul == nil {
		return nil
	}
	profiles, err := LoadProfiles(ctx, p.consul)
	if err != nil {
		return err
	}
	var history []finishedJob
	if data, ok, err := p.consul.Get(ctx, consulx.HistoryKey); err != nil {
		return fmt.Errorf("consul KV %s: %w", consulx.HistoryKey, err)
	} else if ok {
		if err := json.Unmarshal(data, &history); err != nil {
			return fmt.Errorf("consul KV %s: %w", consulx.HistoryKey, err)
		}
	}
	pol, sizingWaits, err := newPolicy(p.cfg, profiles)
	if err != nil {
		return err
	}
	if sizingWaits {
		p.log.Warn("policy sizes CPU and memory with Synergy but no sensitivity profile is imported yet; sizing is off until `caravan profile import` adds one", "policy", p.cfg.Policy)
	}
	arrivals := map[string]time.Time{}
	if data, ok, err := p.consul.Get(ctx, consulx.ArrivalsKey); err != nil {
		return fmt.Errorf("consul KV %s: %w", consulx.ArrivalsKey, err)
	} else if ok {
		if err := json.Unmarshal(data, &arrivals); err != nil {
			return fmt.Errorf("consul KV %s: %w", consulx.ArrivalsKey, err)
		}
	}
	p.mu.Lock()
	for k, t := range arrivals {
		if old, ok := p.arrivals[k]; !ok || t.Before(old) {
			p.arrivals[k] = t
		}
	}
	p.policy = pol
	p.result, p.planned = nil, nil
	p.profiles = profiles
	// Keep sizes seen in this process that the leader has not stored yet.
	if len(history) >= len(p.history) {
		p.setHistory(history)
	}
	p.mu.Unlock()
	return nil
}

// LoadProfiles reads every profile under consulx.ProfilesPrefix.
func LoadProfiles(ctx context.Context, c consulx.Client) (map[string]profile.Profile, error) {
	kv, err := c.List(ctx, consulx.ProfilesPrefix)
	if err != nil {
		return nil, fmt.Errorf("consul KV %s: %w", consulx.ProfilesPrefix, err)
	}
	out := map[string]profile.Profile{}
	for key, data := range kv {
		var pr profile.Profile
		if err := json.Unmarshal(data, &pr); err != nil {
			return nil, fmt.Errorf("consul KV %s: %w", key, err)
		}
		out[pr.Name] = pr
	}
	return out, nil
}
