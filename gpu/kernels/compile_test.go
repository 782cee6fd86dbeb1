package kernels_test

// The compile check: every kernel file, as the GPU backend compiles it
// (kernels.Source as one unit), goes through the real NVRTC for the
// architectures of the GPUs we target, and must compile without a single
// diagnostic. The emulated device compiles the same source with g++, which
// accepts things NVRTC rejects (and the reverse); only this test catches
// those before a run on a GPU.
//
// NVRTC comes from CUDA (libnvrtc.so.12) or, on Debian 12, from the
// non-free packages libnvrtc11.2 and libnvrtc-builtins11.8 (CUDA 11.8,
// which knows compute_90), installed by scripts/setup.sh --cuda. Without
// it the test is skipped with that hint.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"hpctrain/gpu/cuda"
	"hpctrain/gpu/kernels"
)

// archs are the virtual architectures the check compiles for: Volta
// (V100), Ampere (A100) and Hopper (H100, H200).
var archs = []string{"compute_70", "compute_80", "compute_90"}

// backendOpts are the NVRTC options the backend compiles the kernels with
// (gpu/cudanet's compileOpts: no contraction into fused multiply-adds, so
// results match the emulator's and the CPU's); keep the two in step.
var backendOpts = []string{"--fmad=false"}

// realNVRTC loads NVRTC and makes sure it is NVIDIA's, not the emulated
// device's; it skips the test when no NVRTC is installed.
func realNVRTC(t *testing.T) {
	t.Helper()
	for _, d := range filepath.SplitList(os.Getenv("LD_LIBRARY_PATH")) {
		if emulatorDir(d) {
			t.Fatalf("LD_LIBRARY_PATH has %s, the emulated device's libraries: this check needs NVIDIA's NVRTC; run it without that LD_LIBRARY_PATH", d)
		}
	}
	if err := cuda.LoadNVRTC(); err != nil {
		// Skipped only where no NVRTC is installed: one the loader's
		// cache or LD_LIBRARY_PATH holds (make test installs NVRTC 11.8)
		// that does not load is a failure of the loader, not a reason to
		// leave the check out.
		if p := installedNVRTC(); p != "" {
			t.Fatalf("NVRTC is installed (%s), but cuda.LoadNVRTC failed: %v", p, err)
		}
		t.Skipf("kernel compile check skipped: NVRTC (libnvrtc.so.12 or libnvrtc.so.11.2) is not installed (%v); install it with scripts/setup.sh --cuda (Debian's libnvrtc11.2 and libnvrtc-builtins11.8) or load a CUDA module", err)
	}
	if p := loadedNVRTC(); p != "" {
		if emulatorDir(filepath.Dir(p)) {
			t.Fatalf("the NVRTC loaded is %s, the emulated device's: this check needs NVIDIA's", p)
		}
		t.Logf("NVRTC loaded from %s", p)
	}
}

// installedNVRTC returns an NVRTC that cuda.LoadNVRTC would find by one of
// its names, in LD_LIBRARY_PATH or in the loader's cache (ldconfig -p), or
// "" where there is none.
func installedNVRTC() string {
	names := []string{"libnvrtc.so.12", "libnvrtc.so.11.2", "libnvrtc.so.11"}
	for _, d := range filepath.SplitList(os.Getenv("LD_LIBRARY_PATH")) {
		for _, n := range names {
			if p := filepath.Join(d, n); d != "" && fileExists(p) {
				return p
			}
		}
	}
	out, err := exec.Command("/sbin/ldconfig", "-p").Output()
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(out), "\n") {
		for _, n := range names {
			if strings.HasPrefix(strings.TrimSpace(l), n+" ") {
				return strings.TrimSpace(l)
			}
		}
	}
	return ""
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// emulatorDir reports whether dir holds the emulated device's libraries:
// the emulator builds them under the temporary directory, where NVIDIA's
// libraries never are. (A directory with libcuda, libnvrtc and libnccl
// together proves nothing: Debian's and Ubuntu's packages put all three in
// /usr/lib/x86_64-linux-gnu.) The PTX check below catches the emulator
// wherever it is.
func emulatorDir(dir string) bool {
	if dir == "" {
		return false
	}
	tmp, err := filepath.Abs(os.TempDir())
	if err != nil {
		return false
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return false
	}
	if !strings.HasPrefix(abs+"/", strings.TrimSuffix(tmp, "/")+"/") {
		return false
	}
	for _, lib := range []string{"libnvrtc.so.12", "libnvrtc.so.11.2", "libnvrtc.so.11"} {
		if _, err := os.Stat(filepath.Join(abs, lib)); err == nil {
			return true
		}
	}
	return false
}

