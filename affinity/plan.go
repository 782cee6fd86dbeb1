package affinity

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
)

// Policy says how a rank's threads are bound.
type Policy int

const (
	// Cores gives each local rank its own compact set of physical cores
	// and pins worker i to the i-th of them.
	Cores Policy = iota
	// NUMA binds each local rank to a whole NUMA node; workers float
	// inside it.
	NUMA
	// None binds nothing; Plan only fixes the thread count.
	None
)

var policyNames = [...]string{Cores: "cores", NUMA: "numa", None: "none"}

// String returns "cores", "numa" or "none".
func (p Policy) String() string {
	if p < 0 || int(p) >= len(policyNames) {
		return fmt.Sprintf("Policy(%d)", int(p))
	}
	return policyNames[p]
}

// ParsePolicy reads a policy name: cores, numa or none.
func ParsePolicy(s string) (Policy, error) {
	for p, name := range policyNames {
		if strings.EqualFold(strings.TrimSpace(s), name) {
			return Policy(p), nil
		}
	}
	return 0, fmt.Errorf("unknown binding policy %q: accepted values are cores, numa, none", s)
}

// MarshalText implements encoding.TextMarshaler.
func (p Policy) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler with ParsePolicy.
func (p *Policy) UnmarshalText(b []byte) error {
	q, err := ParsePolicy(string(b))
	if err != nil {
		return err
	}
	*p = q
	return nil
}

// Request is what one rank asks of Plan. Every local rank must pass the
// same Request apart from LocalRank (and CPUList, which is per rank): the
// ranks' plans are disjoint because each rank computes the same layout of
// all local ranks and takes its own part.
type Request struct {
	LocalRank int `json:"local_rank"` // this rank's index on the node, [0, LocalSize)
	LocalSize int `json:"local_size"` // ranks on this node
	// Threads is the compute threads per rank; 0 means the physical cores
	// in the mask divided by LocalSize (logical CPUs with UseSMT), at
	// least 1.
	Threads int    `json:"threads"`
	Policy  Policy `json:"policy"`
	// UseSMT lets a rank's workers use every SMT sibling of its cores
	// instead of one logical CPU per physical core.
	UseSMT bool `json:"use_smt"`
	// CPUList, when not empty, is this rank's CPUs, replacing the layout.
	// It must lie inside the mask.
	CPUList CPUSet `json:"cpu_list"`
	// PreferNUMA, when >= 0, is the NUMA node laid out first: rank 0 (and
	// every rank, if they all fit) lands there. -1 means no preference.
	PreferNUMA int `json:"prefer_numa"`
	// Near, when not nil, holds for every local rank (Near[i] for local
	// rank i, so len(Near) == LocalSize) the CPUs nearest the device it
	// drives: its GPU's CPU affinity or NUMA node (package gpu fills it).
	// Under policy cores each rank's cores are taken from its Near set
	// first (see Topology.Plan); under policy numa the rank lands on the
	// node holding most of it. An empty Near[i] means no preference.
	Near []CPUSet `json:"near,omitempty"`
}

// Plan is one rank's binding, the result of Topology.Plan.
type Plan struct {
	Policy    Policy `json:"policy"`
	LocalRank int    `json:"local_rank"`
	LocalSize int    `json:"local_size"`
	// CPUs is the mask Apply gives every thread of the process; empty for
	// policy none.
	CPUs CPUSet `json:"cpus"`
	// WorkerCPUs[i] is the one CPU worker i is pinned to (see NewWorkers);
	// nil when workers are not pinned one by one (policies numa and none).
	WorkerCPUs []int `json:"worker_cpus"`
	// Nodes are the NUMA nodes CPUs touches, ascending.
	Nodes []int `json:"numa_nodes"`
	// Threads is the number of compute threads: GOMAXPROCS, OMP_NUM_THREADS
	// and the Workers count. It may be below Request.Threads (see Warning).
	Threads int `json:"threads"`
	// Kind, on a hybrid CPU, is the class of the cores the workers run on
	// (of CPUs, where they are not pinned one by one): "P", "E", "P+E" for
	// a mix (Topology.Kinds). Empty where the CPU is not hybrid, and under
	// policy none.
	Kind string `json:"kind,omitempty"`
	// Warning, when not empty, says why the plan is not what was asked.
	Warning string `json:"warning,omitempty"`
	// Device is set by the caller, not by Plan: the device this rank
	// drives, as String and ReportLine print it after the cores
	// ("gpu 0 (bus 0000:07:00.0, numa 0)"); empty for none.
	Device string `json:"device,omitempty"`
}

