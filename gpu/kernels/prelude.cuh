// prelude.cuh: what every kernel file may use. Compiled first, once per
// module, under NVRTC and under the emulated device's shim alike.

// KLOOP(i, n) runs i over [0, n) spread over the whole grid (a grid-stride
// loop), so any launch size covers any n.
#define KLOOP(i, n)                                                        \
	for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; \
	     i < (long long)(n); i += (long long)blockDim.x * gridDim.x)

// take returns *t's index along a dimension of size d, the innermost left
// in *t, and leaves the outer ones: unravelling a flat index into
// channels-last (..., H, W, C) coordinates is one take per dimension,
// innermost first.
__device__ __forceinline__ int take(long long* t, int d) {
	int r = (int)(*t % d);
	*t /= d;
	return r;
}

// bfloat16 and IEEE half values travel as unsigned short: the conversions
// below are exact bit operations, round to nearest even, identical on the
// GPU and under the emulator.
__device__ __forceinline__ float bf16_to_float(unsigned short h) {
	return __uint_as_float(((unsigned int)h) << 16);
}

__device__ __forceinline__ unsigned short float_to_bf16(float f) {
	unsigned int u = __float_as_uint(f);
	if ((u & 0x7fffffffu) > 0x7f800000u) // NaN stays NaN (quiet)
		return (unsigned short)((u >> 16) | 0x40u);
	u += 0x7fffu + ((u >> 16) & 1u);
	return (unsigned short)(u >> 16);
}

__device__ __forceinline__ float half_to_float(unsigned short h) {
	unsigned int s = (unsigned int)(h & 0x8000u) << 16;
	unsigned int e = (h >> 10) & 0x1fu;
	unsigned int m = h & 0x3ffu;
	if (e == 0x1fu) // Inf or NaN
		return __uint_as_float(s | 0x7f800000u | (m << 13));
	if (e == 0) { // zero or subnormal: m * 2^-24
		float v = (float)m * 5.9604644775390625e-8f;
		return s ? -v : v;
	}
	return __uint_as_float(s | ((e + 112u) << 23) | (m << 13));
}

__device__ __forceinline__ unsigned short float_to_half(float f) {
	unsigned int u = __float_as_uint(f);
	unsigned int s = (u >> 16) & 0x8000u;
	unsigned int a = u & 0x7fffffffu;
	if (a > 0x7f800000u) // NaN
		return (unsigned short)(s | 0x7e00u);
	if (a >= 0x477ff000u) // rounds to beyond 65504: Inf
		return (unsigned short)(s | 0x7c00u);
	if (a < 0x38800000u) { // below 2^-14: subnormal half (or zero)
		// value / 2^-24, rounded to nearest even
		float v = __uint_as_float(a) * 16777216.0f;
		unsigned int m = (unsigned int)v;
		float r = v - (float)m;
		if (r > 0.5f || (r == 0.5f && (m & 1u)))
			m++;
		return (unsigned short)(s | m);
	}
	unsigned int e = (a >> 23) - 112u;
	unsigned int m = a & 0x7fffffu;
	unsigned int h = (e << 10) | (m >> 13);
	unsigned int rest = m & 0x1fffu;
	if (rest > 0x1000u || (rest == 0x1000u && (h & 1u)))
		h++;
	return (unsigned short)(s | h);
}
