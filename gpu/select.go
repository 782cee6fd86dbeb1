package gpu

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"hpctrain/affinity"
)

// Spec is the user's say in which GPU each local rank drives: the -gpus
// and -gpu-share flags (TOML gpus, gpu_share).
type Spec struct {
	// Off (-gpus none): use no GPU; ranks are placed as on a CPU-only node.
	Off bool
	// Map (-gpus 0,1,2,3): Map[i] is local rank i's GPU, in the numbering
	// CUDA_VISIBLE_DEVICES leaves; nil means automatic.
	Map []int
	// Share (-gpu-share) lets several local ranks drive one GPU (under
	// MPS, say); without it Assign refuses.
	Share bool
}

// ParseSpec reads -gpus and -gpu-share: gpus is "" (automatic), "none",
// or a comma-separated GPU number per local rank. Without share a GPU may
// appear only once.
func ParseSpec(gpus string, share bool) (Spec, error) {
	s := Spec{Share: share}
	switch v := strings.TrimSpace(gpus); {
	case v == "":
		return s, nil
	case strings.EqualFold(v, "none"):
		s.Off = true
		return s, nil
	}
	first := make(map[int]int) // GPU -> first local rank given it
	for rank, part := range strings.Split(gpus, ",") {
		g, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil || g < 0 {
			return Spec{}, fmt.Errorf("%q is not a GPU number: want one GPU number per local rank, e.g. 0,1,2,3, or none", strings.TrimSpace(part))
		}
		if r, dup := first[g]; dup && !share {
			return Spec{}, fmt.Errorf("GPU %d is given to local ranks %d and %d: each rank needs a GPU of its own (add -gpu-share to let ranks share one, e.g. under MPS)", g, r, rank)
		} else if !dup {
			first[g] = rank
		}
		s.Map = append(s.Map, g)
	}
	return s, nil
}

// Assignment is the GPU of every local rank of a node.
type Assignment struct {
	// GPUs[i] is local rank i's device, an index into Topology.Devices;
	// nil when the ranks use no GPU (none found, or Spec.Off).
	GPUs []int
	// Reason says how they were chosen, for a person.
	Reason string
	// Warning, when not empty, says what is wrong with the choice: a GPU
	// in MIG mode, whose MIG instances CUDA shows instead of the GPU.
	Warning string
}

// Assign gives each of localSize ranks a GPU of t:
//
//   - Spec.Map: as mapped; every rank needs an entry naming a device.
//   - As many ranks as GPUs: local rank i drives GPU i.
//   - More ranks than GPUs: refused unless Spec.Share; with it local rank
//     i drives GPU i mod len(t.Devices).
//   - Fewer ranks than GPUs: the set of GPUs with the best links, ranks
//     in ascending order: the set whose worst pair link is best, then
//     whose pair links add up best (NV# above PIX above PXB above PHB
//     above NODE above SYS, more NVLinks better), then the lowest numbers.
//     Reason compares it with the first localSize GPUs.
//
// With no device, or Spec.Off, it returns an empty Assignment; a Map with
// no device is an error.
func (t *Topology) Assign(localSize int, s Spec) (Assignment, error) {
	a, err := t.assign(localSize, s)
	var mig []string
	for _, g := range a.GPUs {
		if t.Devices[g].MIG == MIGEnabled && !slices.Contains(mig, strconv.Itoa(g)) {
			mig = append(mig, strconv.Itoa(g))
		}
	}
	if len(mig) > 0 {
		a.Warning = fmt.Sprintf("GPU %s in MIG mode: CUDA shows its MIG instances, not the GPU, and hpctrain places whole GPUs; disable MIG (nvidia-smi -mig 0) or list other GPUs", strings.Join(mig, ","))
	}
	return a, err
}

func (t *Topology) assign(localSize int, s Spec) (Assignment, error) {
	n := len(t.Devices)
	if localSize < 1 {
		return Assignment{}, fmt.Errorf("assign gpus: %d local ranks, want at least 1", localSize)
	}
	switch {
	case s.Off:
		return Assignment{Reason: "gpus = none: no GPU used"}, nil
	case n == 0 && s.Map != nil && t.CUDAVisibleDevices != nil:
		return Assignment{}, fmt.Errorf("gpus = %s: no GPU visible with CUDA_VISIBLE_DEVICES=%q", joinInts(s.Map), *t.CUDAVisibleDevices)
	case n == 0 && s.Map != nil:
		return Assignment{}, fmt.Errorf("gpus = %s: no GPU found (%s)", joinInts(s.Map), t.Note)
	case n == 0:
		return Assignment{}, nil
	case s.Map != nil:
		if len(s.Map) < localSize {
			return Assignment{}, fmt.Errorf("gpus = %s maps %d local ranks but this node runs %d: give one GPU per local rank",
				joinInts(s.Map), len(s.Map), localSize)
		}
		for _, g := range s.Map[:localSize] {
			if g >= n {
				return Assignment{}, fmt.Errorf("gpus = %s: GPU %d does not exist: %s", joinInts(s.Map), g, t.seen())
			}
		}
		return Assignment{GPUs: slices.Clone(s.Map[:localSize]),
			Reason: fmt.Sprintf("gpus = %s: local rank i drives the i-th GPU listed", joinInts(s.Map))}, nil
	case localSize > n && !s.Share:
		return Assignment{}, fmt.Errorf("%d local ranks but %s: each rank needs a GPU of its own; use -gpu-share to let ranks share GPUs (MPS), -gpus none to use none, or start at most %s per node",
			localSize, t.seen(), plural(n, "rank"))
	case localSize >= n:
		a := Assignment{GPUs: make([]int, localSize)}
		for i := range a.GPUs {
			a.GPUs[i] = i % n
		}
		a.Reason = fmt.Sprintf("%s on %s: local rank i drives GPU i", plural(localSize, "local rank"), plural(n, "GPU"))
		if localSize > n {
			a.Reason = fmt.Sprintf("%d local ranks share %s (gpu_share): local rank i drives GPU i mod %d", localSize, plural(n, "GPU"), n)
		}
		return a, nil
	}
	first := make([]int, localSize)
	for i := range first {
		first[i] = i
	}
	best, searched := t.bestSet(localSize)
	a := Assignment{GPUs: best}
	switch {
	case localSize == 1:
		a.Reason = fmt.Sprintf("1 local rank on %d GPUs: GPU 0", n)
	case !searched:
		a.Reason = fmt.Sprintf("%d local ranks on %d GPUs: GPUs %s (too many sets to compare; the first %d)", localSize, n, joinInts(best), localSize)
	case slices.Equal(best, first):
		a.Reason = fmt.Sprintf("%d local ranks on %d GPUs: GPUs %s (links %s), no other set is better linked", localSize, n, joinInts(best), t.describe(best))
	default:
		a.Reason = fmt.Sprintf("%d local ranks on %d GPUs: chose GPUs %s (links %s) over the first %d, GPUs %s (links %s)",
			localSize, n, joinInts(best), t.describe(best), localSize, joinInts(first), t.describe(first))
	}
	return a, nil
}

