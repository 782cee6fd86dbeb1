//go:build cgo && !purego

package kernels

/*
#cgo CFLAGS: -O3
#include <string.h>
#include <stdint.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define WINO_AVX2 1
#endif
#include "isa.h"
// WFORMS(name, params, args) makes name, which runs name_body compiled for
// x86-64-v4 where hc_avx512 allows (so DNNL_MAX_CPU_ISA caps it as it
// caps oneDNN), else for x86-64-v3 or the baseline, as the CPU has them.
#define WBODY static inline __attribute__((always_inline)) void
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define WFORMS(name, params, args)                                                                 \
	__attribute__((target("arch=x86-64-v4"))) static void name##_v4 params { name##_body args; } \
	__attribute__((target_clones("arch=x86-64-v3", "default"))) static void name##_v3 params {  \
		name##_body args;                                                                  \
	}                                                                                          \
	static void name params {                                                                  \
		if (hc_avx512()) name##_v4 args;                                                   \
		else name##_v3 args;                                                               \
	}
#else
#define WFORMS(name, params, args) static void name params { name##_body args; }
#endif

// Winograd's F(2x2, 3x3) (Lavin and Gray, "Fast Algorithms for
// Convolutional Neural Networks", 2016): a 2x2 tile of outputs from a 4x4
// tile of inputs with 16 multiplications per channel pair instead of 36.
//   V = B^T d B  (input tile d, 4x4)       B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]
//   U = G g G^T  (filter g, 3x3 -> 4x4)    G   = [1 0 0; .5 .5 .5; .5 -.5 .5; 0 0 1]
//   Y = A^T (sum over channels of U.V) A   A^T = [1 1 1 0; 0 1 -1 -1]
// and for the weight gradient, summed over tiles and then transformed
// back: dg = G^T (V . A dY A^T) G. The 16 positions of a tile's transform
// are 16 independent matrix products over channels, each done for a block
// of WB tiles at once by a 4 x 16 register-blocked kernel.

enum { WB = 48 }; // tiles per block, a multiple of the kernel's 4 rows

// wino_in writes V of the tile whose 16 pixels are d[4*i+j] (C floats
// each; a row of zeros outside the image) to v[p*ldv + k], k < C.
WBODY wino_in_body(const float *const *d, long C, float *restrict v, long ldv) {
#pragma GCC ivdep
	for (long k = 0; k < C; k++) {
		float t[16];
		for (int j = 0; j < 4; j++) {
			float d0 = d[j][k], d1 = d[4 + j][k], d2 = d[8 + j][k], d3 = d[12 + j][k];
			t[j] = d0 - d2;
			t[4 + j] = d1 + d2;
			t[8 + j] = d2 - d1;
			t[12 + j] = d1 - d3;
		}
		for (int i = 0; i < 4; i++) {
			float a0 = t[4 * i], a1 = t[4 * i + 1], a2 = t[4 * i + 2], a3 = t[4 * i + 3];
			v[(4 * i) * ldv + k] = a0 - a2;
			v[(4 * i + 1) * ldv + k] = a1 + a2;
			v[(4 * i + 2) * ldv + k] = a2 - a1;
			v[(4 * i + 3) * ldv + k] = a1 - a3;
		}
	}
}
WFORMS(wino_in, (const float *const *d, long C, float *restrict v, long ldv), (d, C, v, ldv))

// wino_out writes Y = A^T M A, M[p] = m[p*ldm + k], to the 2x2 pixels
// y[0..3] (O floats each; a junk row for those outside the image).
WBODY wino_out_body(const float *restrict m, long ldm, long O, float *const *y) {
	float *y0 = y[0], *y1 = y[1], *y2 = y[2], *y3 = y[3];
#pragma GCC ivdep
	for (long k = 0; k < O; k++) {
		float r0[4], r1[4];
		for (int j = 0; j < 4; j++) {
			float m0 = m[j * ldm + k], m1 = m[(4 + j) * ldm + k], m2 = m[(8 + j) * ldm + k], m3 = m[(12 + j) * ldm + k];
			r0[j] = m0 + m1 + m2;
			r1[j] = m1 - m2 - m3;
		}
		y0[k] = r0[0] + r0[1] + r0[2];
		y1[k] = r0[1] - r0[2] - r0[3];
		y2[k] = r1[0] + r1[1] + r1[2];
		y3[k] = r1[1] - r1[2] - r1[3];
	}
}
WFORMS(wino_out, (const float *restrict m, long ldm, long O, float *const *y), (m, ldm, O, y))

// wino_dy writes Z = A dY A^T of the 2x2 gradient tile dy[0..3] (O floats
// each; zeros outside the image) to z[p*ldz + k].
WBODY wino_dy_body(const float *const *dy, long O, float *restrict z, long ldz) {
	const float *q0 = dy[0], *q1 = dy[1], *q2 = dy[2], *q3 = dy[3];
#pragma GCC ivdep
	for (long k = 0; k < O; k++) {
		float y00 = q0[k], y01 = q1[k], y10 = q2[k], y11 = q3[k];
		float r[4][2] = {{y00, y01}, {y00 + y10, y01 + y11}, {y00 - y10, y01 - y11}, {-y10, -y11}};
		for (int i = 0; i < 4; i++) {
			float a = r[i][0], b = r[i][1];
			z[(4 * i) * ldz + k] = a;
			z[(4 * i + 1) * ldz + k] = a + b;
			z[(4 * i + 2) * ldz + k] = a - b;
			z[(4 * i + 3) * ldz + k] = -b;
		}
	}
}
WFORMS(wino_dy, (const float *const *dy, long O, float *restrict z, long ldz), (dy, O, z, ldz))

// mk sets (acc 0) or adds to (acc 1) the 4 x 16 block c[r*ldc + j] the
// sum over k < kk of a[r*ars + k*aks] * b[k*ldb + j].
#ifdef WINO_AVX2
__attribute__((target("avx2,fma"))) static void mk_avx2(long kk, const float *a, long ars, long aks, const float *b, long ldb,
		float *c, long ldc, int acc) {
	__m256 c00, c01, c10, c11, c20, c21, c30, c31;
	if (acc) {
		c00 = _mm256_loadu_ps(c), c01 = _mm256_loadu_ps(c + 8);
		c10 = _mm256_loadu_ps(c + ldc), c11 = _mm256_loadu_ps(c + ldc + 8);
		c20 = _mm256_loadu_ps(c + 2 * ldc), c21 = _mm256_loadu_ps(c + 2 * ldc + 8);
		c30 = _mm256_loadu_ps(c + 3 * ldc), c31 = _mm256_loadu_ps(c + 3 * ldc + 8);
	} else {
		c00 = c01 = c10 = c11 = c20 = c21 = c30 = c31 = _mm256_setzero_ps();
	}
	for (long k = 0; k < kk; k++) {
		const float *bk = b + k * ldb, *ak = a + k * aks;
		__m256 b0 = _mm256_loadu_ps(bk), b1 = _mm256_loadu_ps(bk + 8), av;
		av = _mm256_broadcast_ss(ak);
		c00 = _mm256_fmadd_ps(av, b0, c00), c01 = _mm256_fmadd_ps(av, b1, c01);
		av = _mm256_broadcast_ss(ak + ars);
		c10 = _mm256_fmadd_ps(av, b0, c10), c11 = _mm256_fmadd_ps(av, b1, c11);
		av = _mm256_broadcast_ss(ak + 2 * ars);
		c20 = _mm256_fmadd_ps(av, b0, c20), c21 = _mm256_fmadd_ps(av, b1, c21);
		av = _mm256_broadcast_ss(ak + 3 * ars);
		c30 = _mm256_fmadd_ps(av, b0, c30), c31 = _mm256_fmadd_ps(av, b1, c31);
	}
	_mm256_storeu_ps(c, c00), _mm256_storeu_ps(c + 8, c01);
	_mm256_storeu_ps(c + ldc, c10), _mm256_storeu_ps(c + ldc + 8, c11);
	_mm256_storeu_ps(c + 2 * ldc, c20), _mm256_storeu_ps(c + 2 * ldc + 8, c21);
	_mm256_storeu_ps(c + 3 * ldc, c30), _mm256_storeu_ps(c + 3 * ldc + 8, c31);
}
#endif

static void mk_plain(long kk, const float *a, long ars, long aks, const float *b, long ldb, float *c, long ldc, int acc) {
	float t[4][16];
	for (int r = 0; r < 4; r++)
		for (int j = 0; j < 16; j++) t[r][j] = acc ? c[r * ldc + j] : 0;
	for (long k = 0; k < kk; k++)
		for (int r = 0; r < 4; r++) {
			float av = a[r * ars + k * aks];
			for (int j = 0; j < 16; j++) t[r][j] += av * b[k * ldb + j];
		}
	for (int r = 0; r < 4; r++)
		for (int j = 0; j < 16; j++) c[r * ldc + j] = t[r][j];
}

static int wino_avx2(void) {
#ifdef WINO_AVX2
	static int has = -1;
	if (has < 0) has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
	return has;
#else
	return 0;
#endif
}

// gemm_blk: c (rows x n) = or += a (rows x kk; strides ars, aks) times
// b (kk x n, row stride ldb); rows a multiple of 4, n of 16.
static void gemm_blk(long rows, long n, long kk, const float *a, long ars, long aks, const float *b, long ldb, float *c, long ldc,
		int acc) {
	int v = wino_avx2();
	for (long r = 0; r < rows; r += 4)
		for (long j = 0; j < n; j += 16) {
#ifdef WINO_AVX2
			if (v) {
				mk_avx2(kk, a + r * ars, ars, aks, b + j, ldb, c + r * ldc + j, ldc, acc);
				continue;
			}
#endif
			mk_plain(kk, a + r * ars, ars, aks, b + j, ldb, c + r * ldc + j, ldc, acc);
		}
}

// tile_px sets px to the pixel numbers in (n, H, W) of tile t's 16 input
// pixels (rows 2ty-1 .. 2ty+2, columns 2tx-1 .. 2tx+2) or, with out, its
// 2x2 output pixels; -1 outside the image.
static void tile_px(long t, long H, long W, int out, long *px) {
	long th = (H + 1) / 2, tw = (W + 1) / 2, s = t / (th * tw), r = t % (th * tw), ty = r / tw, tx = r % tw;
	int k = out ? 2 : 4, o = out ? 0 : -1;
	for (int i = 0; i < k; i++)
		for (int j = 0; j < k; j++) {
			long iy = 2 * ty + o + i, ix = 2 * tx + o + j;
			px[k * i + j] = iy >= 0 && iy < H && ix >= 0 && ix < W ? (s * H + iy) * W + ix : -1;
		}
}

// tile_in points d at tile t's 16 input pixels of x (n, H, W, C), zero
// outside.
static void tile_in(long t, long H, long W, long C, const float *x, const float *zero, const float **d) {
	long px[16];
	tile_px(t, H, W, 0, px);
	for (int p = 0; p < 16; p++) d[p] = px[p] < 0 ? zero : x + px[p] * C;
}

// tile_out points y at tile t's 2x2 output pixels of y (n, H, W, O), or
// at out (zeros to read, junk to write) outside.
static void tile_out(long t, long H, long W, long O, float *y, float *out, float **p) {
	long px[4];
	tile_px(t, H, W, 1, px);
	for (int q = 0; q < 4; q++) p[q] = px[q] < 0 ? out : y + px[q] * O;
}

// wino_conv sets y (n, H, W, O) to the 3x3, pad-1 convolution of x (n, H,
// W, C) whose transformed filters are u (16, C, O). Scratch: v 16*WB*C, m
// 16*WB*O, zero C zeros, junk O.
static void wino_conv(long n, long H, long W, long C, long O, const float *x, const float *u, float *y, float *v, float *m,
		const float *zero, float *junk) {
	long T = n * ((H + 1) / 2) * ((W + 1) / 2);
	for (long t0 = 0; t0 < T; t0 += WB) {
		long nb = T - t0 < WB ? T - t0 : WB, rows = (nb + 3) & ~3L;
		for (long b = 0; b < rows; b++) {
			const float *d[16];
			if (b < nb) tile_in(t0 + b, H, W, C, x, zero, d);
			else
				for (int p = 0; p < 16; p++) d[p] = zero;
			wino_in(d, C, v + b * C, WB * C);
		}
		for (int p = 0; p < 16; p++) gemm_blk(rows, O, C, v + p * WB * C, C, 1, u + p * C * O, O, m + p * WB * O, O, 0);
		for (long b = 0; b < nb; b++) {
			float *q[4];
			tile_out(t0 + b, H, W, O, y, junk, q);
			wino_out(m + b * O, WB * O, O, q);
		}
	}
}

// wino_g writes U = G g G^T of the 3x3 filter g (row-major) to u[p*s],
// p < 16.
static inline __attribute__((always_inline)) void wino_g(const float *g, float *u, long s) {
	float r[4][3];
	for (int j = 0; j < 3; j++) {
		r[0][j] = g[j];
		r[1][j] = 0.5f * (g[j] + g[3 + j] + g[6 + j]);
		r[2][j] = 0.5f * (g[j] - g[3 + j] + g[6 + j]);
		r[3][j] = g[6 + j];
	}
	for (int i = 0; i < 4; i++) {
		u[(4 * i) * s] = r[i][0];
		u[(4 * i + 1) * s] = 0.5f * (r[i][0] + r[i][1] + r[i][2]);
		u[(4 * i + 2) * s] = 0.5f * (r[i][0] - r[i][1] + r[i][2]);
		u[(4 * i + 3) * s] = r[i][2];
	}
}

// wino_filters sets u (16, C, O) to G g G^T of w (O, 3, 3, C), or with
// flip of the filters of the backward data pass: u (16, O, C) from the
// rotated w, input and output channels swapped. The loops run along the
// channel that u stores contiguously (C with flip, else O), which the
// compiler vectorises; every value is the same expression as
// goWinoFilters', so the bits are its bits.
WBODY wino_filters_body(long C, long O, const float *w, int flip, float *u) {
	if (flip) {
		for (long o = 0; o < O; o++) {
			const float *wo = w + o * 9 * C;
#pragma GCC ivdep
			for (long c = 0; c < C; c++) {
				float g[9];
				for (int k = 0; k < 9; k++) g[k] = wo[(8 - k) * C + c];
				wino_g(g, u + o * C + c, O * C);
			}
		}
		return;
	}
	for (long c = 0; c < C; c++) {
#pragma GCC ivdep
		for (long o = 0; o < O; o++) {
			float g[9];
			for (int k = 0; k < 9; k++) g[k] = w[o * 9 * C + k * C + c];
			wino_g(g, u + c * O + o, C * O);
		}
	}
}
WFORMS(wino_filters, (long C, long O, const float *w, int flip, float *u), (C, O, w, flip, u))

// wino_grad_out_oc sets dw (O, 3, 3, C) to G^T du G, du (16, O, C) the
// products summed over tiles, or NULL for none (no tiles). du and dw are
// both read and written along C, which the compiler vectorises.
WBODY wino_grad_out_oc_body(long C, long O, const float *du, float *dw) {
	for (long o = 0; o < O; o++) {
		float *g0 = dw + o * 9 * C;
#pragma GCC ivdep
		for (long c = 0; c < C; c++) {
			float s[4][4], r[3][4];
			for (int p = 0; p < 16; p++) s[p / 4][p % 4] = du ? du[(p * O + o) * C + c] : 0;
			for (int j = 0; j < 4; j++) {
				r[0][j] = s[0][j] + 0.5f * (s[1][j] + s[2][j]);
				r[1][j] = 0.5f * (s[1][j] - s[2][j]);
				r[2][j] = 0.5f * (s[1][j] + s[2][j]) + s[3][j];
			}
			for (int i = 0; i < 3; i++) {
				float *g = g0 + i * 3 * C + c;
				g[0] = r[i][0] + 0.5f * (r[i][1] + r[i][2]);
				g[C] = 0.5f * (r[i][1] - r[i][2]);
				g[2 * C] = 0.5f * (r[i][1] + r[i][2]) + r[i][3];
			}
		}
	}
}
WFORMS(wino_grad_out_oc, (long C, long O, const float *du, float *dw), (C, O, du, dw))

// wino_wgrad sets dw (O, 3, 3, C) to the gradient of the filters of the
// 3x3, pad-1 convolution of x (n, H, W, C) given dy (n, H, W, O): the
// products of V and Z summed over tiles in order, per position, into du
// (16, O, C), then G^T du G. Scratch: v 16*WB*C, z 16*WB*O, zero O zeros.
static void wino_wgrad(long n, long H, long W, long C, long O, const float *x, const float *dy, float *dw, float *du, float *v,
		float *z, const float *zero) {
	long T = n * ((H + 1) / 2) * ((W + 1) / 2);
	for (long t0 = 0; t0 < T; t0 += WB) {
		long nb = T - t0 < WB ? T - t0 : WB;
		for (long b = 0; b < nb; b++) {
			const float *d[16];
			float *q[4];
			tile_in(t0 + b, H, W, C, x, zero, d);
			wino_in(d, C, v + b * C, WB * C);
			tile_out(t0 + b, H, W, O, (float *)dy, (float *)zero, q);
			wino_dy((const float *const *)q, O, z + b * O, WB * O);
		}
		for (int p = 0; p < 16; p++) gemm_blk(O, C, nb, z + p * WB * O, 1, O, v + p * WB * C, C, du + p * O * C, C, t0 > 0);
	}
	wino_grad_out_oc(C, O, T > 0 ? du : NULL, dw);
}

// The bf16 Winograd (Wino16): the same F(2x2, 3x3) on bfloat16 inputs
// (x or dy), the transforms computed in float32 from them and rounded to
// bfloat16 once (to nearest even, vcvtneps2bf16), the 16 products per
// block run on AVX512-BF16's vdpbf16ps (pairs of bf16 products summed
// into float32), the output transform and the weight gradient's sums in
// float32. The products' operands are pairs along the summed dimension:
// channels for the forward and backward data passes, tiles for the
// weight gradient; the filters are laid out (16, K/2, N, 2) and the
// weight gradient's transforms (16, tiles/2, channels, 2).
#ifdef WINO_AVX2
#define W16T __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma")))

W16T static inline __m512 ld16(const uint16_t *p) {
	return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}

W16T static inline void st16(uint16_t *p, __m512 v) { _mm256_storeu_si256((__m256i *)p, (__m256i)_mm512_cvtneps_pbh(v)); }

// st16x2 stores a (16 values) and b interleaved, a[0] b[0] a[1] b[1] ...,
// rounded to bf16.
W16T static inline void st16x2(uint16_t *p, __m512 a, __m512 b) {
	const __m512i ix = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21, 5,
		20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
	__m512i ab = (__m512i)_mm512_cvtne2ps_pbh(b, a); // a in the low half
	_mm512_storeu_si512((void *)p, _mm512_permutexvar_epi16(ix, ab));
}

// in16 sets v[p] to V = B^T d B at channels k .. k+15 of the tile whose
// 16 pixels are d[4*i+j].
W16T static inline __attribute__((always_inline)) void in16(const uint16_t *const *d, long k, __m512 *v) {
	__m512 t[16];
	for (int j = 0; j < 4; j++) {
		__m512 d0 = ld16(d[j] + k), d1 = ld16(d[4 + j] + k), d2 = ld16(d[8 + j] + k), d3 = ld16(d[12 + j] + k);
		t[j] = _mm512_sub_ps(d0, d2);
		t[4 + j] = _mm512_add_ps(d1, d2);
		t[8 + j] = _mm512_sub_ps(d2, d1);
		t[12 + j] = _mm512_sub_ps(d1, d3);
	}
	for (int i = 0; i < 4; i++) {
		__m512 a0 = t[4 * i], a1 = t[4 * i + 1], a2 = t[4 * i + 2], a3 = t[4 * i + 3];
		v[4 * i] = _mm512_sub_ps(a0, a2);
		v[4 * i + 1] = _mm512_add_ps(a1, a2);
		v[4 * i + 2] = _mm512_sub_ps(a2, a1);
		v[4 * i + 3] = _mm512_sub_ps(a1, a3);
	}
}

// dy16 sets z[p] to Z = A dY A^T at channels k .. k+15 of the 2x2
// gradient tile q[0..3].
W16T static inline __attribute__((always_inline)) void dy16(const uint16_t *const *q, long k, __m512 *z) {
	__m512 y00 = ld16(q[0] + k), y01 = ld16(q[1] + k), y10 = ld16(q[2] + k), y11 = ld16(q[3] + k);
	__m512 r[4][2] = {{y00, y01}, {_mm512_add_ps(y00, y10), _mm512_add_ps(y01, y11)}, {_mm512_sub_ps(y00, y10), _mm512_sub_ps(y01, y11)},
		{_mm512_sub_ps(_mm512_setzero_ps(), y10), _mm512_sub_ps(_mm512_setzero_ps(), y11)}};
	for (int i = 0; i < 4; i++) {
		__m512 a = r[i][0], b = r[i][1];
		z[4 * i] = a;
		z[4 * i + 1] = _mm512_add_ps(a, b);
		z[4 * i + 2] = _mm512_sub_ps(a, b);
		z[4 * i + 3] = _mm512_sub_ps(_mm512_setzero_ps(), b);
	}
}

// wino_in16 writes V of one tile to v[p*ldv + k] in bf16, k < C.
W16T static void wino_in16(const uint16_t *const *d, long C, uint16_t *v, long ldv) {
	for (long k = 0; k < C; k += 16) {
		__m512 a[16];
		in16(d, k, a);
		for (int p = 0; p < 16; p++) st16(v + p * ldv + k, a[p]);
	}
}

// wino_in16x2 writes V of tiles da and db interleaved: v[p*ldv + 2k + e],
// e 0 for da and 1 for db.
W16T static void wino_in16x2(const uint16_t *const *da, const uint16_t *const *db, long C, uint16_t *v, long ldv) {
	for (long k = 0; k < C; k += 16) {
		__m512 a[16], b[16];
		in16(da, k, a);
		in16(db, k, b);
		for (int p = 0; p < 16; p++) st16x2(v + p * ldv + 2 * k, a[p], b[p]);
	}
}

// wino_dy16x2 is wino_in16x2 for the gradient tiles qa and qb.
W16T static void wino_dy16x2(const uint16_t *const *qa, const uint16_t *const *qb, long O, uint16_t *z, long ldz) {
	for (long k = 0; k < O; k += 16) {
		__m512 a[16], b[16];
		dy16(qa, k, a);
		dy16(qb, k, b);
		for (int p = 0; p < 16; p++) st16x2(z + p * ldz + 2 * k, a[p], b[p]);
	}
}

// mk16_NZ sets (acc 0) or adds to (acc 1) the 8 x 16*NZ block
// c[r*ldc + j] the sum over pairs k < kp of a's pair r*ars + k*aks (two
// bf16 in an int) times b's pairs k*ldb + j. The accumulators are named
// variables: as an array GCC keeps a copy on the stack.
#define DP(r, z) s##r##z = _mm512_dpbf16_ps(s##r##z, a##r, b##z)
#define BC(r) __m512bh a##r = (__m512bh)_mm512_set1_epi32(ak[r * ars])
#define ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#define DECL1(r) __m512 s##r##0 = acc ? _mm512_loadu_ps(c + r * ldc) : _mm512_setzero_ps();
#define DECL2(r) DECL1(r) __m512 s##r##1 = acc ? _mm512_loadu_ps(c + r * ldc + 16) : _mm512_setzero_ps();
#define STEP1(r) { BC(r); DP(r, 0); }
#define STEP2(r) { BC(r); DP(r, 0); DP(r, 1); }
#define STORE1(r) _mm512_storeu_ps(c + r * ldc, s##r##0);
#define STORE2(r) STORE1(r) _mm512_storeu_ps(c + r * ldc + 16, s##r##1);
#define MK16(NZ)                                                                                                                    \
	W16T static void mk16_##NZ(long kp, const int *a, long ars, long aks, const int *b, long ldb, float *c, long ldc, int acc) { \
		ROWS(DECL##NZ)                                                                                                              \
		for (long k = 0; k < kp; k++) {                                                                                             \
			__m512bh b0 = (__m512bh)_mm512_loadu_si512((const void *)(b + k * ldb)), b1;                                          \
			if (NZ > 1) b1 = (__m512bh)_mm512_loadu_si512((const void *)(b + k * ldb + 16));                                      \
			(void)b1;                                                                                                               \
			const int *ak = a + k * aks;                                                                                            \
			ROWS(STEP##NZ)                                                                                                          \
		}                                                                                                                           \
		ROWS(STORE##NZ)                                                                                                             \
	}
MK16(1)
MK16(2)

// gemm16: c (rows x n) = or += a times b as in mk16; rows a multiple of 8,
// n of 16.
static void gemm16(long rows, long n, long kp, const int *a, long ars, long aks, const int *b, long ldb, float *c, long ldc,
		int acc) {
	for (long r = 0; r < rows; r += 8) {
		long j = 0;
		for (; j + 32 <= n; j += 32) mk16_2(kp, a + r * ars, ars, aks, b + j, ldb, c + r * ldc + j, ldc, acc);
		if (j < n) mk16_1(kp, a + r * ars, ars, aks, b + j, ldb, c + r * ldc + j, ldc, acc);
	}
}

// tile_in16 is tile_in for bf16 x.
static void tile_in16(long t, long H, long W, long C, const uint16_t *x, const uint16_t *zero, const uint16_t **d) {
	long px[16];
	tile_px(t, H, W, 0, px);
	for (int p = 0; p < 16; p++) d[p] = px[p] < 0 ? zero : x + px[p] * C;
}

// tile_dy16 points q at tile t's 2x2 pixels of dy (n, H, W, O), zero
// outside.
static void tile_dy16(long t, long H, long W, long O, const uint16_t *dy, const uint16_t *zero, const uint16_t **q) {
	long px[4];
	tile_px(t, H, W, 1, px);
	for (int p = 0; p < 4; p++) q[p] = px[p] < 0 ? zero : dy + px[p] * O;
}

// wino_pack16 sets u16 (16, K/2, N, 2) to f (16, K, N) rounded to bf16.
W16T static void wino_pack16(long K, long N, const float *f, uint16_t *u16) {
	for (long p = 0; p < 16; p++)
		for (long k = 0; k < K; k += 2)
			for (long j = 0; j < N; j += 16)
				st16x2(u16 + ((p * K + k) * N + 2 * j), _mm512_loadu_ps(f + (p * K + k) * N + j),
					_mm512_loadu_ps(f + (p * K + k + 1) * N + j));
}

// wino_conv16 is wino_conv for bf16 x and filters u16 (16, C/2, O, 2).
// Scratch: v 16*WB*C bf16, m 16*WB*O, zero C bf16 zeros, junk O.
static void wino_conv16(long n, long H, long W, long C, long O, const uint16_t *x, const uint16_t *u, float *y, uint16_t *v,
		float *m, const uint16_t *zero, float *junk) {
	long T = n * ((H + 1) / 2) * ((W + 1) / 2);
	for (long t0 = 0; t0 < T; t0 += WB) {
		long nb = T - t0 < WB ? T - t0 : WB, rows = (nb + 7) & ~7L;
		for (long b = 0; b < rows; b++) {
			const uint16_t *d[16];
			if (b < nb) tile_in16(t0 + b, H, W, C, x, zero, d);
			else
				for (int p = 0; p < 16; p++) d[p] = zero;
			wino_in16(d, C, v + b * C, WB * C);
		}
		for (int p = 0; p < 16; p++)
			gemm16(rows, O, C / 2, (const int *)(v + p * WB * C), C / 2, 1, (const int *)(u + p * C * O), O, m + p * WB * O, O, 0);
		for (long b = 0; b < nb; b++) {
			float *q[4];
			tile_out(t0 + b, H, W, O, y, junk, q);
			wino_out(m + b * O, WB * O, O, q);
		}
	}
}


// wino_wgrad16 is wino_wgrad for bf16 x and dy: v (16, WB/2, C, 2) and z
// (16, WB/2, O, 2) bf16 scratch, zero max(C, O) bf16 zeros.
static void wino_wgrad16(long n, long H, long W, long C, long O, const uint16_t *x, const uint16_t *dy, float *dw, float *du,
		uint16_t *v, uint16_t *z, const uint16_t *zero) {
	long T = n * ((H + 1) / 2) * ((W + 1) / 2);
	for (long t0 = 0; t0 < T; t0 += WB) {
		long nb = T - t0 < WB ? T - t0 : WB, pairs = (nb + 1) / 2;
		for (long b = 0; b < 2 * pairs; b += 2) {
			const uint16_t *da[16], *db[16], *qa[4], *qb[4];
			tile_in16(t0 + b, H, W, C, x, zero, da);
			tile_dy16(t0 + b, H, W, O, dy, zero, qa);
			if (b + 1 < nb) {
				tile_in16(t0 + b + 1, H, W, C, x, zero, db);
				tile_dy16(t0 + b + 1, H, W, O, dy, zero, qb);
			} else {
				for (int p = 0; p < 16; p++) db[p] = zero;
				for (int p = 0; p < 4; p++) qb[p] = zero;
			}
			wino_in16x2(da, db, C, v + b * C, WB * C);
			wino_dy16x2(qa, qb, O, z + b * O, WB * O);
		}
		for (int p = 0; p < 16; p++)
			gemm16(O, C, pairs, (const int *)(z + p * WB * O), 1, O, (const int *)(v + p * WB * C), C, du + p * O * C, C, t0 > 0);
	}
	wino_grad_out_oc(C, O, T > 0 ? du : NULL, dw);
}


static int wino_bf16(void) {
	static int has = -1;
	if (has < 0) has = __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
	return has;
}
#else
static int wino_bf16(void) { return 0; }
static void wino_pack16(long K, long N, const float *f, uint16_t *u16) {}
static void wino_conv16(long n, long H, long W, long C, long O, const uint16_t *x, const uint16_t *u, float *y, uint16_t *v,
		float *m, const uint16_t *zero, float *junk) {}
static void wino_wgrad16(long n, long H, long W, long C, long O, const uint16_t *x, const uint16_t *dy, float *dw, float *du,
		uint16_t *v, uint16_t *z, const uint16_t *zero) {}
#endif
*/
import "C"

