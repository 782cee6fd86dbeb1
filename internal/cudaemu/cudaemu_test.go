package cudaemu

import (
	"debug/elf"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"hpctrain/gpu/kernels"
	"hpctrain/internal/mpitest"
)

// exports is what each library must export: the entry points the Go
// binding loads, and nothing else (but the emulator's bounds check).
var exports = map[string][]string{
	"libcuda.so.1": {"cuInit", "cuDriverGetVersion", "cuGetErrorName", "cuDeviceGetCount", "cuDeviceGet",
		"cuDeviceGetName", "cuDeviceGetAttribute", "cuDeviceTotalMem_v2", "cuDevicePrimaryCtxRetain",
		"cuDevicePrimaryCtxRelease_v2", "cuCtxSetCurrent", "cuMemAlloc_v2", "cuMemFree_v2",
		"cuMemHostAlloc", "cuMemFreeHost", "cuMemcpyHtoDAsync_v2", "cuMemcpyDtoHAsync_v2",
		"cuMemcpyDtoDAsync_v2", "cuMemsetD32Async", "cuStreamCreate", "cuStreamDestroy_v2",
		"cuStreamSynchronize", "cuStreamWaitEvent", "cuEventCreate", "cuEventRecord",
		"cuEventSynchronize", "cuEventDestroy_v2", "cuModuleLoadData", "cuModuleGetFunction",
		"cuModuleUnload", "cuLaunchKernel", "cudaemu_check_range"},
	"libcublas.so.12": {"cublasCreate_v2", "cublasDestroy_v2", "cublasSetStream_v2", "cublasSetMathMode",
		"cublasSgemm_v2", "cublasGemmEx"},
	"libnvrtc.so.12": {"nvrtcVersion", "nvrtcCreateProgram", "nvrtcCompileProgram", "nvrtcGetPTXSize",
		"nvrtcGetPTX", "nvrtcGetProgramLogSize", "nvrtcGetProgramLog", "nvrtcDestroyProgram",
		"nvrtcGetErrorString", "nvrtcGetNumSupportedArchs", "nvrtcGetSupportedArchs"},
	"libnccl.so.2": {"ncclGetVersion", "ncclGetUniqueId", "ncclCommInitRank", "ncclAllReduce",
		"ncclCommAbort", "ncclCommDestroy", "ncclCommGetAsyncError", "ncclGetErrorString"},
}

var built struct {
	once                  sync.Once
	dir, emutest, dlcheck string
	err                   error
}

var binDir string

