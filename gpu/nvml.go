package gpu

import (
	"errors"
	"fmt"
	"math/bits"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"hpctrain/affinity"
)

// NVML probes through the NVIDIA Management Library: nvml.New() on the
// live machine (it loads libnvidia-ml.so.1 when Probe calls Init), or a
// mock such as github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100 in tests.
//
// Functions that older drivers lack (nvmlDeviceGetNumaNodeId,
// nvmlDeviceGetMigMode, nvmlDeviceGetNvLinkRemoteDeviceType) are looked up
// before they are called: calling a missing symbol would kill the process.
// What NVML cannot say (NUMA node, CPU affinity) is read from sysfs below
// SysRoot.
type NVML struct {
	Lib     nvml.Interface
	SysRoot string // "" means "/"
}

// Name returns "NVML".
func (NVML) Name() string { return "NVML" }

// nvmlMu serialises probes: go-nvml's library objects share unguarded
// package state (the error-string function Init swaps in), and in-process
// fake ranks probe at the same time.
var nvmlMu sync.Mutex

// Probe lists the devices, their PCIe common ancestors and their NVLinks.
//
// Link kinds: NVML's common ancestor levels map to nvidia-smi's labels
// (INTERNAL and SINGLE: PIX, MULTIPLE: PXB, HOSTBRIDGE: PHB, NODE: NODE,
// SYSTEM: SYS). Two GPUs with NVLinks between them are NV# instead: the
// active links whose remote end is the other GPU, or, on NVSwitch systems
// (DGX A100, HGX H100), where every link ends at a switch, the smaller of
// the two GPUs' switch link counts, as nvidia-smi shows NV12 between every
// pair of a DGX A100.
func (n NVML) Probe() (*Topology, error) {
	nvmlMu.Lock()
	defer nvmlMu.Unlock()
	if ret := n.Lib.Init(); ret != nvml.SUCCESS {
		if ret == nvml.ERROR_LIBRARY_NOT_FOUND {
			return nil, errors.New("cannot load libnvidia-ml.so.1, no NVIDIA driver here")
		}
		return nil, fmt.Errorf("init: %v", ret)
	}
	defer n.Lib.Shutdown()
	root := n.SysRoot
	if root == "" {
		root = "/"
	}
	has := func(symbol string) bool { return n.Lib.Extensions().LookupSymbol(symbol) == nil }

	count, ret := n.Lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("count devices: %v", ret)
	}
	t := &Topology{Source: "nvml"}
	handles := make([]nvml.Device, count)
	for i := range count {
		h, ret := n.Lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("device %d: %v", i, ret)
		}
		handles[i] = h
		d := Device{Index: i, NUMANode: -1}
		if v, ret := h.GetName(); ret == nvml.SUCCESS {
			d.Name = v
		}
		if v, ret := h.GetUUID(); ret == nvml.SUCCESS {
			d.UUID = v
		}
		if v, ret := h.GetMemoryInfo(); ret == nvml.SUCCESS {
			d.Memory = v.Total
		}
		if v, ret := h.GetPciInfo(); ret == nvml.SUCCESS {
			d.BusID = pciBusID(v)
		}
		pciDir := filepath.Join(root, "sys/bus/pci/devices", d.BusID)
		if has("nvmlDeviceGetNumaNodeId") {
			if node, ret := h.GetNumaNodeId(); ret == nvml.SUCCESS {
				d.NUMANode = node
			}
		}
		if d.NUMANode < 0 && d.BusID != "" {
			d.NUMANode = readNUMANode(pciDir)
		}
		if words, ret := h.GetCpuAffinity(affinity.MaxCPU); ret == nvml.SUCCESS {
			d.CPUs = fromWords(words)
		}
		if d.CPUs.IsEmpty() && d.BusID != "" {
			d.CPUs, _ = readCPUs(filepath.Join(pciDir, "local_cpulist"))
		}
		if has("nvmlDeviceGetMigMode") {
			if cur, _, ret := h.GetMigMode(); ret == nvml.SUCCESS {
				d.MIG = MIGDisabled
				if cur == nvml.DEVICE_MIG_ENABLE {
					d.MIG = MIGEnabled
				}
			}
		}
		t.Devices = append(t.Devices, d)
	}

	// PCIe paths from the common ancestors.
	t.Links = make([][]Link, count)
	for i := range t.Links {
		t.Links[i] = make([]Link, count)
		t.Links[i][i] = Link{Kind: LinkSelf}
	}
	for i := range count {
		for j := i + 1; j < count; j++ {
			l := Link{Kind: LinkUnknown}
			if level, ret := handles[i].GetTopologyCommonAncestor(handles[j]); ret == nvml.SUCCESS {
				l = levelLink(level)
			}
			t.Links[i][j], t.Links[j][i] = l, l
		}
	}

	// NVLinks, direct and through switches.
	byBus := make(map[string]int, count)
	for i, d := range t.Devices {
		if d.BusID != "" {
			byBus[d.BusID] = i
		}
	}
	typed := has("nvmlDeviceGetNvLinkRemoteDeviceType")
	direct := make([][]int, count)
	switched := make([]int, count)
	for i, h := range handles {
		direct[i] = make([]int, count)
		for link := range nvml.NVLINK_MAX_LINKS {
			state, ret := h.GetNvLinkState(link)
			if ret != nvml.SUCCESS || state != nvml.FEATURE_ENABLED {
				continue // no such link (PCIe cards: NOT_SUPPORTED), or down
			}
			remote, ret := h.GetNvLinkRemotePciInfo(link)
			if ret != nvml.SUCCESS {
				continue
			}
			peer, isGPU := byBus[pciBusID(remote)]
			kind := nvml.NVLINK_DEVICE_TYPE_UNKNOWN
			if typed {
				if k, ret := h.GetNvLinkRemoteDeviceType(link); ret == nvml.SUCCESS {
					kind = k
				}
			}
			switch {
			case kind == nvml.NVLINK_DEVICE_TYPE_GPU || kind == nvml.NVLINK_DEVICE_TYPE_UNKNOWN && isGPU:
				if isGPU && peer != i {
					direct[i][peer]++
				}
			case kind == nvml.NVLINK_DEVICE_TYPE_SWITCH || kind == nvml.NVLINK_DEVICE_TYPE_UNKNOWN && !typed:
				switched[i]++ // a remote end that is no GPU of ours: an NVSwitch
			}
			// NVLINK_DEVICE_TYPE_IBMNPU: a link to the CPU, not between GPUs.
		}
	}
	for i := range count {
		for j := i + 1; j < count; j++ {
			// Both ends see the same direct links; through switches a pair
			// has the bandwidth of the GPU with fewer switch links.
			nv := max(direct[i][j], direct[j][i]) + min(switched[i], switched[j])
			if nv > 0 {
				l := Link{Kind: LinkNV, NVLinks: nv}
				t.Links[i][j], t.Links[j][i] = l, l
			}
		}
	}
	return t, nil
}

