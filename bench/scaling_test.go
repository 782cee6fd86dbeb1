package bench

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"hpctrain/affinity"
	"hpctrain/internal/cli"
	"hpctrain/internal/mpitest"
	"hpctrain/mpi"
)

func near(got, want float64) bool { return math.Abs(got-want) <= 1e-9*math.Max(1, math.Abs(want)) }

// Links of round figures: net 10 us and 8 Gbit/s = 1e9 B/s; shm 1 us and
// 80 Gbit/s = 1e10 B/s.
var (
	testNet = Link{Name: "net", AlphaUS: 10, Gbps: 8}
	testShm = Link{Name: "shm", AlphaUS: 1, Gbps: 80}
)

// TestScalingFormulas: the three all-reduces against values worked out by
// hand from Thakur, Rabenseifner and Gropp (2005).
func TestScalingFormulas(t *testing.T) {
	const n = 1e6 // bytes
	flat4 := Topo{Nodes: 4, PerNode: 1, Inter: testNet}
	for _, c := range []struct {
		name string
		got  float64
		want float64
	}{
		// ring: 2(p-1) (alpha + n/p/bw) = 6 (10 us + 250 us)
		{"ring p=4", ringTime(n, flat4), 6 * 260e-6},
		// recursive doubling: lg p (alpha + n/bw) = 2 (10 us + 1 ms)
		{"rd p=4", rdTime(n, flat4), 2 * 1010e-6},
		// binomial reduce + bcast: 2 lg p (alpha + n/bw)
		{"tree p=4", treeTime(n, flat4), 4 * 1010e-6},
		// p = 3: not a power of two, floor(lg 3) + 2 = 3 exchanges; the
		// tree needs ceil(lg 3) = 2 levels each way.
		{"rd p=3", rdTime(n, Topo{Nodes: 3, PerNode: 1, Inter: testNet}), 3 * 1010e-6},
		{"tree p=3", treeTime(n, Topo{Nodes: 3, PerNode: 1, Inter: testNet}), 4 * 1010e-6},
		{"ring p=3", ringTime(n, Topo{Nodes: 3, PerNode: 1, Inter: testNet}), 4 * (10e-6 + n/3/1e9)},
		// One node of 4: the shared-memory figures, 6 (1 us + 25 us).
		{"ring 1x4 shm", ringTime(n, Topo{Nodes: 1, PerNode: 4, Intra: testShm, Inter: testNet}), 6 * 26e-6},
		// 2 nodes x 2: every ring step as slow as the network hop.
		{"ring 2x2", ringTime(n, Topo{Nodes: 2, PerNode: 2, Intra: testShm, Inter: testNet}), 6 * 260e-6},
		// rd 2x2: one shm exchange (1 us + 100 us), then one between the
		// nodes with the 2 ranks of a node sharing its link (10 us + 2 ms).
		{"rd 2x2", rdTime(n, Topo{Nodes: 2, PerNode: 2, Intra: testShm, Inter: testNet}), 101e-6 + 2010e-6},
		// tree 2x2: one level each, down and up: 2 (101 us) + 2 (1010 us).
		{"tree 2x2", treeTime(n, Topo{Nodes: 2, PerNode: 2, Intra: testShm, Inter: testNet}), 2*101e-6 + 2*1010e-6},
		{"one rank", ringTime(n, Topo{Nodes: 1, PerNode: 1}) + rdTime(n, Topo{Nodes: 1, PerNode: 1}) + treeTime(n, Topo{Nodes: 1, PerNode: 1}), 0},
	} {
		if !near(c.got, c.want) {
			t.Errorf("%s: %.9g s, want %.9g s", c.name, c.got, c.want)
		}
	}
	// The better one: ring for 1 MB, recursive doubling for 1 KB
	// (ring 6 (10 us + 0.25 us) = 61.5 us; rd 2 (10 us + 1 us) = 22 us).
	if alg, s := allreduceTime(n, flat4); alg != "ring" || !near(s, 6*260e-6) {
		t.Errorf("1 MB on 4: %s %g", alg, s)
	}
	if alg, s := allreduceTime(1e3, flat4); alg != "rd" || !near(s, 22e-6) {
		t.Errorf("1 KB on 4: %s %g", alg, s)
	}
	if alg, s := allreduceTime(n, Topo{Nodes: 1, PerNode: 1}); alg != "" || s != 0 {
		t.Errorf("one rank: %q %g", alg, s)
	}
	for q, want := range map[int]int{1: 0, 2: 1, 3: 3, 4: 2, 5: 4, 8: 3, 12: 5, 256: 8} {
		if got := rdSteps(q); got != want {
			t.Errorf("rdSteps(%d) = %d, want %d", q, got, want)
		}
	}
}