func TestMain(m *testing.M) {
	if os.Getenv("CUDAEMU_TEST_DIR") == "1" { // a second process for TestDirConcurrent
		dir, err := Dir()
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		fmt.Println(dir)
		os.Exit(0)
	}
	var err error
	binDir, err = os.MkdirTemp("", "cudaemu-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(binDir)
	os.Exit(code)
}

// setup builds the libraries and the test programs once.
func setup(t *testing.T) (dir, emutest, dlcheck string) {
	t.Helper()
	built.once.Do(func() {
		built.dir, built.err = Dir()
		if built.err != nil {
			return
		}
		mpi, err := mpiFlags()
		if err != nil {
			built.err = err
			return
		}
		built.emutest = filepath.Join(binDir, "emutest")
		args := []string{"-O2", "-Wall", "-o", built.emutest, "testdata/emutest.c", "-L" + built.dir,
			"-l:libcuda.so.1", "-l:libcublas.so.12", "-l:libnvrtc.so.12", "-l:libnccl.so.2",
			"-Wl,-rpath," + built.dir}
		args = append(append(args, mpi...), "-lm", "-lpthread")
		if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
			built.err = fmt.Errorf("gcc emutest: %v\n%s", err, out)
			return
		}
		built.dlcheck = filepath.Join(binDir, "dlcheck")
		if out, err := exec.Command("gcc", "-O2", "-Wall", "-o", built.dlcheck, "testdata/dlcheck.c", "-ldl").CombinedOutput(); err != nil {
			built.err = fmt.Errorf("gcc dlcheck: %v\n%s", err, out)
		}
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.dir, built.emutest, built.dlcheck
}

// run runs prog with args and extra environment, failing t unless it
// exits 0 and prints "ok" last. It returns stdout and stderr together.
func run(t *testing.T, env []string, prog string, args ...string) string {
	t.Helper()
	cmd := exec.Command(prog, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.HasSuffix(string(out), "ok\n") {
		t.Fatalf("%s %v: %v\n%s", filepath.Base(prog), args, err, out)
	}
	return string(out)
}

func TestExports(t *testing.T) {
	dir, _, dlcheck := setup(t)
	for lib, want := range exports {
		f, err := elf.Open(filepath.Join(dir, lib))
		if err != nil {
			t.Fatal(err)
		}
		soname, err := f.DynString(elf.DT_SONAME)
		if err != nil || len(soname) != 1 || soname[0] != lib {
			t.Errorf("%s: soname %v (%v)", lib, soname, err)
		}
		syms, err := f.DynamicSymbols()
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, s := range syms {
			if s.Section != elf.SHN_UNDEF && elf.ST_BIND(s.Info) == elf.STB_GLOBAL {
				got = append(got, s.Name)
			}
		}
		f.Close()
		sort.Strings(got)
		w := append([]string(nil), want...)
		sort.Strings(w)
		if strings.Join(got, " ") != strings.Join(w, " ") {
			t.Errorf("%s exports\n%v\nwant\n%v", lib, got, w)
		}
		// Found by soname through LD_LIBRARY_PATH, as the binding finds it.
		out := run(t, []string{"LD_LIBRARY_PATH=" + dir}, dlcheck, append([]string{lib}, want...)...)
		if !strings.Contains(out, "loaded "+filepath.Join(dir, lib)) {
			t.Errorf("%s: not loaded from %s:\n%s", lib, dir, out)
		}
	}
}

func TestMemory(t *testing.T) {
	_, emutest, _ := setup(t)
	out := run(t, []string{"HPCTRAIN_CUDAEMU_DEVICES=2", "HPCTRAIN_CUDAEMU_CC=9.0", "HPCTRAIN_CUDAEMU_MEM=1048576"},
		emutest, "mem")
	for _, want := range []string{
		"cudaemu: cuMemcpyHtoDAsync: destination [0x",
		"is not inside one live device allocation",
		"cudaemu: cuMemFree: 0x",
		"no current context on this thread",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
}

func TestNoDevice(t *testing.T) {
	_, emutest, _ := setup(t)
	run(t, []string{"HPCTRAIN_CUDAEMU_DEVICES=0"}, emutest, "nodevice")
}

// TestVisibleDevices: CUDA_VISIBLE_DEVICES hides and reorders the
// emulated devices as the driver does, so that what hpctrain does with
// it (-device auto on the CPU where it hides every GPU) is tested: the
// listed devices in the order listed, up to the first entry naming none;
// an empty value, -1, Slurm's NoDevFiles or a device listed twice leave no
// device, and cuInit fails with CUDA_ERROR_NO_DEVICE.
func TestVisibleDevices(t *testing.T) {
	_, emutest, _ := setup(t)
	for _, c := range []struct{ value, want string }{
		{"", "NODEVICE"},
		{"-1", "NODEVICE"},
		{"NoDevFiles", "NODEVICE"},
		{"GPU-8c5e8b1a", "NODEVICE"}, // no emulated device has a UUID
		{"3", "NODEVICE"},
		{"0", "BUS 1"},
		{"2,0", "BUS 3 BUS 1"},
		{" 1 , 2 ", "BUS 2 BUS 3"},
		{"1,", "BUS 2"},
		{"0,2,-1,1", "BUS 1 BUS 3"}, // the CUDA guide's own example
		{"1,x,2", "BUS 2"},
		// A device listed twice leaves none (it was "BUS 2": the list
		// ended at the repeat); an entry is its leading digits, as
		// strtoul reads it (it ended the list). PyTorch's restatement of
		// the driver (_parse_visible_devices) says both.
		{"1,2,1", "NODEVICE"},
		{"0,0", "NODEVICE"},
		{"1gpu2,2ampere", "BUS 2 BUS 3"},
	} {
		out := run(t, []string{"HPCTRAIN_CUDAEMU_DEVICES=3", "CUDA_VISIBLE_DEVICES=" + c.value}, emutest, "visible")
		var got []string
		for _, l := range strings.Split(out, "\n") {
			if l == "NODEVICE" || strings.HasPrefix(l, "BUS ") {
				got = append(got, l)
			}
		}
		if g := strings.Join(got, " "); g != c.want {
			t.Errorf("CUDA_VISIBLE_DEVICES=%q: %q, want %q", c.value, g, c.want)
		}
	}
	if out := run(t, []string{"HPCTRAIN_CUDAEMU_DEVICES=2"}, emutest, "visible"); !strings.Contains(out, "BUS 1\nBUS 2\n") {
		t.Errorf("without CUDA_VISIBLE_DEVICES: not both devices:\n%s", out)
	}
}

// bf16 is float_to_bf16 of gpu/kernels/prelude.cuh restated: round to
// nearest even, NaN kept quiet.
func bf16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 0x40
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

func TestConvertKernel(t *testing.T) {
	_, emutest, _ := setup(t)
	src := filepath.Join(t.TempDir(), "convert.cu")
	if err := os.WriteFile(src, []byte(kernels.Source("convert.cu")), 0o644); err != nil {
		t.Fatal(err)
	}
	out := run(t, nil, emutest, "convert", src)
	n := 0
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) != 3 || f[0] != "VAL" {
			continue
		}
		x, err1 := strconv.ParseUint(f[1], 16, 32)
		y, err2 := strconv.ParseUint(f[2], 16, 16)
		if err1 != nil || err2 != nil {
			t.Fatalf("bad line %q", line)
		}
		if want := bf16(math.Float32frombits(uint32(x))); uint16(y) != want {
			t.Errorf("to_bf16(%08x) = %04x, want %04x", x, y, want)
		}
		n++
	}
	if n != 1000 {
		t.Fatalf("%d values, want 1000:\n%s", n, out)
	}
	// Ties go to even, both ways (the program's inputs 3 and 4).
	if bf16(1+1.0/256) != 0x3f80 || bf16(1+3.0/256) != 0x3f82 {
		t.Fatal("reference bf16 does not round ties to even")
	}
}

func TestLaunch(t *testing.T) {
	_, emutest, _ := setup(t)
	run(t, nil, emutest, "launch")
}

func TestCompileError(t *testing.T) {
	_, emutest, _ := setup(t)
	out := run(t, nil, emutest, "compile-error")
	for _, want := range []string{
		"bad.cu:3:", "undefined_name",
		"sync.cu:2:", "cudaemu: __syncthreads is not supported",
		"shared.cu:2:", "cudaemu: __shared__ memory is not supported",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in the logs:\n%s", want, out)
		}
	}
}

func TestGemm(t *testing.T) {
	_, emutest, _ := setup(t)
	out := run(t, nil, emutest, "gemm")
	if !strings.Contains(out, "cublasSgemm: matrix") {
		t.Errorf("no bounds message for an operand beyond its allocation:\n%s", out)
	}
}

func TestNCCL(t *testing.T) {
	_, emutest, _ := setup(t)
	out := mpitest.Run(t, 2*time.Minute, 2, emutest, "nccl")
	if n := strings.Count(out, "ok\n"); n != 2 || strings.Contains(out, "FAIL") {
		t.Fatalf("%d ranks passed, want 2:\n%s", n, out)
	}
}

func TestNCCLUniqueIDMismatch(t *testing.T) {
	_, emutest, _ := setup(t)
	out := mpitest.Run(t, 2*time.Minute, 2, emutest, "nccl-badid")
	if n := strings.Count(out, "ok\n"); n != 2 || strings.Contains(out, "FAIL") {
		t.Fatalf("%d ranks passed, want 2:\n%s", n, out)
	}
	if !strings.Contains(out, "unique id differs from rank 0's") {
		t.Errorf("no message naming the id mismatch:\n%s", out)
	}
}

func TestNCCLInitialisesMPI(t *testing.T) {
	_, emutest, _ := setup(t)
	run(t, nil, emutest, "nccl-self")
}

// TestDirConcurrent builds the libraries in two processes at once into a
// fresh temporary directory: both must return the same complete directory.
func TestDirConcurrent(t *testing.T) {
	tmp := t.TempDir()
	var wg sync.WaitGroup
	outs := make([]string, 2)
	errs := make([]error, 2)
	for i := range outs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), "CUDAEMU_TEST_DIR=1", "TMPDIR="+tmp)
			b, err := cmd.CombinedOutput()
			outs[i], errs[i] = strings.TrimSpace(string(b)), err
		}()
	}
	wg.Wait()
	for i := range outs {
		if errs[i] != nil {
			t.Fatalf("process %d: %v\n%s", i, errs[i], outs[i])
		}
	}
	if outs[0] != outs[1] || !strings.HasPrefix(outs[0], tmp+"/hpctrain-cudaemu-") || !complete(outs[0]) {
		t.Fatalf("directories %q and %q", outs[0], outs[1])
	}
	left, _ := filepath.Glob(filepath.Join(tmp, "hpctrain-cudaemu-build-*"))
	if len(left) != 0 {
		t.Errorf("build directories left behind: %v", left)
	}
}
