package reservation

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shoenig/test/must"
)

func TestTaskGrantsRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "grants")
	grants := []Grant{
		{InstanceID: LaneInstanceID("GPU-a", 0, 0), GPUUUID: "GPU-a", Lane: 0, Slot: 0, Slots: 1, MemoryMiB: 4096, SharePercent: 25},
		{InstanceID: LaneInstanceID("GPU-b", 1, 0), GPUUUID: "GPU-b", Lane: 1, Slot: 0, Slots: 1, MemoryMiB: 8192, SharePercent: 50},
	}
	name := "0b9c3d2e-1111-2222-3333-444455556666.train.scope"
	must.NoError(t, WriteTaskGrants(dir, name, grants))
	got, err := ReadTaskGrants(dir, os.Geteuid())
	must.NoError(t, err)
	must.Eq(t, map[string][]Grant{name: grants}, got)

	// Files of another owner are not believed.
	other, err := ReadTaskGrants(dir, os.Geteuid()+1)
	must.NoError(t, err)
	must.MapEmpty(t, other)

	must.NoError(t, RemoveTaskGrants(dir, name))
	got, err = ReadTaskGrants(dir, os.Geteuid())
	must.NoError(t, err)
	must.MapEmpty(t, got)
	must.NoError(t, RemoveTaskGrants(dir, name))

	for _, bad := range []string{"", ".", "..", "a/b", ".tmp-x"} {
		must.Error(t, WriteTaskGrants(dir, bad, grants), must.Sprint(bad))
	}
}

func TestCgroupNames(t *testing.T) {
	cases := []struct {
		in   string
		want []string
	}{
		{"0::/nomad.slice/share.slice/abc.train.scope\n", []string{"abc.train.scope", "share.slice", "nomad.slice"}},
		{"0::/nomad.slice/share.slice/abc.train.scope/workers\n", []string{"workers", "abc.train.scope", "share.slice", "nomad.slice"}},
		{"12:pids:/nomad/abc.train\n7:freezer:/nomad/abc.train\n", []string{"abc.train", "nomad", "abc.train", "nomad"}},
		{"0::/\n", nil},
		{"garbage", nil},
	}
	for _, tc := range cases {
		must.Eq(t, tc.want, CgroupNames(tc.in), must.Sprint(tc.in))
	}
}

func FuzzParseTaskGrants(f *testing.F) {
	g := Grant{InstanceID: "GPU-a:lane0:slot0", GPUUUID: "GPU-a", Lane: 0, Slots: 1, MemoryMiB: 4096, SharePercent: 25}
	f.Add(g.EnvName() + "=" + g.EnvValue() + "\n")
	f.Add("CARAVAN_DEV_X=v1;id=a;gpu=b\n")
	f.Add("junk")
	f.Fuzz(func(t *testing.T, text string) {
		grants, err := ParseTaskGrants(text)
		if err != nil {
			return
		}
		for _, g := range grants {
			if g.InstanceID == "" || g.GPUUUID == "" || g.SharePercent < 0 || g.SharePercent > 100 {
				t.Fatalf("%q gave a grant that Parse refuses: %+v", text, g)
			}
		}
	})
}

func FuzzCgroupNames(f *testing.F) {
	f.Add("0::/nomad.slice/share.slice/abc.train.scope\n")
	f.Add("7:freezer:/nomad/abc.train\n")
	f.Fuzz(func(t *testing.T, text string) {
		for _, n := range CgroupNames(text) {
			if !validCgroupName(n) || strings.Contains(n, "\n") {
				t.Fatalf("%q gave name %q", text, n)
			}
		}
	})
}
