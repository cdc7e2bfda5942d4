package simout

import (
	"strings"
	"testing"
	"testing/fstest"

	"github.com/caravan-gpu/caravan/planner/plot"
	"github.com/shoenig/test/must"
)

func simFolder(prefix string) fstest.MapFS {
	return fstest.MapFS{
		prefix + "summary.json": {Data: []byte(`{"gpus": 4, "policies": [{"policy": "las"}, {"policy": "2d-las+pack"}]}`)},
		prefix + "las.jobs.csv": {Data: []byte("job_id,gpus,weight,arrival,start,finish,jct,queueing\nj1,1,1,0,0,10,10,0\nj2,1,1,0,NaN,NaN,NaN,0\n")},
		prefix + "las.util.csv": {Data: []byte("t,busy_gpus,gpus\n0,2,4\n10,0,4\n")},
		// Written before utilisation CSVs: JCTs only.
		prefix + "2d-las_pack.jobs.csv": {Data: []byte("job_id,jct\nj1,5\n")},
	}
}

func TestReadSimAndReplayFolders(t *testing.T) {
	fsys := simFolder("runs/a/")
	for k, v := range simFolder("runs/r/live/") {
		fsys[k] = v
	}
	for k, v := range simFolder("runs/r/sim/") {
		fsys[k] = v
	}
	fsys["runs/r/replay.json"] = &fstest.MapFile{Data: []byte(`{}`)}
	fsys["runs/empty/readme.txt"] = &fstest.MapFile{Data: []byte(`x`)}

	dirs, err := List(fsys, 3)
	must.NoError(t, err)
	must.Eq(t, []string{"runs/a", "runs/r"}, dirs)

	runs, err := Read(fsys, "runs/a")
	must.NoError(t, err)
	must.Eq(t, []plot.Run{
		{Name: "las", GPUs: 4, JCT: []float64{10}, Util: []plot.UtilPoint{{T: 0, Busy: 2}, {T: 10, Busy: 0}}},
		{Name: "2d-las+pack", GPUs: 4, JCT: []float64{5}},
	}, runs)

	runs, err = Read(fsys, "runs/r")
	must.NoError(t, err)
	must.Len(t, 4, runs)
	must.Eq(t, "live las", runs[0].Name)
	must.Eq(t, "sim 2d-las+pack", runs[3].Name)

	_, err = Read(fsys, "runs/empty")
	must.Error(t, err)
}

func TestParseErrorsNameTheField(t *testing.T) {
	cases := []struct{ name, src, want string }{
		{"empty", "", "want a header"},
		{"no column", "job_id,gpus\nj,1\n", `no "jct" column`},
		{"not a number", "job_id,jct\nj,soon\n", "line 2: jct"},
		{"short record", "job_id,jct\nj\n", `line 2: no "jct" field`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseJobs(strings.NewReader(tc.src))
			must.ErrorContains(t, err, tc.want)
		})
	}
}
