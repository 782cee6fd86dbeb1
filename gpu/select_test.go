package gpu

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"hpctrain/affinity"
)

func mustSpec(t *testing.T, gpus string, share bool) Spec {
	t.Helper()
	s, err := ParseSpec(gpus, share)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestAssign: which GPU each local rank drives, by fixture and request,
// and why.
func TestAssign(t *testing.T) {
	for _, tc := range []struct {
		name, fixture string
		ranks         int
		gpus          string
		share         bool
		want          []int
		reason        string // substring
	}{
		// One rank per GPU: local rank i drives GPU i.
		{"dgx1v 8 ranks", "dgx1v", 8, "", false, []int{0, 1, 2, 3, 4, 5, 6, 7}, "local rank i drives GPU i"},
		{"pcie4 4 ranks", "pcie4", 4, "", false, []int{0, 1, 2, 3}, "local rank i drives GPU i"},
		// Fewer ranks than GPUs: the best-linked set.
		{"dgx1v pair: NV2 over NV1", "dgx1v", 2, "", false, []int{0, 3},
			"2 local ranks on 8 GPUs: chose GPUs 0,3 (links NV2) over the first 2, GPUs 0,1 (links NV1)"},
		{"dgx1v three: two NV2 pairs", "dgx1v", 3, "", false, []int{0, 2, 3},
			"chose GPUs 0,2,3 (links NV2 x2, NV1) over the first 3, GPUs 0,1,2 (links NV2, NV1 x2)"},
		{"dgx1v four: one NVLinked socket", "dgx1v", 4, "", false, []int{0, 1, 2, 3},
			"GPUs 0,1,2,3 (links NV2 x3, NV1 x3), no other set is better linked"},
		{"dgx1v one", "dgx1v", 1, "", false, []int{0}, "1 local rank on 8 GPUs: GPU 0"},
		{"pcie4 pair: PIX over SYS", "pcie4", 2, "", false, []int{0, 1}, "GPUs 0,1 (links PIX), no other set is better linked"},
		{"pcie4 three", "pcie4", 3, "", false, []int{0, 1, 2}, "GPUs 0,1,2 (links PIX, SYS x2)"},
		{"l40s8 all eight, pair", "l40s8-all", 2, "", false, []int{0, 1}, "links PIX"},
		{"l40s8 four: PIX+PXB beat PIX+NODE", "l40s8-all", 4, "", false, []int{0, 1, 2, 3}, "links PIX x2, PXB x4"},
		// CUDA_VISIBLE_DEVICES=6,7: two ranks drive the visible 0 and 1.
		{"l40s8 cvd 6,7", "l40s8-cvd67", 2, "", false, []int{0, 1}, "2 local ranks on 2 GPUs"},
		// Explicit map, sharing.
		{"map", "pcie4", 4, "3,2,1,0", false, []int{3, 2, 1, 0}, "gpus = 3,2,1,0"},
		{"map longer than ranks", "pcie4", 2, "2,3,0,1", false, []int{2, 3}, ""},
		{"share", "l40s8-cvd67", 4, "", true, []int{0, 1, 0, 1}, "4 local ranks share 2 GPUs (gpu_share): local rank i drives GPU i mod 2"},
		{"share in map", "pcie4", 2, "1,1", true, []int{1, 1}, ""},
		{"none", "pcie4", 4, "none", false, nil, "no GPU used"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			top := fixtureTopology(t, tc.fixture)
			a, err := top.Assign(tc.ranks, mustSpec(t, tc.gpus, tc.share))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(a.GPUs, tc.want) {
				t.Errorf("GPUs %v, want %v (%s)", a.GPUs, tc.want, a.Reason)
			}
			if !strings.Contains(a.Reason, tc.reason) {
				t.Errorf("reason %q, want it to contain %q", a.Reason, tc.reason)
			}
		})
	}
}

// fixtureTopology is load's visible topology; "l40s8-all" is l40s8-cvd67
// without its CUDA_VISIBLE_DEVICES.
func fixtureTopology(t *testing.T, name string) *Topology {
	if name == "l40s8-all" {
		_, all, _ := load(t, "l40s8-cvd67")
		return all
	}
	v, _, _ := load(t, name)
	return v
}

