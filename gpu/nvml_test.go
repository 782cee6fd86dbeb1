package gpu

import (
	"bytes"
	"errors"
	"fmt"
	"math/bits"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"

	"hpctrain/affinity"
)

// dgxA100 is go-nvml's mock DGX A100 with what it leaves out filled in as
// a real DGX A100 answers (NVIDIA's DGX A100 User Guide, nvidia-smi topo
// -m): 12 NVLinks per GPU, each to one of 6 NVSwitches; 2 x EPYC 7742 in
// NPS4 mode, 8 NUMA nodes of 16 cores, GPUs 0,1 on node 3, 2,3 on 1, 4,5
// on 7, 6,7 on 5; the real bus ids; UUIDs fixed for the golden file (the
// mock draws random ones); GPU 7 in MIG mode.
func dgxA100() *dgxa100.Server {
	s := dgxa100.New()
	nodes := []int{3, 3, 1, 1, 7, 7, 5, 5}
	buses := []string{"07", "0f", "47", "4e", "87", "90", "b7", "bd"}
	for i, d := range s.Devices {
		dev := d.(*dgxa100.Device)
		dev.UUID = fmt.Sprintf("GPU-a100a100-0000-4000-8000-%012d", i)
		dev.PciBusID = "0000:" + buses[i] + ":00.0"
		var bus [32]uint8
		copy(bus[:], "00000000:"+strings.ToUpper(buses[i])+":00.0") // NVML's form
		dev.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
			return nvml.PciInfo{BusId: bus, PciDeviceId: 0x20B010DE}, nvml.SUCCESS
		}
		node := nodes[i]
		dev.GetNumaNodeIdFunc = func() (int, nvml.Return) { return node, nvml.SUCCESS }
		cpus := affinity.NewCPUSet()
		for c := range 16 {
			cpus = cpus.Union(affinity.NewCPUSet(16*node+c, 128+16*node+c))
		}
		dev.GetCpuAffinityFunc = func(int) ([]uint, nvml.Return) { return toWords(cpus), nvml.SUCCESS }
		dev.GetTopologyCommonAncestorFunc = func(other nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) {
			o := other.(*dgxa100.Device).Index
			switch {
			case nodes[o] == node:
				return nvml.TOPOLOGY_MULTIPLE, nvml.SUCCESS
			case (nodes[o] < 4) == (node < 4):
				return nvml.TOPOLOGY_NODE, nvml.SUCCESS
			}
			return nvml.TOPOLOGY_SYSTEM, nvml.SUCCESS
		}
		dev.GetNvLinkStateFunc = func(link int) (nvml.EnableState, nvml.Return) {
			if link >= 12 {
				return 0, nvml.ERROR_INVALID_ARGUMENT
			}
			return nvml.FEATURE_ENABLED, nvml.SUCCESS
		}
		dev.GetNvLinkRemotePciInfoFunc = func(link int) (nvml.PciInfo, nvml.Return) {
			var sw [32]uint8
			copy(sw[:], fmt.Sprintf("00000000:%02X:00.0", 0xc4+link/2)) // NVSwitch link/2
			return nvml.PciInfo{BusId: sw}, nvml.SUCCESS
		}
		dev.GetNvLinkRemoteDeviceTypeFunc = func(int) (nvml.IntNvLinkDeviceType, nvml.Return) {
			return nvml.NVLINK_DEVICE_TYPE_SWITCH, nvml.SUCCESS
		}
	}
	s.Devices[7].(*dgxa100.Device).MigMode = nvml.DEVICE_MIG_ENABLE
	return s
}

func toWords(s affinity.CPUSet) []uint {
	words := make([]uint, (affinity.MaxCPU+bits.UintSize-1)/bits.UintSize)
	for _, c := range s.CPUs() {
		words[c/bits.UintSize] |= 1 << (c % bits.UintSize)
	}
	return words
}

