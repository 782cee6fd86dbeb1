package affinity

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Topology is the machine's CPU layout as sysfs reports it: logical CPUs,
// the physical cores they are SMT threads of, sockets, NUMA nodes and, on
// a hybrid CPU, the class of each core.
type Topology struct {
	// Online is every online logical CPU.
	Online CPUSet `json:"online"`
	// Allowed is the process's affinity mask when the topology was read
	// from the live system (ReadTopology("/")); empty otherwise. Plan does
	// not read it: the mask is Plan's own argument.
	Allowed CPUSet `json:"allowed"`
	// Sockets by ascending physical_package_id.
	Sockets []Socket `json:"sockets"`
	// Nodes are the NUMA nodes with at least one online CPU, by ascending
	// ID. A machine without /sys/devices/system/node has one node, 0.
	Nodes []Node `json:"numa_nodes"`
	// Cores are the physical cores, ordered by their lowest CPU.
	Cores []Core `json:"cores"`
	// Kinds names the core classes of a hybrid CPU, fastest first
	// (Core.Class indexes it): "P", "E", "LPE" on Intel, "capacity-N"
	// where classes come from cpu_capacity. Nil where every core is of one
	// class.
	Kinds []string `json:"kinds,omitempty"`

	coreOf []int // coreOf[cpu] indexes Cores; -1 for a CPU not online
}

// Socket is one physical package.
type Socket struct {
	ID   int    `json:"id"`
	CPUs CPUSet `json:"cpus"`
}

// Node is one NUMA node.
type Node struct {
	ID   int    `json:"id"`
	CPUs CPUSet `json:"cpus"`
}

// Core is one physical core: the logical CPUs in CPUs are its SMT threads
// (thread_siblings_list), of which the lowest is its first.
type Core struct {
	Socket int    `json:"socket"`
	Die    int    `json:"die"`
	ID     int    `json:"core_id"` // core_id; unique only within a socket
	Node   int    `json:"numa_node"`
	CPUs   CPUSet `json:"cpus"`
	// Class ranks the core on a hybrid CPU, 0 the fastest (Topology.Kinds
	// names it); 0 for every core of a machine that is not hybrid.
	Class int `json:"class,omitempty"`
	// Kind is Topology.Kinds[Class] on a hybrid CPU, empty otherwise.
	Kind string `json:"kind,omitempty"`
	// Capacity is the core's cpu_capacity (1024 for the fastest) where
	// classes come from it, 0 otherwise.
	Capacity int `json:"capacity,omitempty"`
}

// SMT reports whether any physical core has more than one logical CPU.
func (t *Topology) SMT() bool {
	for _, c := range t.Cores {
		if c.CPUs.Len() > 1 {
			return true
		}
	}
	return false
}

// Hybrid reports whether the cores are of more than one class (Intel
// P-cores and E-cores, Arm big.LITTLE).
func (t *Topology) Hybrid() bool { return len(t.Kinds) > 1 }

// ClassOf returns the class of cpu's core (Core.Class), and -1 for a CPU
// that is not online.
func (t *Topology) ClassOf(cpu int) int {
	c, ok := t.CoreOf(cpu)
	if !ok {
		return -1
	}
	return c.Class
}

// CoreOf returns the physical core of cpu, and false for a CPU that is not
// online.
func (t *Topology) CoreOf(cpu int) (Core, bool) {
	if cpu < 0 || cpu >= len(t.coreOf) || t.coreOf[cpu] < 0 {
		return Core{}, false
	}
	return t.Cores[t.coreOf[cpu]], true
}

// NodeOf returns the NUMA node of cpu, or -1 for a CPU that is not online.
func (t *Topology) NodeOf(cpu int) int {
	c, ok := t.CoreOf(cpu)
	if !ok {
		return -1
	}
	return c.Node
}

// PhysicalCores returns how many physical cores have at least one CPU in
// mask.
func (t *Topology) PhysicalCores(mask CPUSet) int {
	n := 0
	for _, c := range t.Cores {
		if !c.CPUs.Intersect(mask).IsEmpty() {
			n++
		}
	}
	return n
}

