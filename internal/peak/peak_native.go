//go:build cgo && !purego

package peak

/*
#cgo CFLAGS: -O2
#include "../kernels/isa.h"
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define PEAK_X86 1
#endif

// NACC independent accumulators: more than latency times issue width of
// the instructions measured (Zen 4 and Ice Lake: latency 4-6, one or two
// per cycle), and few enough to stay in registers.
enum { NACC = 12 };

#ifdef PEAK_X86
// Each loop returns the sum of its accumulators, so that the compiler
// keeps the work; the empty asm keeps it from hoisting the product out of
// the loop as a loop invariant.
__attribute__((target("avx512f"))) static float fma512(long iters) {
	__m512 a[NACC], x = _mm512_set1_ps(1.0f), y = _mm512_set1_ps(1e-9f);
	for (int i = 0; i < NACC; i++) a[i] = _mm512_setzero_ps();
	for (long k = 0; k < iters; k++) {
#pragma GCC unroll 12
		for (int i = 0; i < NACC; i++) a[i] = _mm512_fmadd_ps(x, y, a[i]);
		__asm__ volatile("" : "+v"(x));
	}
	float s = 0;
	for (int i = 0; i < NACC; i++) s += _mm512_reduce_add_ps(a[i]);
	return s;
}

__attribute__((target("avx2,fma"))) static float fma256(long iters) {
	__m256 a[NACC], x = _mm256_set1_ps(1.0f), y = _mm256_set1_ps(1e-9f);
	for (int i = 0; i < NACC; i++) a[i] = _mm256_setzero_ps();
	for (long k = 0; k < iters; k++) {
#pragma GCC unroll 12
		for (int i = 0; i < NACC; i++) a[i] = _mm256_fmadd_ps(x, y, a[i]);
		__asm__ volatile("" : "+x"(x));
	}
	float s = 0, t[8];
	for (int i = 0; i < NACC; i++) {
		_mm256_storeu_ps(t, a[i]);
		for (int j = 0; j < 8; j++) s += t[j];
	}
	return s;
}

__attribute__((target("avx512f,avx512bf16"))) static float dot512(long iters) {
	__m512 a[NACC];
	__m512bh x = (__m512bh)_mm512_set1_epi32(0x3f803f80), y = (__m512bh)_mm512_set1_epi32(0x30003000); // 1 and 2^-31
	for (int i = 0; i < NACC; i++) a[i] = _mm512_setzero_ps();
	for (long k = 0; k < iters; k++) {
#pragma GCC unroll 12
		for (int i = 0; i < NACC; i++) a[i] = _mm512_dpbf16_ps(a[i], x, y);
		__asm__ volatile("" : "+v"(x));
	}
	float s = 0;
	for (int i = 0; i < NACC; i++) s += _mm512_reduce_add_ps(a[i]);
	return s;
}
#endif

// peak_run runs iters iterations of the loop for bf16 (or float32) and
// returns the floating-point operations done (a multiply-add counts 2),
// or 0 where the CPU has no such instruction; *sink gets the loop's sum.
static double peak_run(int bf16, long iters, float *sink) {
#ifdef PEAK_X86
	if (bf16) {
		if (!(hc_avx512() && __builtin_cpu_supports("avx512bf16"))) return 0;
		*sink = dot512(iters);
		return (double)iters * NACC * 64; // 16 lanes, two products each
	}
	if (hc_avx512()) {
		*sink = fma512(iters);
		return (double)iters * NACC * 32;
	}
	if (hc_avx2()) {
		*sink = fma256(iters);
		return (double)iters * NACC * 16;
	}
#endif
	return 0;
}
*/
import "C"

import (
	"math"
	"sync/atomic"
)

// sink holds the last loop's result (float32 bits), so that no compiler
// can drop the work; loops on several cores at once store it, so it is
// atomic (tests read it through Sink).
var sink atomic.Uint32

// Sink is the last loop's result.
func Sink() float32 { return math.Float32frombits(sink.Load()) }

func run(bf16 bool, iters int) float64 {
	b := C.int(0)
	if bf16 {
		b = 1
	}
	var s C.float
	f := float64(C.peak_run(b, C.long(iters), &s))
	sink.Store(math.Float32bits(float32(s)))
	return f
}