// TestMockDGXA100: discovery through NVML on the mock, its matrix
// (golden), and a placement of 8 ranks next to their GPUs.
func TestMockDGXA100(t *testing.T) {
	top := DiscoverWith(NVML{Lib: dgxA100(), SysRoot: t.TempDir()}, fakeProber{name: "sysfs", err: "must not be asked"})
	if top.Source != "nvml" || len(top.Devices) != 8 || top.Note != "" {
		t.Fatalf("source %q, %d devices, note %q", top.Source, len(top.Devices), top.Note)
	}
	d0 := top.Devices[0]
	if d0.Name != "Mock NVIDIA A100-SXM4-40GB" || d0.BusID != "0000:07:00.0" || d0.NUMANode != 3 ||
		d0.CPUs.String() != "48-63,176-191" || d0.Memory != 40<<30 || d0.MIG != MIGDisabled || top.Devices[7].MIG != MIGEnabled {
		t.Errorf("device 0: %+v; device 7 MIG %s", d0, top.Devices[7].MIG)
	}
	for i, row := range top.Links {
		for j, l := range row {
			if want := "NV12"; i != j && l.String() != want {
				t.Errorf("link %d-%d = %s, want %s (12 links through NVSwitches)", i, j, l, want)
			}
		}
	}
	var b bytes.Buffer
	if err := top.Write(&b); err != nil {
		t.Fatal(err)
	}
	cpu := cpuTopo(t, cpuShape{Sockets: 2, CoresPerSocket: 64, ThreadsPerCore: 2, NodesPerSocket: 4})
	b.WriteString("\n")
	if err := top.WritePlans(&b, cpu, affinity.CPUSet{}, 8, affinity.Request{PreferNUMA: -1}, Spec{}); err != nil {
		t.Fatal(err)
	}
	golden(t, "dgxa100-mock", b.String())
}

// TestNVMLMatchesFixtures: a mock that answers like each fixture machine
// (direct NVLinks between GPUs, PCIe ancestors) is read back as the
// fixture's matrix, also without the newer NVML symbols (NUMA node and
// CPUs then come from sysfs).
func TestNVMLMatchesFixtures(t *testing.T) {
	for _, name := range []string{"dgx1v", "pcie4", "l40s8-cvd67"} {
		for _, old := range []bool{false, true} {
			_, want, _ := load(t, name)
			root := t.TempDir()
			lib := mockOf(t, want, old, root)
			got, err := NVML{Lib: lib, SysRoot: root}.Probe()
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			for i := range want.Devices {
				w, g := want.Devices[i], got.Devices[i]
				if g.BusID != w.BusID || g.NUMANode != w.NUMANode || !g.CPUs.Equal(w.CPUs) || g.Memory != w.Memory || g.Name != w.Name {
					t.Errorf("%s (old driver %v): device %d = %+v, want %+v", name, old, i, g, w)
				}
				for j := range want.Devices {
					if got.Links[i][j] != want.Links[i][j] {
						t.Errorf("%s (old driver %v): link %d-%d = %s, want %s", name, old, i, j, got.Links[i][j], want.Links[i][j])
					}
				}
			}
		}
	}
}

// mockOf builds a mock NVML for the machine t describes. With old, the
// mock lacks nvmlDeviceGetNumaNodeId, nvmlDeviceGetMigMode and
// nvmlDeviceGetNvLinkRemoteDeviceType (their functions fail the test if
// called) and sysfs below root holds each GPU's numa_node and
// local_cpulist.
func mockOf(tb testing.TB, t *Topology, old bool, root string) *dgxa100.Server {
	s := dgxa100.New()
	n := len(t.Devices)
	s.DeviceGetCountFunc = func() (int, nvml.Return) { return n, nvml.SUCCESS }
	if old {
		s.LookupSymbolFunc = func(sym string) error {
			switch sym {
			case "nvmlDeviceGetNumaNodeId", "nvmlDeviceGetMigMode", "nvmlDeviceGetNvLinkRemoteDeviceType":
				return errors.New("undefined symbol " + sym)
			}
			return nil
		}
	}
	busOf := func(i int) [32]uint8 {
		var b [32]uint8
		copy(b[:], "0000"+t.Devices[i].BusID)
		return b
	}
	for i := range n {
		dev := s.Devices[i].(*dgxa100.Device)
		w := t.Devices[i]
		dev.Name, dev.UUID = w.Name, w.UUID
		dev.MemoryInfo = nvml.Memory{Total: w.Memory}
		dev.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) { return nvml.PciInfo{BusId: busOf(i)}, nvml.SUCCESS }
		dev.GetCpuAffinityFunc = func(int) ([]uint, nvml.Return) { return toWords(w.CPUs), nvml.SUCCESS }
		dev.GetNumaNodeIdFunc = func() (int, nvml.Return) { return w.NUMANode, nvml.SUCCESS }
		if old {
			dev.GetCpuAffinityFunc = func(int) ([]uint, nvml.Return) { return nil, nvml.ERROR_NOT_SUPPORTED }
			dev.GetNumaNodeIdFunc = func() (int, nvml.Return) { tb.Fatal("nvmlDeviceGetNumaNodeId called"); return 0, 0 }
			dev.GetMigModeFunc = func() (int, int, nvml.Return) { tb.Fatal("nvmlDeviceGetMigMode called"); return 0, 0, 0 }
			dir := filepath.Join(root, "sys/bus/pci/devices", w.BusID)
			os.MkdirAll(dir, 0o755)
			os.WriteFile(filepath.Join(dir, "numa_node"), []byte(fmt.Sprintln(w.NUMANode)), 0o644)
			os.WriteFile(filepath.Join(dir, "local_cpulist"), []byte(w.CPUs.String()+"\n"), 0o644)
		}
		dev.GetTopologyCommonAncestorFunc = func(other nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) {
			j := other.(*dgxa100.Device).Index
			switch l := t.Links[i][j]; l.Kind {
			case LinkPIX:
				return nvml.TOPOLOGY_SINGLE, nvml.SUCCESS
			case LinkPXB:
				return nvml.TOPOLOGY_MULTIPLE, nvml.SUCCESS
			case LinkPHB:
				return nvml.TOPOLOGY_HOSTBRIDGE, nvml.SUCCESS
			case LinkNODE:
				return nvml.TOPOLOGY_NODE, nvml.SUCCESS
			case LinkNV:
				if t.Devices[i].NUMANode == t.Devices[j].NUMANode {
					return nvml.TOPOLOGY_NODE, nvml.SUCCESS
				}
			}
			return nvml.TOPOLOGY_SYSTEM, nvml.SUCCESS
		}
		// NVLinks: link k of GPU i leads to the k-th peer, counted with
		// multiplicity, as in a hybrid cube mesh.
		var peers []int
		for j, l := range t.Links[i] {
			for range l.NVLinks {
				peers = append(peers, j)
			}
		}
		dev.GetNvLinkStateFunc = func(link int) (nvml.EnableState, nvml.Return) {
			if len(peers) == 0 {
				return 0, nvml.ERROR_NOT_SUPPORTED // a PCIe card
			}
			if link >= len(peers) {
				return nvml.FEATURE_DISABLED, nvml.SUCCESS
			}
			return nvml.FEATURE_ENABLED, nvml.SUCCESS
		}
		dev.GetNvLinkRemotePciInfoFunc = func(link int) (nvml.PciInfo, nvml.Return) {
			return nvml.PciInfo{BusId: busOf(peers[link])}, nvml.SUCCESS
		}
		dev.GetNvLinkRemoteDeviceTypeFunc = func(int) (nvml.IntNvLinkDeviceType, nvml.Return) {
			return nvml.NVLINK_DEVICE_TYPE_GPU, nvml.SUCCESS
		}
	}
	return s
}

