package affinity

import (
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the sysfs fixtures in testdata")

// machine describes a fixture: for each cpu its core (siblings share one),
// socket and NUMA node; nodes==nil leaves out the node directory.
type machine struct {
	name    string
	ncpu    int
	core    func(cpu int) int // a core number unique across sockets
	coreID  func(cpu int) int // core_id as sysfs shows it (per socket)
	socket  func(cpu int) int
	node    func(cpu int) int
	noNodes bool
	offline []int // cpus with only cpuN/online ("0"), left out of cpu/online
	memOnly []int // NUMA nodes with memory and no cpu (an empty cpulist)
	// pmus are Intel hybrid PMUs: name -> the cpulist of its "cpus" file
	// (sys/devices/cpu_core/cpus, ...)
	pmus map[string]string
	// capacity, when not nil, writes cpuN/cpu_capacity
	capacity func(cpu int) int
}

var machines = []machine{
	{ // (a) 1 socket, 16 cores, 32 threads; siblings N and N+16
		name: "server16c32t", ncpu: 32,
		core: func(c int) int { return c % 16 }, coreID: func(c int) int { return c % 16 },
		socket: func(int) int { return 0 }, node: func(int) int { return 0 },
	},
	{ // (b) 2 sockets, 2 NUMA nodes, 64 threads; siblings N and N+32;
		// cores 0-15 (+32-47) on socket/node 0, 16-31 (+48-63) on 1
		name: "dual2s64t", ncpu: 64,
		core: func(c int) int { return c % 32 }, coreID: func(c int) int { return c % 16 },
		socket: func(c int) int { return c % 32 / 16 }, node: func(c int) int { return c % 32 / 16 },
	},
	{ // (c) laptop, 4 cores, 8 threads; siblings N and N+4; no node directory
		name: "laptop4c8t", ncpu: 8,
		core: func(c int) int { return c % 4 }, coreID: func(c int) int { return c % 4 },
		socket: func(int) int { return 0 }, node: func(int) int { return 0 }, noNodes: true,
	},
	{ // (d) 8 cpus, 4 cores with siblings numbered next to each other
		// ({0,1},{2,3},...); tests give it the mask 2,3,6,7
		name: "pairs4c8t", ncpu: 8,
		core: func(c int) int { return c / 2 }, coreID: func(c int) int { return c / 2 },
		socket: func(int) int { return 0 }, node: func(int) int { return 0 },
	},
	{ // (e) 2-core VM without SMT, like the machine this was written on
		name: "vm2c", ncpu: 2,
		core: func(c int) int { return c }, coreID: func(c int) int { return c },
		socket: func(int) int { return 0 }, node: func(int) int { return 0 },
	},
	{ // (f) (c) with cpus 4 and 5 offline (echo 0 > cpuN/online):
		// cpu/online is 0-3,6-7 and cores 0 and 1 have lost a sibling
		name: "offline4c8t", ncpu: 8, offline: []int{4, 5},
		core: func(c int) int { return c % 4 }, coreID: func(c int) int { return c % 4 },
		socket: func(int) int { return 0 }, node: func(int) int { return 0 },
	},
	{ // (g) 2 sockets of 2 NUMA nodes each (NPS2, sub-NUMA clustering),
		// 4 cores a node, siblings N and N+16, and node 4 of memory alone
		// (CXL, HBM in flat mode)
		name: "snc2s4n", ncpu: 32, memOnly: []int{4},
		core: func(c int) int { return c % 16 }, coreID: func(c int) int { return c % 8 },
		socket: func(c int) int { return c % 16 / 8 }, node: func(c int) int { return c % 16 / 4 },
	},
	{ // (h) hybrid, like an Intel Core i9-12900: 8 P-cores with SMT,
		// siblings next to each other (cpus 0-15: {0,1},{2,3},...), then
		// 8 E-cores without SMT (cpus 16-23); one socket, one NUMA node
		name: "hybrid8p8e", ncpu: 24,
		core: hybridCore, coreID: hybridCore,
		socket: func(int) int { return 0 }, node: func(int) int { return 0 },
		pmus: map[string]string{"cpu_core": "0-15", "cpu_atom": "16-23"},
	},
	{ // (i) arm64 big.LITTLE without SMT: 4 little cores (cpus 0-3,
		// cpu_capacity 446) numbered before 4 big ones (4-7, 1024)
		name: "biglittle4l4b", ncpu: 8,
		core: func(c int) int { return c }, coreID: func(c int) int { return c },
		socket: func(int) int { return 0 }, node: func(int) int { return 0 },
		capacity: func(c int) int { return [...]int{446, 1024}[c/4] },
	},
}

// hybridCore numbers the cores of fixture (h): P-cores 0-7, E-cores 8-15.
func hybridCore(cpu int) int {
	if cpu < 16 {
		return cpu / 2
	}
	return cpu - 8
}

// files returns the fixture's sysfs files, path -> content.
func (m machine) files() map[string]string {
	f := map[string]string{}
	cpuDir := "sys/devices/system/cpu"
	all := make([]int, m.ncpu)
	for c := range all {
		all[c] = c
	}
	online := NewCPUSet(all...).Minus(NewCPUSet(m.offline...))
	f[cpuDir+"/online"] = online.String() + "\n"
	nodes := map[int][]int{}
	for _, n := range m.memOnly {
		nodes[n] = nil
	}
	for c := range m.ncpu {
		nodes[m.node(c)] = append(nodes[m.node(c)], c) // offline cpus too, as sysfs may list them
		if !online.Contains(c) {
			f[cpuDir+"/cpu"+strconv.Itoa(c)+"/online"] = "0\n" // no topology directory
			continue
		}
		var sib []int
		for s := range m.ncpu {
			if m.core(s) == m.core(c) && online.Contains(s) {
				sib = append(sib, s)
			}
		}
		d := cpuDir + "/cpu" + strconv.Itoa(c) + "/topology/"
		f[d+"core_id"] = fmt.Sprintln(m.coreID(c))
		f[d+"die_id"] = "0\n"
		f[d+"physical_package_id"] = fmt.Sprintln(m.socket(c))
		f[d+"thread_siblings_list"] = NewCPUSet(sib...).String() + "\n"
		if m.capacity != nil {
			f[cpuDir+"/cpu"+strconv.Itoa(c)+"/cpu_capacity"] = fmt.Sprintln(m.capacity(c))
		}
	}
	for pmu, cpus := range m.pmus {
		f["sys/devices/"+pmu+"/cpus"] = cpus + "\n"
	}
	if !m.noNodes {
		for n, cpus := range nodes {
			f["sys/devices/system/node/node"+strconv.Itoa(n)+"/cpulist"] = NewCPUSet(cpus...).String() + "\n"
		}
	}
	return f
}

// TestFixtures checks testdata against the generator above; run
// go test ./affinity -run TestFixtures -update to rewrite it.
func TestFixtures(t *testing.T) {
	for _, m := range machines {
		root := filepath.Join("testdata", m.name)
		want := m.files()
		if *update {
			if err := os.RemoveAll(root); err != nil {
				t.Fatal(err)
			}
			for p, s := range want {
				full := filepath.Join(root, p)
				if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(full, []byte(s), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
		got := map[string]string{}
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, err := os.ReadFile(p)
			rel, _ := filepath.Rel(root, p)
			got[filepath.ToSlash(rel)] = string(b)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Errorf("%s: %d files, generator makes %d (run with -update)", m.name, len(got), len(want))
		}
		for p, s := range want {
			if got[p] != s {
				t.Errorf("%s/%s = %q, generator makes %q (run with -update)", m.name, p, got[p], s)
			}
		}
	}
}
