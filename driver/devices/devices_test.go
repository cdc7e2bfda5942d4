package devices

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opencontainers/cgroups/devices/config"
	"github.com/shoenig/test/must"
)

func ruleStrings(t *testing.T, rules []*config.Rule) []string {
	out := make([]string, len(rules))
	for i, r := range rules {
		must.True(t, r.Allow, must.Sprint(r.CgroupString()))
		out[i] = r.CgroupString()
	}
	return out
}

func TestRulesAllowTheGrantedGPUsAndTheControlDevices(t *testing.T) {
	rules, err := Rules([]int{2, 0, 2}, 510)
	must.NoError(t, err)
	got := ruleStrings(t, rules)
	defaults := ruleStrings(t, DefaultRules())
	must.Eq(t, defaults, got[:len(defaults)])
	must.Eq(t, []string{
		"c 195:255 rw", // nvidiactl
		"c 195:254 rw", // nvidia-modeset
		"c 195:0 rw",
		"c 195:2 rw",
		"c 510:0 rw", // nvidia-uvm
		"c 510:1 rw", // nvidia-uvm-tools
	}, got[len(defaults):])
	for _, s := range got {
		must.StrNotContains(t, s, "195:1 ")
		must.StrNotContains(t, s, "195:*")
	}
}

func TestRulesWithoutGPUsOrUVM(t *testing.T) {
	rules, err := Rules(nil, 0)
	must.NoError(t, err)
	got := ruleStrings(t, rules)
	must.Eq(t, []string{"c 195:255 rw", "c 195:254 rw"}, got[len(DefaultRules()):])
}

func TestGrantRulesCapsAndExtra(t *testing.T) {
	ib := &config.Rule{Type: config.CharDevice, Major: 231, Minor: config.Wildcard, Permissions: "rw", Allow: true}
	rules, err := Grant{GPUMinors: []int{1}, CapsMajor: 238, CapsMinors: []int{21, 22}, Extra: []*config.Rule{ib}}.Rules()
	must.NoError(t, err)
	got := ruleStrings(t, rules)
	must.Eq(t, []string{"c 195:255 rw", "c 195:254 rw", "c 195:1 rw", "c 238:21 rw", "c 238:22 rw", "c 231:* rw"},
		got[len(DefaultRules()):])
	// Extra rules are copied.
	ib.Minor = 0
	must.Eq(t, "c 231:* rw", got[len(got)-1])
}

func TestGrantRulesRefuse(t *testing.T) {
	cases := []struct {
		name    string
		g       Grant
		wantErr string
	}{
		{"negative minor", Grant{GPUMinors: []int{-1}}, "GPU minor -1"},
		{"nvidia-modeset as a GPU", Grant{GPUMinors: []int{254}}, "GPU minor 254"},
		{"nvidiactl as a GPU", Grant{GPUMinors: []int{255}}, "GPU minor 255"},
		{"uvm major 195", Grant{UVMMajor: 195}, "nvidia-uvm major 195"},
		{"uvm major negative", Grant{UVMMajor: -1}, "nvidia-uvm major -1"},
		{"caps minors without a major", Grant{CapsMinors: []int{1}}, "without the nvidia-caps major"},
		{"caps minor out of range", Grant{CapsMajor: 238, CapsMinors: []int{1 << 20}}, "nvidia-caps minor"},
		{"extra deny", Grant{Extra: []*config.Rule{{Type: config.CharDevice, Major: 1, Minor: 3, Permissions: "rwm"}}}, "denies"},
		{"extra allow all", Grant{Extra: []*config.Rule{{Type: config.WildcardDevice, Major: -1, Minor: -1, Permissions: "rwm", Allow: true}}}, "neither 'c' nor 'b'"},
		{"extra no permissions", Grant{Extra: []*config.Rule{{Type: config.CharDevice, Major: 1, Minor: 3, Allow: true}}}, "permissions"},
		{"extra bad permissions", Grant{Extra: []*config.Rule{{Type: config.CharDevice, Major: 1, Minor: 3, Permissions: "rx", Allow: true}}}, "permissions"},
		{"extra major out of range", Grant{Extra: []*config.Rule{{Type: config.CharDevice, Major: 5000, Minor: 3, Permissions: "r", Allow: true}}}, "out of range"},
		{"extra nil", Grant{Extra: []*config.Rule{nil}}, "nil"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := c.g.Rules()
			must.ErrorContains(t, err, c.wantErr)
		})
	}
}

