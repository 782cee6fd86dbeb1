package gpu

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"hpctrain/affinity"
)

// Device is one GPU as this process sees it.
type Device struct {
	// Index is NVML's number for the device, the one nvidia-smi shows
	// (PCI bus order). CUDA_VISIBLE_DEVICES renumbers the devices a
	// process sees, not this.
	Index int    `json:"index"`
	Name  string `json:"name"`           // "NVIDIA A100-SXM4-40GB"; from sysfs "NVIDIA [10de:20b0]"
	UUID  string `json:"uuid,omitempty"` // "GPU-..."; empty from sysfs
	// Memory is the device memory in bytes; 0 when unknown (sysfs).
	Memory uint64 `json:"memory_bytes"`
	// BusID is the PCI address in sysfs form, "0000:07:00.0" (NVML's
	// eight-digit domain is shortened to four).
	BusID string `json:"bus_id"`
	// NUMANode is the node of the device's PCIe root; -1 when unknown.
	NUMANode int `json:"numa_node"`
	// CPUs are the CPUs nearest the device: NVML's CPU affinity, or
	// sysfs local_cpulist; empty when unknown.
	CPUs affinity.CPUSet `json:"cpus"`
	MIG  MIG             `json:"mig"`
}

// MIG is a device's Multi-Instance GPU mode.
type MIG uint8

const (
	MIGUnsupported MIG = iota // the device has no MIG (or NVML cannot say)
	MIGDisabled
	MIGEnabled
)

var migNames = [...]string{MIGUnsupported: "n/a", MIGDisabled: "disabled", MIGEnabled: "enabled"}

// String returns "n/a", "disabled" or "enabled".
func (m MIG) String() string {
	if int(m) >= len(migNames) {
		return fmt.Sprintf("MIG(%d)", int(m))
	}
	return migNames[m]
}

// MarshalText implements encoding.TextMarshaler.
func (m MIG) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (m *MIG) UnmarshalText(b []byte) error {
	for i, name := range migNames {
		if string(b) == name {
			*m = MIG(i)
			return nil
		}
	}
	return fmt.Errorf("unknown MIG mode %q: want n/a, disabled or enabled", b)
}

// LinkKind is how data travels between two GPUs, in nvidia-smi topo -m's
// terms. Kinds are ordered from worst to best.
type LinkKind uint8

const (
	LinkUnknown LinkKind = iota // "N/A": discovery could not tell
	LinkSYS                     // PCIe and the SMP interconnect between NUMA nodes (QPI/UPI, Infinity Fabric)
	LinkNODE                    // PCIe and the interconnect between PCIe host bridges within a NUMA node
	LinkPHB                     // PCIe and a PCIe host bridge (typically the CPU)
	LinkPXB                     // multiple PCIe bridges, not the host bridge
	LinkPIX                     // at most a single PCIe bridge
	LinkNV                      // a bonded set of NVLinks (Link.NVLinks of them), directly or through NVSwitches
	LinkSelf                    // "X": the device itself
)

var kindNames = [...]string{LinkUnknown: "N/A", LinkSYS: "SYS", LinkNODE: "NODE", LinkPHB: "PHB",
	LinkPXB: "PXB", LinkPIX: "PIX", LinkNV: "NV", LinkSelf: "X"}

// Link is the connection between two GPUs.
type Link struct {
	Kind    LinkKind
	NVLinks int // for LinkNV: the bonded NVLinks, >= 1
}

// String returns the nvidia-smi topo -m label: X, NV#, PIX, PXB, PHB,
// NODE, SYS, or N/A.
func (l Link) String() string {
	if l.Kind == LinkNV {
		return "NV" + strconv.Itoa(l.NVLinks)
	}
	if int(l.Kind) >= len(kindNames) {
		return fmt.Sprintf("LinkKind(%d)", int(l.Kind))
	}
	return kindNames[l.Kind]
}

