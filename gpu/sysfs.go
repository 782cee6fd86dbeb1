package gpu

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"hpctrain/affinity"
)

// nvidiaVendor is NVIDIA's PCI vendor id.
const nvidiaVendor = "0x10de"

// Sysfs is the fallback prober where NVML cannot be used: it reads the
// NVIDIA display and 3D controllers (class 0x0300xx, 0x0302xx; NVSwitches
// and audio functions are other classes) from Root/sys/bus/pci/devices,
// with their numa_node and local_cpulist. It knows no NVLinks, names,
// UUIDs, memory or MIG mode, and says so in Note; links come from the
// devices' PCIe paths (see pcieLink).
type Sysfs struct {
	Root string // "/" for this machine, or a fixture tree
}

// Name returns "sysfs".
func (Sysfs) Name() string { return "sysfs" }

// Probe lists the NVIDIA GPUs in PCI bus order.
func (s Sysfs) Probe() (*Topology, error) {
	dir := filepath.Join(s.Root, "sys/bus/pci/devices")
	ents, err := os.ReadDir(dir) // sorted by name: bus order
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", dir, err)
	}
	t := &Topology{Source: "sysfs"}
	var paths [][]string
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		class := readTrim(filepath.Join(p, "class"))
		if readTrim(filepath.Join(p, "vendor")) != nvidiaVendor ||
			!strings.HasPrefix(class, "0x0302") && !strings.HasPrefix(class, "0x0300") {
			continue
		}
		d := Device{Index: len(t.Devices), BusID: e.Name(), NUMANode: readNUMANode(p),
			Name: fmt.Sprintf("NVIDIA [10de:%s]", strings.TrimPrefix(readTrim(filepath.Join(p, "device")), "0x"))}
		d.CPUs, _ = readCPUs(filepath.Join(p, "local_cpulist"))
		t.Devices = append(t.Devices, d)
		paths = append(paths, pciePath(s.Root, p))
	}
	n := len(t.Devices)
	t.Links = make([][]Link, n)
	for i := range n {
		t.Links[i] = make([]Link, n)
		for j := range n {
			if i == j {
				t.Links[i][j] = Link{Kind: LinkSelf}
				continue
			}
			t.Links[i][j] = pcieLink(paths[i], paths[j], t.Devices[i].NUMANode, t.Devices[j].NUMANode)
		}
	}
	if n > 0 {
		t.Note = "sysfs fallback: PCIe links only, NVLinks unseen; no names, UUIDs, memory or MIG mode"
	}
	return t, nil
}

// pciePath returns the PCI devices from the host bridge down to the device
// dev (a /sys/bus/pci/devices entry, a link into /sys/devices):
// ["pci0000:00", "0000:00:01.0", "0000:01:00.0", ..., dev]. Nil when the
// link cannot be followed.
func pciePath(root, dev string) []string {
	real, err := filepath.EvalSymlinks(dev)
	if err != nil {
		return nil
	}
	base, err := filepath.EvalSymlinks(filepath.Join(root, "sys/devices"))
	if err != nil {
		return nil
	}
	rel, err := filepath.Rel(base, real)
	if err != nil || strings.HasPrefix(rel, "..") {
		return nil
	}
	return strings.Split(filepath.ToSlash(rel), "/")
}

// pcieLink classifies the path between two GPUs from their PCIe paths, as
// nvidia-smi does from the common ancestor: different host bridges are
// NODE on one NUMA node and SYS across nodes; meeting at the host bridge
// (different root ports) is PHB; below it, PIX when each GPU is at most
// one bridge (a switch's downstream port) below the common ancestor, else
// PXB. Without paths (no symlinks) only NODE or SYS can be told, by NUMA
// node.
func pcieLink(a, b []string, numaA, numaB int) Link {
	if len(a) < 2 || len(b) < 2 || a[0] != b[0] {
		if numaA == numaB {
			return Link{Kind: LinkNODE}
		}
		return Link{Kind: LinkSYS}
	}
	common := 0 // bridges shared below the host bridge
	for common+1 < len(a)-1 && common+1 < len(b)-1 && a[common+1] == b[common+1] {
		common++
	}
	if common == 0 {
		return Link{Kind: LinkPHB}
	}
	belowA := len(a) - 2 - common // bridges between the common ancestor and the GPU
	belowB := len(b) - 2 - common
	if belowA <= 1 && belowB <= 1 {
		return Link{Kind: LinkPIX}
	}
	return Link{Kind: LinkPXB}
}

func readTrim(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.ToLower(strings.TrimSpace(string(b)))
}

// readNUMANode reads a PCI device's numa_node; -1 when absent or unknown.
func readNUMANode(pciDir string) int {
	n, err := strconv.Atoi(readTrim(filepath.Join(pciDir, "numa_node")))
	if err != nil || n < 0 {
		return -1
	}
	return n
}

func readCPUs(path string) (affinity.CPUSet, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return affinity.CPUSet{}, err
	}
	return affinity.Parse(string(b))
}
