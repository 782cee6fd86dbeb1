package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"hpctrain/affinity"
	"hpctrain/internal/mpitest"
	"hpctrain/mpi"
)

// placementNode is what the placement tests expect of this machine: the
// allowed mask (at least 2 cpus), its topology, and the physical cores in
// the mask (the default thread count of a process alone in it).
func placementNode(t *testing.T) (affinity.CPUSet, *affinity.Topology, int) {
	t.Helper()
	mask, err := affinity.Allowed()
	if err != nil {
		t.Fatal(err)
	}
	if mask.Len() < 2 {
		t.Fatalf("this test needs 2 cpus in the mask, have %s", mask)
	}
	topo, err := affinity.ReadTopology("/")
	if err != nil {
		t.Fatal(err)
	}
	return mask, topo, topo.PhysicalCores(mask)
}

// placedLine is the line eval and predict print for rank 0's compute
// threads pinned to the cores starting at cpu (first..last), threads of
// them, as a regular expression.
func placedLine(host string, cores string, threads int) *regexp.Regexp {
	return regexp.MustCompile(fmt.Sprintf(`(?m)^hpctrain: compute threads: \[%s:rank 0 local 0\] cores %s numa [0-9,]+ threads %d$`,
		regexp.QuoteMeta(host), regexp.QuoteMeta(cores), threads))
}

// TestComputePinned: the compute threads eval and predict give a network
// (ckptFlags.compute) are pinned as train pins its own: worker i, the
// calling thread for worker 0, on the i-th planned core alone, every other
// thread of the process inside the plan's cores, and the line saying so.
// Before, they were NumCPU()/local ranks threads free on every cpu.
func TestComputePinned(t *testing.T) {
	mask, _, cores := placementNode(t)
	dir := t.TempDir()
	ckpt := zooCheckpoint(t, dir, "mlp")
	host, _ := os.Hostname()
	for _, n := range []int{1, 2, 0} {
		t.Run(fmt.Sprintf("threads %d", n), func(t *testing.T) {
			want := n
			if n == 0 {
				want = cores
			}
			if want > cores {
				t.Skipf("%d physical cores in the mask %s", cores, mask)
			}
			ck := ckptFlags{file: ckpt, threads: n}
			tr, err := ck.load("test", io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			defer keepPlacement()()
			var info, warn strings.Builder
			w, err := ck.compute(tr, mpi.NewSingle(), &info, &warn)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			if w.Workers() != want {
				t.Fatalf("%d workers, want %d", w.Workers(), want)
			}
			var plan affinity.CPUSet
			for i := range w.Workers() {
				c := w.CPU(i)
				if c < 0 || !mask.Contains(c) || plan.Contains(c) {
					t.Fatalf("worker %d on cpu %d (mask %s, workers before on %s): want a cpu of its own in the mask", i, c, mask, plan)
				}
				plan = plan.Union(affinity.NewCPUSet(c))
			}
			masks, err := affinity.ThreadMasks()
			if err != nil {
				t.Fatal(err)
			}
			own := map[int]bool{}
			for tid, m := range masks {
				if !m.IsSubset(plan) {
					t.Errorf("thread %d may run on cpus %s, outside the plan's %s", tid, m, plan)
				}
				if m.Len() == 1 {
					own[m.CPUs()[0]] = true
				}
			}
			for _, c := range plan.CPUs() {
				if !own[c] {
					t.Errorf("no thread pinned to cpu %d alone: %v", c, masks)
				}
			}
			if lead, err := affinity.Allowed(); err != nil || !lead.Equal(affinity.NewCPUSet(w.CPU(0))) {
				t.Errorf("the calling thread may run on %s, want worker 0's cpu %d (%v)", lead, w.CPU(0), err)
			}
			if re := placedLine(host, plan.String(), want); !re.MatchString(info.String()) || warn.Len() != 0 {
				t.Errorf("info %q, warnings %q: want a line matching %s", info.String(), warn.String(), re)
			}
		})
	}
}

// TestEvalPinnedUnderMPI: eval's ranks are placed as train's: under
// mpirun -np 2 --bind-to none each rank gets one thread on its own core
// (rank 0 the first), and under mpirun's own binding to a core each is
// planned inside the core it was given (not as local rank i of 2 inside
// one core, oversubscribed), with no warning; rank 0 alone prints the
// line, on stderr with -json. One process takes the physical cores of its
// mask by default, and -threads 1 one of them. Before, eval said nothing
// and ran NumCPU()/local ranks unpinned threads.
func TestEvalPinnedUnderMPI(t *testing.T) {
	mask, topo, cores := placementNode(t)
	if cores < 2 {
		t.Skipf("%d physical core in the mask %s", cores, mask)
	}
	dir := t.TempDir()
	ck := zooCheckpoint(t, dir, "mlp")
	host, _ := os.Hostname()
	first := mask.CPUs()[0]
	one := placedLine(host, fmt.Sprint(first), 1)
	check := func(what, out string, want *regexp.Regexp) {
		t.Helper()
		if !want.MatchString(out) || strings.Count(out, "compute threads:") != 1 || strings.Contains(out, "warning") {
			t.Errorf("%s: want one line matching %s and no warning:\n%s", what, want, out)
		}
	}
	args := []string{"eval", "-checkpoint", ck, "-json", "-test-limit", "100"}
	r := hpctrain(t, 2, 2*time.Minute, args...)
	if r.code != 0 {
		t.Fatalf("mpirun -np 2 --bind-to none: exit %d\n%s", r.code, r.out)
	}
	check("mpirun -np 2 --bind-to none", r.out, one)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "mpirun", append([]string{"-np", "2", "--bind-to", "core", "--map-by", "core", bin}, args...)...)
	cmd.Env = mpitest.Env()
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("mpirun -np 2 --bind-to core: %v\n%s", err, b)
	}
	check("mpirun -np 2 --bind-to core", string(b), one)

	stdout, stderr, code := streams(t, append(args, "-threads", "1")...)
	if code != 0 || strings.Contains(stdout, "compute threads") {
		t.Errorf("-json: exit %d, the line on stdout:\n%s", code, stdout)
	}
	check("one process, -threads 1", stderr, one)
	if !topo.Hybrid() {
		_, stderr, _ = streams(t, args...)
		var all affinity.CPUSet
		for _, c := range mask.CPUs() {
			if core, ok := topo.CoreOf(c); ok && core.CPUs.Intersect(mask).CPUs()[0] == c {
				all = all.Union(affinity.NewCPUSet(c))
			}
		}
		check("one process, default threads", stderr, placedLine(host, all.String(), cores))
	}
}