// TestNVMLInitFails: a failing NVML is a reason in the Note, not an error,
// and sysfs is asked next.
func TestNVMLInitFails(t *testing.T) {
	s := dgxa100.New()
	s.InitFunc = func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }
	top := DiscoverWith(NVML{Lib: s}, Sysfs{Root: t.TempDir()})
	var b bytes.Buffer
	top.Write(&b)
	want := "no GPU found (NVML: cannot load libnvidia-ml.so.1, no NVIDIA driver here; sysfs: read " // then the missing directory
	if len(top.Devices) != 0 || !strings.HasPrefix(b.String(), want) {
		t.Errorf("got %q, want it to start %q", b.String(), want)
	}
	s.InitFunc = func() nvml.Return { return nvml.ERROR_DRIVER_NOT_LOADED }
	if _, err := (NVML{Lib: s}).Probe(); err == nil || !strings.Contains(err.Error(), "init: ERROR_DRIVER_NOT_LOADED") {
		t.Errorf("driver not loaded: %v", err)
	}
}

// TestDiscoverLive runs discovery on this machine: with no GPU (no driver
// here) it must say why, naming both NVML and sysfs; on a GPU machine the
// matrix must be well formed.
func TestDiscoverLive(t *testing.T) {
	top := Discover("/")
	if err := top.check(); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := top.Write(&b); err != nil {
		t.Fatal(err)
	}
	if len(top.Devices) == 0 && (!strings.HasPrefix(b.String(), "no GPU found (NVML: ") || !strings.Contains(b.String(), "; sysfs: ")) {
		t.Errorf("no GPU, but the message does not say why: %q", b.String())
	}
	t.Logf("%s", b.String())
}

func TestBusID(t *testing.T) {
	for in, want := range map[string]string{
		"00000000:07:00.0": "0000:07:00.0",
		"0000:8A:00.0":     "0000:8a:00.0",
		"00000001:C4:00.0": "0001:c4:00.0",
		"garbage":          "garbage",
	} {
		if got := normalBusID(in); got != want {
			t.Errorf("normalBusID(%q) = %q, want %q", in, got, want)
		}
	}
	if got := pciBusID(nvml.PciInfo{Domain: 0, Bus: 0x3b, Device: 0}); got != "0000:3b:00.0" {
		t.Errorf("from numbers: %q", got)
	}
	if got := fromWords([]uint{0b11, 0b11}).String(); got != "0-1,64-65" {
		t.Errorf("fromWords = %s", got)
	}
}