func TestApplyRefusesWhatIsNotAnAllowList(t *testing.T) {
	dir := t.TempDir()
	deny := []*config.Rule{{Type: config.WildcardDevice, Major: -1, Minor: -1, Permissions: "rwm"}}
	must.ErrorContains(t, ApplyV1(dir, deny), "devices cgroup "+dir)
	must.ErrorContains(t, ApplyV2(dir, deny), "denies")
	must.ErrorContains(t, ApplyV1(dir, nil), "no device rules")
	rules, err := Rules([]int{0}, 0)
	must.NoError(t, err)
	// Not a cgroup: nothing is written.
	must.ErrorContains(t, ApplyV1(dir, rules), "is not on a cgroup filesystem")
	must.ErrorContains(t, ApplyV1(filepath.Join(dir, "a", "b"), rules), "is not on a cgroup filesystem")
	must.ErrorContains(t, ApplyV2(dir, rules), "not a cgroup v2 directory")
	must.ErrorContains(t, Apply(filepath.Join(dir, "a", "b"), rules), "is not on a cgroup filesystem")
	must.ErrorContains(t, JoinV1(dir), "not a cgroup v1 directory")
	must.ErrorContains(t, JoinV1("relative"), "absolute")
	must.ErrorContains(t, RemoveV1(dir), "not a cgroup v1 directory")
	must.NoError(t, RemoveV1(filepath.Join(dir, "gone")))
	entries, err := os.ReadDir(dir)
	must.NoError(t, err)
	must.SliceEmpty(t, entries)
}

func TestV1DirNames(t *testing.T) {
	for _, c := range []struct{ parent, name, wantErr string }{
		{"/abs", "x", "relative path"},
		{"../up", "x", "relative path"},
		{"caravan", "", "one path element"},
		{"caravan", "a/b", "one path element"},
		{"caravan", "..", "one path element"},
	} {
		_, err := V1Dir(c.parent, c.name)
		must.ErrorContains(t, err, c.wantErr)
	}
}

func TestParseCharDevices(t *testing.T) {
	const procDevices = `Character devices:
  1 mem
  4 /dev/vc/0
195 nvidia-frontend
237 nvidia-caps
510 nvidia-uvm

Block devices:
  7 loop
259 blkext
`
	majors, err := ParseCharDevices(strings.NewReader(procDevices))
	must.NoError(t, err)
	must.Eq(t, 510, majors[UVMName])
	must.Eq(t, 237, majors[CapsName])
	must.Eq(t, 195, majors["nvidia-frontend"])
	must.MapNotContainsKey(t, majors, "loop") // a block device
	_, err = ParseCharDevices(strings.NewReader("Character devices:\nx mem\n"))
	must.ErrorContains(t, err, "not a major and a name")
	// This host's: no NVIDIA driver is no error.
	_, err = CharMajor(UVMName)
	must.NoError(t, err)
}

func TestGPUMinor(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "0000:3b:00.0")
	must.NoError(t, os.MkdirAll(dir, 0o755))
	must.NoError(t, os.WriteFile(filepath.Join(dir, "information"), []byte(
		"Model: \t\t NVIDIA H100 80GB HBM3\nGPU UUID: \t GPU-1\nBus Location: \t 0000:3b:00.0\nDevice Minor: \t 3\nGPU Excluded:\t No\n"), 0o644))
	m, err := gpuMinor(root, "00000000:3B:00.0")
	must.NoError(t, err)
	must.Eq(t, 3, m)
	_, err = gpuMinor(root, "00000000:3C:00.0")
	must.ErrorContains(t, err, "GPU 00000000:3C:00.0")
	_, err = gpuMinor(root, "../../etc")
	must.ErrorContains(t, err, "not domain:bus:device.function")
	must.NoError(t, os.WriteFile(filepath.Join(dir, "information"), []byte("Device Minor: 255\n"), 0o644))
	_, err = gpuMinor(root, "0000:3b:00.0")
	must.ErrorContains(t, err, "not a GPU minor")
	must.NoError(t, os.WriteFile(filepath.Join(dir, "information"), []byte("Model: x\n"), 0o644))
	_, err = gpuMinor(root, "0000:3b:00.0")
	must.ErrorContains(t, err, "has no Device Minor")
}