// TestCPUsNearGPU: each rank's cores come from its GPU's NUMA node, ranks
// on one node split its cores, and -report-bindings names the GPU.
func TestCPUsNearGPU(t *testing.T) {
	for _, tc := range []struct {
		fixture string
		ranks   int
		gpus    string
		bind    affinity.Policy
		want    []string // each rank's String(): cores and GPU
	}{
		{"dgx1v", 4, "", affinity.Cores, []string{ // all four GPUs on socket 0: 5 of its 20 cores each
			"cores 0-4 numa 0 threads 5, gpu 0 (bus 0000:06:00.0, numa 0)",
			"cores 5-9 numa 0 threads 5, gpu 1 (bus 0000:07:00.0, numa 0)",
			"cores 10-14 numa 0 threads 5, gpu 2 (bus 0000:0a:00.0, numa 0)",
			"cores 15-19 numa 0 threads 5, gpu 3 (bus 0000:0b:00.0, numa 0)"}},
		{"dgx1v", 8, "", affinity.Cores, []string{
			"cores 0-4 numa 0 threads 5, gpu 0 (bus 0000:06:00.0, numa 0)",
			"cores 5-9 numa 0 threads 5, gpu 1 (bus 0000:07:00.0, numa 0)",
			"cores 10-14 numa 0 threads 5, gpu 2 (bus 0000:0a:00.0, numa 0)",
			"cores 15-19 numa 0 threads 5, gpu 3 (bus 0000:0b:00.0, numa 0)",
			"cores 20-24 numa 1 threads 5, gpu 4 (bus 0000:85:00.0, numa 1)",
			"cores 25-29 numa 1 threads 5, gpu 5 (bus 0000:86:00.0, numa 1)",
			"cores 30-34 numa 1 threads 5, gpu 6 (bus 0000:89:00.0, numa 1)",
			"cores 35-39 numa 1 threads 5, gpu 7 (bus 0000:8a:00.0, numa 1)"}},
		{"dgx1v", 2, "4,7", affinity.Cores, []string{ // both on socket 1, rank 0 too
			"cores 20-29 numa 1 threads 10, gpu 4 (bus 0000:85:00.0, numa 1)",
			"cores 30-39 numa 1 threads 10, gpu 7 (bus 0000:8a:00.0, numa 1)"}},
		{"pcie4", 4, "", affinity.Cores, []string{
			"cores 0-3 numa 0 threads 4, gpu 0 (bus 0000:03:00.0, numa 0)",
			"cores 4-7 numa 0 threads 4, gpu 1 (bus 0000:04:00.0, numa 0)",
			"cores 8-11 numa 1 threads 4, gpu 2 (bus 0000:82:00.0, numa 1)",
			"cores 12-15 numa 1 threads 4, gpu 3 (bus 0000:83:00.0, numa 1)"}},
		{"pcie4", 2, "2,3", affinity.NUMA, []string{
			"cores 8-15,24-31 numa 1 threads 4, gpu 2 (bus 0000:82:00.0, numa 1)",
			"cores 8-15,24-31 numa 1 threads 4, gpu 3 (bus 0000:83:00.0, numa 1)"}},
		{"l40s8-cvd67", 2, "", affinity.Cores, []string{ // GPUs 6,7 on socket 1: not cores 0-15
			"cores 16-23 numa 1 threads 8, gpu 0 = nvidia-smi 6 (bus 0000:c3:00.0, numa 1)",
			"cores 24-31 numa 1 threads 8, gpu 1 = nvidia-smi 7 (bus 0000:c4:00.0, numa 1)"}},
	} {
		top, _, cpu := load(t, tc.fixture)
		a, err := top.Assign(tc.ranks, mustSpec(t, tc.gpus, false))
		if err != nil {
			t.Fatal(err)
		}
		req := affinity.Request{LocalSize: tc.ranks, Policy: tc.bind, PreferNUMA: -1, Near: top.Near(a, cpu)}
		plans, err := cpu.PlanAll(affinity.CPUSet{}, req)
		if err != nil {
			t.Fatal(err)
		}
		for i, p := range plans {
			p.Device = top.Label(a.GPUs[i])
			if p.String() != tc.want[i] || p.Warning != "" {
				t.Errorf("%s %d ranks %s: local %d = %q (warning %q), want %q", tc.fixture, tc.ranks, tc.gpus, i, p, p.Warning, tc.want[i])
			}
			if d := top.Devices[a.GPUs[i]]; tc.bind == affinity.Cores && !p.CPUs.IsSubset(d.CPUs) {
				t.Errorf("%s: local %d cores %s outside its GPU's cpus %s", tc.fixture, i, p.CPUs, d.CPUs)
			}
		}
	}
}

