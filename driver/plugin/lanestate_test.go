package plugin

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/caravan-gpu/caravan/driver/lane"
	"github.com/shoenig/test/must"
)

func TestLaneStateRoundTrip(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name    string
		content *string // nil: no file
		want    lane.MemberState
		wantErr string
	}{
		{"no file is a fresh member", nil, lane.MemberState{}, ""},
		{"no path", nil, lane.MemberState{}, ""},
		{"damaged file names itself", ptr(`{"suspended": tru`), lane.MemberState{}, "lane state"},
		{"bad PID names the field", ptr(`{"checkpointed": [0]}`), lane.MemberState{}, "checkpointed"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, tc.name)
			if tc.name == "no path" {
				path = ""
			}
			if tc.content != nil {
				must.NoError(t, os.WriteFile(path, []byte(*tc.content), 0o600))
			}
			got, err := readLaneState(path)
			if tc.wantErr != "" {
				must.ErrorContains(t, err, tc.wantErr)
				must.ErrorContains(t, err, path)
				return
			}
			must.NoError(t, err, must.Sprint(i))
			must.Eq(t, tc.want, got)
		})
	}
	st := lane.MemberState{Profile: lane.Profile{PersistentMiB: 3000, EphemeralMiB: 500, Known: true, Measured: true},
		Suspended: true, Checkpointed: []int{41, 42}, Mode: "time-sliced", Switches: 3, Peers: []string{"b"},
		SliceStart: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	path := filepath.Join(dir, "state.json")
	must.NoError(t, writeLaneState(path, st))
	got, err := readLaneState(path)
	must.NoError(t, err)
	must.Eq(t, st, got)
}

func ptr(s string) *string { return &s }

// FuzzReadLaneState: whatever the lane state file holds, reading it
// returns a state or an error, never a panic.
func FuzzReadLaneState(f *testing.F) {
	f.Add([]byte(`{"profile":{"PersistentMiB":1,"EphemeralMiB":2,"Known":true},"suspended":true,"checkpointed":[1,2],"turn":false,"mode":"time-sliced"}`))
	f.Add([]byte(`{"checkpointed":[-1]}`))
	f.Add([]byte(``))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "state.json")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Skip()
		}
		_, _ = readLaneState(path)
	})
}