// String describes p in the style of Open MPI's --report-bindings:
// "cores 0-1 numa 0 threads 2", then " on P cores" where p.Kind is set (a
// hybrid CPU), and ", " and p.Device when set.
func (p Plan) String() string {
	dev := ""
	if p.Device != "" {
		dev = ", " + p.Device
	}
	if p.Policy == None || p.CPUs.IsEmpty() {
		return fmt.Sprintf("not bound threads %d%s", p.Threads, dev)
	}
	nodes := make([]string, len(p.Nodes))
	for i, n := range p.Nodes {
		nodes[i] = fmt.Sprint(n)
	}
	kind := ""
	if p.Kind != "" {
		kind = " on " + p.Kind + " cores"
	}
	return fmt.Sprintf("cores %s numa %s threads %d%s%s", p.CPUs, strings.Join(nodes, ","), p.Threads, kind, dev)
}

// Plan lays out r.LocalSize ranks on the CPUs of mask and returns rank
// r.LocalRank's part. An empty mask means every online CPU; offline CPUs
// in mask are ignored.
//
// Policy cores: the physical cores with a CPU in mask are taken one
// logical CPU each (the lowest-numbered sibling in mask), or every sibling
// in mask with UseSMT (siblings of a core next to each other), node by
// node. Ranks are spread over NUMA nodes in contiguous blocks, as evenly
// as the nodes hold them (ranks 0,1 on node 0 and 2,3 on node 1 for four
// ranks on two nodes); within a node each rank takes the next Threads
// CPUs, so its cores are compact. A rank that fits in no node's remainder
// takes the CPUs left over, across nodes, in order; when a node could
// have held it, Warning says so and names the -threads that keeps every
// rank in one node.
//
// When LocalSize*Threads exceeds the CPUs available the plan stays
// disjoint and says so in Warning: first Threads shrinks to
// available/LocalSize; if that is 0 (more ranks than physical cores) and
// SMT siblings are in the mask, each rank gets 1 thread on one logical CPU,
// first cores' first siblings, then their second ones. Only when there are
// more ranks than logical CPUs does Plan fail.
//
// On a hybrid CPU (Topology.Hybrid) every policy-cores layout above runs
// class by class, fastest first: the ranks fill the fastest class's cores
// in the mask (in NUMA blocks as above) as far as they hold whole ranks,
// the next ranks the next class, and only a rank that fits in no class's
// remainder takes what is left, fastest first, mixing classes. With
// r.Near, each rank takes its Threads from one class where the free CPUs
// of a tier hold them. Threads defaults, under every policy and with a
// CPU list, to the fastest class's cores in the mask per rank when there
// is at least one per rank, else to all of them (defaultSlots). Warning
// names the local ranks on slower cores or a mix, the same on every rank,
// and the -threads that keeps every rank on the fastest cores (see the
// package doc).
//
// Policy numa: ranks are spread over the NUMA nodes with a CPU in mask in
// the same contiguous blocks; a rank's CPUs are its whole node inside the
// mask (SMT siblings included) and its workers are not pinned one by one.
// Ranks sharing a node share its CPUs, so CheckDisjoint applies only to
// policy cores.
//
// With r.Near (a device per rank, such as a GPU) policy cores lays the
// ranks out one after another in local-rank order instead of in blocks:
// each takes the first Threads free CPUs of its Near set, then, if that
// runs short, free CPUs on the NUMA nodes its Near set touches, then any
// free CPU (and says so in Warning). Threads then defaults to the fewest
// CPUs any group of ranks sharing a Near set has per rank inside it, so
// that by default every rank's cores are its device's nearest ones. Under
// policy numa a rank with a Near set lands on the node holding most of it.
//
// Policy none: nothing is bound; Threads defaults as for cores.
//
// An explicit r.CPUList must lie inside mask; Threads defaults to its
// physical cores (logical CPUs with UseSMT) and workers are pinned to
// them as for policy cores.
func (t *Topology) Plan(mask CPUSet, r Request) (Plan, error) {
	if r.LocalSize < 1 {
		return Plan{}, fmt.Errorf("plan cpu binding: local size %d, want at least 1", r.LocalSize)
	}
	if r.LocalRank < 0 || r.LocalRank >= r.LocalSize {
		return Plan{}, fmt.Errorf("plan cpu binding: local rank %d outside [0, %d)", r.LocalRank, r.LocalSize)
	}
	if r.Threads < 0 {
		return Plan{}, fmt.Errorf("plan cpu binding: %d threads, want 0 (automatic) or more", r.Threads)
	}
	if r.Policy < 0 || r.Policy > None {
		return Plan{}, fmt.Errorf("plan cpu binding: unknown policy %d", int(r.Policy))
	}
	if r.Near != nil && len(r.Near) != r.LocalSize {
		return Plan{}, fmt.Errorf("plan cpu binding: %d near-cpu sets for %d local ranks", len(r.Near), r.LocalSize)
	}
	if mask.IsEmpty() {
		mask = t.Online
	}
	if !r.CPUList.IsEmpty() {
		return t.withKind(t.planList(mask, r))
	}
	usable := mask.Intersect(t.Online)
	if usable.IsEmpty() {
		return Plan{}, fmt.Errorf("plan cpu binding: allowed mask %s holds no online cpu (online: %s)", mask, t.Online)
	}
	nodes := t.available(usable, r.PreferNUMA)
	switch r.Policy {
	case None:
		var first []int
		for _, a := range nodes {
			first = append(first, a.first...)
		}
		return Plan{Policy: None, LocalRank: r.LocalRank, LocalSize: r.LocalSize,
			Threads: defaultThreads(r.Threads, t.defaultSlots(first, r.LocalSize), r.LocalSize)}, nil
	case NUMA:
		return t.withKind(t.planNUMA(nodes, r), nil)
	}
	return t.withKind(t.planCores(nodes, t.byClass(nodes, usable), usable, r))
}

