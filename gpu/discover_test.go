package gpu

import (
	"errors"
	"strings"
	"testing"
)

// fakeProber answers with a fixed topology or error.
type fakeProber struct {
	name string
	t    *Topology
	err  string
}

func (f fakeProber) Name() string { return f.name }

func (f fakeProber) Probe() (*Topology, error) {
	if f.err != "" {
		return nil, errors.New(f.err)
	}
	if f.t == nil {
		return &Topology{}, nil
	}
	return f.t, nil
}

// TestDiscoverWith: the first prober with a GPU answers; the reasons of
// those before it lead its Note.
func TestDiscoverWith(t *testing.T) {
	pcie, _, _ := load(t, "pcie4")
	pcie.Note = "fallback"
	got := DiscoverWith(fakeProber{name: "NVML", err: "init: Driver Not Loaded"}, fakeProber{name: "sysfs", t: pcie})
	if len(got.Devices) != 4 || got.Note != "NVML: init: Driver Not Loaded; fallback" || got.Total != 4 {
		t.Errorf("fallback: %d devices, note %q, total %d", len(got.Devices), got.Note, got.Total)
	}
	got = DiscoverWith(fakeProber{name: "NVML"}, fakeProber{name: "sysfs"})
	if len(got.Devices) != 0 || got.Note != "NVML: none; sysfs: none" {
		t.Errorf("none: %d devices, note %q", len(got.Devices), got.Note)
	}
	a, err := got.Assign(4, Spec{})
	if err != nil || a.GPUs != nil || got.Near(a, nil) != nil {
		t.Errorf("no GPU must mean no assignment and no error: %+v, %v", a, err)
	}
	if !strings.Contains(Discover(t.TempDir()).Note, "sysfs: read ") {
		t.Errorf("a fixture root without sys/bus/pci: %q", Discover(t.TempDir()).Note)
	}
}