// TestScalingShared: the node-shared all-reduce, its Intra being the
// node's whole sum (testShm: 1 us + n / 1e10 B/s = 101 us for 1 MB).
func TestScalingShared(t *testing.T) {
	const n = 1e6
	shared := func(nodes, per int) Topo {
		return Topo{Nodes: nodes, PerNode: per, Intra: testShm, Inter: testNet, Shared: true}
	}
	for _, c := range []struct {
		name string
		t    Topo
		alg  string
		want float64
	}{
		// One node: the sum alone, whatever the node's size.
		{"1x2", shared(1, 2), "shm", 101e-6},
		{"1x8", shared(1, 8), "shm", 101e-6},
		// 2 nodes x 2: the sum, then the 2 shares of 0.5 MB cross the link
		// side by side: one all-reduce of 1 MB over 2 ranks, rd's 10 us + 1
		// ms (the ring's 2 (10 us + 0.5 ms) is 10 us dearer).
		{"2x2", shared(2, 2), "shm+rd", 101e-6 + 1010e-6},
		// 4 nodes x 8: the ring over 4 of 1 MB, 6 (10 us + 250 us).
		{"4x8", shared(4, 8), "shm+ring", 101e-6 + 6*260e-6},
		// One rank per node: nothing to share, MPI_Allreduce as training
		// falls back to (rd over 2: 10 us + 1 ms).
		{"2x1", shared(2, 1), "rd", 1010e-6},
	} {
		alg, got := allreduceTime(n, c.t)
		if alg != c.alg || !near(got, c.want) {
			t.Errorf("%s: %s %.9g s, want %s %.9g s", c.name, alg, got, c.alg, c.want)
		}
	}
	// Within a node the shared sum beats MPI's ring over the same figures
	// (2 (1 us + 50 us) = 102 us on 1x2), and across nodes it sends a
	// node's bytes once where the flat ring's steps wait on the network.
	for _, tp := range []Topo{shared(1, 2), shared(4, 8)} {
		flat := tp
		flat.Shared = false
		if _, s := allreduceTime(n, tp); s >= ringTime(n, flat) {
			t.Errorf("%dx%d: shared %.9g s not below the ring's %.9g s", tp.Nodes, tp.PerNode, s, ringTime(n, flat))
		}
	}

	// The fits: a one-node sweep is the sum; across nodes the sum is taken
	// away and the rest is an all-reduce over one rank per node.
	if l := sumFromFit(1e-6, 1e-10); !near(l.AlphaUS, 1) || !near(l.Gbps, 80) {
		t.Errorf("sum from fit: %+v", l)
	}
	for _, nodes := range []int{2, 4} {
		// What sharedTime predicts for testNet, as a line in n.
		a := testShm.alpha() + float64(rdSteps(nodes))*testNet.alpha()
		b := 1/testShm.bw() + 2*float64(nodes-1)/float64(nodes)/testNet.bw()
		l, err := interFromSharedFit(a, b, testShm, nodes)
		if err != nil || !near(l.AlphaUS, testNet.AlphaUS) || !near(l.Gbps, testNet.Gbps) {
			t.Errorf("%d nodes: %+v %v, want %+v", nodes, l, err, testNet)
		}
	}
	if _, err := interFromSharedFit(0.5e-6, 2e-10, testShm, 2); err == nil || !strings.Contains(err.Error(), "no slower than the node's sum") {
		t.Errorf("a fit below the sum: %v", err)
	}
	// The table names each bucket's algorithm once, in the model's order.
	prof := Profile{BackwardMS: 1, Buckets: []BucketTiming{{Bytes: 1 << 20}, {Bytes: 1 << 10}, {Bytes: 1 << 20}}}
	if pr := predict(prof, Topo{Nodes: 4, PerNode: 1, Inter: testNet}); pr.Algorithm != "ring,rd" {
		t.Errorf("mixed buckets: %q, want ring,rd", pr.Algorithm)
	}
}

