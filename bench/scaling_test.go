package bench

import (
	"bytes"
	"encoding/json"
	"errors"
	"image/png"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

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

var scalingRow = regexp.MustCompile(`(?m)^\s+(\d+)\s+(\d+)\s+(\S+)\s+([a-z+]+|-)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\d+)\s+([\d.]+)$`)

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
	if len(rep.Rows) != 8 || rep.GradBytes != 4*61706 || len(rep.Compute.Buckets) < 2 || len(rep.Layers) == 0 || rep.Intra == nil || rep.Intra.Source != "flag" {
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
	if _, err := exec.LookPath("mpirun"); err != nil {
		t.Skip("no mpirun")
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
	if rep.JobRanks != 2 || rep.JobNodes != 1 || rep.Intra == nil || rep.Intra.Source != "measured" || !(rep.Intra.Gbps > 0) || len(rep.Sweep) < 2 || len(rep.RankStepMS) != 2 {
		t.Fatalf("report: %+v", rep)
	}
	if r := rep.Rows[0]; r.Nodes != 1 || r.Ranks != 2 || r.CommMS <= 0 {
		t.Errorf("1 node x 2 ranks: %+v", r)
	}
}