import "unsafe"

func winoTiles() int { return int(C.WB) }

func winoFilters(c, o int, w []float32, flip bool, u []float32) {
	C.wino_filters(C.long(c), C.long(o), fp(w), cbool(flip), fp(u))
}

func winoConv(n, h, w, c, o int, x, u, y, v, m, zero, junk []float32) {
	C.wino_conv(C.long(n), C.long(h), C.long(w), C.long(c), C.long(o), fp(x), fp(u), fp(y), fp(v), fp(m), fp(zero), fp(junk))
}

func winoWeights(n, h, w, c, o int, x, dy, dw, du, v, z, zero []float32) {
	C.wino_wgrad(C.long(n), C.long(h), C.long(w), C.long(c), C.long(o), fp(x), fp(dy), fp(dw), fp(du), fp(v), fp(z), fp(zero))
}

func winoBF16() bool { return C.wino_bf16() != 0 }

func u16p(s []uint16) *C.uint16_t { return (*C.uint16_t)(unsafe.Pointer(unsafe.SliceData(s))) }

func winoPack16(k, n int, f []float32, u []uint16) {
	C.wino_pack16(C.long(k), C.long(n), fp(f), u16p(u))
}

func winoConv16(n, h, w, c, o int, x, u []uint16, y []float32, v []uint16, m []float32, zero []uint16, junk []float32) {
	C.wino_conv16(C.long(n), C.long(h), C.long(w), C.long(c), C.long(o), u16p(x), u16p(u), fp(y), u16p(v), fp(m), u16p(zero), fp(junk))
}

func winoWeights16(n, h, w, c, o int, x, dy []uint16, dw, du []float32, v, z, zero []uint16) {
	C.wino_wgrad16(C.long(n), C.long(h), C.long(w), C.long(c), C.long(o), u16p(x), u16p(dy), fp(dw), fp(du), u16p(v), u16p(z), u16p(zero))
}
