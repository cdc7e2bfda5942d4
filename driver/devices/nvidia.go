package devices

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// CharMajor is the major of the character device driver called name in
// /proc/devices (UVMName, CapsName), 0 when no such driver is loaded.
func CharMajor(name string) (int, error) {
	f, err := os.Open("/proc/devices")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	majors, err := ParseCharDevices(f)
	if err != nil {
		return 0, fmt.Errorf("/proc/devices: %w", err)
	}
	return majors[name], nil
}

// ParseCharDevices reads /proc/devices into the majors of its character
// device drivers, by name.
func ParseCharDevices(r io.Reader) (map[string]int, error) {
	majors := map[string]int{}
	sc := bufio.NewScanner(r)
	inChar := false
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "":
			continue
		case strings.HasSuffix(line, ":"):
			inChar = line == "Character devices:"
			continue
		case !inChar:
			continue
		}
		num, name, ok := strings.Cut(line, " ")
		major, err := strconv.Atoi(num)
		if !ok || err != nil || major < 0 {
			return nil, fmt.Errorf("%q is not a major and a name", line)
		}
		majors[strings.TrimSpace(name)] = major
	}
	return majors, sc.Err()
}

// GPUMinor is the minor of the /dev/nvidia<N> of the GPU at pciBusID (as
// NVML writes it, "00000000:3B:00.0"), from the NVIDIA kernel driver's
// /proc/driver/nvidia/gpus/<bus>/information ("Device Minor:"). NVML's
// device index need not be the minor.
func GPUMinor(pciBusID string) (int, error) {
	return gpuMinor("/proc/driver/nvidia/gpus", pciBusID)
}

func gpuMinor(root, pciBusID string) (int, error) {
	bus, err := procBusID(pciBusID)
	if err != nil {
		return 0, err
	}
	path := filepath.Join(root, bus, "information")
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("GPU %s: %w", pciBusID, err)
	}
	for line := range strings.Lines(string(data)) {
		key, value, ok := strings.Cut(line, ":")
		if !ok || strings.TrimSpace(key) != "Device Minor" {
			continue
		}
		minor, err := strconv.Atoi(strings.TrimSpace(value))
		if err != nil || minor < 0 || minor > maxGPUMinor {
			return 0, fmt.Errorf("GPU %s: %s: Device Minor %q is not a GPU minor", pciBusID, path, strings.TrimSpace(value))
		}
		return minor, nil
	}
	return 0, fmt.Errorf("GPU %s: %s has no Device Minor", pciBusID, path)
}

// procBusID turns NVML's bus ID (an 8-digit domain, upper case) into the
// kernel's (a 4-digit domain, lower case): "00000000:3B:00.0" is
// "0000:3b:00.0".
func procBusID(id string) (string, error) {
	domain, rest, ok := strings.Cut(id, ":")
	d, err := strconv.ParseUint(domain, 16, 32)
	if !ok || err != nil || strings.Count(rest, ":") != 1 || strings.ContainsAny(rest, "/") {
		return "", errors.New("PCI bus ID " + strconv.Quote(id) + ": not domain:bus:device.function")
	}
	return fmt.Sprintf("%04x:%s", d, strings.ToLower(rest)), nil
}
