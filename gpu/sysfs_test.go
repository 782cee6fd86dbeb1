package gpu

import (
	"bytes"
	"testing"
)

// TestSysfsFallback reads the 4-GPU PCIe box from a sysfs tree: the GPUs
// only (no bridge, audio function or NIC), in bus order, with NUMA nodes,
// CPUs and PCIe links equal to the fixture's, and a note that it is a
// fallback.
func TestSysfsFallback(t *testing.T) {
	root, _ := sysfsTree(t, "sysfs-pcie4")
	want, _, _ := load(t, "pcie4")
	got := Discover(root)
	if got.Source != "sysfs" || len(got.Devices) != len(want.Devices) {
		t.Fatalf("source %q, %d devices (note %q), want sysfs, %d", got.Source, len(got.Devices), got.Note, len(want.Devices))
	}
	for i, w := range want.Devices {
		g := got.Devices[i]
		if g.Index != i || g.BusID != w.BusID || g.NUMANode != w.NUMANode || !g.CPUs.Equal(w.CPUs) || g.Name != "NVIDIA [10de:1eb8]" {
			t.Errorf("device %d = %+v, want bus %s numa %d cpus %s", i, g, w.BusID, w.NUMANode, w.CPUs)
		}
		for j := range want.Devices {
			if got.Links[i][j] != want.Links[i][j] {
				t.Errorf("link %d-%d = %s, want %s", i, j, got.Links[i][j], want.Links[i][j])
			}
		}
	}
	var b bytes.Buffer
	if err := got.Write(&b); err != nil {
		t.Fatal(err)
	}
	golden(t, "sysfs-pcie4", b.String())
}

// TestPCIeLink classifies PCIe paths as nvidia-smi does.
func TestPCIeLink(t *testing.T) {
	sw := []string{"pci0000:00", "0000:00:01.0", "0000:01:00.0"} // root port, switch upstream port
	p := func(base []string, rest ...string) []string { return append(append([]string{}, base...), rest...) }
	for _, tc := range []struct {
		a, b       []string
		numaA, nmB int
		want       string
	}{
		{p(sw, "0000:02:08.0", "0000:03:00.0"), p(sw, "0000:02:10.0", "0000:04:00.0"), 0, 0, "PIX"},
		{p(sw, "0000:02:08.0", "0000:03:00.0", "0000:04:00.0", "0000:05:00.0"), p(sw, "0000:02:10.0", "0000:06:00.0"), 0, 0, "PXB"},
		{[]string{"pci0000:00", "0000:00:01.0", "0000:03:00.0"}, []string{"pci0000:00", "0000:00:02.0", "0000:04:00.0"}, 0, 0, "PHB"},
		{[]string{"pci0000:00", "0000:00:01.0", "0000:03:00.0"}, []string{"pci0000:40", "0000:40:01.0", "0000:41:00.0"}, 0, 0, "NODE"},
		{[]string{"pci0000:00", "0000:00:01.0", "0000:03:00.0"}, []string{"pci0000:80", "0000:80:01.0", "0000:81:00.0"}, 0, 1, "SYS"},
		{nil, nil, -1, -1, "NODE"}, // no paths, one (unknown) node
		{[]string{"pci0000:00", "0000:00:04.0"}, []string{"pci0000:00", "0000:00:05.0"}, 0, 0, "PHB"}, // a VM's flat bus
	} {
		if got := pcieLink(tc.a, tc.b, tc.numaA, tc.nmB).String(); got != tc.want {
			t.Errorf("%v - %v: %s, want %s", tc.a, tc.b, got, tc.want)
		}
	}
}
