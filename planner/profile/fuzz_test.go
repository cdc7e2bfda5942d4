package profile

import "testing"

// caravan profile import reads files users write: a parse either fails
// with an error or returns profiles that validate.
func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"profiles": [{"name": "resnet", "throughput": {"Tesla T4": 1, "NVIDIA H100": 6}}]}`))
	f.Add([]byte("profile,gpu_model,throughput\nresnet,Tesla T4,1\nresnet,NVIDIA H100,6\n"))
	f.Add([]byte("profile,gpu_model,throughput\nbert,V100,-1\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		ps, err := Parse("profiles", data)
		if err != nil {
			return
		}
		for _, p := range ps {
			if err := p.Validate(); err != nil {
				t.Fatalf("parsed an invalid profile %+v: %v", p, err)
			}
		}
	})
}