// withKind sets p.Kind on a hybrid CPU: the classes of p's workers' CPUs,
// or of p.CPUs where workers are not pinned one by one.
func (t *Topology) withKind(p Plan, err error) (Plan, error) {
	cpus := p.WorkerCPUs
	if cpus == nil {
		cpus = p.CPUs.cpus
	}
	if err != nil || !t.Hybrid() || len(cpus) == 0 {
		return p, err
	}
	var k []int
	for _, c := range cpus {
		k = append(k, t.ClassOf(c))
	}
	slices.Sort(k)
	names := make([]string, 0, len(k))
	for _, c := range slices.Compact(k) {
		names = append(names, t.Kinds[c])
	}
	p.Kind = strings.Join(names, "+")
	return p, nil
}

// avail is what one NUMA node offers inside the mask, core by core; on a
// hybrid CPU (byClass), what its cores of one class offer.
type avail struct {
	node      int
	class     int   // Core.Class; 0 for a whole node
	first     []int // each core's lowest CPU in the mask
	siblings  []int // the other CPUs in the mask, core by core
	bySMTCore []int // each core's CPUs in the mask, core by core
	cpus      CPUSet
}

// available groups the cores with a CPU in usable by NUMA node, nodes by
// ascending ID with prefer (if >= 0 and present) first.
func (t *Topology) available(usable CPUSet, prefer int) []avail {
	var out []avail
	for _, n := range t.Nodes {
		a := t.availOn(n.ID, usable, func(Core) bool { return true })
		a.cpus = n.CPUs.Intersect(usable)
		if len(a.first) > 0 {
			out = append(out, a)
		}
	}
	if i := slices.IndexFunc(out, func(a avail) bool { return a.node == prefer }); i > 0 {
		p := out[i]
		copy(out[1:i+1], out[:i])
		out[0] = p
	}
	return out
}

// availOn is what the cores of node for which keep holds offer in usable.
func (t *Topology) availOn(node int, usable CPUSet, keep func(Core) bool) avail {
	a := avail{node: node}
	for _, c := range t.Cores {
		if c.Node != node || !keep(c) {
			continue
		}
		in := c.CPUs.Intersect(usable).cpus
		if len(in) == 0 {
			continue
		}
		a.first = append(a.first, in[0])
		a.siblings = append(a.siblings, in[1:]...)
		a.bySMTCore = append(a.bySMTCore, in...)
	}
	a.cpus = NewCPUSet(a.bySMTCore...)
	return a
}

// byClass splits each node of nodes by core class on a hybrid CPU: the
// fastest class's part of every node (in the order of nodes), then the
// next class's. Elsewhere it returns nodes.
func (t *Topology) byClass(nodes []avail, usable CPUSet) []avail {
	if !t.Hybrid() {
		return nodes
	}
	var out []avail
	for k := range t.Kinds {
		for _, n := range nodes {
			a := t.availOn(n.node, usable, func(c Core) bool { return c.Class == k })
			a.class = k
			if len(a.first) > 0 {
				out = append(out, a)
			}
		}
	}
	return out
}