// seen says how many GPUs this process sees: "2 GPUs (0-1) visible with
// CUDA_VISIBLE_DEVICES=\"6,7\"" or "4 GPUs (0-3)".
func (t *Topology) seen() string {
	n := len(t.Devices)
	s := fmt.Sprintf("%d GPUs (0-%d)", n, n-1)
	if n == 1 {
		s = "1 GPU (0)"
	}
	if t.CUDAVisibleDevices != nil {
		s += fmt.Sprintf(" visible with CUDA_VISIBLE_DEVICES=%q", *t.CUDAVisibleDevices)
	}
	return s
}

// maxSets bounds the sets bestSet compares (C(16,8) = 12870 fits).
const maxSets = 100_000

// bestSet returns the k devices with the best links (see Assign), and
// false, with the first k, when there are too many sets to compare.
func (t *Topology) bestSet(k int) ([]int, bool) {
	n := len(t.Devices)
	set := make([]int, k)
	for i := range set {
		set[i] = i
	}
	if binomial(n, k) > maxSets {
		return set, false
	}
	best := slices.Clone(set)
	bw, bs := t.score(set)
	for next(set, n) {
		if w, s := t.score(set); w > bw || w == bw && s > bs {
			best, bw, bs = slices.Clone(set), w, s
		}
	}
	return best, true
}

// score is a set's worst pair link and the sum of its pair links, by
// Link.rank.
func (t *Topology) score(set []int) (worst, sum int) {
	worst = int(LinkSelf)
	for a, i := range set {
		for _, j := range set[a+1:] {
			r := t.Links[i][j].rank()
			worst = min(worst, r)
			sum += r
		}
	}
	return worst, sum
}

// next steps set to the next k-subset of [0, n) in lexicographic order;
// false after the last.
func next(set []int, n int) bool {
	k := len(set)
	i := k - 1
	for i >= 0 && set[i] == n-k+i {
		i--
	}
	if i < 0 {
		return false
	}
	set[i]++
	for j := i + 1; j < k; j++ {
		set[j] = set[j-1] + 1
	}
	return true
}

func binomial(n, k int) int {
	c := 1
	for i := range k {
		c = c * (n - i) / (i + 1)
		if c > maxSets {
			return c
		}
	}
	return c
}

// describe lists a set's pair links, best first: "NV2" for a pair,
// "NV2 x2, NV1" for three GPUs.
func (t *Topology) describe(set []int) string {
	var links []Link
	for a, i := range set {
		for _, j := range set[a+1:] {
			links = append(links, t.Links[i][j])
		}
	}
	slices.SortStableFunc(links, func(x, y Link) int { return y.rank() - x.rank() })
	var parts []string
	for i := 0; i < len(links); {
		j := i
		for j < len(links) && links[j] == links[i] {
			j++
		}
		p := links[i].String()
		if j-i > 1 {
			p += " x" + strconv.Itoa(j-i)
		}
		parts = append(parts, p)
		i = j
	}
	return strings.Join(parts, ", ")
}

// Near returns, for every local rank of a, the CPUs nearest its GPU:
// the device's CPU affinity, else the CPUs of its NUMA node in cpu, else
// the empty set (no preference). It is nil when a gives no rank a GPU.
// The result is affinity.Request.Near.
func (t *Topology) Near(a Assignment, cpu *affinity.Topology) []affinity.CPUSet {
	if a.GPUs == nil {
		return nil
	}
	near := make([]affinity.CPUSet, len(a.GPUs))
	for r, g := range a.GPUs {
		d := t.Devices[g]
		near[r] = d.CPUs
		if near[r].IsEmpty() && d.NUMANode >= 0 && cpu != nil {
			for _, node := range cpu.Nodes {
				if node.ID == d.NUMANode {
					near[r] = node.CPUs
				}
			}
		}
	}
	return near
}

// plural writes "1 GPU", "2 GPUs".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}
