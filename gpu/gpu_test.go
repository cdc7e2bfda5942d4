package gpu

import (
	"testing"

	"github.com/shoenig/test/must"
)

func TestProcessUsing(t *testing.T) {
	cases := []struct {
		name  string
		bytes uint64
		want  Process
	}{
		{"none", 0, Process{PID: 7}},
		{"whole MiB", 20000 << 20, Process{PID: 7, UsedMemoryMiB: 20000}},
		{"rounded down", 3<<20 - 1, Process{PID: 7, UsedMemoryMiB: 2}},
		{"not available", MemoryNotAvailable, Process{PID: 7, MemoryUnknown: true}},
		{"one below not available is a figure", MemoryNotAvailable - 1, Process{PID: 7, UsedMemoryMiB: 1<<44 - 1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			must.Eq(t, tc.want, ProcessUsing(7, tc.bytes))
		})
	}
}

func TestMergeProcesses(t *testing.T) {
	unknown := func(pid int) Process { return Process{PID: pid, MemoryUnknown: true} }
	known := func(pid int, mib uint64) Process { return Process{PID: pid, UsedMemoryMiB: mib} }
	cases := []struct {
		name    string
		compute []Process
		mps     []Process
		want    []Process
	}{
		{"empty", nil, nil, []Process{}},
		{"compute only", []Process{known(9, 1), known(3, 2)}, nil, []Process{known(3, 2), known(9, 1)}},
		{"MPS clients only", nil, []Process{known(5, 100)}, []Process{known(5, 100)}},
		{"both, apart", []Process{known(1, 10)}, []Process{known(2, 20)}, []Process{known(1, 10), known(2, 20)}},
		{"listed twice counts once", []Process{known(4, 300)}, []Process{known(4, 300)}, []Process{known(4, 300)}},
		{"known beats unknown", []Process{unknown(4)}, []Process{known(4, 300)}, []Process{known(4, 300)}},
		{"unknown never hides known", []Process{known(4, 300)}, []Process{unknown(4)}, []Process{known(4, 300)}},
		{"larger of two figures", []Process{known(4, 100)}, []Process{known(4, 300)}, []Process{known(4, 300)}},
		{"unknown alone stays unknown", nil, []Process{unknown(8)}, []Process{unknown(8)}},
		{"the larger peak is kept", []Process{{PID: 4, UsedMemoryMiB: 300, PeakMemoryMiB: 900}}, []Process{known(4, 400)},
			[]Process{{PID: 4, UsedMemoryMiB: 400, PeakMemoryMiB: 900}}},
		{"a peak survives an unknown figure", []Process{{PID: 4, MemoryUnknown: true, PeakMemoryMiB: 700}}, nil,
			[]Process{{PID: 4, MemoryUnknown: true, PeakMemoryMiB: 700}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			must.Eq(t, tc.want, MergeProcesses(tc.compute, tc.mps))
		})
	}
}