func defaultThreads(threads, cpus, ranks int) int {
	if threads > 0 {
		return threads
	}
	return max(1, cpus/ranks)
}

// defaultSlots is the count the default thread count divides among ranks:
// on a hybrid CPU, the slots of the fastest class among slots when they
// give every rank at least one, else all of them. Why not all of them: a
// rank's workers split each parallel loop into equal chunks
// (Workers.Run) and a synchronous step waits for its slowest rank, so a
// rank is only as fast as its slowest core times its thread count. With
// E-cores at about half a P-core's speed (fewer and narrower FMA units,
// lower clocks; not measured here, no hybrid CPU), 8 P + 8 E threads
// finish a step no sooner than 8 P threads alone, and a rank on E-cores
// beside ranks on P-cores holds all of them back; the E-cores stay free
// for the rest of the system.
func (t *Topology) defaultSlots(slots []int, ranks int) int {
	if fast := t.fastest(slots); len(fast) >= ranks {
		return len(fast)
	}
	return len(slots)
}

// fastest returns the cpus of slots whose core is of the fastest class
// among them, in order: all of slots where the CPU is not hybrid.
func (t *Topology) fastest(slots []int) []int {
	if !t.Hybrid() {
		return slots
	}
	best := len(t.Kinds)
	for _, c := range slots {
		best = min(best, t.ClassOf(c))
	}
	var out []int
	for _, c := range slots {
		if t.ClassOf(c) == best {
			out = append(out, c)
		}
	}
	return out
}

// blocks splits ranks over len(caps) nodes in contiguous blocks, as evenly
// as possible, no node above its capacity; it returns the ranks per node
// and the ranks that fit nowhere.
func blocks(ranks int, caps []int) (per []int, left int) {
	k := len(caps)
	per = make([]int, k)
	left = ranks
	for i := range per {
		want := ranks / k
		if i < ranks%k {
			want++
		}
		per[i] = min(want, caps[i])
		left -= per[i]
	}
	for i := range per {
		more := min(left, caps[i]-per[i])
		per[i] += more
		left -= more
	}
	return per, left
}

// planCores plans policy cores on nodes, the NUMA nodes of usable, and
// groups, the same split by core class (byClass).
func (t *Topology) planCores(nodes, groups []avail, usable CPUSet, r Request) (Plan, error) {
	L := r.LocalSize
	slotsOf := func(a avail) []int {
		if r.UseSMT {
			return a.bySMTCore
		}
		return a.first
	}
	phys, logical := 0, 0
	var slots []int
	for _, a := range groups {
		phys += len(a.first)
		logical += len(a.bySMTCore)
		slots = append(slots, slotsOf(a)...)
	}
	nslots := len(slots)
	unit := "physical cores"
	if r.UseSMT {
		unit = "logical cpus"
	}
	fast := len(t.fastest(slots))
	T := defaultThreads(r.Threads, t.defaultSlots(slots, L), L)
	if r.Threads == 0 && r.Near != nil {
		near := groups // the groups the default counted
		if t.defaultSlots(slots, L) < nslots {
			near = slices.DeleteFunc(slices.Clone(groups), func(a avail) bool { return a.class != groups[0].class })
		}
		T = min(T, nearThreads(near, slotsOf, usable, r.Near))
	}
	warning := ""
	switch {
	case L*T <= nslots:
	case nslots/L >= 1:
		warning = fmt.Sprintf("%d ranks x %d threads need %d %s but the allowed mask %s has %d; using %d threads per rank",
			L, T, L*T, unit, usable, nslots, nslots/L)
		T = nslots / L
	case logical >= L:
		warning = fmt.Sprintf("%d ranks on this node but only %d physical cores in the allowed mask %s; ranks share physical cores through SMT siblings, 1 thread each",
			L, phys, usable)
		T = 1
		slotsOf = func(a avail) []int { return append(slices.Clip(a.first), a.siblings...) }
	default:
		return Plan{}, fmt.Errorf("plan cpu binding: %d ranks on this node but only %d cores in the allowed mask %s (%d logical cpus); use fewer ranks, -bind none, or mpirun --oversubscribe with -bind none",
			L, phys, usable, logical)
	}

	var all [][]int // every local rank's slots
	if r.Near != nil {
		var far string
		all, far = t.layoutNear(groups, slotsOf, usable, r, T)
		warning = joinWarnings(warning, far)
	} else {
		all = t.layoutBlocks(groups, slotsOf, L, T)
		warning = joinWarnings(warning, spanNote(nodes, slotsOf, r, T, t.nodesOf(NewCPUSet(all[r.LocalRank]...))))
	}
	warning = joinWarnings(warning, t.classNote(all, 0, fast))
	mine := all[r.LocalRank]
	p := Plan{Policy: Cores, LocalRank: r.LocalRank, LocalSize: L,
		CPUs: NewCPUSet(mine...), WorkerCPUs: slices.Clone(mine), Threads: T, Warning: warning}
	p.Nodes = t.nodesOf(p.CPUs)
	return p, nil
}

