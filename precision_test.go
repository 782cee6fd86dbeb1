package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"hpctrain/internal/dnnl"
	"hpctrain/internal/kernels"
	"hpctrain/internal/mpitest"
)

// CPU bf16 end to end: the real binary under the real mpirun on real
// Fashion-MNIST.

// TestCPUBF16Refused: a CPU without bf16 dot products (oneDNN held to AVX2
// with DNNL_MAX_CPU_ISA, which hpctrain's check follows) refuses
// -precision bf16 with one line on every rank naming the instructions;
// settings the CPU cannot run are refused before MPI starts.
func TestCPUBF16Refused(t *testing.T) {
	args := []string{"train", "-model", "mlp", "-limit", "640", "-test-limit", "100", "-precision", "bf16", "-device", "cpu"}
	r := hpctrainEnv(t, 2, 2*time.Minute, []string{"DNNL_MAX_CPU_ISA=AVX2"}, args...)
	lines := errorLines(t, r)
	if len(lines) != 2 {
		t.Fatalf("want one error line per rank, got %q\n%s", lines, r.out)
	}
	for _, l := range lines {
		if !strings.Contains(l, "bf16 needs AVX512-BF16 or AMX-BF16") {
			t.Errorf("error line %q does not name the instructions", l)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-precision", "fp16"}, `precision = "fp16" needs device = "cuda"`},
		{[]string{"-precision", "tf32"}, `precision = "tf32" needs device = "cuda"`},
		{[]string{"-precision", "bf16", "-cpu-kernels", "blas"}, `needs cpu_kernels = "dnnl"`},
		{[]string{"-cpu-kernels", "mkl"}, "cpu_kernels"},
	} {
		r := hpctrain(t, 0, time.Minute, append([]string{"train", "-device", "cpu"}, c.args...)...)
		lines := errorLines(t, r)
		if r.code != 2 || len(lines) != 1 || !strings.Contains(lines[0], c.want) {
			t.Errorf("%v: exit %d, lines %q, want exit 2 and one line with %q", c.args, r.code, lines, c.want)
		}
	}
}

// TestCPUBF16 trains the CNN with 2 ranks in fp32 and in bf16 on the same
// data: bf16 follows fp32's losses within bf16's rounding for the first
// steps (not exactly: it must round), its results do not depend on the
// number of threads per rank, and the start-up line says what computes.
func TestCPUBF16(t *testing.T) {
	if ok, missing := dnnl.HasBF16(); !ok {
		t.Skipf("this CPU cannot run bf16 (%s): only the refusal is tested (TestCPUBF16Refused)", missing)
	}
	// The CNN's conv2 runs hpctrain's bf16 Winograd where the CPU has
	// AVX512-BF16 (every CPU oneDNN runs bf16 on but an AMX-only one).
	if kernels.HasWino16() {
		r := hpctrain(t, 0, time.Minute, "topo")
		if want := "bf16 3x3 Winograd: hpctrain's F(2x2, 3x3)"; !strings.Contains(r.out, want) {
			t.Errorf("topo does not say %q:\n%s", want, r.out)
		}
	}
	dir := t.TempDir()
	run := func(name string, np int, extra ...string) []float64 {
		ll := filepath.Join(dir, name)
		args := append([]string{"train", "-model", "cnn", "-device", "cpu", "-limit", "1280", "-test-limit", "200", "-batch", "32",
			"-lr", "0.01", "-loss-log", ll, "-v"}, extra...)
		r := hpctrain(t, np, 3*time.Minute, args...)
		if r.code != 0 {
			t.Fatalf("%s: exit %d\n%s", name, r.code, r.out)
		}
		if p := "dnnl bf16"; strings.Contains(name, "bf16") && !strings.Contains(r.out, p) {
			t.Errorf("%s: the start-up lines do not say %q:\n%s", name, p, r.out)
		}
		return readLosses(t, ll)
	}
	fp32 := run("fp32", 2, "-threads", "1")
	bf16 := run("bf16", 2, "-threads", "1", "-precision", "bf16")
	if len(fp32) != 20 || len(bf16) != 20 {
		t.Fatalf("losses: %d fp32, %d bf16, want 20 each", len(fp32), len(bf16))
	}
	var most, differ float64
	for i := range fp32 {
		d := math.Abs(bf16[i]-fp32[i]) / fp32[i]
		most = max(most, d)
		if bf16[i] != fp32[i] {
			differ++
		}
	}
	// bf16 keeps 8 significant bits (relative rounding 2^-8 = 0.4%); over
	// 20 steps of SGD the losses stay within a few percent of fp32's.
	if most > 0.05 {
		t.Errorf("bf16 losses differ from fp32's by up to %.1f%%:\nfp32 %v\nbf16 %v", 100*most, fp32, bf16)
	}
	if differ == 0 {
		t.Errorf("bf16 losses equal fp32's at every step: was anything rounded?")
	}
	// One rank of batch 64 on 1 and on 2 threads: the same losses.
	one := run("bf16-1rank-1thread", 0, "-threads", "1", "-precision", "bf16", "-batch", "64")
	two := run("bf16-1rank-2threads", 0, "-threads", "2", "-precision", "bf16", "-batch", "64")
	if fmt.Sprint(one) != fmt.Sprint(two) {
		t.Errorf("bf16 losses depend on the thread count:\n1 thread  %v\n2 threads %v", one, two)
	}
}

// TestOwnWinogradAVX2: on a CPU where oneDNN has no Winograd (held to AVX2
// here with DNNL_MAX_CPU_ISA), the CNN's conv2 runs hpctrain's F(2x2, 3x3):
// topo says so, the losses do not depend on the thread count, and they
// follow those of the uncapped run (oneDNN's F(4x4, 3x3) on AVX-512, or
// the same kernels elsewhere) within float32 rounding's drift (0.14%
// apart after 18 steps on Zen 4; 1% allowed).
func TestOwnWinogradAVX2(t *testing.T) {
	if !dnnl.Native {
		t.Skip("built without oneDNN (purego): no Winograd layers")
	}
	avx2 := []string{"DNNL_MAX_CPU_ISA=AVX2"}
	r := hpctrainEnv(t, 0, time.Minute, avx2, "topo")
	if want := "fp32 3x3 Winograd: hpctrain's F(2x2, 3x3)"; !strings.Contains(r.out, want) {
		t.Errorf("topo under DNNL_MAX_CPU_ISA=AVX2 does not say %q:\n%s", want, r.out)
	}
	// The cap holds hpctrain's own kernels too, and only the cap: on an
	// AVX-512 CPU they use it when nothing caps them.
	if bad := "hpctrain's own: avx512"; strings.Contains(r.out, bad) {
		t.Errorf("topo under DNNL_MAX_CPU_ISA=AVX2 says %q:\n%s", bad, r.out)
	}
	if cpuFlags(t, "avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl") {
		r := hpctrainEnv(t, 0, time.Minute, nil, "topo")
		if want := "hpctrain's own: avx512"; !strings.Contains(r.out, want) {
			t.Errorf("topo on an AVX-512 CPU, uncapped, does not say %q:\n%s", want, r.out)
		}
	}
	dir := t.TempDir()
	run := func(name string, env []string, threads string) []float64 {
		ll := filepath.Join(dir, name)
		r := hpctrainEnv(t, 0, 3*time.Minute, env, "train", "-model", "cnn", "-device", "cpu", "-limit", "1280", "-test-limit", "200",
			"-batch", "64", "-lr", "0.01", "-threads", threads, "-loss-log", ll)
		if r.code != 0 {
			t.Fatalf("%s: exit %d\n%s", name, r.code, r.out)
		}
		return readLosses(t, ll)
	}
	one, two := run("avx2-1", avx2, "1"), run("avx2-2", avx2, "2")
	if len(one) != 20 || fmt.Sprint(one) != fmt.Sprint(two) {
		t.Errorf("losses under AVX2 (%d steps) depend on the thread count:\n1 thread  %v\n2 threads %v", len(one), one, two)
	}
	ref := run("uncapped", nil, "1")
	for i := range ref {
		if d := math.Abs(one[i]-ref[i]) / ref[i]; !(d < 1e-2) {
			t.Errorf("step %d: loss %v under AVX2, %v uncapped (%.2g apart)", i, one[i], ref[i], d)
		}
	}
}

// cpuFlags reports whether /proc/cpuinfo lists every one of flags (false
// where it cannot be read).
func cpuFlags(t *testing.T, flags ...string) bool {
	t.Helper()
	info, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		t.Logf("cpuFlags: %v", err)
		return false
	}
	for _, line := range strings.Split(string(info), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "flags" {
			have := strings.Fields(v)
			for _, f := range flags {
				if !slices.Contains(have, f) {
					return false
				}
			}
			return true
		}
	}
	return false
}

