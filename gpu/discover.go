package gpu

import (
	"path/filepath"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Prober is one way of finding a node's GPUs: NVML, Sysfs, or in tests a
// fixture. Probe returns the devices in NVML's (PCI bus) order with
// Index, Links and Source filled; zero devices is not an error.
type Prober interface {
	Name() string // "NVML", "sysfs": what Topology.Note calls it
	Probe() (*Topology, error)
}

// Discover finds this node's GPUs: NVML first, then, if NVML cannot be
// used or finds none, sysfs below sysRoot. With a sysRoot other than "/"
// (a fixture tree) NVML, which can only see the live machine, is not
// asked. It never fails: with no GPU it returns an empty Topology whose
// Note says why ("NVML: ...; sysfs: none").
func Discover(sysRoot string) *Topology {
	var probers []Prober
	if filepath.Clean(sysRoot) == "/" {
		probers = append(probers, NVML{Lib: nvml.New(), SysRoot: sysRoot})
	}
	return DiscoverWith(append(probers, Sysfs{Root: sysRoot})...)
}

// DiscoverWith asks each prober in turn and returns the first answer with
// a GPU, its Note prefixed by what the probers before it said. With no
// GPU it returns an empty Topology whose Note gathers every prober's
// reason.
func DiscoverWith(probers ...Prober) *Topology {
	var notes []string
	for _, p := range probers {
		t, err := p.Probe()
		switch {
		case err != nil:
			notes = append(notes, p.Name()+": "+err.Error())
			continue
		case len(t.Devices) == 0:
			notes = append(notes, p.Name()+": none")
			continue
		}
		if t.Note != "" {
			notes = append(notes, t.Note)
		}
		t.Note = strings.Join(notes, "; ")
		t.Total = len(t.Devices)
		return t
	}
	return &Topology{Devices: []Device{}, Links: [][]Link{}, Source: "none", Note: strings.Join(notes, "; ")}
}