// ReadTopology reads the CPU topology below sysRoot: "/" for this machine,
// or a fixture tree holding sys/devices/system/{cpu,node}. It reads
// cpu/online (or, without it, the cpuN directories), each online CPU's
// topology/{core_id,die_id,physical_package_id,thread_siblings_list} and
// node/nodeN/cpulist, and the core classes of a hybrid CPU (readClasses);
// hwloc is not needed. A missing file other than
// cpu/online and the thread siblings list defaults sensibly: no die_id
// means die 0, no node directory means one NUMA node 0 holding every CPU,
// no topology directory means a core of its own on socket 0, no class
// files mean one class. For sysRoot "/" Allowed is filled from the
// process's affinity mask.
func ReadTopology(sysRoot string) (*Topology, error) {
	cpuDir := filepath.Join(sysRoot, "sys/devices/system/cpu")
	nodeDir := filepath.Join(sysRoot, "sys/devices/system/node")

	online, err := readCPUList(filepath.Join(cpuDir, "online"))
	if errors.Is(err, fs.ErrNotExist) {
		online, err = listIndexed(cpuDir, "cpu")
	}
	if err != nil {
		return nil, fmt.Errorf("read cpu topology: %w", err)
	}
	if online.IsEmpty() {
		return nil, fmt.Errorf("read cpu topology: no online cpu under %s", cpuDir)
	}

	t := &Topology{Online: online, coreOf: make([]int, online.Max()+1)}
	for i := range t.coreOf {
		t.coreOf[i] = -1
	}

	// NUMA nodes; a CPU no node lists goes to node 0.
	nodeOf := make(map[int]int)
	nodeIDs, err := listIndexed(nodeDir, "node")
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read numa nodes: %w", err)
	}
	for _, id := range nodeIDs.cpus {
		cpus, err := readCPUList(filepath.Join(nodeDir, "node"+strconv.Itoa(id), "cpulist"))
		if err != nil {
			return nil, fmt.Errorf("read numa nodes: %w", err)
		}
		for _, c := range cpus.Intersect(online).cpus {
			nodeOf[c] = id
		}
	}

	nodeCPUs := make(map[int][]int)
	sockCPUs := make(map[int][]int)
	for _, cpu := range online.cpus {
		dir := filepath.Join(cpuDir, "cpu"+strconv.Itoa(cpu), "topology")
		pkg, err := readIntDefault(filepath.Join(dir, "physical_package_id"), 0)
		if err != nil {
			return nil, fmt.Errorf("read cpu topology: %w", err)
		}
		die, err := readIntDefault(filepath.Join(dir, "die_id"), 0)
		if err != nil {
			return nil, fmt.Errorf("read cpu topology: %w", err)
		}
		coreID, err := readIntDefault(filepath.Join(dir, "core_id"), cpu)
		if err != nil {
			return nil, fmt.Errorf("read cpu topology: %w", err)
		}
		sib, err := readCPUList(filepath.Join(dir, "thread_siblings_list"))
		if errors.Is(err, fs.ErrNotExist) {
			sib, err = NewCPUSet(cpu), nil
		}
		if err != nil {
			return nil, fmt.Errorf("read cpu topology: %w", err)
		}
		sib = sib.Intersect(online).Union(NewCPUSet(cpu))
		node := nodeOf[cpu] // 0 when unlisted
		nodeCPUs[node] = append(nodeCPUs[node], cpu)
		sockCPUs[pkg] = append(sockCPUs[pkg], cpu)

		if t.coreOf[cpu] >= 0 {
			continue // already placed as a sibling of a lower CPU
		}
		for _, s := range sib.cpus {
			if t.coreOf[s] >= 0 {
				return nil, fmt.Errorf("read cpu topology: cpu %d has siblings %s but cpu %d is already in core %s",
					cpu, sib, s, t.Cores[t.coreOf[s]].CPUs)
			}
			t.coreOf[s] = len(t.Cores)
		}
		t.Cores = append(t.Cores, Core{Socket: pkg, Die: die, ID: coreID, Node: node, CPUs: sib})
	}
	for _, id := range sortedKeys(nodeCPUs) {
		t.Nodes = append(t.Nodes, Node{ID: id, CPUs: NewCPUSet(nodeCPUs[id]...)})
	}
	for _, id := range sortedKeys(sockCPUs) {
		t.Sockets = append(t.Sockets, Socket{ID: id, CPUs: NewCPUSet(sockCPUs[id]...)})
	}
	if err := t.readClasses(sysRoot); err != nil {
		return nil, fmt.Errorf("read cpu core classes: %w", err)
	}
	if filepath.Clean(sysRoot) == "/" {
		if t.Allowed, err = Allowed(); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// hybridPMUs are the perf PMUs Linux registers on an Intel hybrid CPU, one
// per core type, fastest first, with the Kind each gives its cores. Each
// has a file "cpus" listing its logical CPUs in cpulist syntax, the
// interface perf itself reads (tools/perf/Documentation/intel-hybrid.txt:
// "cat /sys/devices/cpu_core/cpus 0-15", "cat /sys/devices/cpu_atom/cpus
// 16-23" on Alder Lake). In the kernel, arch/x86/events/intel/core.c names
// them in intel_hybrid_pmu_type_map ({hybrid_big, "cpu_core"},
// {hybrid_small, "cpu_atom"}, since 2024 {hybrid_tiny, "cpu_lowpower"}
// for Arrow Lake-H's second atom uarch: "perf/x86/intel: Support hybrid
// PMU with multiple atom uarchs") and prints the file with
// DEVICE_ATTR(cpus, ..., intel_hybrid_get_attr_cpus). A CPU of one core
// type has a single PMU, /sys/devices/cpu, and none of these. Linux 5.13+
// with CONFIG_PERF_EVENTS; Meteor Lake's low-power E-cores share cpu_atom
// with its other E-cores (the same uarch), so they are not told apart.
var hybridPMUs = []struct{ pmu, kind string }{{"cpu_core", "P"}, {"cpu_atom", "E"}, {"cpu_lowpower", "LPE"}}

// readClasses sets each core's class. Intel hybrid CPUs: from the PMUs'
// cpus files (hybridPMUs). Otherwise, where every online CPU has
// cpu/cpuN/cpu_capacity, from it: the scheduler's relative capacity of
// the CPU, 1024 for the fastest (Documentation/ABI/testing/
// sysfs-devices-system-cpu, "cpu_capacity: capacity of cpuX"; written by
// drivers/base/arch_topology.c, built where an architecture selects
// GENERIC_ARCH_TOPOLOGY: arm, arm64, riscv), one class per distinct
// value, largest first. x86 kernels have the file too: the 2-core AMD
// EPYC VM this was written on (Linux 6.18) shows 1024 on both CPUs; the
// commit that added it there was not found, and on Intel hybrid CPUs the
// PMU files are read first. One class found (E-cores disabled, an arm64
// or x86 server: all 1024) leaves the machine not hybrid: Kinds nil,
// every Class 0.
func (t *Topology) readClasses(sysRoot string) error {
	classOf := make(map[int]int) // cpu -> index into kinds
	var kinds []string
	for _, h := range hybridPMUs {
		cpus, err := readCPUList(filepath.Join(sysRoot, "sys/devices", h.pmu, "cpus"))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		if cpus = cpus.Intersect(t.Online); cpus.IsEmpty() {
			continue
		}
		for _, c := range cpus.cpus {
			if _, ok := classOf[c]; !ok {
				classOf[c] = len(kinds)
			}
		}
		kinds = append(kinds, h.kind)
	}
	capacity := make(map[int]int)
	if kinds == nil {
		var err error
		if capacity, kinds, classOf, err = t.readCapacities(sysRoot); err != nil {
			return err
		}
	}
	if len(kinds) < 2 {
		return nil
	}
	// An online CPU no PMU lists (none seen; a CPU the kernel could not
	// match to a PMU) goes in a class of its own, after the known ones:
	// it is used last.
	unknown := -1
	for i := range t.Cores {
		c := &t.Cores[i]
		first := c.CPUs.cpus[0]
		k, ok := classOf[first]
		if !ok {
			if unknown < 0 {
				unknown = len(kinds)
				kinds = append(kinds, "unknown")
			}
			k = unknown
		}
		c.Class, c.Kind, c.Capacity = k, kinds[k], capacity[first]
	}
	t.Kinds = kinds
	return nil
}

// readCapacities reads cpu/cpuN/cpu_capacity of every online CPU and
// returns each CPU's capacity, the classes ("capacity-N", largest first)
// and each CPU's class; no classes where a CPU has no such file.
func (t *Topology) readCapacities(sysRoot string) (capacity map[int]int, kinds []string, classOf map[int]int, err error) {
	capacity = make(map[int]int)
	var values []int
	for _, cpu := range t.Online.cpus {
		v, err := readIntDefault(filepath.Join(sysRoot, "sys/devices/system/cpu", "cpu"+strconv.Itoa(cpu), "cpu_capacity"), -1)
		if err != nil {
			return nil, nil, nil, err
		}
		if v < 0 {
			return nil, nil, nil, nil
		}
		capacity[cpu] = v
		values = append(values, v)
	}
	slices.Sort(values)
	values = slices.Compact(values)
	slices.Reverse(values)
	classOf = make(map[int]int)
	for cpu, v := range capacity {
		classOf[cpu] = slices.Index(values, v)
	}
	for _, v := range values {
		kinds = append(kinds, "capacity-"+strconv.Itoa(v))
	}
	return capacity, kinds, classOf, nil
}

func sortedKeys(m map[int][]int) []int {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func readCPUList(path string) (CPUSet, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return CPUSet{}, err
	}
	s, err := Parse(string(b))
	if err != nil {
		return CPUSet{}, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

func readIntDefault(path string, def int) (int, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return def, nil
	}
	if err != nil {
		return 0, err
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

// listIndexed returns N for the entries prefixN (N decimal) of dir.
func listIndexed(dir, prefix string) (CPUSet, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return CPUSet{}, err
	}
	var ids []int
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok || rest == "" {
			continue
		}
		if n, err := strconv.Atoi(rest); err == nil && n >= 0 && n < MaxCPU {
			ids = append(ids, n)
		}
	}
	return NewCPUSet(ids...), nil
}

// Write prints t for a person: a summary line, sockets, NUMA nodes, the
// physical cores with their SMT siblings (and their kind on a hybrid CPU),
// and the allowed mask when known.
func (t *Topology) Write(w io.Writer) error {
	smt := "SMT off"
	if t.SMT() {
		smt = "SMT on"
	}
	logical := t.Online.Len()
	ew := &errWriter{w: w}
	if t.Hybrid() {
		count := make([]int, len(t.Kinds))
		for _, c := range t.Cores {
			count[c.Class]++
		}
		classes := make([]string, len(t.Kinds))
		for k, name := range t.Kinds {
			classes[k] = fmt.Sprintf("%d %s cores", count[k], name)
		}
		smt += "; hybrid, fastest first: " + strings.Join(classes, ", ")
	}
	ew.printf("%d socket(s), %d NUMA node(s), %d physical cores, %d logical CPUs (%s)\n",
		len(t.Sockets), len(t.Nodes), len(t.Cores), logical, smt)
	for _, s := range t.Sockets {
		ew.printf("socket %d: cpus %s\n", s.ID, s.CPUs)
	}
	for _, n := range t.Nodes {
		ew.printf("numa node %d: cpus %s\n", n.ID, n.CPUs)
	}
	ew.printf("physical cores (first cpu, then SMT siblings):\n")
	for i, c := range t.Cores {
		kind := ""
		if c.Kind != "" {
			kind = " kind " + c.Kind
		}
		ew.printf("  core %3d  socket %d die %d core_id %d numa %d%s: cpus %s\n",
			i, c.Socket, c.Die, c.ID, c.Node, kind, c.CPUs)
	}
	if !t.Allowed.IsEmpty() {
		ew.printf("allowed mask: %s (%d logical CPUs on %d physical cores)\n",
			t.Allowed, t.Allowed.Len(), t.PhysicalCores(t.Allowed))
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
