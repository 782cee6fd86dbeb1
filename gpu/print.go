package gpu

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"hpctrain/affinity"
)

// legend is nvidia-smi topo -m's, word for word.
const legend = `Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
`

// Write prints t for a person: a summary line (with Note), the matrix and
// its legend (WriteMatrix), then the devices (WriteDevices). With no
// device it prints one line: "no GPU found (NVML: ...; sysfs: none)", or
// "no GPU visible (CUDA_VISIBLE_DEVICES=...)".
func (t *Topology) Write(w io.Writer) error {
	ew := &errWriter{w: w}
	if len(t.Devices) == 0 {
		if t.CUDAVisibleDevices != nil {
			ew.printf("no GPU visible (CUDA_VISIBLE_DEVICES=%q hides all %s)\n", *t.CUDAVisibleDevices, plural(t.Total, "GPU"))
		} else {
			ew.printf("no GPU found (%s)\n", t.Note)
		}
		return ew.err
	}
	by := map[string]string{"nvml": "NVML", "sysfs": "sysfs", "fixture": "a fixture"}[t.Source]
	if by == "" {
		by = t.Source
	}
	ew.printf("%s found by %s", plural(t.Total, "GPU"), by)
	if t.Note != "" {
		ew.printf(" (%s)", t.Note)
	}
	if t.CUDAVisibleDevices != nil {
		ew.printf(", %d visible with CUDA_VISIBLE_DEVICES=%q, renumbered from 0", len(t.Devices), *t.CUDAVisibleDevices)
	}
	ew.printf("\n\n")
	if ew.err != nil {
		return ew.err
	}
	if err := t.WriteMatrix(w); err != nil {
		return err
	}
	ew.printf("\n")
	if ew.err != nil {
		return ew.err
	}
	return t.WriteDevices(w)
}

// WriteMatrix prints the GPU-GPU and GPU-CPU matrix in nvidia-smi topo
// -m's notation, columns aligned with spaces rather than tabs:
//
//	      GPU0  GPU1  CPU Affinity  NUMA Affinity
//	GPU0  X     NV2   0-19,40-59    0
//
// followed by the legend. Unknown values print as N/A.
func (t *Topology) WriteMatrix(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	ew := &errWriter{w: tw}
	for i := range t.Devices {
		ew.printf("\tGPU%d", i)
	}
	ew.printf("\tCPU Affinity\tNUMA Affinity\n")
	for i, d := range t.Devices {
		ew.printf("GPU%d", i)
		for _, l := range t.Links[i] {
			ew.printf("\t%s", l)
		}
		cpus := d.CPUs.String()
		if cpus == "" {
			cpus = "N/A"
		}
		ew.printf("\t%s\t%s\n", cpus, numaString(d.NUMANode))
	}
	if ew.err != nil {
		return ew.err
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\n%s", legend)
	return err
}

// WriteDevices prints one line per device: "GPU0: NVIDIA A100-SXM4-40GB,
// 40960 MiB, bus 0000:07:00.0, numa 3, MIG disabled, GPU-...", with
// NVML's number where CUDA_VISIBLE_DEVICES renumbered it ("GPU0 =
// nvidia-smi GPU6: ...").
func (t *Topology) WriteDevices(w io.Writer) error {
	ew := &errWriter{w: w}
	for i, d := range t.Devices {
		ew.printf("GPU%d", i)
		if d.Index != i {
			ew.printf(" = nvidia-smi GPU%d", d.Index)
		}
		parts := []string{d.Name}
		if d.Memory > 0 {
			parts = append(parts, fmt.Sprintf("%d MiB", d.Memory>>20))
		}
		parts = append(parts, "bus "+d.BusID, "numa "+numaString(d.NUMANode), "MIG "+d.MIG.String())
		if d.UUID != "" {
			parts = append(parts, d.UUID)
		}
		ew.printf(": %s\n", strings.Join(parts, ", "))
	}
	return ew.err
}

// WritePlans prints how np local ranks would be placed on this node: the
// reason for their GPUs, then per rank its cores (planned on cpu within
// mask with r, r.Near filled from the assignment) and its GPU:
// "local 0: cores 0-4 numa 0 threads 5, gpu 0 (bus 0000:06:00.0, numa 0)".
func (t *Topology) WritePlans(w io.Writer, cpu *affinity.Topology, mask affinity.CPUSet, np int, r affinity.Request, s Spec) error {
	a, err := t.Assign(np, s)
	if err != nil {
		return err
	}
	r.LocalSize = np
	r.Near = t.Near(a, cpu)
	plans, err := cpu.PlanAll(mask, r)
	if err != nil {
		return err
	}
	ew := &errWriter{w: w}
	if a.Reason != "" {
		ew.printf("%s\n", a.Reason)
	}
	if a.Warning != "" {
		ew.printf("warning: %s\n", a.Warning)
	}
	for i, p := range plans {
		if a.GPUs != nil {
			p.Device = t.Label(a.GPUs[i])
		}
		ew.printf("local %d: %s\n", i, p)
		if p.Warning != "" {
			ew.printf("  warning: %s\n", p.Warning)
		}
	}
	return ew.err
}

// errWriter keeps the first write error, so printing code stays linear.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) printf(format string, args ...any) {
	if e.err == nil {
		_, e.err = fmt.Fprintf(e.w, format, args...)
	}
}
