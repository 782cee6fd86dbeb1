package cuda

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const (
	hintDriver = "; install the NVIDIA driver or add its directory to LD_LIBRARY_PATH"
	noFile     = ": cannot open shared object file: No such file or directory"
)

func TestLoadNoLibraries(t *testing.T) {
	got := runChild(t, t.TempDir())
	want := []string{
		"driver: cuda: cannot load the CUDA driver: tried libcuda.so.1 (libcuda.so.1" + noFile + ")" + hintDriver,
		"blas: cuda: cannot load cuBLAS: tried libcublas.so.12, libcublas.so.11 (libcublas.so.12" + noFile +
			"; libcublas.so.11" + noFile + "); install the CUDA toolkit's cuBLAS or add its directory to LD_LIBRARY_PATH",
		"nccl: cuda: cannot load NCCL: tried libnccl.so.2 (libnccl.so.2" + noFile + "); install NCCL (libnccl2) or add its directory to LD_LIBRARY_PATH",
	}
	// NVRTC may be installed on the machine (make test installs NVRTC 11.8
	// for the kernel compile check): then the loader finds it in its
	// default directories, by its fallback name.
	if f := lineFor(got, "nvrtc file: "); f != "" {
		name := strings.TrimPrefix(f, "nvrtc file: ")
		if !systemHas(name) {
			t.Errorf("NVRTC loaded as %s, which the loader's cache does not list", name)
		}
		t.Logf("this machine has NVRTC: %s", name)
	} else {
		want = append(want, "nvrtc: cuda: cannot load NVRTC: tried libnvrtc.so.12, libnvrtc.so.11.2, libnvrtc.so.11 (libnvrtc.so.12"+noFile+
			"; libnvrtc.so.11.2"+noFile+"; libnvrtc.so.11"+noFile+"); install the CUDA toolkit's NVRTC or add its directory to LD_LIBRARY_PATH")
	}
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("missing line\n%s\nin\n%s", w, strings.Join(got, "\n"))
		}
	}
}

// systemHas reports whether ldconfig's cache lists the library name.
func systemHas(name string) bool {
	out, err := exec.Command("/sbin/ldconfig", "-p").Output()
	return err == nil && strings.Contains(string(out), "\t"+name+" ")
}

// The bindings against a real NVRTC, when the machine has one (outside
// LD_LIBRARY_PATH): PTX for the requested architecture with the kernel's
// entry, and a compile error of one line with the log's words.
func TestRealNVRTC(t *testing.T) {
	got := runChild(t, libDir(t, "libcuda.so.1"), childCompileEnv+"=1")
	if lineFor(got, "nvrtc file: ") == "" {
		// Skipped only where the loader's cache lists none of the names
		// LoadNVRTC tries: where it lists one (make test installs NVRTC
		// 11.8), a load that fails is the loader's fault.
		for _, name := range []string{"libnvrtc.so.12", "libnvrtc.so.11.2", "libnvrtc.so.11"} {
			if systemHas(name) {
				t.Fatalf("ldconfig lists %s, but LoadNVRTC did not load it: %q", name, lineFor(got, "nvrtc: "))
			}
		}
		t.Skip("no NVRTC installed on this machine (scripts/setup.sh --cuda installs one)")
	}
	t.Log(lineFor(got, "nvrtc file: "), lineFor(got, "nvrtc version: "))
	for _, w := range []string{"compile: <nil>", "ptx: .target sm_80", "ptx: .visible .entry to_bf16(", "ptx: .visible .entry to_half(", "broken log has name: true"} {
		if l := lineFor(got, w); l == "" {
			t.Errorf("missing %q in %q", w, got)
		}
	}
	if l := lineFor(got, "broken: "); !strings.HasPrefix(l, "broken: cuda: nvrtcCompileProgram broken: NVRTC_ERROR_COMPILATION (6): ") || !strings.Contains(l, "no_such_name") {
		t.Errorf("got %q", l)
	}
}

// Each library missing alone: the others load.
func TestLoadOneMissing(t *testing.T) {
	all := []string{"libcuda.so.1", "libcublas.so.12", "libnvrtc.so.12", "libnccl.so.2"}
	for _, c := range []struct{ missing, key, want string }{
		{"libcublas.so.12", "blas", "blas: cuda: cannot load cuBLAS: tried libcublas.so.12, libcublas.so.11 ("},
		{"libnccl.so.2", "nccl", "nccl: cuda: cannot load NCCL: tried libnccl.so.2 ("},
	} {
		t.Run(c.key, func(t *testing.T) {
			var libs []string
			for _, l := range all {
				if l != c.missing {
					libs = append(libs, l)
				}
			}
			got := runChild(t, libDir(t, libs...))
			for _, k := range []string{"driver", "blas", "nvrtc", "nccl"} {
				line := lineFor(got, k+": ")
				if k == c.key {
					if !strings.HasPrefix(line, c.want) {
						t.Errorf("%s: got %q, want prefix %q", k, line, c.want)
					}
				} else if line != k+": ok" {
					t.Errorf("got %q, want %s: ok", line, k)
				}
			}
		})
	}
}

