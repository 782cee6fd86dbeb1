package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"hpctrain/affinity"
	"hpctrain/internal/mpitest"
)

// threadMasks reads Cpus_allowed_list of every thread of pid.
func threadMasks(pid int) map[int]affinity.CPUSet {
	tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/status")
	m := map[int]affinity.CPUSet{}
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok {
				if s, err := affinity.Parse(strings.TrimSpace(v)); err == nil {
					tid, _ := strconv.Atoi(filepath.Base(filepath.Dir(f)))
					m[tid] = s
				}
			}
		}
	}
	return m
}

// lastCPU is the processor a thread last ran on and the CPU time it has
// used (/proc/PID/task/TID/stat fields 39, 14 and 15).
func lastCPU(pid, tid int) (cpu, ticks int) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(tid) + "/stat")
	if err != nil {
		return -1, 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:]) // fields from 3 on
	cpu, _ = strconv.Atoi(f[36])
	ut, _ := strconv.Atoi(f[11])
	st, _ := strconv.Atoi(f[12])
	return cpu, ut + st
}

// TestRanksPinnedUnderMPI: under mpirun -np 2 --bind-to none (the placement
// is hpctrain's own), every thread of each rank is confined to the rank's
// planned core, the two ranks' cores are disjoint, and the threads pinned to
// a core are seen running there while training.
func TestRanksPinnedUnderMPI(t *testing.T) {
	mask, err := affinity.Allowed()
	if err != nil {
		t.Fatal(err)
	}
	if mask.Len() < 2 {
		t.Fatalf("this test needs 2 cpus in the mask, have %s", mask)
	}
	j := startJob(t, 2, nil, "train", "-model", "cnn", "-limit", "12800", "-epochs", "3", "-progress", "200ms", "-threads", "1")
	// The first progress line: start-up and placement done on both ranks,
	// training. (A fixed 5 s sleep was too short for a start-up on a
	// machine busy with other tests: the masks read were start-up's.)
	j.waitFor(t, "step ", time.Minute)
	pids := []int{j.rankPID(t, 0), j.rankPID(t, 1)}
	var cores []affinity.CPUSet
	for _, pid := range pids {
		masks := threadMasks(pid)
		if len(masks) < 3 {
			t.Fatalf("pid %d: %d threads", pid, len(masks))
		}
		var core affinity.CPUSet
		for tid, m := range masks {
			if m.Len() != 1 {
				t.Errorf("pid %d thread %d: mask %s, want the rank's one core", pid, tid, m)
			}
			if core.IsEmpty() {
				core = m
			} else if !core.Equal(m) {
				t.Errorf("pid %d: threads on %s and %s", pid, core, m)
			}
		}
		// Sample where the threads run while training. A thread asleep since
		// before the rank placed itself still shows the cpu it last ran on
		// then, so only threads that used cpu time meanwhile count.
		start := map[int]int{}
		for tid := range masks {
			_, start[tid] = lastCPU(pid, tid)
		}
		seen := 0
		for i := 0; i < 30; i++ {
			time.Sleep(20 * time.Millisecond)
			for tid := range masks {
				c, ticks := lastCPU(pid, tid)
				if ticks == start[tid] || c < 0 {
					continue
				}
				seen++
				if !core.Contains(c) {
					t.Errorf("pid %d thread %d ran on cpu %d, outside %s", pid, tid, c, core)
				}
			}
		}
		if seen == 0 {
			t.Errorf("pid %d: no thread seen running while training", pid)
		}
		cores = append(cores, core)
	}
	if cores[0].Equal(cores[1]) {
		t.Errorf("both ranks on cores %s", cores[0])
	}
}

// TestLauncherBoundRanks: under mpirun's own binding (--bind-to core, its
// default for 2 ranks), each rank is planned among the ranks sharing its
// mask: bound to the core mpirun gave it, with no warning. Before, each
// rank planned itself as local rank i of 2 inside a 1-core mask, found
// itself oversubscribed and ran unbound with a warning.
func TestLauncherBoundRanks(t *testing.T) {
	mask, err := affinity.Allowed()
	if err != nil {
		t.Fatal(err)
	}
	if mask.Len() < 2 {
		t.Fatalf("this test needs 2 cpus in the mask, have %s", mask)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "mpirun", "-np", "2", "--bind-to", "core", "--map-by", "core", bin,
		"train", "-model", "mlp", "-limit", "640", "-test-limit", "64", "-progress", "0", "-report-bindings")
	cmd.Env = mpitest.Env()
	b, err := cmd.CombinedOutput()
	out := string(b)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	cpus := mask.CPUs()
	host, _ := os.Hostname()
	for r := range 2 {
		want := fmt.Sprintf("[%s:rank %d local %d] cores %d ", host, r, r, cpus[r])
		if !strings.Contains(out, want) {
			t.Errorf("no %q: rank %d not bound to the core mpirun gave it:\n%s", want, r, out)
		}
	}
	if strings.Contains(out, "warning") {
		t.Errorf("a warning:\n%s", out)
	}
}
