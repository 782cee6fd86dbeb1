package gpu

import (
	"fmt"
	"strconv"
	"strings"
)

// Visible returns the view of t a CUDA program gets with
// CUDA_VISIBLE_DEVICES=value (set false: the variable is unset, and t
// itself is returned): the listed devices, in the order listed,
// renumbered from 0. Device.Index keeps NVML's number.
//
// An entry is a device index (in PCI bus order, CUDA's order with
// CUDA_DEVICE_ORDER=PCI_BUS_ID) or a UUID or unique UUID prefix starting
// "GPU-". As in CUDA, an empty value shows no GPU, and the list ends at a
// negative index: "-1" is the usual way to hide every GPU, and SLURM's
// "NoDevFiles" (a job given no GPU on a GPU node) shows none too. Where CUDA
// silently drops an entry naming no device and every entry after it, this
// returns an error naming the entry: an index past the last device, a
// UUID no device has or several have, a device listed twice, a MIG
// instance ("MIG-..."; whole GPUs only), or anything else.
//
// On a node without GPUs the value is not read: there is nothing it could
// name, and the CPU path runs as it would without the variable.
func (t *Topology) Visible(value string, set bool) (*Topology, error) {
	if !set || len(t.Devices) == 0 {
		return t, nil
	}
	fail := func(entry, why string) (*Topology, error) {
		return nil, fmt.Errorf("CUDA_VISIBLE_DEVICES=%q: entry %q %s", value, entry, why)
	}
	entries := strings.Split(value, ",")
	if strings.TrimSpace(value) == "NoDevFiles" {
		// Not an index or a UUID: CUDA finds no device by it.
		entries = nil
	}
	var pick []int
	seen := make(map[int]bool)
	for k, raw := range entries {
		e := strings.TrimSpace(raw)
		if e == "" {
			if k < len(entries)-1 {
				return fail(e, "is empty; CUDA would ignore it and every entry after it")
			}
			break // "" (no GPU) or a trailing comma
		}
		if n, err := strconv.Atoi(e); err == nil && n < 0 {
			break // CUDA stops at the first invalid index
		}
		i, why := t.lookup(e)
		if why != "" {
			return fail(e, why)
		}
		if seen[i] {
			return fail(e, fmt.Sprintf("repeats GPU %d, listed before", t.Devices[i].Index))
		}
		seen[i] = true
		pick = append(pick, i)
	}
	v := &Topology{Source: t.Source, Note: t.Note, CUDAVisibleDevices: &value, Total: t.Total,
		Devices: make([]Device, len(pick)), Links: make([][]Link, len(pick))}
	for a, i := range pick {
		v.Devices[a] = t.Devices[i]
		v.Links[a] = make([]Link, len(pick))
		for b, j := range pick {
			v.Links[a][b] = t.Links[i][j]
		}
	}
	return v, nil
}

// lookup finds the device an entry names; why says what is wrong when it
// names none.
func (t *Topology) lookup(e string) (int, string) {
	n := len(t.Devices)
	have := fmt.Sprintf("this node has %d GPUs (0-%d)", n, n-1)
	switch {
	case n == 0:
		have = "this node has no GPU"
	case n == 1:
		have = "this node has 1 GPU (0)"
	}
	if i, err := strconv.Atoi(e); err == nil {
		if i >= n {
			return 0, "names no GPU: " + have + "; CUDA would hide it and every entry after it"
		}
		return i, ""
	}
	switch upper := strings.ToUpper(e); {
	case strings.HasPrefix(upper, "GPU-"):
		var found []int
		for i, d := range t.Devices {
			if d.UUID != "" && strings.HasPrefix(strings.ToUpper(d.UUID), upper) {
				found = append(found, i)
			}
		}
		switch {
		case len(found) == 1:
			return found[0], ""
		case len(found) > 1:
			return 0, fmt.Sprintf("is the start of %d GPUs' UUIDs (GPU %d and %d); give more of the UUID",
				len(found), t.Devices[found[0]].Index, t.Devices[found[1]].Index)
		case t.Source == "sysfs":
			return 0, "cannot be matched: UUIDs are unknown without NVML; use indices"
		}
		return 0, "matches no GPU's UUID: " + have + " (nvidia-smi -L lists their UUIDs)"
	case strings.HasPrefix(upper, "MIG-"):
		return 0, "is a MIG instance: hpctrain places whole GPUs; list GPU indices or GPU- UUIDs"
	}
	return 0, "is neither a GPU index nor a GPU- UUID"
}
