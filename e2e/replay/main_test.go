package main

import (
	"strings"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/caravan-gpu/caravan/e2e/harness"
	"github.com/caravan-gpu/caravan/planner/service"
)

func TestScanTakesItsOwnFlags(t *testing.T) {
	base := []string{"-trace", "t.csv", "-cluster", "n4g4", "-policy", "las", "-time-scale", "10"}
	for _, tc := range []struct {
		name     string
		extra    []string
		clients  int
		settle   time.Duration
		fails    string
		passedOn []string
	}{
		{name: "defaults", clients: 1, settle: defaultSettle},
		{name: "both, two forms", extra: []string{"-clients", "4", "--settle=20ms", "-json"}, clients: 4, settle: 20 * time.Millisecond, passedOn: []string{"-json"}},
		{name: "settle off", extra: []string{"-settle", "0"}, clients: 1, settle: 0},
		{name: "settle past the interval", extra: []string{"-settle", "2s"}, fails: "flag -settle"},
		{name: "settle negative", extra: []string{"-settle=-5ms"}, fails: "flag -settle"},
		{name: "settle not a duration", extra: []string{"-settle", "50"}, fails: "flag -settle"},
		{name: "settle without a value", extra: []string{"-settle"}, fails: "flag -settle needs a value"},
		{name: "more clients than nodes", extra: []string{"-clients", "5"}, fails: "flag -clients"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, rest, err := scan(append(append([]string{}, base...), tc.extra...))
			if tc.fails != "" {
				must.Error(t, err)
				must.StrContains(t, err.Error(), tc.fails)
				return
			}
			must.NoError(t, err)
			must.Eq(t, tc.clients, o.clients)
			must.Eq(t, tc.settle, o.settle)
			must.Eq(t, strings.Join(append(append([]string{}, base...), tc.passedOn...), " "), strings.Join(rest, " "))
		})
	}
}

// The planner reads the settle the harness writes for it.
func TestThePlannerReadsTheSettle(t *testing.T) {
	cfg := harness.PlannerOptions{Policy: "las", Settle: defaultSettle}.Config("127.0.0.1:0")
	s, err := service.ParseConfig("planner.hcl", []byte(cfg))
	must.NoError(t, err)
	must.Eq(t, defaultSettle, s.Settle)
	off, err := service.ParseConfig("planner.hcl", []byte(harness.PlannerOptions{Policy: "las"}.Config("127.0.0.1:0")))
	must.NoError(t, err)
	must.Eq(t, 0, off.Settle)
}