// levelLink maps NVML's common-ancestor level to nvidia-smi's label.
func levelLink(level nvml.GpuTopologyLevel) Link {
	switch level {
	case nvml.TOPOLOGY_INTERNAL, nvml.TOPOLOGY_SINGLE:
		return Link{Kind: LinkPIX}
	case nvml.TOPOLOGY_MULTIPLE:
		return Link{Kind: LinkPXB}
	case nvml.TOPOLOGY_HOSTBRIDGE:
		return Link{Kind: LinkPHB}
	case nvml.TOPOLOGY_NODE:
		return Link{Kind: LinkNODE}
	case nvml.TOPOLOGY_SYSTEM:
		return Link{Kind: LinkSYS}
	}
	return Link{Kind: LinkUnknown}
}

// pciBusID returns the bus id of p in sysfs form ("0000:07:00.0"): from
// BusId, else BusIdLegacy, else the domain, bus and device numbers.
func pciBusID(p nvml.PciInfo) string {
	s := cString(p.BusId[:])
	if s == "" {
		s = cString(p.BusIdLegacy[:])
	}
	if s == "" {
		if p.Domain == 0 && p.Bus == 0 && p.Device == 0 {
			return ""
		}
		return fmt.Sprintf("%04x:%02x:%02x.0", p.Domain, p.Bus, p.Device)
	}
	return normalBusID(s)
}

func cString(b []uint8) string {
	n := 0
	for n < len(b) && b[n] != 0 {
		n++
	}
	return string(b[:n])
}

// normalBusID writes "00000000:07:00.0" (NVML) as "0000:07:00.0" (sysfs),
// lower case; what it cannot parse it returns lower-cased.
func normalBusID(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	dom, rest, ok := strings.Cut(s, ":")
	if !ok {
		return s
	}
	d, err := strconv.ParseUint(dom, 16, 32)
	if err != nil || strings.Count(rest, ":") != 1 {
		return s
	}
	return fmt.Sprintf("%04x:%s", d, rest)
}

// fromWords reads NVML's CPU affinity bitmask: bit b of word w is CPU
// w*64+b (an unsigned long per word).
func fromWords(words []uint) affinity.CPUSet {
	var cpus []int
	for w, v := range words {
		for v != 0 {
			b := bits.TrailingZeros(v)
			if c := w*bits.UintSize + b; c < affinity.MaxCPU {
				cpus = append(cpus, c)
			}
			v &= v - 1
		}
	}
	return affinity.NewCPUSet(cpus...)
}