// layoutBlocks lays out L local ranks of T slots in contiguous blocks per
// group (see Topology.Plan) and returns every rank's slots. Groups of one
// class (byClass) take ranks before the next class's, as many as they
// hold: each class's share is spread over its groups by blocks.
func (t *Topology) layoutBlocks(groups []avail, slotsOf func(avail) []int, L, T int) [][]int {
	slots := make([][]int, len(groups))
	caps := make([]int, len(groups))
	for i, a := range groups {
		slots[i] = slotsOf(a)
		caps[i] = len(slots[i]) / T
	}
	per := make([]int, len(groups))
	left := L
	for i := 0; i < len(groups); {
		j := i + 1
		for j < len(groups) && groups[j].class == groups[i].class {
			j++
		}
		n := 0
		for _, c := range caps[i:j] {
			n += c
		}
		n = min(n, left)
		p, _ := blocks(n, caps[i:j])
		copy(per[i:j], p)
		left -= n
		i = j
	}
	all := make([][]int, 0, L)
	for i := range groups {
		for range per[i] {
			all = append(all, slots[i][:T])
			slots[i] = slots[i][T:]
		}
	}
	// Ranks that fit in no group: the leftovers, in order, of one class
	// where one holds them (across NUMA nodes), else mixed.
	var rest []int
	for i := range slots {
		rest = append(rest, slots[i]...)
	}
	for len(all) < L {
		got := t.oneClass(rest, T)
		all = append(all, got)
		rest = slices.DeleteFunc(rest, func(c int) bool { return slices.Contains(got, c) })
	}
	return all
}

// spanNote says when rank r.LocalRank's T slots span NUMA nodes
// although a node could hold T: the other ranks took the rest. It names
// the largest thread count that keeps every rank in one node.
func spanNote(nodes []avail, slotsOf func(avail) []int, r Request, T int, spanned []int) string {
	if len(spanned) < 2 {
		return ""
	}
	caps := make([]int, len(nodes))
	fitsOne := false
	for i, a := range nodes {
		caps[i] = len(slotsOf(a))
		fitsOne = fitsOne || caps[i] >= T
	}
	if !fitsOne {
		return "" // a rank of T threads spans nodes wherever it goes
	}
	fit := 0
	for k := T - 1; k >= 1 && fit == 0; k-- {
		per := make([]int, len(caps))
		for i, c := range caps {
			per[i] = c / k
		}
		if _, left := blocks(r.LocalSize, per); left == 0 {
			fit = k
		}
	}
	note := fmt.Sprintf("local rank %d's %d threads span numa nodes %s: they do not fit in one node beside the other ranks", r.LocalRank, T, joinInts(spanned, ","))
	if fit > 0 {
		note += fmt.Sprintf("; -threads %d keeps every rank in one node", fit)
	}
	return note
}

// nearThreads is the default thread count with r.Near: for every group of
// ranks with the same Near set, the slots inside it per rank of the group;
// the smallest of these, at least 1. Ranks whose Near set has fewer slots
// than ranks, or none in the mask, do not count: they spill (layoutNear).
func nearThreads(nodes []avail, slotsOf func(avail) []int, usable CPUSet, near []CPUSet) int {
	var slots []int
	for _, a := range nodes {
		slots = append(slots, slotsOf(a)...)
	}
	ranks := make(map[string]int) // by the set's cpulist
	sets := make(map[string]CPUSet)
	for _, s := range near {
		ranks[s.String()]++
		sets[s.String()] = s
	}
	T := len(slots)
	for key, k := range ranks {
		s := sets[key]
		n := 0
		for _, c := range slots {
			if s.Contains(c) {
				n++
			}
		}
		if n/k >= 1 {
			T = min(T, n/k)
		}
	}
	return max(T, 1)
}