// loadedNVRTC returns the path of the libnvrtc mapped into this process,
// from /proc/self/maps ("" where that cannot be read).
func loadedNVRTC() string {
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 6 && strings.Contains(filepath.Base(f[5]), "libnvrtc.so") {
			return f[5]
		}
	}
	return ""
}

// compileClean compiles src for arch and returns the PTX, or a problem:
// a failed compile, or any diagnostic at all in NVRTC's log (a warning on
// one compiler is often an error, or a wrong result, on another).
func compileClean(name, src, arch string, opts ...string) (ptx []byte, problem string) {
	ptx, log, err := cuda.Compile(name, src, arch, opts...)
	log = strings.TrimSpace(strings.TrimRight(log, "\x00"))
	switch {
	case err != nil:
		return nil, fmt.Sprintf("%v\nlog:\n%s", err, log)
	case log != "":
		return nil, "compiled, but with diagnostics:\n" + log
	case len(ptx) == 0:
		return nil, "compiled to an empty PTX"
	}
	return ptx, ""
}

var (
	comments = regexp.MustCompile(`(?s)//[^\n]*|/\*.*?\*/`)
	globals  = regexp.MustCompile(`\b__global__\b`)
	kernelRe = regexp.MustCompile(`extern\s+"C"\s+__global__\s+void\s+([A-Za-z_]\w*)\s*\(`)
)

// kernelNames lists the extern "C" __global__ kernels declared in src,
// comments removed. Every __global__ must be such a declaration: one the
// pattern misses would go unchecked.
func kernelNames(t *testing.T, src string) []string {
	t.Helper()
	code := comments.ReplaceAllString(src, "")
	var names []string
	for _, m := range kernelRe.FindAllStringSubmatch(code, -1) {
		names = append(names, m[1])
	}
	if g := len(globals.FindAllString(code, -1)); g != len(names) {
		t.Fatalf("the source has %d __global__ but %d declarations of the form extern \"C\" __global__ void NAME(: kernels must be declared that way (gpu/kernels/doc.go)", g, len(names))
	}
	return names
}

// ptxProblems lists what makes ptx other than NVIDIA's PTX for arch
// (".version" and ".target sm_XX"; the emulator's "PTX" is a marker and a
// path) with an entry for every kernel name.
func ptxProblems(ptx []byte, arch string, names []string) []string {
	s := string(ptx)
	sm := "sm_" + strings.TrimPrefix(arch, "compute_")
	if !regexp.MustCompile(`(?m)^\s*\.version\s+\d+\.\d+`).MatchString(s) ||
		!regexp.MustCompile(`(?m)^\s*\.target\s+`+sm+`\b`).MatchString(s) {
		head := s
		if len(head) > 200 {
			head = head[:200]
		}
		return []string{fmt.Sprintf("%s: not NVIDIA PTX for %s (no .version line or no .target %s): is the NVRTC loaded the emulator's? It begins %q", arch, sm, sm, head)}
	}
	var bad []string
	for _, n := range names {
		if !regexp.MustCompile(`\.entry\s+` + regexp.QuoteMeta(n) + `\s*\(`).MatchString(s) {
			bad = append(bad, fmt.Sprintf("%s: the PTX has no .entry %s", arch, n))
		}
	}
	return bad
}

