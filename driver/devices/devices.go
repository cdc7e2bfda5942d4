// Package devices limits which device nodes a task may open: only the
// /dev/nvidia<N> of the GPUs it was granted, the NVIDIA control devices
// every CUDA process opens, and the devices runc lets every container open
// (null, zero, full, random, urandom, tty, ptmx and the pts).
//
// The kernel checks a device's major:minor when it is opened (and mknod'ed),
// against the devices cgroup of the opening process: on cgroup v1 the
// devices controller (devices.deny, devices.allow), on cgroup v2 the
// BPF_CGROUP_DEVICE programs attached to the process's cgroup and its
// ancestors. A device opened before the restriction stays open, so the
// restriction must be in place before the task's command runs:
//
//   - cgroup v1: ApplyV1 writes the rules into a devices cgroup of the
//     task's own (V1Dir), and the task's root process (driver/runas) joins
//     it with JoinV1 before it drops privileges and execs the command.
//   - cgroup v2: Nomad's executor starts the task's process inside the
//     task's cgroup (clone3 with CLONE_INTO_CGROUP), so ApplyV2 attaches the
//     program to that cgroup before the executor launches the task.
//
// The rule types, the rules' checks (the cgroup v1 emulator), the cgroup v1
// writes and the eBPF program are github.com/opencontainers/cgroups'
// (devices/), as runc uses them.
package devices

import (
	"errors"
	"fmt"
	"slices"

	"github.com/opencontainers/cgroups/devices/config"
)

// NVIDIA's character device numbers. /dev/nvidia<N> is 195:N; nvidia-uvm and
// nvidia-caps take a major the kernel hands out when their module loads
// (read it with CharMajor).
const (
	NvidiaMajor        = 195
	NvidiaModesetMinor = 254
	NvidiaCtlMinor     = 255
	// maxGPUMinor is the highest minor a /dev/nvidia<N> can have: 254 and
	// 255 are the control devices.
	maxGPUMinor = 253
)

// Names of the dynamic majors in /proc/devices.
const (
	UVMName  = "nvidia-uvm"
	CapsName = "nvidia-caps"
)

// nvidia-uvm's minors: /dev/nvidia-uvm and /dev/nvidia-uvm-tools.
const (
	uvmMinor      = 0
	uvmToolsMinor = 1
)

// maxMajor and maxMinor are the largest numbers a Linux dev_t holds (12 and
// 20 bits).
const (
	maxMajor = 1<<12 - 1
	maxMinor = 1<<20 - 1
)

// DefaultRules are the devices runc lets every container use
// (libcontainer/specconv.AllowedDevices of runc v1.4): mknod of any device
// (opening one still needs a rule of its own), /dev/null, /dev/random,
// /dev/full, /dev/tty, /dev/zero, /dev/urandom, the pts (136:*), /dev/ptmx
// and /dev/net/tun. A new slice of new rules every call.
func DefaultRules() []*config.Rule {
	c := func(major, minor int64, perms config.Permissions) *config.Rule {
		return &config.Rule{Type: config.CharDevice, Major: major, Minor: minor, Permissions: perms, Allow: true}
	}
	return []*config.Rule{
		c(config.Wildcard, config.Wildcard, "m"),
		{Type: config.BlockDevice, Major: config.Wildcard, Minor: config.Wildcard, Permissions: "m", Allow: true},
		c(1, 3, "rwm"),                 // /dev/null
		c(1, 8, "rwm"),                 // /dev/random
		c(1, 7, "rwm"),                 // /dev/full
		c(5, 0, "rwm"),                 // /dev/tty
		c(1, 5, "rwm"),                 // /dev/zero
		c(1, 9, "rwm"),                 // /dev/urandom
		c(136, config.Wildcard, "rwm"), // /dev/pts/*
		c(5, 2, "rwm"),                 // /dev/ptmx
		c(10, 200, "rwm"),              // /dev/net/tun
	}
}

// Grant is what one task may open besides DefaultRules.
type Grant struct {
	// GPUMinors are the minors of the granted GPUs' /dev/nvidia<N> (0-253).
	// A MIG instance is opened through its parent's node.
	GPUMinors []int
	// UVMMajor is nvidia-uvm's major (/proc/devices); 0 when the host has
	// none. /dev/nvidia-uvm (minor 0) and /dev/nvidia-uvm-tools (minor 1)
	// are allowed.
	UVMMajor int
	// CapsMajor is nvidia-caps' major (/proc/devices), 0 when the host has
	// none, and CapsMinors the /dev/nvidia-caps/nvidia-cap<M> to allow: the
	// access capabilities of the granted MIG instances' GPU and compute
	// instances (/proc/driver/nvidia/capabilities/gpu<N>/mig/gi<G>[/ci<C>]/
	// access, "DeviceFileMinor"). The capabilities are what keeps MIG
	// tenants of one GPU apart, so none is allowed unless named; the MIG
	// config (1) and monitor (2) capabilities should not be.
	CapsMajor  int
	CapsMinors []int
	// Extra are rules an operator adds (InfiniBand verbs for GPUDirect RDMA,
	// say); they must allow, as every rule here does.
	Extra []*config.Rule
}

