package cuda

import (
	"regexp"
	"testing"
	"unsafe"
)

func TestOpenDevice(t *testing.T) {
	c := openDevice(t)
	if c.Ordinal() != 0 {
		t.Errorf("ordinal %d", c.Ordinal())
	}
	if c.Name() != "cudaemu (host memory)" {
		t.Errorf("name %q", c.Name())
	}
	if ma, mi := c.ComputeCapability(); ma != 8 || mi != 0 {
		t.Errorf("compute capability %d.%d, want 8.0", ma, mi)
	}
	if c.TotalMem() <= 0 {
		t.Errorf("total memory %d", c.TotalMem())
	}
	if v, err := DriverVersion(); err != nil || v < 11000 {
		t.Errorf("driver version %d, %v", v, err)
	}
	if _, err := OpenDevice(-1); err == nil {
		t.Error("OpenDevice(-1) succeeded")
	}
}

// Host to device, device to device at an offset, memset, device to host:
// every word lands where it should, on a stream, through pinned memory too.
func TestMemoryRoundTrip(t *testing.T) {
	c := openDevice(t)
	const n = 1000
	a, err := c.Alloc(4 * n)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Free(a)
	b, err := c.Alloc(4 * n)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Free(b)
	s, err := c.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()

	src := make([]float32, n)
	for i := range src {
		src[i] = float32(i) + 0.25
	}
	must(t, MemsetD32(b, 0xdeadbeef, n, s))
	must(t, CopyHtoD(a, unsafe.Pointer(&src[0]), 4*n, s))
	must(t, CopyDtoD(b.Add(4*100), a, 4*200, s))        // b[100:300] = src[0:200]
	must(t, MemsetD32(b.Add(4*150), 0x3f800000, 10, s)) // b[150:160] = 1.0

	pinned, err := c.HostAlloc(4 * n)
	if err != nil {
		t.Fatal(err)
	}
	defer c.HostFree(pinned)
	must(t, CopyDtoH(pinned, b, 4*n, s))
	must(t, s.Sync())
	got := unsafe.Slice((*float32)(pinned), n)
	gotBits := unsafe.Slice((*uint32)(pinned), n)
	for i := range n {
		switch {
		case i >= 150 && i < 160:
			if got[i] != 1 {
				t.Fatalf("b[%d] = %v, want 1", i, got[i])
			}
		case i >= 100 && i < 300:
			if got[i] != src[i-100] {
				t.Fatalf("b[%d] = %v, want %v", i, got[i], src[i-100])
			}
		default:
			if gotBits[i] != 0xdeadbeef {
				t.Fatalf("b[%d] = %#x, want 0xdeadbeef", i, gotBits[i])
			}
		}
	}
}

func TestStreamsAndEvents(t *testing.T) {
	c := openDevice(t)
	s1, err := c.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s1.Destroy()
	s2, err := c.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Destroy()
	e, err := c.NewEvent()
	if err != nil {
		t.Fatal(err)
	}
	defer e.Destroy()
	p, err := c.Alloc(64)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Free(p)
	must(t, MemsetD32(p, 7, 16, s1))
	must(t, e.Record(s1))
	must(t, s2.Wait(e))
	var out [16]uint32
	must(t, CopyDtoH(unsafe.Pointer(&out[0]), p, 64, s2))
	must(t, s2.Sync())
	must(t, e.Sync())
	for i, v := range out {
		if v != 7 {
			t.Fatalf("word %d = %d, want 7", i, v)
		}
	}
	// The legacy default stream is a nil *Stream.
	must(t, MemsetD32(p, 9, 16, nil))
	must(t, CopyDtoH(unsafe.Pointer(&out[0]), p, 64, nil))
	must(t, (*Stream)(nil).Sync())
	if out[15] != 9 {
		t.Fatalf("default stream: got %d, want 9", out[15])
	}
	must(t, s1.Destroy())
	must(t, s1.Destroy()) // a second Destroy does nothing
}

var driverErr = regexp.MustCompile(`^cuda: [a-zA-Z]+: CUDA_ERROR_[A-Z_]+ \([0-9]+\)$`)

// A failed driver call is one *Error line naming the call and the code.
func TestDriverError(t *testing.T) {
	c := openDevice(t)
	err := c.Free(Ptr(0x10))
	e, ok := err.(*Error)
	if !ok {
		t.Fatalf("Free of a bad address: got %v, want *Error", err)
	}
	if e.Call != "cuMemFree" || !driverErr.MatchString(err.Error()) {
		t.Errorf("got %q", err)
	}
	if _, err := c.Alloc(-1); err == nil {
		t.Error("Alloc(-1) succeeded")
	}
	if err := CopyHtoD(0, nil, -4, nil); err == nil {
		t.Error("a negative copy succeeded")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