// layoutNear lays out every local rank in local-rank order, each taking T
// free slots: first those in its Near set, then those on the NUMA nodes
// its Near set touches, then any, each in layout order, and within a tier
// from one core class where one holds them (oneClass). It returns every
// rank's slots and, for rank r.LocalRank, a warning when some of its slots
// lie outside its Near set. Every rank computes the same layout, so the
// ranks' slots are disjoint.
func (t *Topology) layoutNear(groups []avail, slotsOf func(avail) []int, usable CPUSet, r Request, T int) ([][]int, string) {
	var order []int
	for _, a := range groups {
		order = append(order, slotsOf(a)...)
	}
	used := make(map[int]bool, len(order))
	all := make([][]int, r.LocalSize)
	warning := ""
	for rank := range r.LocalSize {
		near := r.Near[rank].Intersect(usable)
		nearNodes := t.nodesOf(near)
		tiers := []func(int) bool{
			near.Contains,
			func(c int) bool { return slices.Contains(nearNodes, t.NodeOf(c)) },
			func(int) bool { return true },
		}
		if near.IsEmpty() {
			tiers = tiers[2:]
		}
		var got []int
		for _, in := range tiers {
			var free []int
			for _, c := range order {
				if !used[c] && in(c) {
					free = append(free, c)
				}
			}
			for _, c := range t.oneClass(free, T-len(got)) {
				got = append(got, c)
				used[c] = true
			}
		}
		all[rank] = got
		if rank != r.LocalRank {
			continue
		}
		switch far := NewCPUSet(got...).Minus(near); {
		case r.Near[rank].IsEmpty() || far.IsEmpty():
		case near.IsEmpty():
			warning = fmt.Sprintf("local rank %d: none of the cpus %s nearest its device are in the allowed mask %s; using cpus %s",
				rank, r.Near[rank], usable, NewCPUSet(got...))
		default:
			warning = fmt.Sprintf("local rank %d: cpus %s are not among the cpus %s nearest its device (%d threads per rank do not fit there beside the other ranks); use fewer -threads to keep every rank near its device",
				rank, far, near, T)
		}
	}
	return all, warning
}

// oneClass returns, in a new slice, need of the cpus free (in layout
// order, so fastest class first): those of the first class that has need,
// or else the first need, across classes. Where the CPU is not hybrid, the
// first need.
func (t *Topology) oneClass(free []int, need int) []int {
	need = min(need, len(free))
	if need <= 0 {
		return nil
	}
	count := make(map[int]int)
	for _, c := range free {
		count[t.ClassOf(c)]++
	}
	for _, c := range free {
		if k := t.ClassOf(c); count[k] >= need {
			var out []int
			for _, d := range free {
				if len(out) < need && t.ClassOf(d) == k {
					out = append(out, d)
				}
			}
			return out
		}
	}
	return slices.Clone(free[:need])
}

// classNote says, on a hybrid CPU, which local ranks got cores of a slower
// class than the fastest any rank got, or a mix of classes; all[i] is the
// slots of local rank first+i. The same text on every rank, as rank 0
// alone prints it. fast is the slots of the fastest class in the mask,
// all ranks' share of which names the -threads that keeps them there.
// Ranks all on one class, whichever, say nothing: they keep pace with
// each other.
func (t *Topology) classNote(all [][]int, first, fast int) string {
	if !t.Hybrid() || len(all) == 0 {
		return ""
	}
	kindsOf := make([][]int, len(all))
	best, worst := len(t.Kinds), 0
	for i, s := range all {
		var k []int
		for _, c := range s {
			k = append(k, t.ClassOf(c))
		}
		slices.Sort(k)
		k = slices.Compact(k)
		kindsOf[i] = k
		best, worst = min(best, k[0]), max(worst, k[len(k)-1])
	}
	if best == worst {
		return ""
	}
	// Ranks by the classes they got ("P", "P+E"), in order of first
	// appearance.
	var got []string
	ranks := make(map[string][]int)
	for i, k := range kindsOf {
		s := make([]string, len(k))
		for j, c := range k {
			s[j] = t.Kinds[c]
		}
		n := strings.Join(s, "+")
		if _, ok := ranks[n]; !ok {
			got = append(got, n)
		}
		ranks[n] = append(ranks[n], first+i)
	}
	parts := make([]string, len(got))
	for i, n := range got {
		who := "local rank "
		if len(ranks[n]) > 1 {
			who = "local ranks "
		}
		parts[i] = fmt.Sprintf("%s%s got %s cores", who, joinInts(ranks[n], ","), n)
	}
	note := fmt.Sprintf("hybrid cpu: %s; a rank's threads split each step evenly and every step waits for the slowest rank, so the job runs at the pace of its %s cores",
		strings.Join(parts, ", "), t.Kinds[worst])
	if fit := fast / len(all); fit >= 1 {
		return note + fmt.Sprintf("; -threads %d keeps every rank on %s cores (or choose each rank's cores with -cpu-list)", fit, t.Kinds[best])
	}
	return note + fmt.Sprintf("; the %s cores in the mask hold at most %d ranks: run that many on this node to keep every rank on them (or choose each rank's cores with -cpu-list)",
		t.Kinds[best], fast)
}

