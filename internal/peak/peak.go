package peak

import (
	"runtime"
	"slices"
	"time"
)

// Flops runs iters iterations of the peak loop, float32 fused
// multiply-adds or (bf16) bf16 dot products, on the calling thread, and
// returns the floating-point operations done (a multiply-add counts two),
// or 0 where the CPU has no such vector instruction (or without cgo).
func Flops(bf16 bool, iters int) float64 { return run(bf16, iters) }

// Rate is the calling thread's peak rate in GFLOP/s, the median of reps
// runs of about d each, or 0 where Flops is 0. The caller pins the thread
// (LockOSThread and the affinity it wants) so that the rate is one core's.
func Rate(bf16 bool, d time.Duration, reps int) float64 {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	// Size the loop: about a millisecond first, then d.
	iters := 1 << 12
	for {
		t := time.Now()
		if Flops(bf16, iters) == 0 {
			return 0
		}
		if e := time.Since(t); e > time.Millisecond {
			iters = int(float64(iters) * d.Seconds() / e.Seconds())
			break
		}
		iters *= 4
	}
	rates := make([]float64, max(reps, 1))
	for i := range rates {
		t := time.Now()
		f := Flops(bf16, iters)
		rates[i] = f / time.Since(t).Seconds() / 1e9
	}
	slices.Sort(rates)
	return rates[len(rates)/2]
}