func TestCompileAllKernelsWithNVRTC(t *testing.T) {
	realNVRTC(t)
	major, minor, err := cuda.NVRTCVersion()
	if err != nil {
		t.Fatal(err)
	}
	src := kernels.Source()
	names := kernelNames(t, src)
	if len(names) == 0 {
		t.Fatal("kernels.Source() declares no kernel")
	}
	t.Logf("NVRTC %d.%d, options %q; %d kernels in %s", major, minor, backendOpts, len(names), strings.Join(kernels.Files(), ", "))
	for _, arch := range archs {
		t.Run(arch, func(t *testing.T) {
			ptx, problem := compileClean("hpctrain_kernels.cu", src, arch, backendOpts...)
			if problem != "" {
				t.Fatalf("NVRTC %d.%d, %s: %s", major, minor, arch, problem)
			}
			if bad := ptxProblems(ptx, arch, names); len(bad) > 0 {
				t.Fatal(strings.Join(bad, "\n"))
			}
			t.Logf("NVRTC %d.%d, %s: %d kernels, %d bytes of PTX, no diagnostics", major, minor, arch, len(names), len(ptx))
		})
	}
}

// The check fails on what it should: an error, with NVRTC's log, and a
// mere warning.
func TestCompileCheckCatchesProblems(t *testing.T) {
	realNVRTC(t)
	broken := kernels.Source("convert.cu") + "\nextern \"C\" __global__ void broken(float* y) { y[0] = no_such_name; }\n"
	_, problem := compileClean("broken.cu", broken, "compute_80")
	if problem == "" {
		t.Fatal("a kernel using an undefined identifier compiled cleanly")
	}
	if !strings.Contains(problem, "no_such_name") {
		t.Errorf("the failure does not carry NVRTC's log naming the identifier:\n%s", problem)
	}
	t.Logf("broken kernel, as reported:\n%s", problem)

	warn := "extern \"C\" __global__ void warns(float* y) { int unused; y[0] = 1.0f; }\n"
	_, problem = compileClean("warns.cu", warn, "compute_80")
	if !strings.Contains(problem, "warning") || !strings.Contains(problem, "unused") {
		t.Errorf("a kernel with an unused variable passed the check (problem %q); NVRTC warns about it", problem)
	}

	// The name extraction sees every kernel, and only kernels.
	src := "/* extern \"C\" __global__ void gone(int n) {} */\n" +
		"extern \"C\" __global__ void one(float* y) {}\n// extern \"C\" __global__ void two(float* y) {}\n" +
		"extern  \"C\"\n__global__ void three ( int n ) {}\n"
	if got := strings.Join(kernelNames(t, src), " "); got != "one three" {
		t.Errorf("kernel names %q, want \"one three\"", got)
	}
	ptx, problem := compileClean("names.cu", src, "compute_70")
	if problem != "" {
		t.Fatal(problem)
	}
	if bad := ptxProblems(ptx, "compute_70", []string{"one", "three"}); len(bad) > 0 {
		t.Error(strings.Join(bad, "\n"))
	}
	// What is not NVIDIA's PTX for the arch, or lacks a kernel, is refused.
	for _, c := range []struct {
		arch  string
		names []string
	}{
		{"compute_80", []string{"one"}},     // .target sm_70, not sm_80
		{"compute_70", []string{"missing"}}, // no .entry missing
	} {
		if bad := ptxProblems(ptx, c.arch, c.names); len(bad) == 0 {
			t.Errorf("PTX for compute_70 with kernels one and three passed as %s with %v", c.arch, c.names)
		}
	}
	emu := []byte("// cudaemu module\n/tmp/x/one.so\n") // the emulator's format
	if bad := ptxProblems(emu, "compute_70", nil); len(bad) == 0 {
		t.Error("an emulator-style module passed as NVIDIA PTX")
	}
}
