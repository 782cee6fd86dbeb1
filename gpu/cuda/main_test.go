package cuda

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"hpctrain/gpu/kernels"
	"hpctrain/internal/cudaemu"
)

func TestMain(m *testing.M) { cudaemu.Main(m, "gpu/cuda") }

// emuDir is the emulated device's directory.
func emuDir() string { return os.Getenv(cudaemu.MainEnv) }

// openDevice opens device 0 of the emulator, bound on the test's
// goroutine's thread, and closes it at the end of the test.
func openDevice(t *testing.T) *Context {
	t.Helper()
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
	c, err := OpenDevice(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// runChild runs the test binary's TestChild in a process with
// LD_LIBRARY_PATH=libdir and env, and returns its output lines that start
// with "> " (without the prefix).
func runChild(t *testing.T, libdir string, env ...string) []string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestChild$", "-test.v")
	cmd.Env = append(os.Environ(), append([]string{"LD_LIBRARY_PATH=" + libdir, childEnv + "=1"}, env...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	var lines []string
	for _, l := range strings.Split(string(out), "\n") {
		if s, ok := strings.CutPrefix(l, "> "); ok {
			lines = append(lines, s)
		}
	}
	return lines
}

const (
	childEnv        = "HPCTRAIN_CUDA_TEST_CHILD"
	childCompileEnv = "HPCTRAIN_CUDA_TEST_CHILD_COMPILE" // also compile with the NVRTC found
)

// childCompile compiles to_bf16 and a broken kernel with the NVRTC loaded
// and prints what came out.
func childCompile() {
	ma, mi, err := NVRTCVersion()
	fmt.Printf("> nvrtc version: %d.%d %v\n", ma, mi, err)
	ptx, _, err := Compile("convert", kernels.Source("convert.cu"), "compute_80", "--fmad=false")
	fmt.Printf("> compile: %v\n", err)
	for _, l := range strings.Split(string(ptx), "\n") {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, ".target") || strings.HasPrefix(l, ".visible .entry") {
			fmt.Printf("> ptx: %s\n", l)
		}
	}
	_, log, err := Compile("broken", brokenKernel, "compute_80")
	fmt.Printf("> broken: %v\n", err)
	fmt.Printf("> broken log has name: %v\n", strings.Contains(log, "no_such_name"))
}

const brokenKernel = `extern "C" __global__ void k(float* y) { y[0] = no_such_name; }`

// TestChild, run by runChild, loads each library in a fresh process and
// prints what happened.
func TestChild(t *testing.T) {
	if os.Getenv(childEnv) == "" {
		t.Skip("runs only as runChild's child process")
	}
	show := func(what string, err error) {
		if err != nil {
			fmt.Printf("> %s: %v\n", what, err)
			if le, ok := err.(*LoadError); ok {
				fmt.Printf("> %s symbol: %s\n", what, le.Symbol)
			}
			return
		}
		fmt.Printf("> %s: ok\n", what)
	}
	show("driver", LoadDriver())
	if n, err := DeviceCount(); err == nil {
		fmt.Printf("> devices: %d\n", n)
		if _, err := OpenDevice(n); err != nil {
			fmt.Printf("> open beyond: %v\n", err)
		}
	}
	show("blas", LoadBLAS())
	if blasLib.loaded.Load() {
		fmt.Printf("> blas file: %s\n", blasLib.file)
	}
	show("nvrtc", LoadNVRTC())
	if nvrtcLib.loaded.Load() {
		fmt.Printf("> nvrtc file: %s\n", nvrtcLib.file)
		if os.Getenv(childCompileEnv) != "" {
			childCompile()
		}
	}
	show("nccl", LoadNCCL())
}

// libDir makes a directory holding links to the named libraries of the
// emulator, and the extra links given as "name=target".
func libDir(t *testing.T, libs ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, l := range libs {
		name, target, ok := strings.Cut(l, "=")
		if !ok {
			target = name
		}
		if err := os.Symlink(filepath.Join(emuDir(), target), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
