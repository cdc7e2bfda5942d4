package gpu

import (
	"testing"

	"github.com/shoenig/test/must"
)

func TestParseMemoryMiB(t *testing.T) {
	cases := []struct {
		in   string
		want uint64
		err  string
	}{
		{"2048", 2048, ""},
		{" 2048 ", 2048, ""},
		{"512MiB", 512, ""},
		{"512 mib", 512, ""},
		{"20GiB", 20480, ""},
		{"20 GiB", 20480, ""},
		{"1.5GiB", 1536, ""},
		{".5GiB", 512, ""},
		{"1TiB", 1 << 20, ""},
		{"4096KiB", 4, ""},
		// Decimal units, as Nomad reads them: 20 GB = 20e9 bytes.
		{"20GB", 19073, ""},
		{"20gb", 19073, ""},
		{"10GB", 9536, ""},
		{"512 MB", 488, ""},
		{"1TB", 953674, ""},
		{"1048576B", 1, ""},
		{"1KiB", 0, ""},
		{"", 0, "is not a size"},
		{"GiB", 0, "is not a size"},
		{".", 0, "is not a size"},
		{"1.2.3GiB", 0, "is not a size"},
		{"-1GiB", 0, "is not a size"},
		{"1,5GiB", 0, "unknown unit"},
		{"1e3GiB", 0, "unknown unit"},
		{"5 bananas", 0, "unknown unit"},
		{"4 parsecs", 0, "unknown unit"},
		{"20G", 0, `unit "G" is ambiguous`},
		{"2048k", 0, `unit "k" is ambiguous`},
		{"99999999999999TiB", 0, "too large"},
		{"1EiB", 0, "too large"},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseMemoryMiB(tc.in)
			if tc.err != "" {
				must.ErrorContains(t, err, tc.err)
				return
			}
			must.NoError(t, err)
			must.Eq(t, tc.want, got)
		})
	}
}

func FuzzParseMemoryMiB(f *testing.F) {
	for _, s := range []string{"20GiB", "512 MiB", "1.5GB", "2048", "", "GiB", "1e9TiB", "0.0001KiB", "9999999999999999999", "20G", "..5", "1,000MB"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		mib, err := ParseMemoryMiB(s)
		if err != nil {
			return
		}
		if mib >= maxMemoryMiB {
			t.Fatalf("%q parsed to an impossible %d MiB", s, mib)
		}
		// Surrounding space never changes a size.
		again, err := ParseMemoryMiB(s + " ")
		if err != nil || again != mib {
			t.Fatalf("%q parsed to %d, with a trailing space to %d (%v)", s, mib, again, err)
		}
	})
}