func (t *Topology) planNUMA(nodes []avail, r Request) Plan {
	caps := make([]int, len(nodes))
	for i := range caps {
		caps[i] = r.LocalSize // no capacity limit: ranks may share a node
	}
	per, _ := blocks(r.LocalSize, caps)
	at := make([]int, 0, r.LocalSize) // at[rank] indexes nodes
	for i := range nodes {
		for range per[i] {
			at = append(at, i)
		}
	}
	for rank, near := range r.Near { // a rank with a device: the node holding most of its Near set
		most := 0
		for i, a := range nodes {
			if n := a.cpus.Intersect(near).Len(); n > most {
				at[rank], most = i, n
			}
		}
	}
	i := at[r.LocalRank]
	sharing := 0
	for _, j := range at {
		if j == i {
			sharing++
		}
	}
	a := nodes[i]
	slots := a.first
	if r.UseSMT {
		slots = a.bySMTCore
	}
	cpus := t.defaultSlots(slots, sharing)
	p := Plan{Policy: NUMA, LocalRank: r.LocalRank, LocalSize: r.LocalSize,
		CPUs: a.cpus, Nodes: []int{a.node}, Threads: defaultThreads(r.Threads, cpus, sharing)}
	if p.Threads*sharing > cpus {
		p.Warning = fmt.Sprintf("%d ranks x %d threads on numa node %d, which has %d cpus in the mask: oversubscribed",
			sharing, p.Threads, a.node, cpus)
	}
	return p
}

func (t *Topology) planList(mask CPUSet, r Request) (Plan, error) {
	if r.Policy == None {
		return Plan{}, fmt.Errorf("plan cpu binding: cpu list %s given with policy none", r.CPUList)
	}
	if out := r.CPUList.Minus(mask.Intersect(t.Online)); !out.IsEmpty() {
		return Plan{}, fmt.Errorf("plan cpu binding: cpu list %s: cpus %s are outside the allowed mask %s (online: %s)",
			r.CPUList, out, mask, t.Online)
	}
	var first, all []int
	for _, a := range t.byClass(t.available(r.CPUList, -1), r.CPUList) {
		first = append(first, a.first...)
		all = append(all, a.bySMTCore...)
	}
	slots := first
	if r.UseSMT {
		slots = all
	}
	T := defaultThreads(r.Threads, t.defaultSlots(slots, 1), 1)
	warning := ""
	if T > len(slots) {
		warning = fmt.Sprintf("%d threads asked but cpu list %s has %d usable cpus; using %d threads",
			T, r.CPUList, len(slots), len(slots))
		T = len(slots)
	}
	warning = joinWarnings(warning, t.classNote([][]int{slots[:T]}, r.LocalRank, len(t.fastest(slots))))
	p := Plan{Policy: Cores, LocalRank: r.LocalRank, LocalSize: r.LocalSize,
		CPUs: r.CPUList, WorkerCPUs: slices.Clone(slots[:T]), Threads: T, Warning: warning}
	p.Nodes = t.nodesOf(p.CPUs)
	return p, nil
}

func (t *Topology) nodesOf(s CPUSet) []int {
	var nodes []int
	for _, c := range s.cpus {
		if n := t.NodeOf(c); n >= 0 {
			nodes = append(nodes, n)
		}
	}
	slices.Sort(nodes)
	return slices.Compact(nodes)
}

// PlanAll returns the plans of all r.LocalSize local ranks (r.LocalRank is
// ignored), as each would compute it.
func (t *Topology) PlanAll(mask CPUSet, r Request) ([]Plan, error) {
	plans := make([]Plan, r.LocalSize)
	for i := range plans {
		r.LocalRank = i
		p, err := t.PlanOversubscribed(mask, r)
		if err != nil {
			return nil, err
		}
		plans[i] = p
	}
	return plans, nil
}