// TestPrecisionAuto: -precision auto trains in bf16 where every rank's CPU
// has bf16 products (the same losses as -precision bf16, bit for bit), and
// in fp32 where one rank's has not (oneDNN held to AVX2 on rank 1 alone,
// or on both), naming that rank and what it lacks; the run goes on.
func TestPrecisionAuto(t *testing.T) {
	dir := t.TempDir()
	args := func(name string, extra ...string) []string {
		return append([]string{"train", "-model", "mlp", "-device", "cpu", "-threads", "1", "-limit", "1280", "-test-limit", "100",
			"-progress", "0", "-loss-log", filepath.Join(dir, name)}, extra...)
	}
	// rank runs hpctrain on 2 ranks, with oneDNN capped to AVX2 on the
	// ranks of capped (as on a node without AVX512-BF16).
	rank := func(name string, capped []int, extra ...string) result {
		t.Helper()
		script := `case " $CAPPED " in *" $OMPI_COMM_WORLD_RANK "*) export DNNL_MAX_CPU_ISA=AVX2;; esac; exec "$0" "$@"`
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := mpitest.Command(ctx, 2, "/bin/sh", append([]string{"-c", script, bin}, args(name, extra...)...)...)
		cmd.Env = append(cmd.Env, "CAPPED="+strings.Trim(fmt.Sprint(capped), "[]"))
		out, err := cmd.CombinedOutput()
		if ctx.Err() != nil {
			t.Fatalf("%s: did not end within 2 minutes (hang):\n%s", name, out)
		}
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, out)
		}
		return result{string(out), 0}
	}
	want := func(name string, r result, lines ...string) {
		t.Helper()
		for _, l := range lines {
			if !strings.Contains(r.out, l) {
				t.Errorf("%s: the output does not say %q:\n%s", name, l, r.out)
			}
		}
	}

	mixed := rank("mixed", []int{1}, "-precision", "auto")
	want("mixed", mixed, "hpctrain: precision auto: fp32, since rank 1 of 2 cannot compute in bf16",
		"hpctrain: rank 1: precision auto: no bf16 here: oneDNN's effective ISA is avx2", "(cpu, dnnl)")
	none := rank("none", []int{0, 1}, "-precision", "auto")
	want("none", none, "hpctrain: precision auto: fp32, no bf16 here: oneDNN's effective ISA is avx2", "(cpu, dnnl)")
	if strings.Contains(none.out, "hpctrain: rank ") {
		t.Errorf("none: with no rank able, a rank prints its own line too:\n%s", none.out)
	}
	// The same ranks capped alike: oneDNN's AVX2 kernels round differently.
	rank("mixed-fp32", []int{1}, "-precision", "fp32")
	if a, b := readLosses(t, filepath.Join(dir, "mixed")), readLosses(t, filepath.Join(dir, "mixed-fp32")); len(a) == 0 || fmt.Sprint(a) != fmt.Sprint(b) {
		t.Errorf("auto resolved to fp32 but its losses are not fp32's:\nauto %v\nfp32 %v", a, b)
	}

	if ok, missing := dnnl.HasBF16(); !ok {
		t.Logf("this CPU cannot run bf16 (%s): auto on every rank is the fp32 case above", missing)
		return
	}
	auto := rank("auto", nil, "-precision", "auto")
	want("auto", auto, "hpctrain: precision auto: bf16 (every rank's CPU has AVX512-BF16 or AMX-BF16)", "(cpu, dnnl bf16")
	rank("bf16", nil, "-precision", "bf16")
	rank("fp32", nil, "-precision", "fp32")
	a, b := readLosses(t, filepath.Join(dir, "auto")), readLosses(t, filepath.Join(dir, "bf16"))
	if len(a) == 0 || fmt.Sprint(a) != fmt.Sprint(b) {
		t.Errorf("auto resolved to bf16 but its losses are not bf16's:\nauto %v\nbf16 %v", a, b)
	}
	if fmt.Sprint(a) == fmt.Sprint(readLosses(t, filepath.Join(dir, "fp32"))) {
		t.Errorf("bf16's losses are fp32's: was anything rounded?")
	}
}
