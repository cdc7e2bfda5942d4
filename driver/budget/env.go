package budget

import (
	"strconv"
	"strings"

	"github.com/caravan-gpu/caravan/gpu/reservation"
)

// EnvOptions shape the environment a task gets for its budget.
type EnvOptions struct {
	// Watchdog is true when the driver's watchdog enforces the budget; only
	// then is the task told the policy it acts on.
	Watchdog bool
	// MPS is true when an MPS control daemon serves this node.
	MPS bool
	// MPSPipeDirectory is passed on when set.
	MPSPipeDirectory string
	// FrameworkHints adds the PyTorch, TensorFlow and JAX settings.
	FrameworkHints bool
	// DeviceMemoryMiB is each GPU's total memory, for memory fractions.
	DeviceMemoryMiB map[string]uint64
	// DeviceModel is each GPU's model name, by UUID.
	DeviceModel map[string]string
}

// ModelEnv names the model of the task's first granted GPU (in
// CUDA_VISIBLE_DEVICES order), so that a task can tell how fast its GPU is.
const ModelEnv = "CARAVAN_GPU_MODEL"

// ownedPrefixes and ownedNames are the variables the driver owns. Values a
// job sets for them are dropped, so a task cannot raise its own budget (or
// forge a grant) through its env block.
var ownedPrefixes = []string{reservation.EnvPrefix, "CARAVAN_GPU_", "CUDA_MPS_"}

var ownedNames = map[string]bool{
	"CUDA_VISIBLE_DEVICES":           true,
	"NVIDIA_VISIBLE_DEVICES":         true,
	"PYTORCH_CUDA_ALLOC_CONF":        true,
	"TF_FORCE_GPU_ALLOW_GROWTH":      true,
	"XLA_PYTHON_CLIENT_PREALLOCATE":  true,
	"XLA_PYTHON_CLIENT_MEM_FRACTION": true,
	"CARAVAN_ITERATION_FILE":         true,
	"CARAVAN_LANE":                   true,
	"CARAVAN_SIM_STATE_DIR":          true,
	"CARAVAN_BUDGET_POLICY":          true,
}

// Owned reports whether the driver owns the variable name.
func Owned(name string) bool {
	if ownedNames[name] {
		return true
	}
	for _, p := range ownedPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// MPSClientLimits is what each MPS client of the task may hold on each
// granted GPU, by UUID: its process's share of the GPU's budget.
func MPSClientLimits(grants []reservation.Grant, b Budget) map[string]uint64 {
	limits := map[string]uint64{}
	if !b.Enforced() {
		return limits
	}
	for _, g := range grants {
		if gb, ok := b.For(g.GPUUUID); ok {
			limits[g.GPUUUID] = b.ShareMiB(gb.LimitMiB)
		}
	}
	return limits
}

// TaskEnv returns the task's environment: jobEnv without any driver-owned
// variable, then the trusted device env (the grants as caravan-device wrote
// them), then what the budget implies.
func TaskEnv(jobEnv, deviceEnv map[string]string, grants []reservation.Grant, b Budget, opts EnvOptions) map[string]string {
	env := make(map[string]string, len(jobEnv)+16)
	for k, v := range jobEnv {
		if !Owned(k) {
			env[k] = v
		}
	}
	for k, v := range deviceEnv {
		env[k] = v
	}
	for k, v := range Env(grants, b, opts) {
		env[k] = v
	}
	return env
}

// Env is what a budget adds to a task's environment.
func Env(grants []reservation.Grant, b Budget, opts EnvOptions) map[string]string {
	env := map[string]string{}
	var visible []string
	if len(grants) > 0 {
		// Nomad merges the env of several device blocks and the last one
		// wins, so CUDA_VISIBLE_DEVICES is rebuilt from all grants.
		v := reservation.VisibleDevices(grants)
		env["CUDA_VISIBLE_DEVICES"] = v
		env["NVIDIA_VISIBLE_DEVICES"] = v
		visible = strings.Split(v, ",")
		if m := opts.DeviceModel[visible[0]]; m != "" {
			env[ModelEnv] = m
		}
	}
	if !b.Enforced() {
		return env
	}
	minLimit := b.GPUs[0].LimitMiB
	for _, g := range b.GPUs {
		minLimit = min(minLimit, g.LimitMiB)
	}
	env["CARAVAN_GPU_MEMORY_MIB"] = strconv.FormatUint(minLimit, 10)
	perGPU := map[int]uint64{}
	for i, uuid := range visible {
		if g, ok := b.For(uuid); ok {
			perGPU[i] = g.LimitMiB
		}
	}
	if len(perGPU) > 0 {
		env[PerGPUEnv] = FormatDeviceLimits(perGPU, "")
	}
	env[ProcessesEnv] = strconv.Itoa(b.ProcessCount())
	if opts.Watchdog {
		env["CARAVAN_BUDGET_POLICY"] = string(b.Policy)
	}

	if opts.MPS && len(visible) > 0 {
		// Ordinals follow CUDA_VISIBLE_DEVICES, as the MPS client sees them.
		share := 0
		for _, uuid := range visible {
			if g, ok := b.For(uuid); ok && g.SharePercent > 0 && (share == 0 || g.SharePercent < share) {
				share = g.SharePercent
			}
		}
		// MPS limits each client process: each gets its share.
		shares := make(map[int]uint64, len(perGPU))
		for i, mib := range perGPU {
			shares[i] = b.ShareMiB(mib)
		}
		env[MPSLimitEnv] = FormatDeviceLimits(shares, "M")
		if share > 0 && share < 100 {
			env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = strconv.Itoa(share)
		}
		if opts.MPSPipeDirectory != "" {
			env["CUDA_MPS_PIPE_DIRECTORY"] = opts.MPSPipeDirectory
		}
	}

	if opts.FrameworkHints {
		// Frameworks grab most of a GPU up front unless told otherwise.
		env["TF_FORCE_GPU_ALLOW_GROWTH"] = "true"
		env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
		// Return cached blocks early instead of growing to the budget's edge.
		env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True,garbage_collection_threshold:0.8"
		if frac, ok := fraction(b, visible, opts.DeviceMemoryMiB); ok {
			f := strconv.FormatFloat(frac, 'f', 3, 64)
			// JAX caps its pool at this fraction; PyTorch reads nothing from
			// the env, so scripts pass CARAVAN_GPU_MEMORY_FRACTION to
			// torch.cuda.set_per_process_memory_fraction.
			env["XLA_PYTHON_CLIENT_MEM_FRACTION"] = f
			env["CARAVAN_GPU_MEMORY_FRACTION"] = f
		}
	}
	return env
}

// fraction is the smallest share/device-memory ratio over the visible GPUs.
func fraction(b Budget, visible []string, total map[string]uint64) (float64, bool) {
	best, found := 1.0, false
	for _, uuid := range visible {
		g, ok := b.For(uuid)
		mem := total[uuid]
		if !ok || mem == 0 {
			continue
		}
		// Frameworks cap each process: a process's fraction is its share.
		f := float64(b.ShareMiB(g.LimitMiB)) / float64(mem)
		if f < best {
			best = f
		}
		found = true
	}
	// Floor at three decimals so the rounded fraction never exceeds the budget.
	return float64(int(best*1000)) / 1000, found
}