// ParseLink reads a label String writes.
func ParseLink(s string) (Link, error) {
	s = strings.TrimSpace(s)
	if n, ok := strings.CutPrefix(s, "NV"); ok && n != "" {
		v, err := strconv.Atoi(n)
		if err != nil || v < 1 || v > 1000 {
			return Link{}, fmt.Errorf("bad link %q: NV must be followed by the number of NVLinks", s)
		}
		return Link{Kind: LinkNV, NVLinks: v}, nil
	}
	for k, name := range kindNames {
		if s == name && LinkKind(k) != LinkNV {
			return Link{Kind: LinkKind(k)}, nil
		}
	}
	return Link{}, fmt.Errorf("bad link %q: want X, NV#, PIX, PXB, PHB, NODE, SYS or N/A", s)
}

// MarshalText implements encoding.TextMarshaler with String.
func (l Link) MarshalText() ([]byte, error) { return []byte(l.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler with ParseLink.
func (l *Link) UnmarshalText(b []byte) error {
	v, err := ParseLink(string(b))
	if err != nil {
		return err
	}
	*l = v
	return nil
}

// rank orders links for choosing GPUs: higher is better; every NVLink
// beats every PCIe path, and more NVLinks beat fewer.
func (l Link) rank() int {
	if l.Kind == LinkNV {
		return int(LinkNV) + l.NVLinks - 1
	}
	return int(l.Kind)
}

// Topology is the GPUs of a node and the links between them.
type Topology struct {
	// Devices in CUDA's numbering: Devices[i] is device i of this process.
	Devices []Device `json:"devices"`
	// Links[i][j] is how Devices[i] reaches Devices[j].
	Links [][]Link `json:"links"`
	// Source is what found the devices: "nvml", "sysfs" or "fixture".
	Source string `json:"source"`
	// Note says, for a person, what discovery could not learn and why: a
	// fallback to sysfs, or why no GPU was found ("NVML: ...; sysfs:
	// none").
	Note string `json:"note,omitempty"`
	// CUDAVisibleDevices is the CUDA_VISIBLE_DEVICES value this view was
	// made with (Visible); nil when it was not set.
	CUDAVisibleDevices *string `json:"cuda_visible_devices,omitempty"`
	// Total is the number of GPUs on the node before CUDA_VISIBLE_DEVICES.
	Total int `json:"total"`
}

// Decode reads a Topology in the JSON form it encodes to (`hpctrain topo
// -gpu -json`, the fixtures in testdata) and checks it: a link row per
// device, Self exactly on the diagonal, symmetric.
func Decode(r io.Reader) (*Topology, error) {
	var t Topology
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&t); err != nil {
		return nil, fmt.Errorf("decode gpu topology: %w", err)
	}
	if t.Total == 0 {
		t.Total = len(t.Devices)
	}
	if err := t.check(); err != nil {
		return nil, fmt.Errorf("decode gpu topology: %w", err)
	}
	return &t, nil
}

func (t *Topology) check() error {
	n := len(t.Devices)
	if len(t.Links) != n {
		return fmt.Errorf("%d devices but %d rows of links", n, len(t.Links))
	}
	for i, row := range t.Links {
		if len(row) != n {
			return fmt.Errorf("links row %d has %d entries for %d devices", i, len(row), n)
		}
		for j, l := range row {
			if (l.Kind == LinkSelf) != (i == j) {
				return fmt.Errorf("link %d-%d is %s: X belongs on the diagonal and only there", i, j, l)
			}
			if l != t.Links[j][i] {
				return fmt.Errorf("link %d-%d is %s but %d-%d is %s", i, j, l, j, i, t.Links[j][i])
			}
		}
	}
	for i, d := range t.Devices {
		if d.NUMANode < -1 {
			return fmt.Errorf("device %d: numa node %d (want -1 for unknown, or >= 0)", i, d.NUMANode)
		}
	}
	return nil
}

// Label names visible device i for -report-bindings: "gpu 0 (bus
// 0000:07:00.0, numa 0)", with NVML's number added where
// CUDA_VISIBLE_DEVICES renumbered it: "gpu 0 = nvidia-smi 6 (...)".
func (t *Topology) Label(i int) string {
	d := t.Devices[i]
	alias := ""
	if d.Index != i {
		alias = fmt.Sprintf(" = nvidia-smi %d", d.Index)
	}
	return fmt.Sprintf("gpu %d%s (bus %s, numa %s)", i, alias, d.BusID, numaString(d.NUMANode))
}

func numaString(n int) string {
	if n < 0 {
		return "N/A"
	}
	return strconv.Itoa(n)
}
