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

// With -sensitivity each client is one node of the spec: its cores of
// -core-mhz each and its memory, so that the planner's sizer, reading
// planning.core_mhz, sees the simulator's servers. It needs a client per
// node; otherwise the clients hold one small allocation per GPU.
func TestClientsHoldTheirNodesCoresWhereJobsAreSized(t *testing.T) {
	base := []string{"-trace", "t.csv", "-cluster", "n4g4", "-policy", "fjf+count+synergy", "-time-scale", "10"}
	for _, tc := range []struct {
		extra   []string
		coreMHz float64
		want    string
		fails   string
	}{
		{extra: nil, want: "  cpu_total_compute = 20000\n  memory_total_mb   = 16384\n"},
		{extra: []string{"-sensitivity", "s.csv", "-clients", "4"}, coreMHz: 1000, want: "  cpu_total_compute = 40000\n  memory_total_mb   = 262144\n"},
		{extra: []string{"-sensitivity", "s.csv", "-core-mhz", "500", "-clients", "4"}, coreMHz: 500, want: "  cpu_total_compute = 20000\n  memory_total_mb   = 262144\n"},
		{extra: []string{"-sensitivity", "s.csv", "-clients", "2"}, coreMHz: 1000, fails: "needs a client of its own (-clients 4), got 2"},
		{extra: []string{"-sensitivity", "s.csv", "-core-mhz", "0"}, fails: "flag -core-mhz"},
	} {
		o, _, err := scan(append(append([]string{}, base...), tc.extra...))
		if err == nil {
			must.Eq(t, tc.coreMHz, o.coreMHz)
			var hcl string
			hcl, err = clientConfig(o, []int{4, 4, 4, 4})
			if err == nil {
				must.Eq(t, tc.want, hcl, must.Sprint(tc.extra))
				continue
			}
		}
		if tc.fails == "" {
			must.NoError(t, err, must.Sprint(tc.extra))
		}
		must.ErrorContains(t, err, tc.fails, must.Sprint(tc.extra))
	}
}

// -synergy-lease reaches the planner as planning.synergy_lease, in real
// time: 300 trace seconds at time scale 30 are 10 s.
func TestTheLeaseReachesThePlannerInRealTime(t *testing.T) {
	base := []string{"-trace", "t.csv", "-cluster", "n4g4", "-policy", "fjf+count+synergy", "-time-scale", "30", "-clients", "4", "-sensitivity", "s.csv"}
	o, _, err := scan(append(append([]string{}, base...), "-synergy-lease", "300"))
	must.NoError(t, err)
	must.Eq(t, 300.0, o.synergyLease)
	must.StrContains(t, harness.PlannerOptions{SynergyLease: plannerLease(o)}.Config("127.0.0.1:1"), `synergy_lease = "10s"`)
	_, _, err = scan(append(append([]string{}, base...), "-synergy-lease", "soon"))
	must.ErrorContains(t, err, "flag -synergy-lease")
}