// PlanOversubscribed is Plan, except that more local ranks than cpus in
// mask under a binding policy (and no CPU list) is not an error: as
// mpirun --oversubscribe runs them, the ranks are planned unbound (policy
// none, one thread unless r asks for more), with a warning saying so.
//
// A mask narrower than the online CPUs is most often not oversubscription
// but a launcher that bound each rank itself (Open MPI binds every rank to
// one core by default with two ranks or fewer): the warning then says so
// and how to launch for hpctrain's placement.
//
// A bound plan's Warning also names OMP_NUM_THREADS or
// OPENBLAS_NUM_THREADS when the environment sets them to another count:
// the plan's count wins (Apply sets both), and the user's is not lost in
// silence.
func (t *Topology) PlanOversubscribed(mask CPUSet, r Request) (Plan, error) {
	if mask.IsEmpty() {
		mask = t.Online // as Plan reads it
	}
	usable := mask.Intersect(t.Online)
	if r.Policy == None || !r.CPUList.IsEmpty() || r.LocalSize <= usable.Len() || usable.IsEmpty() {
		p, err := t.Plan(mask, r)
		if err == nil && p.Policy != None {
			p.Warning = joinWarnings(p.Warning, envNote(p.Threads, r.Threads, os.LookupEnv))
		}
		return p, err
	}
	p, err := t.Plan(mask, Request{LocalRank: r.LocalRank, LocalSize: r.LocalSize, Threads: max(r.Threads, 1), Policy: None})
	if usable.Equal(t.Online) {
		p.Warning = fmt.Sprintf("%d ranks on this node but %d cpus in the allowed mask %s: oversubscribed, so ranks are not bound (bind none); use fewer ranks for pinned runs", r.LocalSize, usable.Len(), usable)
	} else {
		p.Warning = fmt.Sprintf("%d ranks on this node but this rank may run only on cpus %s (%d of the %d online): the launcher bound it (mpirun binds each rank to a core unless given --bind-to none) or taskset or a cgroup narrowed it, so hpctrain binds nothing and runs %d thread(s) there; launch with mpirun --bind-to none for hpctrain's placement",
			r.LocalSize, usable, usable.Len(), t.Online.Len(), p.Threads)
	}
	return p, err
}

// ThreadEnv names the variables Apply sets to the plan's thread count.
var ThreadEnv = []string{"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"}

// envNote says which of ThreadEnv the environment sets to other than the
// plan's threads: Apply replaces them, so the user's setting would be
// lost in silence. asked is Request.Threads (0: automatic).
func envNote(threads, asked int, lookup func(string) (string, bool)) string {
	want := strconv.Itoa(threads)
	var set []string
	for _, name := range ThreadEnv {
		if v, ok := lookup(name); ok && strings.TrimSpace(v) != want && v != "" {
			set = append(set, fmt.Sprintf("%s=%s", name, v))
		}
	}
	if len(set) == 0 {
		return ""
	}
	if asked > 0 {
		return fmt.Sprintf("environment %s overridden by -threads %d", strings.Join(set, ", "), threads)
	}
	return fmt.Sprintf("environment %s overridden by this plan's %d threads per rank (cores / ranks; -threads N sets the count)", strings.Join(set, ", "), threads)
}

func joinWarnings(a, b string) string {
	if a == "" || b == "" {
		return a + b
	}
	return a + "; " + b
}

// WritePlans prints, one line per local rank, the plans np ranks on this
// node would get: "local 0: cores 0-3 numa 0 threads 4 workers 0,1,2,3",
// with any warning on the next line.
func WritePlans(w io.Writer, t *Topology, mask CPUSet, np int, r Request) error {
	r.LocalSize = np
	plans, err := t.PlanAll(mask, r)
	if err != nil {
		return err
	}
	ew := &errWriter{w: w}
	for _, p := range plans {
		ew.printf("local %d: %s", p.LocalRank, p)
		if p.WorkerCPUs != nil {
			ew.printf(" workers %s", joinInts(p.WorkerCPUs, ","))
		}
		ew.printf("\n")
		if p.Warning != "" {
			ew.printf("  warning: %s\n", p.Warning)
		}
	}
	return ew.err
}

// Layout is what `hpctrain topo -json` encodes.
type Layout struct {
	Topology *Topology `json:"topology"`
	Plans    []Plan    `json:"plans"`
}

func joinInts(v []int, sep string) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, sep)
}