// TestScalingOverlap: the engine's buckets against the backward they hide
// behind.
func TestScalingOverlap(t *testing.T) {
	fast := Topo{Nodes: 2, PerNode: 1, Inter: Link{AlphaUS: 1, Gbps: 80}} // 1 MB: 1 us + 100 us
	// Four 1 MB buckets produced over a 10 ms backward, the last (the
	// first layers') small, as train/buckets.go makes them: each
	// all-reduce ends long before the next bucket is ready, and the last
	// one's 4 KB take 1.4 us after backward.
	prof := Profile{ForwardMS: 5, BackwardMS: 10, UpdateMS: 1, Buckets: []BucketTiming{
		{Bytes: 1e6, ReadyMS: 1}, {Bytes: 1e6, ReadyMS: 4}, {Bytes: 1e6, ReadyMS: 7}, {Bytes: 4000, ReadyMS: 10}}}
	pr := predict(prof, fast)
	if pr.ExposedMS > 0.01*pr.CommMS || pr.CommMS < 0.3 {
		t.Errorf("comm fits under backward, yet %.4f of %.4f ms exposed", pr.ExposedMS, pr.CommMS)
	}
	if !near(pr.StepMS, prof.StepMS()+pr.ExposedMS) {
		t.Errorf("step %.4f != compute %.4f + exposed %.4f", pr.StepMS, prof.StepMS(), pr.ExposedMS)
	}
	// bucket_mb 0: one all-reduce after backward, all of it exposed.
	one := Profile{ForwardMS: 5, BackwardMS: 10, UpdateMS: 1, Buckets: []BucketTiming{{Bytes: 3004000, ReadyMS: 10}}}
	if p := predict(one, fast); !near(p.ExposedMS, p.CommMS) || !near(p.StepMS, 16+p.CommMS) {
		t.Errorf("one bucket after backward: exposed %.4f of %.4f, step %.4f", p.ExposedMS, p.CommMS, p.StepMS)
	}
	// One communication thread: buckets ready at once run back to back.
	// On a 1e9 B/s link, 2 nodes: 1 MB takes 2 (10 us + 500 us) = 1.02
	// ms by the ring, 1.01 ms by rd, which wins. Two of them ready at 9.5
	// ms end at 9.5 + 2.02 ms: 1.52 ms after backward.
	slow := Topo{Nodes: 2, PerNode: 1, Inter: testNet}
	two := Profile{BackwardMS: 10, Buckets: []BucketTiming{{Bytes: 1e6, ReadyMS: 9.5}, {Bytes: 1e6, ReadyMS: 9.5}}}
	if p := predict(two, slow); !near(p.ExposedMS, 1.52) || !near(p.CommMS, 2.02) || p.Algorithm != "rd" {
		t.Errorf("serialized: exposed %.6f comm %.6f (%s), want 1.52 of 2.02 (rd)", p.ExposedMS, p.CommMS, p.Algorithm)
	}
}

// TestScalingMonotone: doubling the nodes never raises the efficiency,
// whatever the link, the ranks per node and the buckets. (Between powers of
// two it can: recursive doubling over 3 nodes takes 3 exchanges, over 4
// only 2, as in MPICH and Open MPI.)
func TestScalingMonotone(t *testing.T) {
	profs := []Profile{
		{ForwardMS: 10, BackwardMS: 20, UpdateMS: 1, Buckets: []BucketTiming{{Bytes: 6520360, ReadyMS: 20}}},
		{ForwardMS: 10, BackwardMS: 20, UpdateMS: 1, Buckets: []BucketTiming{{Bytes: 4 << 20, ReadyMS: 6}, {Bytes: 2 << 20, ReadyMS: 15}, {Bytes: 100, ReadyMS: 20}}},
		{ForwardMS: 0.1, BackwardMS: 0.2, Buckets: []BucketTiming{{Bytes: 400, ReadyMS: 0.2}}},
	}
	links := []Link{testNet, {AlphaUS: 2, Gbps: 400}, {AlphaUS: 50, Gbps: 0.2}, {AlphaUS: 0.5, Gbps: 1000}}
	for pi, prof := range profs {
		for _, l := range links {
			for _, rpn := range []int{1, 2, 3, 8} {
				last := math.Inf(1)
				for n := 1; n <= 1024; n *= 2 {
					pr := predict(prof, Topo{Nodes: n, PerNode: rpn, Intra: testShm, Inter: l})
					eff := prof.StepMS() / pr.StepMS
					if eff > last*(1+1e-12) || eff > 1 {
						t.Fatalf("profile %d, link %+v, %d/node: efficiency %.6f at %d nodes > %.6f at %d", pi, l, rpn, eff, n, last, n/2)
					}
					last = eff
				}
			}
		}
	}
}

// TestScalingSingleRank: a job of one is its compute step.
func TestScalingSingleRank(t *testing.T) {
	prof := Profile{ForwardMS: 3, BackwardMS: 6, UpdateMS: 0.5, OtherMS: 0.25, Buckets: []BucketTiming{{Bytes: 1 << 20, ReadyMS: 2}, {Bytes: 1 << 20, ReadyMS: 6}}}
	pr := predict(prof, Topo{Nodes: 1, PerNode: 1})
	if pr.StepMS != 9.75 || pr.CommMS != 0 || pr.ExposedMS != 0 || pr.Algorithm != "-" {
		t.Errorf("one rank: %+v, want step 9.75 ms and no communication", pr)
	}
}

// TestScalingFit: the fit recovers a line, and the link it gives
// reproduces the times the model predicts for the measuring job.
func TestScalingFit(t *testing.T) {
	x := []float64{4096, 16384, 65536, 262144, 1 << 20, 4 << 20}
	ts := make([]float64, len(x))
	for i := range x {
		ts[i] = 20e-6 + x[i]*1e-9
	}
	a, b, err := fitLine(x, ts)
	if err != nil || !near(a, 20e-6) || !near(b, 1e-9) {
		t.Fatalf("fit: a %g b %g err %v", a, b, err)
	}
	// Two ranks: alpha = a (one rd exchange), bw = 1/b.
	l := linkFromFit(a, b, 2)
	if !near(l.AlphaUS, 20) || !near(l.Gbps, 8) {
		t.Errorf("2 ranks: %+v, want 20 us, 8 Gbit/s", l)
	}
	// Four ranks on one link: the slope is the ring's 2(3)/4 / bw.
	l = linkFromFit(a, b, 4)
	if !near(l.Gbps, 8*1.5) || !near(l.AlphaUS, 10) {
		t.Errorf("4 ranks: %+v", l)
	}
	if _, _, err := fitLine([]float64{1, 1}, []float64{1, 2}); err == nil {
		t.Error("fit of one size: no error")
	}
	if _, _, err := fitLine([]float64{1, 2}, []float64{2, 1}); err == nil {
		t.Error("falling times: no error")
	}
}