// TestNearFromNUMANode: a device without a CPU mask (sysfs without
// local_cpulist) is near its NUMA node's CPUs.
func TestNearFromNUMANode(t *testing.T) {
	top, _, cpu := load(t, "pcie4")
	top.Devices[3].CPUs = affinity.CPUSet{}
	top.Devices[2].CPUs, top.Devices[2].NUMANode = affinity.CPUSet{}, -1
	near := top.Near(Assignment{GPUs: []int{3, 2}}, cpu)
	if near[0].String() != "8-15,24-31" || !near[1].IsEmpty() {
		t.Errorf("near %v, want [8-15,24-31 (node 1), empty (unknown)]", near)
	}
	if top.Near(Assignment{}, cpu) != nil {
		t.Errorf("no GPUs, yet near sets")
	}
}

// TestBadInput: each mistake is one line naming the culprit.
func TestBadInput(t *testing.T) {
	dgx, _, _ := load(t, "dgx1v")
	_, l40all, _ := load(t, "l40s8-cvd67")
	l40, _, _ := load(t, "l40s8-cvd67")
	none := DiscoverWith(fakeProber{name: "NVML", err: "cannot load libnvidia-ml.so.1, no NVIDIA driver here"}, fakeProber{name: "sysfs"})
	for _, tc := range []struct {
		name string
		err  func() error
		want string
	}{
		{"CUDA_VISIBLE_DEVICES names a missing index", func() error { _, err := l40all.Visible("6,9", true); return err },
			`CUDA_VISIBLE_DEVICES="6,9": entry "9" names no GPU: this node has 8 GPUs (0-7); CUDA would hide it and every entry after it`},
		{"CUDA_VISIBLE_DEVICES names a missing UUID", func() error { _, err := l40all.Visible("GPU-deadbeef", true); return err },
			`CUDA_VISIBLE_DEVICES="GPU-deadbeef": entry "GPU-deadbeef" matches no GPU's UUID: this node has 8 GPUs (0-7) (nvidia-smi -L lists their UUIDs)`},
		{"CUDA_VISIBLE_DEVICES with an ambiguous UUID prefix", func() error { _, err := l40all.Visible("GPU-1405e000", true); return err },
			`entry "GPU-1405e000" is the start of 8 GPUs' UUIDs (GPU 0 and 1); give more of the UUID`},
		{"CUDA_VISIBLE_DEVICES repeats a GPU", func() error { _, err := l40all.Visible("6,7,6", true); return err },
			`CUDA_VISIBLE_DEVICES="6,7,6": entry "6" repeats GPU 6, listed before`},
		{"CUDA_VISIBLE_DEVICES with a MIG instance", func() error {
			_, err := l40all.Visible("MIG-0b2a31e3-5d2b-5b6c-9b7d-6ad0ad5bc7c2", true)
			return err
		}, "is a MIG instance: hpctrain places whole GPUs"},
		{"CUDA_VISIBLE_DEVICES junk", func() error { _, err := l40all.Visible("0,gpu1", true); return err },
			`entry "gpu1" is neither a GPU index nor a GPU- UUID`},
		{"CUDA_VISIBLE_DEVICES with an empty entry", func() error { _, err := l40all.Visible("0,,1", true); return err },
			`entry "" is empty`},
		{"more local ranks than GPUs", func() error { _, err := l40.Assign(4, Spec{}); return err },
			`4 local ranks but 2 GPUs (0-1) visible with CUDA_VISIBLE_DEVICES="6,7": each rank needs a GPU of its own; use -gpu-share to let ranks share GPUs (MPS), -gpus none to use none, or start at most 2 ranks per node`},
		{"-gpus with a duplicate", func() error { _, err := ParseSpec("0,1,1,2", false); return err },
			"GPU 1 is given to local ranks 1 and 2: each rank needs a GPU of its own (add -gpu-share to let ranks share one, e.g. under MPS)"},
		{"-gpus not numbers", func() error { _, err := ParseSpec("0,x", false); return err },
			`"x" is not a GPU number: want one GPU number per local rank, e.g. 0,1,2,3, or none`},
		{"-gpus naming a hidden GPU", func() error { _, err := l40.Assign(2, mustSpec(t, "0,6", false)); return err },
			`gpus = 0,6: GPU 6 does not exist: 2 GPUs (0-1) visible with CUDA_VISIBLE_DEVICES="6,7"`},
		{"-gpus too short", func() error { _, err := dgx.Assign(4, mustSpec(t, "0,1", false)); return err },
			"gpus = 0,1 maps 2 local ranks but this node runs 4: give one GPU per local rank"},
		{"-gpus without a GPU", func() error { _, err := none.Assign(1, mustSpec(t, "0", false)); return err },
			"gpus = 0: no GPU found (NVML: cannot load libnvidia-ml.so.1, no NVIDIA driver here; sysfs: none)"},
	} {
		err := tc.err()
		if err == nil {
			t.Errorf("%s: no error", tc.name)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, tc.want) || strings.Contains(msg, "\n") {
			t.Errorf("%s:\n got %q\nwant %q, on one line", tc.name, msg, tc.want)
		}
	}
}

