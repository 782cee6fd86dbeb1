package peak

import (
	"testing"
	"time"

	"hpctrain/internal/dnnl"
)

// The loops do the work they count: the sum of the accumulators is
// iters * 12 lanes-sums of x*y, so a loop the compiler shortened, or one
// that counted lanes wrongly, gives another sum; and the rates are those
// of a real core (between 1 and 10,000 GFLOP/s).
func TestFlops(t *testing.T) {
	const iters = 1000
	f := Flops(false, iters)
	if f == 0 {
		t.Skip("no AVX2 or AVX-512 here (or no cgo): no fp32 peak loop to test")
	}
	// fp32: every lane adds 1e-9 per iteration, 12 accumulators.
	lanes := f / iters / 12 / 2
	if lanes != 8 && lanes != 16 {
		t.Fatalf("fp32: %v flops for %d iterations: %v lanes, want 8 or 16", f, iters, lanes)
	}
	if want := float32(iters * 12 * lanes * 1e-9); Sink() < 0.99*want || Sink() > 1.01*want {
		t.Errorf("fp32: sum %v, want %v", Sink(), want)
	}
	if r := Rate(false, 20*time.Millisecond, 3); !(r > 1 && r < 1e4) {
		t.Errorf("fp32 rate %v GFLOP/s", r)
	}
	fb := Flops(true, iters)
	if ok, _ := dnnl.HasBF16(); !ok {
		if fb != 0 {
			t.Errorf("bf16: %v flops on a CPU without bf16 dot products", fb)
		}
		t.Skip("no AVX512-BF16 here: the bf16 loop is not run")
	}
	if fb == 0 {
		t.Skip("bf16 dot products through AMX only (or capped by DNNL_MAX_CPU_ISA): no vdpbf16ps loop")
	}
	if fb != iters*12*64 {
		t.Fatalf("bf16: %v flops for %d iterations, want %d", fb, iters, iters*12*64)
	}
	// Each instruction adds 1 * 2^-31 twice per lane: 16 lanes.
	if want := float32(iters * 12 * 16 * 2 * 0x1p-31); Sink() < 0.99*want || Sink() > 1.01*want {
		t.Errorf("bf16: sum %v, want %v", Sink(), want)
	}
	if r := Rate(true, 20*time.Millisecond, 3); !(r > 1 && r < 1e4) {
		t.Errorf("bf16 rate %v GFLOP/s", r)
	}
}