// Rules is the allow list for a task granted the GPUs whose /dev/nvidia<N>
// have grantedMinors, on a host whose nvidia-uvm has uvmMajor (0: none):
// DefaultRules, nvidiactl, nvidia-modeset, the granted GPUs, nvidia-uvm and
// nvidia-uvm-tools. Every other device is denied.
func Rules(grantedMinors []int, uvmMajor int) ([]*config.Rule, error) {
	return Grant{GPUMinors: grantedMinors, UVMMajor: uvmMajor}.Rules()
}

// Rules is the allow list for g: DefaultRules, nvidiactl, nvidia-modeset,
// the granted GPUs (each once, in order), nvidia-uvm and nvidia-uvm-tools,
// the named nvidia-caps and Extra.
func (g Grant) Rules() ([]*config.Rule, error) {
	rw := func(major, minor int) *config.Rule {
		return &config.Rule{Type: config.CharDevice, Major: int64(major), Minor: int64(minor), Permissions: "rw", Allow: true}
	}
	rules := append(DefaultRules(), rw(NvidiaMajor, NvidiaCtlMinor), rw(NvidiaMajor, NvidiaModesetMinor))
	minors := slices.Clone(g.GPUMinors)
	slices.Sort(minors)
	for _, m := range slices.Compact(minors) {
		if m < 0 || m > maxGPUMinor {
			return nil, fmt.Errorf("GPU minor %d: /dev/nvidia<N> has a minor from 0 to %d", m, maxGPUMinor)
		}
		rules = append(rules, rw(NvidiaMajor, m))
	}
	if err := checkMajor(UVMName, g.UVMMajor); err != nil {
		return nil, err
	}
	if g.UVMMajor > 0 {
		rules = append(rules, rw(g.UVMMajor, uvmMinor), rw(g.UVMMajor, uvmToolsMinor))
	}
	if err := checkMajor(CapsName, g.CapsMajor); err != nil {
		return nil, err
	}
	if len(g.CapsMinors) > 0 && g.CapsMajor == 0 {
		return nil, fmt.Errorf("%s minors %v without the %s major", CapsName, g.CapsMinors, CapsName)
	}
	for _, m := range g.CapsMinors {
		if m < 0 || m > maxMinor {
			return nil, fmt.Errorf("%s minor %d is out of range", CapsName, m)
		}
		rules = append(rules, rw(g.CapsMajor, m))
	}
	for _, r := range g.Extra {
		if r == nil {
			return nil, errors.New("extra device rule: nil")
		}
		c := *r
		rules = append(rules, &c)
	}
	if err := validate(rules); err != nil {
		return nil, err
	}
	return rules, nil
}

func checkMajor(name string, major int) error {
	if major < 0 || major > maxMajor || major == NvidiaMajor {
		return fmt.Errorf("%s major %d: not a dynamic character device major", name, major)
	}
	return nil
}

// validate accepts only an allow list: rules that each allow a char or
// block device (or all of one type, with a wildcard major or minor) one or
// more of r, w and m. Everything the rules do not allow is denied; a rule
// that denies, or that allows every type of device ('a'), would make the
// list a deny list, which is never what a tenant boundary wants.
func validate(rules []*config.Rule) error {
	if len(rules) == 0 {
		return errors.New("no device rules: every device, /dev/null included, would be denied")
	}
	for i, r := range rules {
		switch {
		case r == nil:
			return fmt.Errorf("device rule %d: nil", i)
		case !r.Allow:
			return fmt.Errorf("device rule %d (%s): denies; the rules are an allow list", i, r.CgroupString())
		case r.Type != config.CharDevice && r.Type != config.BlockDevice:
			return fmt.Errorf("device rule %d (%s): type %q is neither 'c' nor 'b'", i, r.CgroupString(), rune(r.Type))
		case r.Permissions == "" || !r.Permissions.IsValid():
			return fmt.Errorf("device rule %d (%s): permissions must be some of r, w and m", i, r.CgroupString())
		case (r.Major != config.Wildcard && (r.Major < 0 || r.Major > maxMajor)) ||
			(r.Minor != config.Wildcard && (r.Minor < 0 || r.Minor > maxMinor)):
			return fmt.Errorf("device rule %d (%s): major or minor out of range", i, r.CgroupString())
		}
	}
	return nil
}
