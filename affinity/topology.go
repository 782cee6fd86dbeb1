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
// the physical cores they are SMT threads of, sockets and NUMA nodes.
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
// node/nodeN/cpulist; hwloc is not needed. A missing file other than
// cpu/online and the thread siblings list defaults sensibly: no die_id
// means die 0, no node directory means one NUMA node 0 holding every CPU,
// no topology directory means a core of its own on socket 0. For sysRoot
// "/" Allowed is filled from the process's affinity mask.
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
	if filepath.Clean(sysRoot) == "/" {
		if t.Allowed, err = Allowed(); err != nil {
			return nil, err
		}
	}
	return t, nil
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
// physical cores with their SMT siblings, and the allowed mask when known.
func (t *Topology) Write(w io.Writer) error {
	smt := "SMT off"
	if t.SMT() {
		smt = "SMT on"
	}
	logical := t.Online.Len()
	ew := &errWriter{w: w}
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
		ew.printf("  core %3d  socket %d die %d core_id %d numa %d: cpus %s\n",
			i, c.Socket, c.Die, c.ID, c.Node, c.CPUs)
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
