package trace

import (
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// NodeGroup is Count identical nodes.
type NodeGroup struct {
	Count    int
	GPUModel string
	GPUs     int // per node
	CPUs     float64
	MemoryGB float64
}

// Cluster is a cluster as node groups.
type Cluster struct {
	Name   string
	Groups []NodeGroup
}

// GPUs is the cluster's total GPU count.
func (c Cluster) GPUs() int {
	n := 0
	for _, g := range c.Groups {
		n += g.Count * g.GPUs
	}
	return n
}

// Models are the GPU models of c's nodes with GPUs, each once, in the
// order of its groups.
func (c Cluster) Models() []string {
	var out []string
	for _, g := range c.Groups {
		if g.Count > 0 && g.GPUs > 0 && !slices.Contains(out, g.GPUModel) {
			out = append(out, g.GPUModel)
		}
	}
	return out
}

// ByModelName is c with its node groups in order of GPU model name, each
// model's groups in their own order: the order a Nomad client that holds
// several models lists its GPUs in to the planner. A policy that breaks a
// tie between models by their order (an agnostic placer giving a job the
// model with the most free GPUs) then breaks it the same way on a replay's
// simulated side as on its live side.
func (c Cluster) ByModelName() Cluster {
	out := c
	out.Groups = slices.Clone(c.Groups)
	slices.SortStableFunc(out.Groups, func(a, b NodeGroup) int { return strings.Compare(a.GPUModel, b.GPUModel) })
	return out
}

// Default per-node host resources when a spec does not give them: those of
// Tiresias' n32g4 spec scaled per GPU (10 cores and 64 GB per GPU).
const (
	defaultCPUsPerGPU  = 10
	defaultMemGBPerGPU = 64
	defaultGPUModel    = "V100"
)

// ParseClusterSpec reads a Tiresias cluster spec CSV
// (num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node)
// with one data row. Every GPU is the default model.
func ParseClusterSpec(r io.Reader, file string) (Cluster, error) {
	var idx map[string]int
	var c Cluster
	rows := 0
	err := lines(r, file, func(n int, line string) error {
		cols := strings.Split(line, ",")
		if idx == nil {
			var err error
			idx, err = header(file, n, cols, "num_switch", "num_node_p_switch", "num_gpu_p_node", "num_cpu_p_node", "mem_p_node")
			return err
		}
		rows++
		if rows > 1 {
			return perr(file, n, "", "a cluster spec has one data row")
		}
		vals := map[string]int{}
		for _, name := range []string{"num_switch", "num_node_p_switch", "num_gpu_p_node", "num_cpu_p_node", "mem_p_node"} {
			s, err := field(file, n, cols, idx, name)
			if err != nil {
				return err
			}
			v, err := parseInt(file, n, name, s, 0)
			if err != nil {
				return err
			}
			vals[name] = v
		}
		nodes := vals["num_switch"] * vals["num_node_p_switch"]
		if nodes <= 0 || vals["num_gpu_p_node"] <= 0 || nodes > 1<<20 {
			return perr(file, n, "num_node_p_switch", "cluster has %d nodes of %d GPUs", nodes, vals["num_gpu_p_node"])
		}
		c.Groups = []NodeGroup{{Count: nodes, GPUModel: defaultGPUModel, GPUs: vals["num_gpu_p_node"],
			CPUs: float64(vals["num_cpu_p_node"]), MemoryGB: float64(vals["mem_p_node"])}}
		return nil
	})
	if err != nil {
		return Cluster{}, err
	}
	if rows == 0 {
		return Cluster{}, &ParseError{File: file, Line: 1, Err: ErrEmpty}
	}
	c.Name = file
	return c, nil
}

// ParsePAIMachines reads Alibaba PAI's machine spec, no header:
// machine,gpu_type,cap_cpu,cap_mem,cap_gpu. Machines without GPUs are
// dropped; identical machines are grouped.
func ParsePAIMachines(r io.Reader, file string) (Cluster, error) {
	type key struct {
		model    string
		gpus     int
		cpu, mem float64
	}
	count := map[key]int{}
	var order []key
	err := lines(r, file, func(n int, line string) error {
		cols := strings.Split(line, ",")
		if len(cols) != 5 {
			return perr(file, n, "", "want 5 fields machine,gpu_type,cap_cpu,cap_mem,cap_gpu, got %d", len(cols))
		}
		model := strings.TrimSpace(cols[1])
		if model == "" {
			return perr(file, n, "gpu_type", "empty")
		}
		cpu, err := parseFloat(file, n, "cap_cpu", strings.TrimSpace(cols[2]), 0)
		if err != nil {
			return err
		}
		mem, err := parseFloat(file, n, "cap_mem", strings.TrimSpace(cols[3]), 0)
		if err != nil {
			return err
		}
		g, err := parseInt(file, n, "cap_gpu", strings.TrimSpace(cols[4]), 0)
		if err != nil {
			return err
		}
		if g == 0 {
			return nil
		}
		k := key{model, g, cpu, mem}
		if count[k] == 0 {
			order = append(order, k)
		}
		count[k]++
		return nil
	})
	if err != nil {
		return Cluster{}, err
	}
	if len(order) == 0 {
		return Cluster{}, &ParseError{File: file, Line: 1, Err: fmt.Errorf("no GPU machines")}
	}
	c := Cluster{Name: file}
	for _, k := range order {
		c.Groups = append(c.Groups, NodeGroup{Count: count[k], GPUModel: k.model, GPUs: k.gpus, CPUs: k.cpu, MemoryGB: k.mem})
	}
	return c, nil
}

var (
	shorthandRe = regexp.MustCompile(`^n(\d+)g(\d+)$`)
	mixRe       = regexp.MustCompile(`^(\d+)x([A-Za-z0-9_\-]+)$`)
)

// ParseShorthand reads "n32g4" (32 nodes of 4 GPUs) or an inline mix
// "32xV100,32xP100,32xK80" (GPU counts per model, on 8-GPU nodes with a
// smaller last node).
func ParseShorthand(spec string) (Cluster, error) {
	spec = strings.TrimSpace(spec)
	if m := shorthandRe.FindStringSubmatch(spec); m != nil {
		nodes, _ := strconv.Atoi(m[1])
		gpus, _ := strconv.Atoi(m[2])
		if nodes <= 0 || gpus <= 0 || nodes > 1<<20 || gpus > 1024 {
			return Cluster{}, fmt.Errorf("cluster %q: want positive node and GPU counts", spec)
		}
		return Cluster{Name: spec, Groups: []NodeGroup{{Count: nodes, GPUModel: defaultGPUModel, GPUs: gpus,
			CPUs: float64(gpus * defaultCPUsPerGPU), MemoryGB: float64(gpus * defaultMemGBPerGPU)}}}, nil
	}
	c := Cluster{Name: spec}
	for _, part := range strings.Split(spec, ",") {
		m := mixRe.FindStringSubmatch(strings.TrimSpace(part))
		if m == nil {
			return Cluster{}, fmt.Errorf("cluster %q: %q is neither nNgG nor COUNTxMODEL", spec, part)
		}
		n, _ := strconv.Atoi(m[1])
		if n <= 0 || n > 1<<24 {
			return Cluster{}, fmt.Errorf("cluster %q: bad GPU count in %q", spec, part)
		}
		const perNode = 8
		if full := n / perNode; full > 0 {
			c.Groups = append(c.Groups, NodeGroup{Count: full, GPUModel: m[2], GPUs: perNode,
				CPUs: perNode * defaultCPUsPerGPU, MemoryGB: perNode * defaultMemGBPerGPU})
		}
		if rest := n % perNode; rest > 0 {
			c.Groups = append(c.Groups, NodeGroup{Count: 1, GPUModel: m[2], GPUs: rest,
				CPUs: float64(rest * defaultCPUsPerGPU), MemoryGB: float64(rest * defaultMemGBPerGPU)})
		}
	}
	return c, nil
}

// LoadCluster accepts a cluster-spec file (Tiresias CSV or PAI machine
// spec), an "nNgG" shorthand, or an inline mix like "32xV100,32xP100".
func LoadCluster(spec string) (Cluster, error) {
	if _, err := os.Stat(spec); err == nil {
		f, err := os.Open(spec)
		if err != nil {
			return Cluster{}, err
		}
		defer f.Close()
		head := make([]byte, 64)
		k, _ := io.ReadFull(f, head)
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return Cluster{}, err
		}
		if strings.HasPrefix(string(head[:k]), "num_switch") {
			return ParseClusterSpec(f, spec)
		}
		return ParsePAIMachines(f, spec)
	}
	if strings.ContainsAny(spec, "/\\") || strings.HasSuffix(spec, ".csv") {
		return Cluster{}, fmt.Errorf("cluster spec file %s: %w", spec, os.ErrNotExist)
	}
	return ParseShorthand(spec)
}
