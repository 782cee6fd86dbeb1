package affinity

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func readFixture(t testing.TB, name string) *Topology {
	t.Helper()
	topo, err := ReadTopology(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

func mustParse(t testing.TB, s string) CPUSet {
	t.Helper()
	c, err := Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestReadTopology(t *testing.T) {
	for _, tc := range []struct {
		name                      string
		sockets, nodes, cores, on int
		smt                       bool
		core5                     string // siblings of cpu 5's core
	}{
		{"server16c32t", 1, 1, 16, 32, true, "5,21"},
		{"dual2s64t", 2, 2, 32, 64, true, "5,37"},
		{"laptop4c8t", 1, 1, 4, 8, true, "1,5"},
		{"pairs4c8t", 1, 1, 4, 8, true, "4-5"},
		{"vm2c", 1, 1, 2, 2, false, ""},
		{"offline4c8t", 1, 1, 4, 6, true, ""},
		{"snc2s4n", 2, 4, 16, 32, true, "5,21"},
		{"hybrid8p8e", 1, 1, 16, 24, true, "4-5"},
		{"biglittle4l4b", 1, 1, 8, 8, false, "5"},
	} {
		topo := readFixture(t, tc.name)
		if len(topo.Sockets) != tc.sockets || len(topo.Nodes) != tc.nodes || len(topo.Cores) != tc.cores ||
			topo.Online.Len() != tc.on || topo.SMT() != tc.smt {
			t.Errorf("%s: %d sockets %d nodes %d cores %d online smt %v, want %d %d %d %d %v", tc.name,
				len(topo.Sockets), len(topo.Nodes), len(topo.Cores), topo.Online.Len(), topo.SMT(),
				tc.sockets, tc.nodes, tc.cores, tc.on, tc.smt)
		}
		if tc.core5 != "" {
			if c, _ := topo.CoreOf(5); c.CPUs.String() != tc.core5 {
				t.Errorf("%s: core of cpu 5 = %s, want %s", tc.name, c.CPUs, tc.core5)
			}
		}
	}
	d := readFixture(t, "dual2s64t")
	if d.Nodes[1].CPUs.String() != "16-31,48-63" || d.NodeOf(40) != 0 || d.NodeOf(50) != 1 {
		t.Errorf("dual2s64t nodes %v", d.Nodes)
	}
	if c, _ := d.CoreOf(48); c.Socket != 1 || c.ID != 0 {
		t.Errorf("dual2s64t core of 48 = %+v, want socket 1 core_id 0", c)
	}
}

// TestReadTopologyHybrid: core classes come from Intel's hybrid PMUs
// (sys/devices/cpu_core/cpus, cpu_atom/cpus) or, without them, from
// cpu_capacity, fastest first; one class found is not hybrid, and no
// fixture without class files changes.
func TestReadTopologyHybrid(t *testing.T) {
	kindsOf := func(topo *Topology) string {
		var s []string
		for _, c := range topo.Cores {
			s = append(s, fmt.Sprintf("%s:%s/%d/%d", c.CPUs, c.Kind, c.Class, c.Capacity))
		}
		return strings.Join(s, " ")
	}
	h := readFixture(t, "hybrid8p8e")
	if !h.Hybrid() || strings.Join(h.Kinds, ",") != "P,E" ||
		kindsOf(h) != "0-1:P/0/0 2-3:P/0/0 4-5:P/0/0 6-7:P/0/0 8-9:P/0/0 10-11:P/0/0 12-13:P/0/0 14-15:P/0/0 "+
			"16:E/1/0 17:E/1/0 18:E/1/0 19:E/1/0 20:E/1/0 21:E/1/0 22:E/1/0 23:E/1/0" ||
		h.ClassOf(15) != 0 || h.ClassOf(16) != 1 || h.ClassOf(24) != -1 {
		t.Errorf("hybrid8p8e: hybrid %v kinds %v cores %s", h.Hybrid(), h.Kinds, kindsOf(h))
	}
	b := readFixture(t, "biglittle4l4b")
	if !b.Hybrid() || strings.Join(b.Kinds, ",") != "capacity-1024,capacity-446" ||
		kindsOf(b) != "0:capacity-446/1/446 1:capacity-446/1/446 2:capacity-446/1/446 3:capacity-446/1/446 "+
			"4:capacity-1024/0/1024 5:capacity-1024/0/1024 6:capacity-1024/0/1024 7:capacity-1024/0/1024" {
		t.Errorf("biglittle4l4b: hybrid %v kinds %v cores %s", b.Hybrid(), b.Kinds, kindsOf(b))
	}
	for _, name := range []string{"server16c32t", "dual2s64t", "laptop4c8t", "pairs4c8t", "vm2c", "offline4c8t", "snc2s4n"} {
		if topo := readFixture(t, name); topo.Hybrid() || topo.Kinds != nil || strings.Contains(kindsOf(topo), "/1/") {
			t.Errorf("%s is not hybrid: kinds %v cores %s", name, topo.Kinds, kindsOf(topo))
		}
	}

	// Trees of 4 cpus without topology directories: each a core.
	tree := func(files map[string]string) *Topology {
		t.Helper()
		root := t.TempDir()
		files["sys/devices/system/cpu/online"] = "0-3\n"
		for p, s := range files {
			full := filepath.Join(root, p)
			if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(full, []byte(s), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		topo, err := ReadTopology(root)
		if err != nil {
			t.Fatal(err)
		}
		return topo
	}
	capacities := func(v ...int) map[string]string {
		f := map[string]string{}
		for cpu, c := range v {
			f[fmt.Sprintf("sys/devices/system/cpu/cpu%d/cpu_capacity", cpu)] = fmt.Sprintln(c)
		}
		return f
	}
	// E-cores disabled: cpu_core alone lists every cpu.
	if topo := tree(map[string]string{"sys/devices/cpu_core/cpus": "0-3\n"}); topo.Hybrid() || kindsOf(topo) != "0:/0/0 1:/0/0 2:/0/0 3:/0/0" {
		t.Errorf("cpu_core only: kinds %v cores %s", topo.Kinds, kindsOf(topo))
	}
	// An arm64 server: every cpu_capacity 1024.
	if topo := tree(capacities(1024, 1024, 1024, 1024)); topo.Hybrid() || kindsOf(topo) != "0:/0/0 1:/0/0 2:/0/0 3:/0/0" {
		t.Errorf("equal capacities: kinds %v cores %s", topo.Kinds, kindsOf(topo))
	}
	// Three capacities (a phone's prime, big and little cores), and a cpu
	// without the file: no classes, rather than a guess.
	if topo := tree(capacities(1024, 870, 870, 300)); strings.Join(topo.Kinds, ",") != "capacity-1024,capacity-870,capacity-300" ||
		kindsOf(topo) != "0:capacity-1024/0/1024 1:capacity-870/1/870 2:capacity-870/1/870 3:capacity-300/2/300" {
		t.Errorf("three capacities: kinds %v cores %s", topo.Kinds, kindsOf(topo))
	}
	if topo := tree(capacities(1024, 870, 870)); topo.Hybrid() {
		t.Errorf("cpu 3 without cpu_capacity: kinds %v cores %s", topo.Kinds, kindsOf(topo))
	}
	// Arrow Lake-H's three PMUs, and an online cpu none lists: a class of
	// its own, last.
	topo := tree(map[string]string{"sys/devices/cpu_core/cpus": "0\n", "sys/devices/cpu_atom/cpus": "1\n", "sys/devices/cpu_lowpower/cpus": "2\n"})
	if strings.Join(topo.Kinds, ",") != "P,E,LPE,unknown" || kindsOf(topo) != "0:P/0/0 1:E/1/0 2:LPE/2/0 3:unknown/3/0" {
		t.Errorf("three PMUs: kinds %v cores %s", topo.Kinds, kindsOf(topo))
	}
	// The PMU lists win over capacities.
	f := capacities(1024, 1024, 1024, 1024)
	f["sys/devices/cpu_core/cpus"], f["sys/devices/cpu_atom/cpus"] = "0-1\n", "2-3\n"
	if topo := tree(f); strings.Join(topo.Kinds, ",") != "P,E" {
		t.Errorf("pmus and capacities: kinds %v cores %s", topo.Kinds, kindsOf(topo))
	}
}

func TestReadTopologyLive(t *testing.T) {
	topo, err := ReadTopology("/")
	if err != nil {
		t.Fatal(err)
	}
	if topo.Allowed.IsEmpty() || !topo.Allowed.IsSubset(topo.Online) {
		t.Fatalf("live allowed %s, online %s", topo.Allowed, topo.Online)
	}
	var b bytes.Buffer
	if err := topo.Write(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "allowed mask: ") {
		t.Errorf("Write output lacks the allowed mask:\n%s", b.String())
	}
}

// TestPlan checks the layout of every local rank, exactly.
func TestPlan(t *testing.T) {
	req := func(l, threads int) Request { return Request{LocalSize: l, Threads: threads, PreferNUMA: -1} }
	smt := func(r Request) Request { r.UseSMT = true; return r }
	for _, tc := range []struct {
		name, fixture, mask string
		r                   Request
		want                []string // each rank's CPUs
		workers0            string   // rank 0's WorkerCPUs, if checked
		threads             int
		warn, err           string // substrings; "" = none expected
	}{
		// (a) 16 cores / 32 threads, siblings N, N+16
		{name: "a/L1", fixture: "server16c32t", r: req(1, 0), want: []string{"0-15"}, threads: 16},
		{name: "a/L2", fixture: "server16c32t", r: req(2, 0), want: []string{"0-7", "8-15"}, threads: 8},
		{name: "a/L4", fixture: "server16c32t", r: req(4, 0), want: []string{"0-3", "4-7", "8-11", "12-15"}, threads: 4},
		{name: "a/L8", fixture: "server16c32t", r: req(8, 0),
			want: []string{"0-1", "2-3", "4-5", "6-7", "8-9", "10-11", "12-13", "14-15"}, threads: 2},
		{name: "a/L8x4 too many threads", fixture: "server16c32t", r: req(8, 4),
			want: []string{"0-1", "2-3", "4-5", "6-7", "8-9", "10-11", "12-13", "14-15"}, threads: 2,
			warn: "8 ranks x 4 threads need 32 physical cores but the allowed mask 0-31 has 16; using 2 threads per rank"},
		{name: "a/L2 smt", fixture: "server16c32t", r: smt(req(2, 0)), want: []string{"0-7,16-23", "8-15,24-31"},
			workers0: "0,16,1,17,2,18,3,19,4,20,5,21,6,22,7,23", threads: 16},
		{name: "a/L2 mask of second siblings", fixture: "server16c32t", mask: "16-19", r: req(2, 0),
			want: []string{"16-17", "18-19"}, threads: 2},
		{name: "a/L32 smt fallback", fixture: "server16c32t", r: req(32, 0), threads: 1,
			want: []string{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14", "15",
				"16", "17", "18", "19", "20", "21", "22", "23", "24", "25", "26", "27", "28", "29", "30", "31"},
			warn: "32 ranks on this node but only 16 physical cores"},
		{name: "a/L33", fixture: "server16c32t", r: req(33, 0),
			err: "33 ranks on this node but only 16 cores in the allowed mask 0-31 (32 logical cpus); use fewer ranks, -bind none, or mpirun --oversubscribe with -bind none"},

		// (b) 2 sockets, 2 NUMA nodes, siblings N, N+32
		{name: "b/L1", fixture: "dual2s64t", r: req(1, 0), want: []string{"0-31"}, threads: 32},
		{name: "b/L2", fixture: "dual2s64t", r: req(2, 0), want: []string{"0-15", "16-31"}, threads: 16},
		{name: "b/L4", fixture: "dual2s64t", r: req(4, 0), want: []string{"0-7", "8-15", "16-23", "24-31"}, threads: 8},
		{name: "b/L8", fixture: "dual2s64t", r: req(8, 0),
			want: []string{"0-3", "4-7", "8-11", "12-15", "16-19", "20-23", "24-27", "28-31"}, threads: 4},
		{name: "b/L2x4 spread over nodes", fixture: "dual2s64t", r: req(2, 4), want: []string{"0-3", "16-19"}, threads: 4},
		{name: "b/L2 smt", fixture: "dual2s64t", r: smt(req(2, 0)), want: []string{"0-15,32-47", "16-31,48-63"}, threads: 32},
		{name: "b/L1x8 prefer node 1", fixture: "dual2s64t", r: Request{LocalSize: 1, Threads: 8, PreferNUMA: 1},
			want: []string{"16-23"}, threads: 8},
		{name: "b/L64 smt fallback", fixture: "dual2s64t", r: req(64, 0), threads: 1,
			want: func() []string {
				var w []string
				for _, c := range []int{0, 16} { // node 0: firsts then siblings, then node 1
					for i := range 16 {
						w = append(w, NewCPUSet(c+i).String())
					}
					for i := range 16 {
						w = append(w, NewCPUSet(c+32+i).String())
					}
				}
				return w
			}(), warn: "64 ranks on this node but only 32 physical cores"},
		{name: "b/numa L4", fixture: "dual2s64t", r: Request{LocalSize: 4, Policy: NUMA, PreferNUMA: -1},
			want: []string{"0-15,32-47", "0-15,32-47", "16-31,48-63", "16-31,48-63"}, threads: 8},

		// (c) laptop, siblings N, N+4, no node directory
		{name: "c/L1", fixture: "laptop4c8t", r: req(1, 0), want: []string{"0-3"}, threads: 4},
		{name: "c/L2", fixture: "laptop4c8t", r: req(2, 0), want: []string{"0-1", "2-3"}, threads: 2},
		{name: "c/L4", fixture: "laptop4c8t", r: req(4, 0), want: []string{"0", "1", "2", "3"}, threads: 1},
		{name: "c/L8 smt fallback", fixture: "laptop4c8t", r: req(8, 0),
			want: []string{"0", "1", "2", "3", "4", "5", "6", "7"}, threads: 1,
			warn: "ranks share physical cores through SMT siblings"},
		{name: "c/L16", fixture: "laptop4c8t", r: req(16, 0), err: "16 ranks on this node but only 4 cores"},

		// (d) mask 2,3,6,7 on 4 cores with siblings {2,3} and {6,7}
		{name: "d/L1", fixture: "pairs4c8t", mask: "2,3,6,7", r: req(1, 0), want: []string{"2,6"}, threads: 2},
		{name: "d/L1 smt", fixture: "pairs4c8t", mask: "2,3,6,7", r: smt(req(1, 0)), want: []string{"2-3,6-7"},
			workers0: "2,3,6,7", threads: 4},
		{name: "d/L2", fixture: "pairs4c8t", mask: "2,3,6,7", r: req(2, 0), want: []string{"2", "6"}, threads: 1},
		{name: "d/L4 smt fallback", fixture: "pairs4c8t", mask: "2,3,6,7", r: req(4, 0),
			want: []string{"2", "6", "3", "7"}, threads: 1, warn: "4 ranks on this node but only 2 physical cores"},
		{name: "d/L8", fixture: "pairs4c8t", mask: "2,3,6,7", r: req(8, 0),
			err: "8 ranks on this node but only 2 cores in the allowed mask 2-3,6-7 (4 logical cpus)"},
		{name: "d/cpu list", fixture: "pairs4c8t", mask: "2,3,6,7", r: Request{LocalSize: 2, CPUList: NewCPUSet(6, 7)},
			want: []string{"6-7", "6-7"}, workers0: "6", threads: 1},
		{name: "d/cpu list outside mask", fixture: "pairs4c8t", mask: "2,3,6,7", r: Request{LocalSize: 1, CPUList: NewCPUSet(0, 1, 2)},
			err: "cpu list 0-2: cpus 0-1 are outside the allowed mask 2-3,6-7"},

		// (e) 2-core VM, no SMT
		{name: "e/L1", fixture: "vm2c", r: req(1, 0), want: []string{"0-1"}, threads: 2},
		{name: "e/L2", fixture: "vm2c", r: req(2, 0), want: []string{"0", "1"}, threads: 1},
		{name: "e/L4", fixture: "vm2c", r: req(4, 0), err: "4 ranks on this node but only 2 cores in the allowed mask 0-1"},
		{name: "e/L8", fixture: "vm2c", r: req(8, 0), err: "8 ranks on this node but only 2 cores"},
		{name: "e/L8 none", fixture: "vm2c", r: Request{LocalSize: 8, Policy: None, PreferNUMA: -1},
			want: []string{"", "", "", "", "", "", "", ""}, threads: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			topo := readFixture(t, tc.fixture)
			var mask CPUSet
			if tc.mask != "" {
				mask = mustParse(t, tc.mask)
			}
			plans, err := planEach(topo, mask, tc.r)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if mask.IsEmpty() {
				mask = topo.Online
			}
			for i, p := range plans {
				if i < len(tc.want) && p.CPUs.String() != tc.want[i] {
					t.Errorf("rank %d cpus %s, want %s", i, p.CPUs, tc.want[i])
				}
				if p.Threads != tc.threads {
					t.Errorf("rank %d threads %d, want %d", i, p.Threads, tc.threads)
				}
				if (tc.warn == "") != (p.Warning == "") || !strings.Contains(p.Warning, tc.warn) {
					t.Errorf("rank %d warning %q, want %q", i, p.Warning, tc.warn)
				}
				if !p.CPUs.IsSubset(mask) {
					t.Errorf("rank %d cpus %s outside mask %s", i, p.CPUs, mask)
				}
				if p.Policy == Cores && len(p.WorkerCPUs) != p.Threads {
					t.Errorf("rank %d: %d worker cpus for %d threads", i, len(p.WorkerCPUs), p.Threads)
				}
				if p.Policy == Cores && tc.r.CPUList.IsEmpty() {
					for j := range i {
						if s := p.CPUs.Intersect(plans[j].CPUs); !s.IsEmpty() {
							t.Errorf("ranks %d and %d share cpus %s", j, i, s)
						}
					}
				}
			}
			if len(plans) != len(tc.want) {
				t.Errorf("%d plans, want %d", len(plans), len(tc.want))
			}
			if tc.workers0 != "" && joinInts(plans[0].WorkerCPUs, ",") != tc.workers0 {
				t.Errorf("rank 0 workers %v, want %s", plans[0].WorkerCPUs, tc.workers0)
			}
		})
	}
}

// planEach is every local rank's Plan, the first error ending it.
func planEach(t *Topology, mask CPUSet, r Request) ([]Plan, error) {
	var plans []Plan
	for i := range r.LocalSize {
		r.LocalRank = i
		p, err := t.Plan(mask, r)
		if err != nil {
			return nil, err
		}
		plans = append(plans, p)
	}
	return plans, nil
}

// TestPlanOversubscribed: more ranks than cpus under a binding policy
// (which Plan refuses) are planned unbound with a warning, as train runs
// them and topo shows them; more ranks than cores but not than cpus, and
// every other request, are Plan's.
func TestPlanOversubscribed(t *testing.T) {
	topo := readFixture(t, "vm2c")
	plans, err := topo.PlanAll(CPUSet{}, Request{LocalSize: 4, PreferNUMA: -1})
	if err != nil || len(plans) != 4 {
		t.Fatalf("4 ranks on 2 cpus: %v, %d plans", err, len(plans))
	}
	for i, p := range plans {
		if p.Policy != None || p.Threads != 1 || p.LocalRank != i || !strings.Contains(p.Warning, "4 ranks on this node but 2 cpus in the allowed mask 0-1: oversubscribed") {
			t.Errorf("rank %d: %+v", i, p)
		}
	}
	// A mask narrower than the node (mpirun's default --bind-to core gives
	// each of 2 ranks one core) is not called oversubscribed: the warning
	// says the launcher bound the rank and how to launch instead.
	for _, m := range []string{"1", "0"} {
		p, err := topo.PlanOversubscribed(mustParse(t, m), Request{LocalSize: 2, LocalRank: 1, PreferNUMA: -1})
		if err != nil || p.Policy != None || p.Threads != 1 || strings.Contains(p.Warning, "oversubscribed") ||
			!strings.Contains(p.Warning, "may run only on cpus "+m+" (1 of the 2 online): the launcher bound it") ||
			!strings.Contains(p.Warning, "--bind-to none") {
			t.Errorf("2 ranks, mask %s: %+v, %v", m, p, err)
		}
	}
	// Only online cpus count: a mask naming cpu 5 of a 2-cpu node holds 2
	// usable cpus, too few for 3 ranks (Plan refused it).
	if p, err := topo.PlanOversubscribed(mustParse(t, "0-1,5"), Request{LocalSize: 3, LocalRank: 2, PreferNUMA: -1}); err != nil || p.Policy != None ||
		!strings.Contains(p.Warning, "3 ranks on this node but 2 cpus in the allowed mask 0-1: oversubscribed") {
		t.Errorf("3 ranks, mask 0-1,5: %+v, %v", p, err)
	}
	pairs := readFixture(t, "pairs4c8t")
	mask := mustParse(t, "2,3,6,7")
	if _, err := pairs.PlanAll(mask, Request{LocalSize: 3, Policy: Cores, PreferNUMA: -1}); err != nil {
		t.Errorf("3 ranks on 2 cores of 4 cpus (SMT fallback): %v", err)
	}
	if p, err := pairs.PlanOversubscribed(mask, Request{LocalSize: 2, LocalRank: 1, PreferNUMA: -1}); err != nil || p.Warning != "" || p.CPUs.String() != "6" {
		t.Errorf("2 ranks, 2 cores: %+v, %v", p, err)
	}
}

func TestPlanBadRequest(t *testing.T) {
	topo := readFixture(t, "vm2c")
	for _, r := range []Request{
		{LocalSize: 0},
		{LocalSize: 2, LocalRank: 2},
		{LocalSize: 1, Threads: -1},
		{LocalSize: 1, Policy: None, CPUList: NewCPUSet(0)},
	} {
		if _, err := topo.Plan(CPUSet{}, r); err == nil {
			t.Errorf("Plan(%+v) gave no error", r)
		}
	}
	if _, err := topo.Plan(NewCPUSet(5, 6), Request{LocalSize: 1}); err == nil || !strings.Contains(err.Error(), "no online cpu") {
		t.Errorf("mask of offline cpus: %v", err)
	}
}

func TestParsePolicy(t *testing.T) {
	for s, want := range map[string]Policy{"cores": Cores, "NUMA": NUMA, "none": None} {
		if p, err := ParsePolicy(s); err != nil || p != want {
			t.Errorf("ParsePolicy(%q) = %v, %v", s, p, err)
		}
	}
	if _, err := ParsePolicy("socket"); err == nil || !strings.Contains(err.Error(), "cores, numa, none") {
		t.Errorf("ParsePolicy(socket) error %v, want one naming the accepted values", err)
	}
}

func TestWritePlansAndJSON(t *testing.T) {
	topo := readFixture(t, "laptop4c8t")
	var b bytes.Buffer
	if err := WritePlans(&b, topo, CPUSet{}, 2, Request{PreferNUMA: -1}); err != nil {
		t.Fatal(err)
	}
	want := "local 0: cores 0-1 numa 0 threads 2 workers 0,1\nlocal 1: cores 2-3 numa 0 threads 2 workers 2,3\n"
	if b.String() != want {
		t.Errorf("WritePlans:\n%s\nwant:\n%s", b.String(), want)
	}
	plans, _ := topo.PlanAll(CPUSet{}, Request{LocalSize: 2, PreferNUMA: -1})
	js, err := json.Marshal(Layout{Topology: topo, Plans: plans})
	if err != nil {
		t.Fatal(err)
	}
	var back Layout
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatal(err)
	}
	if !back.Plans[1].CPUs.Equal(plans[1].CPUs) || back.Plans[1].Policy != Cores || !back.Topology.Online.Equal(topo.Online) {
		t.Errorf("JSON round trip: %s", js)
	}
	if !strings.Contains(string(js), `"cpus":"2-3"`) {
		t.Errorf("JSON does not write cpu lists as strings: %s", js)
	}
	b.Reset()
	if err := topo.Write(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "1 socket(s), 1 NUMA node(s), 4 physical cores, 8 logical CPUs (SMT on)") ||
		!strings.Contains(b.String(), "numa 0: cpus 1,5") {
		t.Errorf("Topology.Write:\n%s", b.String())
	}
}

// TestPlanNear: with Request.Near each rank's cores come from the cpus
// nearest its device, ranks stay disjoint, and a rank pushed off them says
// so.
func TestPlanNear(t *testing.T) {
	topo := readFixture(t, "dual2s64t") // node 0: 0-15,32-47; node 1: 16-31,48-63
	n0, n1 := topo.Nodes[0].CPUs, topo.Nodes[1].CPUs
	for _, tc := range []struct {
		name string
		mask string
		r    Request
		want []string // each rank's CPUs
		warn []string // each rank's warning (substring); "" = none
		thr  int
	}{
		{name: "two ranks near node 1, one near node 0",
			r:    Request{LocalSize: 3, PreferNUMA: -1, Near: []CPUSet{n1, n1, n0}},
			want: []string{"16-23", "24-31", "0-7"}, warn: []string{"", "", ""}, thr: 8},
		{name: "four ranks near node 0 keep to it",
			r:    Request{LocalSize: 4, PreferNUMA: -1, Near: []CPUSet{n0, n0, n0, n0}},
			want: []string{"0-3", "4-7", "8-11", "12-15"}, warn: []string{"", "", "", ""}, thr: 4},
		{name: "too many threads spill to the other node",
			r:    Request{LocalSize: 2, Threads: 12, PreferNUMA: -1, Near: []CPUSet{n0, n0}},
			want: []string{"0-11", "12-23"}, warn: []string{"", "local rank 1: cpus 16-23 are not among the cpus 0-15,32-47 nearest its device"}, thr: 12},
		{name: "device's node outside the mask",
			mask: "0-15", r: Request{LocalSize: 1, PreferNUMA: -1, Near: []CPUSet{n1}},
			want: []string{"0-15"}, warn: []string{"none of the cpus 16-31,48-63 nearest its device are in the allowed mask 0-15"}, thr: 16},
		{name: "empty near sets: no preference",
			r:    Request{LocalSize: 2, PreferNUMA: -1, Near: []CPUSet{{}, {}}},
			want: []string{"0-15", "16-31"}, warn: []string{"", ""}, thr: 16},
		{name: "smt",
			r:    Request{LocalSize: 1, UseSMT: true, PreferNUMA: -1, Near: []CPUSet{n1}},
			want: []string{"16-31,48-63"}, warn: []string{""}, thr: 32},
		{name: "numa policy follows the device",
			r:    Request{LocalSize: 2, Policy: NUMA, PreferNUMA: -1, Near: []CPUSet{n1, n1}},
			want: []string{"16-31,48-63", "16-31,48-63"}, warn: []string{"", ""}, thr: 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mask CPUSet
			if tc.mask != "" {
				mask = mustParse(t, tc.mask)
			}
			plans, err := topo.PlanAll(mask, tc.r)
			if err != nil {
				t.Fatal(err)
			}
			for i, p := range plans {
				if p.CPUs.String() != tc.want[i] || p.Threads != tc.thr {
					t.Errorf("rank %d: cpus %s threads %d, want %s threads %d", i, p.CPUs, p.Threads, tc.want[i], tc.thr)
				}
				if (tc.warn[i] == "") != (p.Warning == "") || !strings.Contains(p.Warning, tc.warn[i]) {
					t.Errorf("rank %d warning %q, want %q", i, p.Warning, tc.warn[i])
				}
				for j := range i {
					if s := p.CPUs.Intersect(plans[j].CPUs); p.Policy == Cores && !s.IsEmpty() {
						t.Errorf("ranks %d and %d share cpus %s", j, i, s)
					}
				}
			}
		})
	}
	if _, err := topo.Plan(CPUSet{}, Request{LocalSize: 2, Near: []CPUSet{n0}}); err == nil ||
		!strings.Contains(err.Error(), "1 near-cpu sets for 2 local ranks") {
		t.Errorf("short Near: %v", err)
	}
	p, _ := topo.Plan(CPUSet{}, Request{LocalSize: 1, Near: []CPUSet{n1}})
	p.Device = "gpu 0 (bus 0000:3b:00.0, numa 1)"
	if got := ReportLine("h", 0, p); got != "[h:rank 0 local 0] cores 16-31 numa 1 threads 16, gpu 0 (bus 0000:3b:00.0, numa 1)" {
		t.Errorf("ReportLine with a device: %q", got)
	}
}

// TestPlanThreadEnv: Apply replaces OMP_NUM_THREADS and
// OPENBLAS_NUM_THREADS with the plan's thread count; a user's other value
// is named in the plan's warning, not lost in silence.
func TestPlanThreadEnv(t *testing.T) {
	topo := readFixture(t, "server16c32t")
	t.Setenv("OMP_NUM_THREADS", "4")
	t.Setenv("OPENBLAS_NUM_THREADS", "8")
	p, err := topo.PlanOversubscribed(CPUSet{}, Request{LocalSize: 2, PreferNUMA: -1})
	if err != nil || p.Threads != 8 ||
		p.Warning != "environment OMP_NUM_THREADS=4 overridden by this plan's 8 threads per rank (cores / ranks; -threads N sets the count)" {
		t.Errorf("auto threads: %+v, %v", p, err)
	}
	p, err = topo.PlanOversubscribed(CPUSet{}, Request{LocalSize: 2, Threads: 2, PreferNUMA: -1})
	if err != nil || p.Warning != "environment OMP_NUM_THREADS=4, OPENBLAS_NUM_THREADS=8 overridden by -threads 2" {
		t.Errorf("-threads 2: %+v, %v", p, err)
	}
	// Policy none: Apply is not called, the environment stays; no note.
	p, err = topo.PlanOversubscribed(CPUSet{}, Request{LocalSize: 2, Threads: 2, Policy: None, PreferNUMA: -1})
	if err != nil || p.Warning != "" {
		t.Errorf("-bind none: %+v, %v", p, err)
	}
	// The same count: nothing to say.
	t.Setenv("OMP_NUM_THREADS", "16")
	t.Setenv("OPENBLAS_NUM_THREADS", "16")
	if p, err = topo.PlanOversubscribed(CPUSet{}, Request{LocalSize: 1, PreferNUMA: -1}); err != nil || p.Warning != "" {
		t.Errorf("same count: %+v, %v", p, err)
	}
}

// TestPlanOddMachines: offline cpus and their lost siblings, and sub-NUMA
// clustering with a memory-only node: plans take physical cores, never an
// offline cpu, and spread ranks over NUMA nodes in blocks, one socket's
// nodes before the next's.
func TestPlanOddMachines(t *testing.T) {
	for _, tc := range []struct {
		fixture, mask string
		r             Request
		want          []string // each rank's plan
		warn          map[int]string
	}{
		// cores 0 and 1 lost siblings 4 and 5; 6 and 7 are 2's and 3's
		{"offline4c8t", "", Request{LocalSize: 2},
			[]string{"cores 0-1 numa 0 threads 2", "cores 2-3 numa 0 threads 2"}, nil},
		// with SMT, threads count logical cpus: 6 of them make 3 a rank
		{"offline4c8t", "", Request{LocalSize: 2, UseSMT: true},
			[]string{"cores 0-2 numa 0 threads 3", "cores 3,6-7 numa 0 threads 3"}, nil},
		// the mask names an offline cpu: only 6 and 7 are usable
		{"offline4c8t", "4-7", Request{LocalSize: 2},
			[]string{"cores 6 numa 0 threads 1", "cores 7 numa 0 threads 1"}, nil},
		// 3 ranks of 10 on 2 nodes of 16: rank 2 takes the rest of both
		// (moved from TestPlan, which has one warning for all ranks)
		{"dual2s64t", "", Request{LocalSize: 3},
			[]string{"cores 0-9 numa 0 threads 10", "cores 16-25 numa 1 threads 10", "cores 10-15,26-29 numa 0,1 threads 10"},
			map[int]string{2: "local rank 2's 10 threads span numa nodes 0,1: they do not fit in one node beside the other ranks; -threads 8 keeps every rank in one node"}},
		// one rank per node; the memory-only node 4 gets none
		{"snc2s4n", "", Request{LocalSize: 4},
			[]string{"cores 0-3 numa 0 threads 4", "cores 4-7 numa 1 threads 4", "cores 8-11 numa 2 threads 4", "cores 12-15 numa 3 threads 4"}, nil},
		// a rank larger than a node takes a whole socket's two nodes
		{"snc2s4n", "", Request{LocalSize: 2},
			[]string{"cores 0-7 numa 0,1 threads 8", "cores 8-15 numa 2,3 threads 8"}, nil},
		// a non-contiguous mask of second siblings on two nodes
		{"snc2s4n", "16-17,28-31", Request{LocalSize: 2, Threads: 2},
			[]string{"cores 16-17 numa 0 threads 2", "cores 28-29 numa 3 threads 2"}, nil},
		{"snc2s4n", "16-17,28-31", Request{LocalSize: 3, Threads: 2},
			[]string{"cores 16-17 numa 0 threads 2", "cores 28-29 numa 3 threads 2", "cores 30-31 numa 3 threads 2"}, nil},
		// 3 threads fit in node 3 but not beside the other rank: rank 1
		// takes what is left on nodes 0 and 3, and says so
		{"snc2s4n", "16-17,28-31", Request{LocalSize: 2},
			[]string{"cores 28-30 numa 3 threads 3", "cores 16-17,31 numa 0,3 threads 3"},
			map[int]string{1: "local rank 1's 3 threads span numa nodes 0,3: they do not fit in one node beside the other ranks; -threads 2 keeps every rank in one node"}},
	} {
		topo := readFixture(t, tc.fixture)
		tc.r.PreferNUMA = -1
		plans, err := topo.PlanAll(mustParse(t, tc.mask), tc.r)
		if err != nil {
			t.Errorf("%s mask %q %+v: %v", tc.fixture, tc.mask, tc.r, err)
			continue
		}
		for i, p := range plans {
			if p.String() != tc.want[i] || p.Warning != tc.warn[i] {
				t.Errorf("%s mask %q %+v rank %d: %s (warning %q), want %s", tc.fixture, tc.mask, tc.r, i, p, p.Warning, tc.want[i])
			}
		}
	}
}

// TestPlanHybrid: on a hybrid CPU (fixture hybrid8p8e: P-cores 0-15 with
// siblings next to each other, E-cores 16-23; biglittle4l4b: little cores
// 0-3, big 4-7) ranks take cores of one class each, fastest first; the
// default thread count counts the fastest class when it holds a thread
// per rank; and the warning, the same on every rank, names the ranks on
// slower cores or a mix, and the -threads that keeps all on the fastest.
func TestPlanHybrid(t *testing.T) {
	const slowest = "a rank's threads split each step evenly and every step waits for the slowest rank, so the job runs at the pace of its E cores"
	req := func(l, threads int) Request { return Request{LocalSize: l, Threads: threads, PreferNUMA: -1} }
	smt := func(r Request) Request { r.UseSMT = true; return r }
	list := func(r Request, s string) Request { r.CPUList = mustParse(t, s); return r }
	policy := func(r Request, p Policy) Request { r.Policy = p; return r }
	near := func(r Request, s ...string) Request {
		for _, n := range s {
			r.Near = append(r.Near, mustParse(t, n))
		}
		return r
	}
	for _, tc := range []struct {
		name, fixture, mask string
		r                   Request
		want                []string // each rank's CPUs
		workers0            string   // rank 0's WorkerCPUs, if checked
		threads             int
		warn                []string // substrings of every rank's warning; nil = none
	}{
		{name: "2x4 on P", r: req(2, 4), want: []string{"0,2,4,6", "8,10,12,14"}, threads: 4},
		{name: "2 ranks default: P-cores only", r: req(2, 0), want: []string{"0,2,4,6", "8,10,12,14"}, threads: 4},
		{name: "1 rank default: P-cores only", r: req(1, 0), want: []string{"0,2,4,6,8,10,12,14"}, threads: 8},
		{name: "3x4: the third rank on E", r: req(3, 4), want: []string{"0,2,4,6", "8,10,12,14", "16-19"}, threads: 4,
			warn: []string{"hybrid cpu: local ranks 0,1 got P cores, local rank 2 got E cores; " + slowest + "; -threads 2 keeps every rank on P cores"}},
		{name: "2x6: E, not a mix", r: req(2, 6), want: []string{"0,2,4,6,8,10", "16-21"}, threads: 6,
			warn: []string{"local rank 0 got P cores, local rank 1 got E cores", "-threads 4 keeps every rank on P cores"}},
		{name: "1x12: a mix only P and E hold", r: req(1, 12), want: []string{"0,2,4,6,8,10,12,14,16-19"}, threads: 12,
			warn: []string{"hybrid cpu: local rank 0 got P+E cores; " + slowest + "; -threads 8 keeps every rank on P cores"}},
		{name: "10 ranks: more than P-cores", r: req(10, 0), threads: 1,
			want: []string{"0", "2", "4", "6", "8", "10", "12", "14", "16", "17"},
			warn: []string{"local ranks 0,1,2,3,4,5,6,7 got P cores, local ranks 8,9 got E cores", "the P cores in the mask hold at most 8 ranks"}},
		{name: "2 ranks smt default", r: smt(req(2, 0)), want: []string{"0-7", "8-15"}, workers0: "0,1,2,3,4,5,6,7", threads: 8},
		{name: "1 rank smt default", r: smt(req(1, 0)), want: []string{"0-15"}, threads: 16},
		{name: "20 ranks: P siblings, then E", r: req(20, 0), threads: 1,
			want: []string{"0", "2", "4", "6", "8", "10", "12", "14", "1", "3", "5", "7", "9", "11", "13", "15", "16", "17", "18", "19"},
			warn: []string{"20 ranks on this node but only 16 physical cores", "local ranks 16,17,18,19 got E cores"}},
		{name: "mask of E-cores", mask: "16-23", r: req(2, 0), want: []string{"16-19", "20-23"}, threads: 4},
		{name: "cpu list of E-cores", r: list(req(2, 0), "16-19"), want: []string{"16-19", "16-19"}, workers0: "16,17,18,19", threads: 4},
		{name: "cpu list of P and E: default P", r: list(req(1, 0), "12-19"), want: []string{"12-19"}, workers0: "12,14", threads: 2},
		{name: "cpu list of P and E: 4 threads", r: list(req(1, 4), "12-19"), want: []string{"12-19"}, workers0: "12,14,16,17", threads: 4,
			warn: []string{"local rank 0 got P+E cores", "-threads 2 keeps every rank on P cores"}},
		{name: "mask of 4 P and 8 E", mask: "8-23", r: req(2, 0), want: []string{"8,10", "12,14"}, threads: 2},
		{name: "bind none", r: policy(req(2, 0), None), want: []string{"", ""}, threads: 4},
		{name: "bind numa", r: policy(req(1, 0), NUMA), want: []string{"0-23"}, threads: 8},
		{name: "near the whole node", r: near(req(2, 0), "0-23", "0-23"), want: []string{"0,2,4,6", "8,10,12,14"}, threads: 4},
		{name: "near, 6 threads: E, not a mix", r: near(req(2, 6), "0-23", "0-23"), want: []string{"0,2,4,6,8,10", "16-21"}, threads: 6,
			warn: []string{"local rank 0 got P cores, local rank 1 got E cores"}},

		{name: "big.LITTLE 1 rank default", fixture: "biglittle4l4b", r: req(1, 0), want: []string{"4-7"}, threads: 4},
		{name: "big.LITTLE 2x2 on big", fixture: "biglittle4l4b", r: req(2, 2), want: []string{"4-5", "6-7"}, threads: 2},
		{name: "big.LITTLE 3x2", fixture: "biglittle4l4b", r: req(3, 2), want: []string{"4-5", "6-7", "0-1"}, threads: 2,
			warn: []string{"local ranks 0,1 got capacity-1024 cores, local rank 2 got capacity-446 cores", "pace of its capacity-446 cores; -threads 1 keeps every rank on capacity-1024 cores"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.fixture == "" {
				tc.fixture = "hybrid8p8e"
			}
			topo := readFixture(t, tc.fixture)
			mask := topo.Online
			if tc.mask != "" {
				mask = mustParse(t, tc.mask)
			}
			plans, err := planEach(topo, mask, tc.r)
			if err != nil {
				t.Fatal(err)
			}
			if len(plans) != len(tc.want) {
				t.Fatalf("%d plans, want %d", len(plans), len(tc.want))
			}
			for i, p := range plans {
				if p.CPUs.String() != tc.want[i] || p.Threads != tc.threads {
					t.Errorf("rank %d: cpus %s threads %d, want %s threads %d", i, p.CPUs, p.Threads, tc.want[i], tc.threads)
				}
				if (tc.warn == nil) != (p.Warning == "") {
					t.Errorf("rank %d warning %q, want %q", i, p.Warning, tc.warn)
				}
				for _, w := range tc.warn {
					if !strings.Contains(p.Warning, w) {
						t.Errorf("rank %d warning %q lacks %q", i, p.Warning, w)
					}
				}
				if !p.CPUs.IsSubset(mask) {
					t.Errorf("rank %d cpus %s outside mask %s", i, p.CPUs, mask)
				}
				if p.Policy != Cores {
					continue
				}
				if len(p.WorkerCPUs) != p.Threads {
					t.Errorf("rank %d: %d worker cpus for %d threads", i, len(p.WorkerCPUs), p.Threads)
				}
				for _, c := range p.WorkerCPUs {
					if core, _ := topo.CoreOf(c); !tc.r.UseSMT && core.CPUs.Intersect(p.CPUs).CPUs()[0] != c {
						t.Errorf("rank %d: worker on cpu %d, not the first of its core's %s", i, c, core.CPUs)
					}
				}
				for j := range i {
					if s := p.CPUs.Intersect(plans[j].CPUs); tc.r.CPUList.IsEmpty() && !s.IsEmpty() {
						t.Errorf("ranks %d and %d share cpus %s", j, i, s)
					}
				}
			}
			if tc.workers0 != "" && joinInts(plans[0].WorkerCPUs, ",") != tc.workers0 {
				t.Errorf("rank 0 workers %v, want %s", plans[0].WorkerCPUs, tc.workers0)
			}
		})
	}
}

// TestPlanHybridInvariants: on hybrid CPUs, for every count of ranks and
// threads, with and without SMT, in several masks, the plans keep the
// package's invariants (disjoint, inside the mask, one worker per physical
// core's first sibling without UseSMT unless SMT is the fallback), and
// ranks on different classes or a mix are always warned about, every rank
// named with exactly the classes it got. Besides the fixtures: two NUMA
// nodes of 2 P-cores (SMT) and 4 E-cores each, written from a machine
// description.
func TestPlanHybridInvariants(t *testing.T) {
	core := func(c int) int { // node 0: cores 0,1 (P), 2-5 (E); node 1: 10,11, 12-15
		if i := c % 8; i < 4 {
			return c/8*10 + i/2
		}
		return c/8*10 + c%8 - 2
	}
	twoNodes := machine{name: "hybrid2n", ncpu: 16, core: core, coreID: core,
		socket: func(int) int { return 0 }, node: func(c int) int { return c / 8 },
		pmus: map[string]string{"cpu_core": "0-3,8-11", "cpu_atom": "4-7,12-15"},
	}
	root := t.TempDir()
	for p, s := range twoNodes.files() {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	topos := map[string]*Topology{"hybrid8p8e": readFixture(t, "hybrid8p8e"), "biglittle4l4b": readFixture(t, "biglittle4l4b")}
	var err error
	if topos["hybrid2n"], err = ReadTopology(root); err != nil {
		t.Fatal(err)
	}
	if h := topos["hybrid2n"]; len(h.Cores) != 12 || len(h.Nodes) != 2 || strings.Join(h.Kinds, ",") != "P,E" || h.Cores[6].CPUs.String() != "8-9" || h.Cores[6].Kind != "P" || h.Cores[6].Node != 1 {
		t.Fatalf("hybrid2n: kinds %v cores %+v", h.Kinds, h.Cores)
	}
	masks := map[string][]string{
		"hybrid8p8e":    {"", "8-23", "0-3,16-17", "16-23"},
		"biglittle4l4b": {"", "2-5"},
		"hybrid2n":      {"", "2-7,10-15"},
	}
	for name, topo := range topos {
		for _, m := range masks[name] {
			mask := topo.Online
			if m != "" {
				mask = mustParse(t, m)
			}
			for L := 1; L <= mask.Len(); L++ {
				for T := 0; T <= 13; T++ {
					for _, smt := range []bool{false, true} {
						r := Request{LocalSize: L, Threads: T, UseSMT: smt, PreferNUMA: -1}
						plans, err := planEach(topo, mask, r)
						if err != nil {
							t.Fatalf("%s mask %q %+v: %v", name, m, r, err)
						}
						checkHybrid(t, topo, fmt.Sprintf("%s mask %q %+v", name, m, r), mask, r, plans)
					}
				}
			}
		}
	}
}

var hybridGroup = regexp.MustCompile(`local ranks? ([0-9,]+) got ([A-Za-z0-9+-]+) cores`)

func checkHybrid(t *testing.T, topo *Topology, where string, mask CPUSet, r Request, plans []Plan) {
	t.Helper()
	used := CPUSet{}
	got := make([]string, len(plans)) // each rank's classes, "P+E"
	classes := map[string]bool{}
	for i, p := range plans {
		if !p.CPUs.IsSubset(mask) || !used.Intersect(p.CPUs).IsEmpty() || len(p.WorkerCPUs) != p.Threads {
			t.Fatalf("%s: rank %d %s overlaps %s or leaves the mask", where, i, p, used)
		}
		used = used.Union(p.CPUs)
		var kinds []int
		for _, c := range p.WorkerCPUs {
			core, _ := topo.CoreOf(c)
			if !r.UseSMT && !strings.Contains(p.Warning, "through SMT siblings") && core.CPUs.Intersect(mask).CPUs()[0] != c {
				t.Fatalf("%s: rank %d worker %d is not its core's first cpu", where, i, c)
			}
			kinds = append(kinds, core.Class)
		}
		slices.Sort(kinds)
		var names []string
		for _, k := range slices.Compact(kinds) {
			names = append(names, topo.Kinds[k])
		}
		got[i] = strings.Join(names, "+")
		classes[got[i]] = true
		note := func(w string) string { // the hybrid part, the same on every rank
			if i := strings.Index(w, "hybrid cpu: "); i >= 0 {
				return w[i:]
			}
			return ""
		}
		if note(p.Warning) != note(plans[0].Warning) {
			t.Fatalf("%s: rank %d's warning %q, rank 0's %q", where, i, p.Warning, plans[0].Warning)
		}
	}
	w := plans[0].Warning
	if len(classes) == 1 && !strings.Contains(got[0], "+") {
		if strings.Contains(w, "hybrid cpu: ") {
			t.Fatalf("%s: ranks on %v, warning %q", where, got, w)
		}
		return
	}
	named := make([]string, len(plans))
	for _, m := range hybridGroup.FindAllStringSubmatch(w, -1) {
		for _, f := range strings.Split(m[1], ",") {
			i, _ := strconv.Atoi(f)
			named[i] = m[2]
		}
	}
	if !slices.Equal(named, got) {
		t.Fatalf("%s: ranks got %v, warning %q names %v", where, got, w, named)
	}
}

// TestWriteHybrid: on a hybrid CPU, topo's text shows each core's kind and
// each rank's ("on P cores"), and its JSON the classes; on every other
// fixture none of it appears (TestWritePlansAndJSON has the exact text).
func TestWriteHybrid(t *testing.T) {
	topo := readFixture(t, "hybrid8p8e")
	var b bytes.Buffer
	if err := WritePlans(&b, topo, CPUSet{}, 3, Request{Threads: 4, PreferNUMA: -1}); err != nil {
		t.Fatal(err)
	}
	warn := "  warning: hybrid cpu: local ranks 0,1 got P cores, local rank 2 got E cores; a rank's threads split each step evenly and every step waits for the slowest rank, so the job runs at the pace of its E cores; -threads 2 keeps every rank on P cores (or choose each rank's cores with -cpu-list)\n"
	want := "local 0: cores 0,2,4,6 numa 0 threads 4 on P cores workers 0,2,4,6\n" + warn +
		"local 1: cores 8,10,12,14 numa 0 threads 4 on P cores workers 8,10,12,14\n" + warn +
		"local 2: cores 16-19 numa 0 threads 4 on E cores workers 16,17,18,19\n" + warn
	if b.String() != want {
		t.Errorf("WritePlans:\n%s\nwant:\n%s", b.String(), want)
	}
	if p, _ := topo.Plan(CPUSet{}, Request{LocalSize: 1, Threads: 12, PreferNUMA: -1}); p.Kind != "P+E" ||
		ReportLine("h", 0, p) != "[h:rank 0 local 0] cores 0,2,4,6,8,10,12,14,16-19 numa 0 threads 12 on P+E cores" {
		t.Errorf("a mixed rank: %q", ReportLine("h", 0, p))
	}
	if p, _ := topo.Plan(CPUSet{}, Request{LocalSize: 1, Policy: NUMA, PreferNUMA: -1}); p.Kind != "P+E" {
		t.Errorf("policy numa: kind %q, want P+E (the node's cpus)", p.Kind)
	}
	if p, _ := topo.Plan(CPUSet{}, Request{LocalSize: 1, Policy: None, PreferNUMA: -1}); p.Kind != "" || p.String() != "not bound threads 8" {
		t.Errorf("policy none: %q kind %q", p, p.Kind)
	}
	b.Reset()
	if err := topo.Write(&b); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{
		"1 socket(s), 1 NUMA node(s), 16 physical cores, 24 logical CPUs (SMT on; hybrid, fastest first: 8 P cores, 8 E cores)\n",
		"  core   7  socket 0 die 0 core_id 7 numa 0 kind P: cpus 14-15\n",
		"  core   8  socket 0 die 0 core_id 8 numa 0 kind E: cpus 16\n",
	} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("Topology.Write lacks %q:\n%s", s, b.String())
		}
	}
	plans, _ := topo.PlanAll(CPUSet{}, Request{LocalSize: 3, Threads: 4, PreferNUMA: -1})
	js, err := json.Marshal(Layout{Topology: topo, Plans: plans})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{`"kinds":["P","E"]`, `"cpus":"16","class":1,"kind":"E"`, `"threads":4,"kind":"E"`} {
		if !strings.Contains(string(js), s) {
			t.Errorf("JSON lacks %s: %s", s, js)
		}
	}
	for _, name := range []string{"server16c32t", "dual2s64t", "laptop4c8t", "pairs4c8t", "vm2c", "offline4c8t", "snc2s4n"} {
		topo := readFixture(t, name)
		b.Reset()
		if err := topo.Write(&b); err != nil {
			t.Fatal(err)
		}
		if err := WritePlans(&b, topo, CPUSet{}, 2, Request{PreferNUMA: -1}); err != nil {
			t.Fatal(err)
		}
		plans, _ := topo.PlanAll(CPUSet{}, Request{LocalSize: 2, PreferNUMA: -1})
		js, _ := json.Marshal(Layout{Topology: topo, Plans: plans})
		if strings.Contains(b.String(), "kind") || strings.Contains(b.String(), "hybrid") || strings.Contains(b.String(), " on ") ||
			strings.Contains(string(js), "kind") || strings.Contains(string(js), "class") {
			t.Errorf("%s, not hybrid, shows classes:\n%s\n%s", name, b.String(), js)
		}
	}
}
