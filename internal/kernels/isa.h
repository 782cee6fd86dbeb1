// The instruction sets hpctrain's own C kernels may use, shared by the
// package's cgo preambles.
#ifndef HPCTRAIN_KERNELS_ISA_H
#define HPCTRAIN_KERNELS_ISA_H

#include <stdlib.h>
#include <strings.h>

// hc_avx512 reports whether the kernels may use AVX-512 (F, BW, CD, DQ
// and VL, x86-64-v4): the CPU has it, and DNNL_MAX_CPU_ISA, where set,
// does not hold the process below it (SSE41, AVX, AVX2, AVX2_VNNI), so
// that one variable caps oneDNN and these kernels alike, as it must for
// an AVX2 machine to be measured on an AVX-512 one.
static inline int hc_avx512(void) {
	static int v = -1;
	if (v >= 0) return v;
#if defined(__x86_64__) && defined(__GNUC__)
	const char *cap = getenv("DNNL_MAX_CPU_ISA");
	int capped = cap && *cap && strncasecmp(cap, "AVX512", 6) != 0 && strcasecmp(cap, "ALL") != 0;
	v = !capped && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
		__builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
#else
	v = 0;
#endif
	return v;
}

// hc_avx2 reports whether the CPU has AVX2 and FMA (x86-64-v3's vector
// part), which the kernels' AVX2 forms need.
static inline int hc_avx2(void) {
#if defined(__x86_64__) && defined(__GNUC__)
	return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
	return 0;
#endif
}

#endif
