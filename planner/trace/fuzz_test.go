package trace

import (
	"bytes"
	"testing"
)

// Every parser must return jobs or an error for any input, never panic,
// and never hand back values the simulator cannot run.

func FuzzParseTiresias(f *testing.F) {
	f.Add([]byte(tiresiasSample))
	f.Add([]byte("job_id,num_gpu,submit_time,duration\n1,2,3,4\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		jobs, err := ParseTiresias(bytes.NewReader(b), "fuzz")
		checkJobs(t, jobs, err)
	})
}

func FuzzParsePhilly(f *testing.F) {
	f.Add([]byte("timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,66.0,1,66.0,11cb48\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		jobs, err := ParsePhilly(bytes.NewReader(b), "fuzz")
		checkJobs(t, jobs, err)
	})
}

func FuzzParseGavel(f *testing.F) {
	f.Add([]byte("LM (batch size 5)\tcmd\t--steps\t1\t1000\t6.000000\t4\n"))
	f.Add([]byte("ResNet-50 (batch size 64)\tcmd\tdir\t--n\t1\t2931\t1\t1\t-1.000000\t0\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		jobs, err := ParseGavel(bytes.NewReader(b), "fuzz")
		checkJobs(t, jobs, err)
	})
}

func FuzzParseClusterSpec(f *testing.F) {
	f.Add([]byte("num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node\n1,32,4,40,256\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseClusterSpec(bytes.NewReader(b), "fuzz")
		if err == nil && c.GPUs() <= 0 {
			t.Fatalf("cluster without GPUs: %+v", c)
		}
	})
}

func FuzzParsePAIMachines(f *testing.F) {
	f.Add([]byte("m1,V100,96,512,8\nm2,CPU,96,512,0\nm3,T4,64,256,2\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParsePAIMachines(bytes.NewReader(b), "fuzz")
		if err == nil && c.GPUs() <= 0 {
			t.Fatalf("cluster without GPUs: %+v", c)
		}
	})
}

func FuzzParseShorthand(f *testing.F) {
	for _, s := range []string{"n32g4", "32xV100,32xP100,32xK80", "n0g0", "9x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseShorthand(s)
		if err == nil && c.GPUs() <= 0 {
			t.Fatalf("cluster without GPUs: %q", s)
		}
	})
}

func FuzzParseThroughputs(f *testing.F) {
	f.Add([]byte(`{"v100": {"('LM (batch size 5)', 1)": {"null": 2.5, "('LM (batch size 5)', 1)": [1.2, 1.2]}}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		tp, err := ParseThroughputs(bytes.NewReader(b), "fuzz")
		if err == nil {
			_ = tp.Colocation().Factor("v100", "a", "b")
		}
	})
}

func FuzzParseSensitivity(f *testing.F) {
	f.Add([]byte("model,gpus,cpus_per_gpu,mem_gb_per_gpu,normalized_throughput\nalexnet,1,3,62.5,1\nalexnet,1,6,62.5,1.5\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := ParseSensitivity(bytes.NewReader(b), "fuzz")
		if err == nil {
			for _, m := range s.Models() {
				_, _ = s.Throughput(m, 1, 3, 62.5)
			}
		}
	})
}

func FuzzParseJobSizes(f *testing.F) {
	f.Add([]byte("duration\n121\n122\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := ParseJobSizes(bytes.NewReader(b), "fuzz")
		if err == nil {
			_ = d.Gittins(100, 3250)
		}
	})
}

func checkJobs(t *testing.T, jobs []Job, err error) {
	t.Helper()
	if err != nil {
		return
	}
	if len(jobs) == 0 {
		t.Fatal("no jobs and no error")
	}
	for i, j := range jobs {
		if j.GPUs < 1 || j.Arrival < 0 || j.Duration < 0 || j.Steps < 0 {
			t.Fatalf("job %d out of range: %+v", i, j)
		}
		if i > 0 && j.Arrival < jobs[i-1].Arrival {
			t.Fatal("jobs not sorted by arrival")
		}
	}
}
