package cuda

import (
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"hpctrain/gpu/kernels"
)

// bf16Ref rounds f to the nearest bfloat16, ties to the even one, by
// comparing the distances to the two candidates (in float64, where they
// are exact); overflow goes to Inf as if the exponent were unbounded.
func bf16Ref(f float32) uint16 {
	u := math.Float32bits(f)
	sign := uint16(u>>16) & 0x8000
	if math.IsNaN(float64(f)) {
		return 0 // the caller checks NaN apart
	}
	mag := u & 0x7fffffff
	lo := uint16(mag >> 16)
	if mag&0xffff == 0 {
		return sign | lo
	}
	hi := lo + 1
	val := func(h uint16) float64 {
		if h == 0x7f80 {
			return math.Ldexp(1, 128)
		}
		return float64(math.Float32frombits(uint32(h) << 16))
	}
	x := float64(math.Float32frombits(mag))
	dlo, dhi := x-val(lo), val(hi)-x
	switch {
	case dlo < dhi:
		return sign | lo
	case dhi < dlo:
		return sign | hi
	case lo&1 == 0:
		return sign | lo
	default:
		return sign | hi
	}
}

func convertInputs() []float32 {
	bits := []uint32{
		0, 0x80000000, 0x3f800000, 0xbf800000, 0x7f800000, 0xff800000,
		0x7fc00000, 0xffc00001, 0x7f800001, // NaNs
		0x7f7fffff, 0xff7fffff, 0x7f7f7fff, 0x7f7f8000, // near the largest
		0x00000001, 0x00008000, 0x00018000, 0x807fffff, // subnormals
		0x3f808000, 0x3f818000, 0x3f808001, 0x3f817fff, // ties to even, and just off them
	}
	r := rand.New(rand.NewSource(1))
	for len(bits) < 5000 {
		bits = append(bits, r.Uint32())
	}
	x := make([]float32, len(bits))
	for i, b := range bits {
		x[i] = math.Float32frombits(b)
	}
	return x
}

func convertModule(t *testing.T, c *Context) *Module {
	t.Helper()
	m, err := c.CompileModule("convert", kernels.Source("convert.cu"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Unload() })
	return m
}

// to_bf16 from gpu/kernels, compiled by NVRTC and launched, matches
// round-to-nearest-even bit for bit.
func TestLaunchToBF16(t *testing.T) {
	t.Setenv("HPCTRAIN_KERNEL_CACHE", t.TempDir())
	c := openDevice(t)
	f, err := convertModule(t, c).Function("to_bf16")
	if err != nil {
		t.Fatal(err)
	}
	x := convertInputs()
	n := len(x)
	dx, err := c.Alloc(4 * n)
	must(t, err)
	defer c.Free(dx)
	dy, err := c.Alloc(2 * n)
	must(t, err)
	defer c.Free(dy)
	must(t, CopyHtoD(dx, unsafe.Pointer(&x[0]), 4*n, nil))
	must(t, f.Launch(Dim3{X: 7}, Dim3{X: 64}, nil, dy, dx, int64(n))) // fewer threads than n: the grid-stride loop
	y := make([]uint16, n)
	must(t, CopyDtoH(unsafe.Pointer(&y[0]), dy, 2*n, nil))
	must(t, (*Stream)(nil).Sync())
	for i, v := range x {
		if math.IsNaN(float64(v)) {
			if y[i]&0x7f80 != 0x7f80 || y[i]&0x7f == 0 || y[i]&0x8000 != uint16(math.Float32bits(v)>>16)&0x8000 {
				t.Errorf("to_bf16(%#08x) = %#04x, want a NaN of the same sign", math.Float32bits(v), y[i])
			}
			continue
		}
		if want := bf16Ref(v); y[i] != want {
			t.Errorf("to_bf16(%#08x) = %#04x, want %#04x", math.Float32bits(v), y[i], want)
		}
	}
}