var scalingRow = regexp.MustCompile(`(?m)^\s+(\d+)\s+(\d+)\s+(\S+)\s+([a-z+,]+|-)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\d+)\s+([\d.]+)$`)

// TestScalingCommand: bench scaling in-process as a job of one, with the
// links and the shared-memory figures given: the table, the JSON and the
// PNG; and the intra-node figures demanded when ranks share a node.
func TestScalingCommand(t *testing.T) {
	dir := t.TempDir()
	js, pngPath := filepath.Join(dir, "s.json"), filepath.Join(dir, "s.png")
	single := func() (mpi.Comm, error) { return mpi.NewSingle(), nil }
	var out bytes.Buffer
	err := Scaling([]string{"-model", "lenet5", "-steps", "3", "-bucket-mb", "0.05", "-nodes", "1,2,4,64", "-ranks-per-node", "2",
		"-link-gbps", "1,100", "-alpha-us", "5", "-shm-alpha-us", "1", "-shm-gbps", "80", "-json", js, "-png", pngPath}, single, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	rows := scalingRow.FindAllStringSubmatch(out.String(), -1)
	if len(rows) != 8 {
		t.Fatalf("%d rows, want 4 node counts x 2 links\n%s", len(rows), out.String())
	}
	var rep ScalingReport
	b, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 8 || rep.GradBytes != 4*61706 || len(rep.Compute.Buckets) < 2 || len(rep.Layers) == 0 || rep.Intra == nil || rep.Intra.Source != "flag" || rep.Intra.Name != "shm-sum" || rep.Collective != "shm" {
		t.Fatalf("report: %d rows, %d grad bytes, %d buckets, %d layers, intra %+v", len(rep.Rows), rep.GradBytes, len(rep.Compute.Buckets), len(rep.Layers), rep.Intra)
	}
	// The engine's buckets: each starts during backward, the last (the first
	// layers') at its end.
	last := rep.Compute.Buckets[len(rep.Compute.Buckets)-1]
	if last.ReadyMS < 0.9*rep.Compute.BackwardMS || last.ReadyMS > rep.Compute.BackwardMS || rep.Compute.Buckets[0].ReadyMS >= last.ReadyMS {
		t.Errorf("bucket starts %+v, backward %.3f ms", rep.Compute.Buckets, rep.Compute.BackwardMS)
	}
	for i, r := range rep.Rows {
		if r.Ranks != 2*r.Nodes || r.Efficiency <= 0 || r.Efficiency > 1 || !near(r.SamplesPerSecond, float64(r.Ranks*64)/(r.StepMS/1e3)) {
			t.Errorf("row %d: %+v", i, r)
		}
		if i%4 > 0 && r.Efficiency > rep.Rows[i-1].Efficiency {
			t.Errorf("row %d: efficiency rose with nodes", i)
		}
	}
	if rep.Rows[3].Efficiency >= rep.Rows[7].Efficiency {
		t.Errorf("64 nodes: 1G link %.3f not below 100G %.3f", rep.Rows[3].Efficiency, rep.Rows[7].Efficiency)
	}
	if a := rep.Rows[0].Algorithm; a != "shm" {
		t.Errorf("1 node x 2, collective auto: algorithm %q, want shm", a)
	}
	// -collective mpi with the same figures as a hop, on nodes of 4: one
	// node's all-reduce costs more than the shared sum (which does not
	// depend on the node's size): recursive doubling makes 2 exchanges of
	// the whole vector, 2 (1 us + n / bw), against 1 us + n / bw, and the
	// rows name MPI's algorithms.
	var mout bytes.Buffer
	mjs := filepath.Join(dir, "m.json")
	if err := Scaling([]string{"-model", "lenet5", "-steps", "3", "-bucket-mb", "0.05", "-nodes", "1,2,4,64", "-ranks-per-node", "4", "-collective", "mpi",
		"-link-gbps", "1,100", "-alpha-us", "5", "-shm-alpha-us", "1", "-shm-gbps", "80", "-json", mjs}, single, &mout); err != nil {
		t.Fatalf("%v\n%s", err, mout.String())
	}
	var mrep ScalingReport
	if b, err := os.ReadFile(mjs); err != nil || json.Unmarshal(b, &mrep) != nil || len(mrep.Rows) != 8 {
		t.Fatalf("-collective mpi report: %v %+v", err, mrep)
	}
	if m, s := mrep.Rows[0], rep.Rows[0]; m.CommMS <= s.CommMS || strings.HasPrefix(m.Algorithm, "shm") || mrep.Intra.Name != "shm" {
		t.Errorf("1 node: mpi x 4 %s %.4f ms against shm %s %.4f ms; intra %+v", m.Algorithm, m.CommMS, s.Algorithm, s.CommMS, mrep.Intra)
	}
	f, err := os.Open(pngPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil || img.Bounds().Dx() < 400 {
		t.Fatalf("png: %v %v", err, img)
	}

	// Two ranks per node and no intra-node figures: a usage error.
	err = Scaling([]string{"-model", "lenet5", "-steps", "1", "-ranks-per-node", "2", "-link-gbps", "10"}, single, &bytes.Buffer{})
	var ue cli.UsageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "-shm-gbps") {
		t.Errorf("no intra-node figures: %v", err)
	}
}

// TestScalingMPI: under mpirun -np 2 (one node) the sweep measures the
// shared-memory link and the prediction uses it. The CNN's 6.5 MB of
// gradients make the sweep's sizes span enough for a clear slope on a busy
// machine (lenet5's 247 KB once fitted none: "time does not grow with
// size"), and calls back to back (-sweep-step=false): with a compute step
// between calls, unbound ranks on a machine busy with other tests finished
// their steps up to 8 ms apart, which buried the 1.5 ms all-reduce.
func TestScalingMPI(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	// No skip without mpirun: scripts/setup.sh (make test) installs Open MPI.
	if _, err := exec.LookPath("mpirun"); err != nil {
		t.Fatal("no mpirun in PATH: run scripts/setup.sh, which installs Open MPI")
	}
	bin := hpctrainBinary(t)
	js := filepath.Join(t.TempDir(), "s.json")
	out := mpitest.Run(t, 2*time.Minute, 2, bin, "bench", "scaling", "-model", "cnn", "-steps", "3", "-bind", "none",
		"-nodes", "1,2", "-link-gbps", "10", "-alpha-us", "5", "-sweep-step=false", "-json", js)
	if n := len(scalingRow.FindAllString(out, -1)); n != 2 {
		t.Fatalf("%d rows\n%s", n, out)
	}
	var rep ScalingReport
	b, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	// The default collective sums through shared memory: the sweep runs
	// on node memory and measures the node's whole sum.
	if rep.JobRanks != 2 || rep.JobNodes != 1 || rep.Intra == nil || rep.Intra.Source != "measured" || rep.Intra.Name != "shm-sum" || !rep.SweepShared ||
		!(rep.Intra.Gbps > 0) || len(rep.Sweep) < 2 || len(rep.RankStepMS) != 2 {
		t.Fatalf("report: %+v", rep)
	}
	if r := rep.Rows[0]; r.Nodes != 1 || r.Ranks != 2 || r.CommMS <= 0 || r.Algorithm != "shm" {
		t.Errorf("1 node x 2 ranks: %+v", r)
	}
}

// TestScalingLists: -nodes and -link-gbps are sorted and each value kept
// once (the chart joined points in the order given: 8, 1, 64, 2 drew a
// zigzag), and links given by flag are named as given (rounded to three
// digits, 1000 and 1004 Gbit/s were one line of the chart).
func TestScalingLists(t *testing.T) {
	if n, err := intList("8,1,64,2,2"); err != nil || fmt.Sprint(n) != "[1 2 8 64]" {
		t.Errorf("-nodes 8,1,64,2,2: %v %v, want [1 2 8 64]", n, err)
	}
	if g, err := floatList("1004,1000,1000"); err != nil || fmt.Sprint(g) != "[1000 1004]" {
		t.Errorf("-link-gbps 1004,1000,1000: %v %v, want [1000 1004]", g, err)
	}
	for _, c := range []struct {
		r    ScalingRow
		want string
	}{
		{ScalingRow{Link: "1004G", LinkGbps: 1004}, "1004G"},
		{ScalingRow{Link: "12345G", LinkGbps: 12345}, "12345G"},
		{ScalingRow{Link: "measured", LinkGbps: 9.8765}, "meas:9.88G"},
	} {
		if got := linkLabel(c.r); got != c.want {
			t.Errorf("link %q: labelled %q, want %q", c.r.Link, got, c.want)
		}
	}
	// The chart's legend states the units and the latency.
	for _, c := range []struct {
		r    ScalingRow
		want string
	}{
		{ScalingRow{Link: "25G", LinkGbps: 25, AlphaUS: 5}, "25 Gbit/s, 5 us"},
		{ScalingRow{Link: "0.2G", LinkGbps: 0.2, AlphaUS: 1047.6538871578025}, "0.2 Gbit/s, 1048 us"},
		{ScalingRow{Link: "measured", LinkGbps: 9.8765, AlphaUS: 12.345}, "measured: 9.877 Gbit/s, 12.35 us"},
	} {
		if got := legendLabel(c.r); got != c.want {
			t.Errorf("link %q: legend %q, want %q", c.r.Link, got, c.want)
		}
	}
}

// TestScalingBindAsRun: -bind cores with more threads than the mask has
// cpus runs the compute steps unpinned, and the report says so (bind none,
// and why) instead of the -bind asked for; where they fit, bind cores.
func TestScalingBindAsRun(t *testing.T) {
	mask, err := affinity.Allowed()
	if err != nil {
		t.Fatal(err)
	}
	single := func() (mpi.Comm, error) { return mpi.NewSingle(), nil }
	for _, c := range []struct {
		threads            int
		bind, note, header string
	}{
		{mask.Len() + 1, "none", fmt.Sprintf("-bind cores, but 1 rank(s) x %d thread(s) need %d cpus", mask.Len()+1, mask.Len()+1), "bind none (-bind cores, but "},
		{1, "cores", "", "bind cores,"},
	} {
		js := filepath.Join(t.TempDir(), "s.json")
		var out bytes.Buffer
		if err := Scaling([]string{"-model", "mlp", "-steps", "2", "-threads", fmt.Sprint(c.threads), "-link-gbps", "10", "-json", js}, single, &out); err != nil {
			t.Fatalf("-threads %d: %v\n%s", c.threads, err, out.String())
		}
		var rep ScalingReport
		if b, err := os.ReadFile(js); err != nil || json.Unmarshal(b, &rep) != nil {
			t.Fatalf("-threads %d: report: %v", c.threads, err)
		}
		if rep.Bind != c.bind || !strings.HasPrefix(rep.BindNote, c.note) || (c.note == "") != (rep.BindNote == "") {
			t.Errorf("-threads %d on %d cpus: bind %q, note %q; want %q, %q", c.threads, mask.Len(), rep.Bind, rep.BindNote, c.bind, c.note)
		}
		if !strings.Contains(out.String(), c.header) {
			t.Errorf("-threads %d: the header does not say %q:\n%s", c.threads, c.header, out.String())
		}
	}
}

// TestScalingRowsFromDocs: every row of a real run (in-process, a job of
// one) recomputed from the formulas of docs/scaling.md alone, in their
// units (-link-gbps and -shm-gbps in Gbit/s, latencies in us), from the
// measured profile the JSON reports: the three algorithms over N nodes x R
// ranks, the cheapest per bucket, the buckets serialised after their
// ready times, the exposed part after backward, samples/s and efficiency;
// and the node-shared all-reduce, sum(n) + the cheapest all-reduce of n
// over N nodes of one rank.
func TestScalingRowsFromDocs(t *testing.T) {
	single := func() (mpi.Comm, error) { return mpi.NewSingle(), nil }
	const shmUS, shmGbps, netUS, netGbps = 2.0, 40.0, 5.0, 25.0
	// rd_steps(q): lg q exchanges for a power of two, else floor(lg q) + 2.
	rdSteps := func(q int) float64 {
		if q <= 1 {
			return 0
		}
		fl := math.Floor(math.Log2(float64(q)))
		if math.Exp2(fl) == float64(q) {
			return fl
		}
		return fl + 2
	}
	lgCeil := func(q int) float64 { return math.Ceil(math.Log2(float64(q))) }
	// A message of n bytes over a link of us microseconds and gbps Gbit/s.
	msg := func(n, us, gbps float64) float64 { return us*1e-6 + n*8/(gbps*1e9) }
	mpiAllreduce := func(n float64, nodes, r int) float64 {
		p := nodes * r
		if p == 1 {
			return 0
		}
		// ring: every step as slow as its slowest hop.
		hopUS, hopG := shmUS, shmGbps
		if nodes > 1 && r == 1 {
			hopUS, hopG = netUS, netGbps
		} else if nodes > 1 {
			hopUS, hopG = math.Max(shmUS, netUS), math.Min(shmGbps, netGbps)
		}
		ring := 2 * float64(p-1) * msg(n/float64(p), hopUS, hopG)
		rd := rdSteps(r)*msg(n, shmUS, shmGbps) + rdSteps(nodes)*msg(float64(r)*n, netUS, netGbps)
		tree := 2*lgCeil(r)*msg(n, shmUS, shmGbps) + 2*lgCeil(nodes)*msg(n, netUS, netGbps)
		return min(ring, rd, tree)
	}
	for _, coll := range []string{"mpi", "shm"} {
		js := filepath.Join(t.TempDir(), "s.json")
		if err := Scaling([]string{"-model", "lenet5", "-steps", "3", "-bucket-mb", "0.05", "-nodes", "1,3,8,256", "-ranks-per-node", "4",
			"-collective", coll, "-link-gbps", fmt.Sprint(netGbps), "-alpha-us", fmt.Sprint(netUS),
			"-shm-alpha-us", fmt.Sprint(shmUS), "-shm-gbps", fmt.Sprint(shmGbps), "-json", js, "-q"}, single, io.Discard); err != nil {
			t.Fatal(err)
		}
		var rep ScalingReport
		if b, err := os.ReadFile(js); err != nil || json.Unmarshal(b, &rep) != nil {
			t.Fatalf("%s: report: %v", coll, err)
		}
		c := rep.Compute
		compute := c.ForwardMS + c.BackwardMS + c.UpdateMS + c.OtherMS
		if len(rep.Rows) != 4 || len(c.Buckets) < 2 {
			t.Fatalf("%s: %d rows, %d buckets", coll, len(rep.Rows), len(c.Buckets))
		}
		for _, row := range rep.Rows {
			var comm, end float64 // ms
			for _, b := range c.Buckets {
				n := float64(b.Bytes)
				s := mpiAllreduce(n, row.Nodes, 4)
				if coll == "shm" {
					s = msg(n, shmUS, shmGbps) + mpiAllreduce(n, row.Nodes, 1)
				}
				comm += 1e3 * s
				end = math.Max(b.ReadyMS, end) + 1e3*s
			}
			exposed := math.Max(0, end-c.BackwardMS)
			step := compute + exposed
			want := ScalingRow{Nodes: row.Nodes, RanksPerNode: 4, Ranks: 4 * row.Nodes, Link: "25G", LinkGbps: netGbps, AlphaUS: netUS,
				Algorithm: row.Algorithm, StepMS: step, CommMS: comm, ExposedMS: exposed,
				SamplesPerSecond: float64(4*row.Nodes*rep.Batch) / (step / 1e3), Efficiency: compute / step}
			if row.Nodes != want.Nodes || row.Ranks != want.Ranks || row.Link != want.Link || row.LinkGbps != want.LinkGbps || row.AlphaUS != want.AlphaUS ||
				!near(row.StepMS, want.StepMS) || !near(row.CommMS, want.CommMS) || !near(row.ExposedMS, want.ExposedMS) ||
				!near(row.SamplesPerSecond, want.SamplesPerSecond) || !near(row.Efficiency, want.Efficiency) {
				t.Errorf("%s, %d nodes x 4:\n got  %+v\n want %+v", coll, row.Nodes, row, want)
			}
		}
	}
}

// TestScalingFitOff: a sweep whose points follow its fit passes in silence;
// one measured on a busy node (the points of a run under mpirun -np 2 on
// 2 shared cores, where the fit gave 1095 us at the gradients' 6.5 MB
// that took 16826 us) is warned about, naming the point.
func TestScalingFitOff(t *testing.T) {
	pts := func(us ...float64) []SweepPoint {
		sizes := []int{4096, 16384, 65536, 262144, 1048576, 4194304, 6520360}
		p := make([]SweepPoint, len(us))
		for i := range us {
			p[i] = SweepPoint{Bytes: sizes[i], TimeUS: us[i]}
		}
		return p
	}
	fit := func(p []SweepPoint) (float64, float64) {
		x, ts := make([]float64, len(p)), make([]float64, len(p))
		for i := range p {
			x[i], ts[i] = float64(p[i].Bytes), p[i].TimeUS*1e-6
		}
		a, b, err := fitLine(x, ts)
		if err != nil {
			t.Fatal(err)
		}
		return a, b
	}
	// docs/scaling.json's sweep: within 1.7x of its fit.
	clean := pts(1.67, 4.27, 6.23, 18.42, 48.89, 256.13, 316.34)
	a, b := fit(clean)
	if off, w := fitOff(clean, a, b); w != "" || off < 1 || off > maxFitOff {
		t.Errorf("a clean sweep: off %.2f, warning %q", off, w)
	}
	busy := pts(1265.9, 4726.8, 894.0, 826.5, 4398.5, 964.7, 16825.8)
	a, b = fit(busy)
	off, w := fitOff(busy, a, b)
	if off < 10 || !strings.Contains(w, "at 6520360 bytes (measured 16825.8 us, fitted ") || !strings.Contains(w, "off its fit by") {
		t.Errorf("a busy sweep: off %.2f, warning %q", off, w)
	}
}

// TestScalingFitText: the fit's line, read as printed (us, us/MB x MB),
// gives the fitted time of a size.
func TestScalingFitText(t *testing.T) {
	a, b := 1017.6e-6, 12.46e-6/(1<<20) // seconds, seconds per byte
	s := fitText(a, b)
	var us, perMB float64
	var per, times string
	if _, err := fmt.Sscanf(s, "time = %g us + %g %s x %s", &us, &perMB, &per, &times); err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	unit := map[string]float64{"bytes": 1, "B": 1, "MB": 1 << 20}[times]
	if per != "us/MB" || unit == 0 {
		t.Fatalf("%q: the slope in %s, times %q", s, per, times)
	}
	const n = 6520360
	if got, want := us+perMB*n/unit, 1e6*(a+b*n); math.Abs(got-want) > 0.01*want {
		t.Errorf("%q at %d bytes: %.1f us as printed, fitted %.1f us", s, n, got, want)
	}
}

// TestScalingSharedAcrossNodesEarly: a job of 2 nodes x 2 ranks summing
// through shared memory, predicting one rank per node without the node's
// sum, is refused before it measures anything, on every rank, without
// advice that is itself refused (-collective mpi across nodes of 2); it was
// refused after the compute steps and the sweep, minutes on a slow link.
func TestScalingSharedAcrossNodesEarly(t *testing.T) {
	fakes := mpi.NewFake(4, 2)
	type result struct {
		err error
		out string
	}
	res := make(chan result, len(fakes))
	for _, f := range fakes {
		go func() {
			var out bytes.Buffer
			err := Scaling([]string{"-model", "lenet5", "-steps", "1", "-threads", "1", "-bind", "none", "-ranks-per-node", "1", "-link-gbps", "10"},
				func() (mpi.Comm, error) { return f, nil }, &out)
			if err == nil {
				f.Kill()
			}
			res <- result{err, out.String()}
		}()
	}
	for range fakes {
		select {
		case r := <-res:
			var ue cli.UsageError
			if !errors.As(r.err, &ue) || !strings.Contains(r.err.Error(), "spans 2 nodes") || !strings.Contains(r.err.Error(), "-shm-alpha-us") ||
				strings.Contains(r.err.Error(), "-collective mpi") || r.out != "" {
				t.Errorf("err %v; output %q", r.err, r.out)
			}
		case <-time.After(time.Minute):
			t.Fatal("a rank still running after a minute")
		}
	}
}

// TestScalingCrowdedWarning: a job of 2 ranks on a node predicting one
// rank per node measured its compute step with both ranks at once, each
// with the threads of a node of one (under mpirun -np 2 on 2 cpus: 41 ms
// where one process takes 23): the report warns that its step is that of
// a more crowded node; with as many ranks as the prediction, no warning.
func TestScalingCrowdedWarning(t *testing.T) {
	for _, rpn := range []string{"1", "2"} {
		js := filepath.Join(t.TempDir(), "s.json")
		fakes := mpi.NewFake(2, 2)
		errs := make(chan error, len(fakes))
		for _, f := range fakes {
			go func() {
				err := Scaling([]string{"-model", "mlp", "-steps", "2", "-threads", "1", "-bind", "none", "-ranks-per-node", rpn, "-link-gbps", "10", "-collective", "mpi",
					"-sweep-step=false", "-sweep-max-mb", "0.1", "-json", js, "-q"}, func() (mpi.Comm, error) { return f, nil }, io.Discard)
				if err != nil {
					f.Kill()
				}
				errs <- err
			}()
		}
		for range fakes {
			select {
			case err := <-errs:
				if err != nil {
					t.Fatalf("-ranks-per-node %s: %v", rpn, err)
				}
			case <-time.After(time.Minute):
				t.Fatal("a rank still running after a minute")
			}
		}
		var rep ScalingReport
		if b, err := os.ReadFile(js); err != nil || json.Unmarshal(b, &rep) != nil {
			t.Fatalf("-ranks-per-node %s: report: %v", rpn, err)
		}
		crowded := slices.ContainsFunc(rep.Warnings, func(w string) bool {
			return strings.Contains(w, "for 1 rank(s) per node, but this job's 2 ranks per node measured the compute step at once")
		})
		if crowded != (rpn == "1") {
			t.Errorf("-ranks-per-node %s on a node of 2: warnings %q", rpn, rep.Warnings)
		}
	}
}

// TestScalingShmFlagsZero: -shm-alpha-us 0 with -shm-gbps given is
// refused saying 0 is "measured", with both values; it said "give both"
// to a user who had.
func TestScalingShmFlagsZero(t *testing.T) {
	single := func() (mpi.Comm, error) { return mpi.NewSingle(), nil }
	err := Scaling([]string{"-shm-alpha-us", "0", "-shm-gbps", "20", "-link-gbps", "10"}, single, io.Discard)
	var ue cli.UsageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "above 0 (0: measured)") || !strings.Contains(err.Error(), "-shm-alpha-us 0 with -shm-gbps 20") {
		t.Errorf("-shm-alpha-us 0 -shm-gbps 20: %v", err)
	}
}

// TestScalingTitle: the chart's title names the collective the rows
// model: with one rank per node there is no node-shared sum, and it said
// shm of rows of MPI_Allreduce alone.
func TestScalingTitle(t *testing.T) {
	rep := ScalingReport{Model: "cnn", Batch: 64, Collective: "shm", Rows: []ScalingRow{{RanksPerNode: 1}}}
	if got := scalingTitle(rep); !strings.Contains(got, "1 rank(s)/node, mpi:") {
		t.Errorf("1 rank per node, -collective shm: title %q, want mpi", got)
	}
	rep.Rows[0].RanksPerNode = 2
	if got := scalingTitle(rep); !strings.Contains(got, "2 rank(s)/node, shm:") {
		t.Errorf("2 ranks per node: title %q, want shm", got)
	}
}