// TestVisible: CUDA_VISIBLE_DEVICES as CUDA reads it.
func TestVisible(t *testing.T) {
	_, all, _ := load(t, "l40s8-cvd67")
	for _, tc := range []struct {
		value string
		set   bool
		want  []int // NVML indices of the visible devices, in order
	}{
		{"", false, []int{0, 1, 2, 3, 4, 5, 6, 7}},
		{"6,7", true, []int{6, 7}},
		{"7,6", true, []int{7, 6}},
		{" 3 , 1 ", true, []int{3, 1}},
		{"", true, nil},            // empty: no GPU
		{"-1", true, nil},          // the usual way to hide them all
		{"NoDevFiles", true, nil},  // SLURM's, for a job given no GPU
		{"2,-1,5", true, []int{2}}, // CUDA stops at the first negative index
		{"5,", true, []int{5}},
		{"GPU-1405e000-0000-4000-8000-000000000004,0", true, []int{4, 0}},
		{"gpu-1405E000-0000-4000-8000-000000000007", true, []int{7}}, // any case
	} {
		v, err := all.Visible(tc.value, tc.set)
		if err != nil {
			t.Errorf("%q: %v", tc.value, err)
			continue
		}
		var got []int
		for _, d := range v.Devices {
			got = append(got, d.Index)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("CUDA_VISIBLE_DEVICES=%q: devices %v, want %v", tc.value, got, tc.want)
		}
		if err := v.check(); err != nil {
			t.Errorf("%q: %v", tc.value, err)
		}
	}
	v, _ := all.Visible("7,6", true)
	if v.Links[0][1].String() != "PIX" || v.Devices[0].BusID != "0000:c4:00.0" || v.Total != 8 {
		t.Errorf("7,6: link %s, GPU0 bus %s, total %d", v.Links[0][1], v.Devices[0].BusID, v.Total)
	}
	v, _ = all.Visible("", true)
	var b bytes.Buffer
	v.Write(&b)
	if b.String() != "no GPU visible (CUDA_VISIBLE_DEVICES=\"\" hides all 8 GPUs)\n" {
		t.Errorf("empty CUDA_VISIBLE_DEVICES printed %q", b.String())
	}
}

// TestSubsetSearch checks bestSet against every subset on a larger
// machine, and the bound on how many sets it compares.
func TestSubsetSearch(t *testing.T) {
	n := 0
	set := []int{0, 1, 2}
	for ok := true; ok; ok = next(set, 6) {
		n++
	}
	if n != 20 || binomial(6, 3) != 20 || binomial(16, 8) != 12870 {
		t.Errorf("C(6,3): enumerated %d, binomial %d; C(16,8) = %d", n, binomial(6, 3), binomial(16, 8))
	}
	big := &Topology{Devices: make([]Device, 64), Links: make([][]Link, 64)}
	for i := range big.Links {
		big.Links[i] = make([]Link, 64)
		for j := range big.Links[i] {
			big.Links[i][j] = Link{Kind: LinkSYS}
		}
		big.Links[i][i] = Link{Kind: LinkSelf}
	}
	a, err := big.Assign(32, Spec{})
	if err != nil || len(a.GPUs) != 32 || a.GPUs[31] != 31 || !strings.Contains(a.Reason, "too many sets") {
		t.Errorf("64 GPUs, 32 ranks: %v %v", a, err)
	}
}

// FuzzParse: CUDA_VISIBLE_DEVICES and -gpus never panic, errors are one
// line, and an accepted view is a well-formed topology.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"6,7", "", "-1", "0,,1", "GPU-1405e000", "MIG-x", "1,1", "none", " 3 , 1 ", "99999999999999999999"} {
		f.Add(s)
	}
	_, all, _ := load(f, "l40s8-cvd67")
	f.Fuzz(func(t *testing.T, s string) {
		if v, err := all.Visible(s, true); err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("Visible(%q): error on two lines: %q", s, err)
			}
		} else if err := v.check(); err != nil {
			t.Errorf("Visible(%q): %v", s, err)
		}
		for _, share := range []bool{false, true} {
			spec, err := ParseSpec(s, share)
			if err != nil {
				if strings.Contains(err.Error(), "\n") {
					t.Errorf("ParseSpec(%q): error on two lines: %q", s, err)
				}
				continue
			}
			if _, err := all.Assign(4, spec); err != nil && strings.Contains(err.Error(), "\n") {
				t.Errorf("Assign(%q): error on two lines: %q", s, err)
			}
		}
	})
}
