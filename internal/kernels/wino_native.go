//go:build cgo && !purego

package kernels

/*
#cgo CFLAGS: -O3
#include <string.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define WINO_AVX2 1
#endif
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define WCLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define WCLONES
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
WCLONES static void wino_in(const float *const *d, long C, float *restrict v, long ldv) {
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

// wino_out writes Y = A^T M A, M[p] = m[p*ldm + k], to the 2x2 pixels
// y[0..3] (O floats each; a junk row for those outside the image).
WCLONES static void wino_out(const float *restrict m, long ldm, long O, float *const *y) {
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

// wino_dy writes Z = A dY A^T of the 2x2 gradient tile dy[0..3] (O floats
// each; zeros outside the image) to z[p*ldz + k].
WCLONES static void wino_dy(const float *const *dy, long O, float *restrict z, long ldz) {
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

// tile_in points d at tile t's 16 input pixels of x (n, H, W, C): rows
// 2ty-1 .. 2ty+2, columns 2tx-1 .. 2tx+2, zero outside.
static void tile_in(long t, long H, long W, long C, const float *x, const float *zero, const float **d) {
	long th = (H + 1) / 2, tw = (W + 1) / 2, s = t / (th * tw), r = t % (th * tw), ty = r / tw, tx = r % tw;
	for (int i = 0; i < 4; i++)
		for (int j = 0; j < 4; j++) {
			long iy = 2 * ty - 1 + i, ix = 2 * tx - 1 + j;
			d[4 * i + j] = iy >= 0 && iy < H && ix >= 0 && ix < W ? x + ((s * H + iy) * W + ix) * C : zero;
		}
}

// tile_out points y at tile t's 2x2 output pixels of y (n, H, W, O), or
// at out (zeros to read, junk to write) outside.
static void tile_out(long t, long H, long W, long O, float *y, float *out, float **p) {
	long th = (H + 1) / 2, tw = (W + 1) / 2, s = t / (th * tw), r = t % (th * tw), ty = r / tw, tx = r % tw;
	for (int i = 0; i < 2; i++)
		for (int j = 0; j < 2; j++) {
			long oy = 2 * ty + i, ox = 2 * tx + j;
			p[2 * i + j] = oy < H && ox < W ? y + ((s * H + oy) * W + ox) * O : out;
		}
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

// wino_filters sets u (16, C, O) to G g G^T of w (O, 3, 3, C), or with
// flip of the filters of the backward data pass: u (16, O, C) from the
// rotated w, input and output channels swapped.
static void wino_filters(long C, long O, const float *w, int flip, float *u) {
	for (long o = 0; o < O; o++)
		for (long c = 0; c < C; c++) {
			float g[3][3], r[4][3];
			for (int i = 0; i < 3; i++)
				for (int j = 0; j < 3; j++) g[i][j] = flip ? w[o * 9 * C + ((2 - i) * 3 + 2 - j) * C + c] : w[o * 9 * C + (i * 3 + j) * C + c];
			for (int j = 0; j < 3; j++) {
				r[0][j] = g[0][j];
				r[1][j] = 0.5f * (g[0][j] + g[1][j] + g[2][j]);
				r[2][j] = 0.5f * (g[0][j] - g[1][j] + g[2][j]);
				r[3][j] = g[2][j];
			}
			for (int i = 0; i < 4; i++) {
				float q[4] = {r[i][0], 0.5f * (r[i][0] + r[i][1] + r[i][2]), 0.5f * (r[i][0] - r[i][1] + r[i][2]), r[i][2]};
				for (int j = 0; j < 4; j++) {
					long p = 4 * i + j;
					if (flip) u[p * O * C + o * C + c] = q[j];
					else u[p * C * O + c * O + o] = q[j];
				}
			}
		}
}

// wino_wgrad sets dw (O, 3, 3, C) to the gradient of the filters of the
// 3x3, pad-1 convolution of x (n, H, W, C) given dy (n, H, W, O): the
// products of V and Z summed over tiles in order, per position, into du
// (16, C, O), then G^T du G. Scratch: v 16*WB*C, z 16*WB*O, zero O zeros.
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
		for (int p = 0; p < 16; p++) gemm_blk(C, O, nb, v + p * WB * C, 1, C, z + p * WB * O, O, du + p * C * O, O, t0 > 0);
	}
	for (long o = 0; o < O; o++)
		for (long c = 0; c < C; c++) {
			float s[4][4], r[3][4];
			for (int p = 0; p < 16; p++) s[p / 4][p % 4] = T > 0 ? du[p * C * O + c * O + o] : 0;
			for (int j = 0; j < 4; j++) {
				r[0][j] = s[0][j] + 0.5f * (s[1][j] + s[2][j]);
				r[1][j] = 0.5f * (s[1][j] - s[2][j]);
				r[2][j] = 0.5f * (s[1][j] + s[2][j]) + s[3][j];
			}
			for (int i = 0; i < 3; i++) {
				float *g = dw + o * 9 * C + i * 3 * C + c;
				g[0] = r[i][0] + 0.5f * (r[i][1] + r[i][2]);
				g[C] = 0.5f * (r[i][1] - r[i][2]);
				g[2 * C] = 0.5f * (r[i][1] + r[i][2]) + r[i][3];
			}
		}
}
*/
import "C"

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