// A second CompileModule of the same source finds the PTX in the cache and
// does not call NVRTC; a cached PTX that fails to load is compiled again.
func TestCompileModuleCache(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("HPCTRAIN_KERNEL_CACHE", dir)
	c := openDevice(t)
	src := kernels.Source("convert.cu")

	n0 := compiles.Load()
	m1, err := c.CompileModule("convert", src)
	must(t, err)
	defer m1.Unload()
	if got := compiles.Load() - n0; got != 1 {
		t.Fatalf("first CompileModule: %d compilations, want 1", got)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.ptx"))
	if len(files) != 1 {
		t.Fatalf("cache holds %q, want one .ptx", files)
	}
	ptx, err := os.ReadFile(files[0])
	must(t, err)

	m2, err := c.CompileModule("convert", src)
	must(t, err)
	defer m2.Unload()
	if got := compiles.Load() - n0; got != 1 {
		t.Fatalf("second CompileModule: %d compilations, want still 1 (a cache hit)", got)
	}
	if _, err := m2.Function("to_half"); err != nil {
		t.Fatal(err)
	}

	// Other options are another entry.
	m3, err := c.CompileModule("convert", src, "-DUNUSED=1")
	must(t, err)
	defer m3.Unload()
	if got := compiles.Load() - n0; got != 2 {
		t.Fatalf("other options: %d compilations, want 2", got)
	}

	// A damaged entry: compiled again and replaced.
	must(t, os.WriteFile(files[0], []byte("not ptx"), 0o644))
	m4, err := c.CompileModule("convert", src)
	must(t, err)
	defer m4.Unload()
	if got := compiles.Load() - n0; got != 3 {
		t.Fatalf("damaged entry: %d compilations, want 3", got)
	}
	again, err := os.ReadFile(files[0])
	must(t, err)
	if string(again) != string(ptx) {
		t.Errorf("damaged entry not replaced: %q", again)
	}
	if tmp, _ := filepath.Glob(filepath.Join(dir, ".*")); len(tmp) != 0 {
		t.Errorf("temporary files left: %q", tmp)
	}
}

func TestCacheKey(t *testing.T) {
	base := cacheKey("src", "compute_80", []string{"-a"}, 12, 4)
	for _, k := range []string{
		cacheKey("src2", "compute_80", []string{"-a"}, 12, 4),
		cacheKey("src", "compute_90", []string{"-a"}, 12, 4),
		cacheKey("src", "compute_80", []string{"-b"}, 12, 4),
		cacheKey("src", "compute_80", []string{"-a", ""}, 12, 4),
		cacheKey("src", "compute_80", []string{"-a"}, 12, 5),
		cacheKey("src", "compute_8", []string{"0-a"}, 12, 4),
	} {
		if k == base {
			t.Errorf("key collision %s", k)
		}
	}
	if cacheKey("src", "compute_80", []string{"-a"}, 12, 4) != base {
		t.Error("key not stable")
	}
}

// A compilation error is one line with the log's first lines; the whole
// log comes back too.
func TestCompileError(t *testing.T) {
	_, log, err := Compile("broken", brokenKernel, "compute_80")
	e, ok := err.(*Error)
	if !ok {
		t.Fatalf("got %v, want *Error", err)
	}
	if !strings.HasPrefix(e.Call, "nvrtcCompileProgram") || e.Name != "NVRTC_ERROR_COMPILATION" || e.Code != 6 {
		t.Errorf("got %#v", e)
	}
	if log == "" || e.Log == "" || !strings.Contains(log, "no_such_name") {
		t.Errorf("log %q, error log %q", log, e.Log)
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("error is not one line: %q", err)
	}
}

// Launch allocates nothing on the Go heap.
func TestLaunchAllocs(t *testing.T) {
	t.Setenv("HPCTRAIN_KERNEL_CACHE", t.TempDir())
	c := openDevice(t)
	f, err := convertModule(t, c).Function("to_half")
	must(t, err)
	const n = 4096
	dx, err := c.Alloc(4 * n)
	must(t, err)
	defer c.Free(dx)
	dy, err := c.Alloc(2 * n)
	must(t, err)
	defer c.Free(dy)
	s, err := c.NewStream()
	must(t, err)
	defer s.Destroy()
	count := int64(1000)
	allocs := testing.AllocsPerRun(50, func() {
		count++ // values the compiler cannot fold into static boxes
		if err := f.Launch(Dim3{X: 2}, Dim3{X: 32}, s, dy, dx, count); err != nil {
			t.Fatal(err)
		}
	})
	must(t, s.Sync())
	if allocs != 0 {
		t.Errorf("Launch: %v allocations per run, want 0", allocs)
	}
}

func TestLaunchBadArgument(t *testing.T) {
	t.Setenv("HPCTRAIN_KERNEL_CACHE", t.TempDir())
	c := openDevice(t)
	f, err := convertModule(t, c).Function("to_bf16")
	must(t, err)
	defer func() {
		r := recover()
		msg, _ := r.(string)
		if want := "cuda: Launch to_bf16: argument 2 is a int; want Ptr, int32, uint32, int64, uint64, float32 or float64"; msg != want {
			t.Errorf("panic %v, want %q", r, want)
		}
	}()
	f.Launch(Dim3{X: 1}, Dim3{X: 1}, nil, Ptr(0), Ptr(0), 5)
}

func TestFunctionMissing(t *testing.T) {
	t.Setenv("HPCTRAIN_KERNEL_CACHE", t.TempDir())
	c := openDevice(t)
	_, err := convertModule(t, c).Function("no_such_kernel")
	if e, ok := err.(*Error); !ok || !strings.HasPrefix(err.Error(), "cuda: cuModuleGetFunction no_such_kernel: CUDA_ERROR_") {
		t.Errorf("got %v (%T)", err, e)
	}
}

// TestCompileArch: a GPU NVRTC has is compiled for as it is; one newer than
// NVRTC (Blackwell, sm_100 and sm_120, under NVRTC 12.4) gets the newest
// architecture NVRTC has, whose PTX the driver compiles for it; one older
// than every architecture (Kepler under NVRTC 12) is an error naming the
// range. Without a list (NVRTC 11.0, 11.1) the device's own is tried.
func TestCompileArch(t *testing.T) {
	nvrtc124 := []int{50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 89, 90}
	for _, c := range []struct {
		cc   int
		want string
	}{{80, "compute_80"}, {89, "compute_89"}, {90, "compute_90"}, {100, "compute_90"}, {120, "compute_90"}, {51, "compute_50"}} {
		got, err := CompileArch(c.cc, nvrtc124, 12, 4)
		if err != nil || got != c.want {
			t.Errorf("sm_%d under NVRTC 12.4: %q, %v; want %q", c.cc, got, err, c.want)
		}
	}
	_, err := CompileArch(35, nvrtc124, 12, 4)
	want := "cuda: NVRTC 12.4 compiles for compute_50 to compute_90, and this GPU is sm_35: install an NVRTC of the CUDA release that still supports it, or use -device cpu"
	if err == nil || err.Error() != want {
		t.Errorf("sm_35 under NVRTC 12.4: %v, want %q", err, want)
	}
	if got, err := CompileArch(100, nil, 11, 1); err != nil || got != "compute_100" {
		t.Errorf("sm_100 without a list: %q, %v; want compute_100", got, err)
	}
}