func lineFor(lines []string, prefix string) string {
	for _, l := range lines {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}

// cuBLAS 11 is taken when 12 is absent.
func TestLoadBLASFallback(t *testing.T) {
	got := runChild(t, libDir(t, "libcuda.so.1", "libcublas.so.11=libcublas.so.12"))
	if l := lineFor(got, "blas file: "); l != "blas file: libcublas.so.11" {
		t.Errorf("got %q, want blas file: libcublas.so.11 (lines %q)", l, got)
	}
}

// A libcublas.so.12 that lacks cublasGemmEx is refused when it is loaded,
// naming the file and the symbol.
func TestLoadMissingSymbol(t *testing.T) {
	dir := libDir(t, "libcuda.so.1")
	src := filepath.Join(t.TempDir(), "stub.c")
	var b strings.Builder
	for _, f := range []string{"cublasCreate_v2", "cublasDestroy_v2", "cublasSetStream_v2", "cublasSetMathMode", "cublasSgemm_v2"} {
		b.WriteString("int " + f + "(void) { return 0; }\n")
	}
	if err := os.WriteFile(src, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-shared", "-fPIC", "-o", filepath.Join(dir, "libcublas.so.12"), src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	got := runChild(t, dir)
	for _, w := range []string{"blas: cuda: libcublas.so.12 has no symbol cublasGemmEx", "blas symbol: cublasGemmEx", "driver: ok"} {
		if !slices.Contains(got, w) {
			t.Errorf("missing %q in %q", w, got)
		}
	}
}

func TestLoadNoDevice(t *testing.T) {
	got := runChild(t, emuDir(), "HPCTRAIN_CUDAEMU_DEVICES=0")
	want := "driver: cuda: no CUDA device: cuInit: CUDA_ERROR_NO_DEVICE (100)"
	if !slices.Contains(got, want) {
		t.Errorf("missing %q in %q", want, got)
	}
}

func TestDeviceCount(t *testing.T) {
	got := runChild(t, emuDir(), "HPCTRAIN_CUDAEMU_DEVICES=3")
	for _, w := range []string{"devices: 3", "open beyond: cuda: no device 3: the driver sees 3"} {
		if !slices.Contains(got, w) {
			t.Errorf("missing %q in %q", w, got)
		}
	}
}

// The load error of a missing device wraps the driver's *Error.
func TestLoadErrorUnwrap(t *testing.T) {
	inner := &Error{Call: "cuInit", Code: 100, Name: "CUDA_ERROR_NO_DEVICE"}
	err := error(&LoadError{What: "no CUDA device", Reason: "cuInit: CUDA_ERROR_NO_DEVICE (100)", Err: inner})
	var e *Error
	if !errors.As(err, &e) || e.Code != 100 {
		t.Fatalf("errors.As: got %v", e)
	}
	if got, want := err.Error(), "cuda: no CUDA device: cuInit: CUDA_ERROR_NO_DEVICE (100)"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// NoDevice tells a driver that sees no device (what CUDA_VISIBLE_DEVICES
// hiding every GPU gives) from other failures of cuInit and of loading.
func TestNoDevice(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&LoadError{What: "no CUDA device", Err: &Error{Call: "cuInit", Code: 100, Name: "CUDA_ERROR_NO_DEVICE"}}, true},
		{fmt.Errorf("opening: %w", &LoadError{What: "no CUDA device", Reason: "cuDeviceGetCount: 0 devices"}), true},
		{&LoadError{What: "no CUDA device", Err: &Error{Call: "cuInit", Code: 1, Name: "CUDA_ERROR_INVALID_VALUE"}}, false},
		{&LoadError{What: "the CUDA driver", Tried: []string{"libcuda.so.1"}}, false},
		{&Error{Call: "cuInit", Code: 100, Name: "CUDA_ERROR_NO_DEVICE"}, false},
		{nil, false},
	} {
		if got := NoDevice(c.err); got != c.want {
			t.Errorf("NoDevice(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
