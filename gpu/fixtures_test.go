package gpu

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"hpctrain/affinity"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// fixture is a machine in testdata/NAME.json: its GPUs as Topology's JSON
// (what `hpctrain topo -gpu -json` prints), the shape of its CPUs, and the
// CUDA_VISIBLE_DEVICES its job runs with, if any.
type fixture struct {
	Machine string          `json:"machine"`
	Comment string          `json:"comment"`
	CPU     cpuShape        `json:"cpu"`
	CVD     *string         `json:"cuda_visible_devices"`
	GPUs    json.RawMessage `json:"gpus"`
}

// cpuShape is a machine's CPUs: logical CPU c is thread c/(S*C) of core
// c%(S*C), cores numbered socket by socket (Linux on Intel: siblings N and
// N+S*C), each socket split into nodes_per_socket NUMA nodes.
type cpuShape struct {
	Sockets        int `json:"sockets"`
	CoresPerSocket int `json:"cores_per_socket"`
	ThreadsPerCore int `json:"threads_per_core"`
	NodesPerSocket int `json:"nodes_per_socket"`
}

// load reads testdata/name.json and returns the GPUs as the job sees them
// (after its CUDA_VISIBLE_DEVICES), all of them, and the CPU topology.
func load(t testing.TB, name string) (visible, all *Topology, cpu *affinity.Topology) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var f fixture
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	all, err = Decode(bytes.NewReader(f.GPUs))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	visible = all
	if f.CVD != nil {
		if visible, err = all.Visible(*f.CVD, true); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	return visible, all, cpuTopo(t, f.CPU)
}

// cpuTopos caches cpuTopo's answers: writing the trees is slow.
var cpuTopos = map[cpuShape]*affinity.Topology{}

// cpuTopo writes a sysfs cpu tree of shape s and reads it back.
func cpuTopo(t testing.TB, s cpuShape) *affinity.Topology {
	t.Helper()
	if topo, ok := cpuTopos[s]; ok {
		return topo
	}
	root := t.TempDir()
	cores := s.Sockets * s.CoresPerSocket
	n := cores * s.ThreadsPerCore
	nodeSize := s.CoresPerSocket / s.NodesPerSocket
	nodes := map[int][]int{}
	write := func(p, v string) {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("sys/devices/system/cpu/online", fmt.Sprintf("0-%d", n-1))
	for c := range n {
		core := c % cores
		var sib []int
		for th := range s.ThreadsPerCore {
			sib = append(sib, core+th*cores)
		}
		d := "sys/devices/system/cpu/cpu" + strconv.Itoa(c) + "/topology/"
		write(d+"core_id", strconv.Itoa(core%s.CoresPerSocket))
		write(d+"physical_package_id", strconv.Itoa(core/s.CoresPerSocket))
		write(d+"thread_siblings_list", affinity.NewCPUSet(sib...).String())
		node := core/s.CoresPerSocket*s.NodesPerSocket + core%s.CoresPerSocket/nodeSize
		nodes[node] = append(nodes[node], c)
	}
	for id, cpus := range nodes {
		write("sys/devices/system/node/node"+strconv.Itoa(id)+"/cpulist", affinity.NewCPUSet(cpus...).String())
	}
	topo, err := affinity.ReadTopology(root)
	if err != nil {
		t.Fatal(err)
	}
	cpuTopos[s] = topo
	return topo
}

// sysfsTree builds the tree testdata/name.txt describes under a temporary
// directory and returns its root and the CPU shape.
func sysfsTree(t testing.TB, name string) (string, cpuShape) {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name+".txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	root := t.TempDir()
	var shape cpuShape
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		w := strings.Fields(sc.Text())
		switch {
		case len(w) == 0 || strings.HasPrefix(w[0], "#"):
		case w[0] == "cpu" && len(w) == 5:
			v := make([]int, 4)
			for i := range v {
				v[i], _ = strconv.Atoi(w[i+1])
			}
			shape = cpuShape{v[0], v[1], v[2], v[3]}
		case len(w) == 6:
			dir := filepath.Join(root, "sys/devices", w[0])
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			for i, file := range []string{"vendor", "device", "class", "numa_node", "local_cpulist"} {
				if err := os.WriteFile(filepath.Join(dir, file), []byte(w[i+1]+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			links := filepath.Join(root, "sys/bus/pci/devices")
			if err := os.MkdirAll(links, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("../../../devices/"+w[0], filepath.Join(links, filepath.Base(w[0]))); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("%s.txt: bad line %q", name, sc.Text())
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return root, shape
}

// golden compares got with testdata/name.golden (rewritten with -update).
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./gpu -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from %s (run go test ./gpu -update if the change is right):\n--- got\n%s--- want\n%s", name, path, got, want)
	}
}