// TestPredictPinned: predict places its threads alone in its mask, as one
// process of train would: -threads 1 on the mask's first core, by default
// one thread per physical core, also under mpirun -np 2 (rank 0 works
// alone, with the whole mask); the line is on stderr, stdout holds the
// predictions alone. Before, predict said nothing and its threads were
// unpinned.
func TestPredictPinned(t *testing.T) {
	mask, topo, cores := placementNode(t)
	dir := t.TempDir()
	ck := zooCheckpoint(t, dir, "mlp")
	imgs, _ := testImages(t, 1)
	png := filepath.Join(dir, "0.png")
	writePNG(t, png, grey(imgs[0], 28, 28))
	host, _ := os.Hostname()
	stdout, stderr, code := streams(t, "predict", "-checkpoint", ck, "-threads", "1", png)
	if want := placedLine(host, fmt.Sprint(mask.CPUs()[0]), 1); code != 0 || !want.MatchString(stderr) || strings.Count(stdout, "\n") != 1 || !strings.HasPrefix(stdout, `{"input":`) {
		t.Errorf("-threads 1: exit %d; want stderr matching %s:\n%s\nand one prediction on stdout:\n%s", code, want, stderr, stdout)
	}
	if topo.Hybrid() {
		return
	}
	re := regexp.MustCompile(fmt.Sprintf(`(?m)^hpctrain: compute threads: \[%s:rank 0 local 0\] cores \S+ numa [0-9,]+ threads %d$`, regexp.QuoteMeta(host), cores))
	_, stderr, _ = streams(t, "predict", "-checkpoint", ck, png)
	if !re.MatchString(stderr) {
		t.Errorf("default threads: want a line matching %s:\n%s", re, stderr)
	}
	r := hpctrain(t, 2, time.Minute, "predict", "-checkpoint", ck, png)
	if r.code != 0 || !re.MatchString(r.out) || strings.Count(r.out, "compute threads:") != 1 {
		t.Errorf("mpirun -np 2: exit %d; want one line matching %s:\n%s", r.code, re, r.out)
	}
}
