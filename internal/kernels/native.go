//go:build cgo && !purego

package kernels

/*
#cgo CFLAGS: -O3
#include <stdint.h>
#include <string.h>
#include "isa.h"
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define MOMENTS_AVX2 1
#endif

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define CLONES
#endif

typedef struct { long H, W, C, K, S, P, Ho, Wo; } window;

static inline void copyz(float *restrict d, const float *restrict s, long n) {
	__builtin_memcpy(d, s, n * sizeof(float));
}
static inline void zero(float *d, long n) {
	for (long j = 0; j < n; j++) d[j] = 0;
}

CLONES static void im2col(window g, long n, const float *x, float *col) {
	long C = g.C, K = g.K, kc = K * C, kkc = K * kc;
	long in = g.H * g.W * C, cols = g.Ho * g.Wo * kkc;
	for (long i = 0; i < n; i++) {
		const float *xs = x + i * in;
		float *cs = col + i * cols;
		for (long oh = 0; oh < g.Ho; oh++)
		for (long ow = 0; ow < g.Wo; ow++) {
			float *row = cs + (oh * g.Wo + ow) * kkc;
			long iw0 = ow * g.S - g.P;
			int inside = iw0 >= 0 && iw0 + K <= g.W;
			for (long kh = 0; kh < K; kh++) {
				long ih = oh * g.S - g.P + kh;
				float *seg = row + kh * kc;
				if (ih < 0 || ih >= g.H) { zero(seg, kc); continue; }
				const float *src = xs + ih * g.W * C;
				if (inside) { copyz(seg, src + iw0 * C, kc); continue; }
				for (long kw = 0; kw < K; kw++) {
					long iw = iw0 + kw;
					if (iw < 0 || iw >= g.W) zero(seg + kw * C, C);
					else copyz(seg + kw * C, src + iw * C, C);
				}
			}
		}
	}
}

CLONES static void col2im(window g, long n, const float *col, float *dx) {
	long C = g.C, K = g.K, kc = K * C, kkc = K * kc;
	long in = g.H * g.W * C, cols = g.Ho * g.Wo * kkc;
	zero(dx, n * in);
	for (long i = 0; i < n; i++) {
		float *xs = dx + i * in;
		const float *cs = col + i * cols;
		for (long oh = 0; oh < g.Ho; oh++)
		for (long ow = 0; ow < g.Wo; ow++) {
			const float *row = cs + (oh * g.Wo + ow) * kkc;
			long iw0 = ow * g.S - g.P;
			int inside = iw0 >= 0 && iw0 + K <= g.W;
			for (long kh = 0; kh < K; kh++) {
				long ih = oh * g.S - g.P + kh;
				if (ih < 0 || ih >= g.H) continue;
				float *dst = xs + ih * g.W * C;
				const float *seg = row + kh * kc;
				if (inside) {
					float *d = dst + iw0 * C;
					for (long j = 0; j < kc; j++) d[j] += seg[j];
					continue;
				}
				for (long kw = 0; kw < K; kw++) {
					long iw = iw0 + kw;
					if (iw < 0 || iw >= g.W) continue;
					float *d = dst + iw * C;
					const float *s = seg + kw * C;
					for (long j = 0; j < C; j++) d[j] += s[j];
				}
			}
		}
	}
}

// max4 is the 2x2 window: the maximum of four rows of C channels and which
// row it came from (the first on ties). The argmax is kept in a float so
// that the loop vectorises with one lane width.
static inline void max4(const float *restrict r0, const float *restrict r1, const float *restrict r2,
	const float *restrict r3, float *restrict y, uint8_t *restrict arg, long C) {
	for (long c = 0; c < C; c++) {
		float m = r0[c], a = 0, v;
		v = r1[c]; a = v > m ? 1.f : a; m = v > m ? v : m;
		v = r2[c]; a = v > m ? 2.f : a; m = v > m ? v : m;
		v = r3[c]; a = v > m ? 3.f : a; m = v > m ? v : m;
		y[c] = m;
		arg[c] = (uint8_t)(int)a;
	}
}

// route4 writes a 2x2 window's four gradient rows: dy where the maximum
// was (unless a fused ReLU cut the output to zero), zero elsewhere.
static inline void route4(const float *restrict dy, const float *restrict y, const uint8_t *restrict arg, int relu,
	float *restrict r0, float *restrict r1, float *restrict r2, float *restrict r3, long C) {
	for (long c = 0; c < C; c++) {
		float g = relu && y[c] == 0 ? 0 : dy[c];
		float a = (float)arg[c];
		r0[c] = a == 0 ? g : 0;
		r1[c] = a == 1 ? g : 0;
		r2[c] = a == 2 ? g : 0;
		r3[c] = a == 3 ? g : 0;
	}
}

CLONES static void pool_fwd(window g, long n, const float *x, const float *bias, int relu, float *y, uint8_t *arg) {
	long C = g.C, K = g.K, W = g.W;
	long in = g.H * W * C, out = g.Ho * g.Wo * C;
	for (long i = 0; i < n; i++)
	for (long oh = 0; oh < g.Ho; oh++)
	for (long ow = 0; ow < g.Wo; ow++) {
		const float *x0 = x + i * in + (oh * g.S * W + ow * g.S) * C;
		float *yr = y + i * out + (oh * g.Wo + ow) * C;
		uint8_t *ar = arg + i * out + (oh * g.Wo + ow) * C;
		if (K == 2) {
			max4(x0, x0 + C, x0 + W * C, x0 + W * C + C, yr, ar, C);
		} else {
			for (long c = 0; c < C; c++) { yr[c] = x0[c]; ar[c] = 0; }
			for (long kh = 0; kh < K; kh++)
			for (long kw = 0; kw < K; kw++) {
				const float *r = x0 + (kh * W + kw) * C;
				uint8_t win = (uint8_t)(kh * K + kw);
				for (long c = 0; c < C; c++) {
					if (r[c] > yr[c]) { yr[c] = r[c]; ar[c] = win; }
				}
			}
		}
		if (bias) for (long c = 0; c < C; c++) yr[c] += bias[c];
		if (relu) for (long c = 0; c < C; c++) yr[c] = yr[c] < 0 ? 0 : yr[c];
	}
}

CLONES static void pool_bwd(window g, long n, const float *dy, const float *y, const uint8_t *arg, int relu, float *dx) {
	long C = g.C, K = g.K, W = g.W;
	long in = g.H * W * C, out = g.Ho * g.Wo * C;
	int tiles = K == 2 && g.S == 2 && g.Ho * 2 == g.H && g.Wo * 2 == W;
	if (!tiles) zero(dx, n * in);
	for (long i = 0; i < n; i++)
	for (long oh = 0; oh < g.Ho; oh++)
	for (long ow = 0; ow < g.Wo; ow++) {
		long o = i * out + (oh * g.Wo + ow) * C;
		const float *dyr = dy + o, *yr = y + o;
		const uint8_t *ar = arg + o;
		float *x0 = dx + i * in + (oh * g.S * W + ow * g.S) * C;
		if (tiles) {
			route4(dyr, yr, ar, relu, x0, x0 + C, x0 + W * C, x0 + W * C + C, C);
			continue;
		}
		for (long c = 0; c < C; c++) {
			if (relu && yr[c] == 0) continue;
			long a = ar[c];
			x0[((a / K) * W + a % K) * C + c] += dyr[c];
		}
	}
}

CLONES static void colsums(float *dst, const float *a, long m, long n, long lda) {
	zero(dst, n);
	for (long i = 0; i < m; i++) {
		const float *r = a + i * lda;
		for (long j = 0; j < n; j++) dst[j] += r[j];
	}
}

// v8 is eight floats, unaligned: GCC's vector extension keeps the
// accumulators below in registers (AVX2 ymm, or two SSE xmm in the
// generic clone).
typedef float v8 __attribute__((vector_size(32), aligned(4)));
typedef int32_t v8i __attribute__((vector_size(32), aligned(4)));

// padded returns one sample x (H, W, C) with a zero border of P, so that
// the direct convolutions below need no bounds checks: x itself where P is
// 0 (a 1x1 projection shortcut: no copy), else its copy in xp (H+2P,
// W+2P, C), of which only the border is zeroed.
static const float *padded(window g, const float *x, float *restrict xp) {
	long C = g.C, P = g.P, Wp = g.W + 2 * P;
	if (P == 0) return x;
	zero(xp, P * Wp * C);
	for (long h = 0; h < g.H; h++) {
		float *r = xp + (h + P) * Wp * C;
		zero(r, P * C);
		__builtin_memcpy(r + P * C, x + h * g.W * C, g.W * C * sizeof(float));
		zero(r + (P + g.W) * C, P * C);
	}
	zero(xp + (P + g.H) * Wp * C, P * Wp * C);
	return xp;
}

// tap_offsets sets off[t] to tap t's offset, t = (kh*K + kw)*C + c, from
// an output pixel's first input in a padded sample (see pad).
static void tap_offsets(window g, long *off) {
	long Wp = g.W + 2 * g.P;
	for (long kh = 0, t = 0; kh < g.K; kh++)
		for (long kw = 0; kw < g.K; kw++)
			for (long c = 0; c < g.C; c++) off[t++] = (kh * Wp + kw) * g.C + c;
}

// tap_group sets tt to the nine taps from t (repeating t past the last).
static void tap_group(const long *off, long t, long kkc, long *tt) {
	for (int k = 0; k < 9; k++) tt[k] = off[t + k < kkc ? t + k : t];
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define SMALL512 1
// The AVX-512 forms of conv_small_fwd and conv_pool_fwd, and of the inner
// loops of conv_small_dw and conv_pool_dw, for O a multiple of 16 (where
// hc_avx512 allows, see small_wide): the same arithmetic in the same order
// lane by lane (so the same bits, TestISAForms), sixteen channels to a
// register, 32 at a time where O allows, and the pool done in registers,
// without conv_pool_fwd's tile. BenchmarkConv1 (the CNN's conv1, 4
// samples) on one Zen 4 core: with its pool, forward 40-48 GFLOP/s before,
// 81-82 after, weight gradient 42-45 before, 65-75 after; without, weight
// gradient 36-39 before, 94.5 after.
#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma")))

// small_wide reports whether the kernels run their AVX-512 forms for O
// output channels.
static int small_wide(long O) { return O % 16 == 0 && hc_avx512(); }

// pool16 is max4 on sixteen channels held in registers, then the bias and
// ReLU of conv_pool_fwd.
T512 static inline void pool16(__m512 r0, __m512 r1, __m512 r2, __m512 r3, const float *bias, int relu, float *y, uint8_t *arg) {
	__m512 m = r0;
	__m512i a = _mm512_setzero_si512();
	__mmask16 k = _mm512_cmp_ps_mask(r1, m, _CMP_GT_OQ);
	a = _mm512_mask_mov_epi32(a, k, _mm512_set1_epi32(1)); m = _mm512_mask_mov_ps(m, k, r1);
	k = _mm512_cmp_ps_mask(r2, m, _CMP_GT_OQ);
	a = _mm512_mask_mov_epi32(a, k, _mm512_set1_epi32(2)); m = _mm512_mask_mov_ps(m, k, r2);
	k = _mm512_cmp_ps_mask(r3, m, _CMP_GT_OQ);
	a = _mm512_mask_mov_epi32(a, k, _mm512_set1_epi32(3)); m = _mm512_mask_mov_ps(m, k, r3);
	if (bias) m = _mm512_add_ps(m, _mm512_loadu_ps(bias));
	if (relu) m = _mm512_mask_mov_ps(m, _mm512_cmp_ps_mask(m, _mm512_setzero_ps(), _CMP_LT_OQ), _mm512_setzero_ps());
	_mm512_storeu_ps(y, m);
	_mm_storeu_si128((__m128i *)arg, _mm512_cvtepi32_epi8(a));
}

// px_out512 ends fwd_px512 and fwd16_px: the four pixels' sums a, c, d
// and e (channels [j, j+16*nb)) written to y, y1, y2 and y3, or, with y1
// NULL, pooled as one window into y and arg.
T512 static inline __attribute__((always_inline)) void px_out512(__m512 a0, __m512 a1, __m512 c0, __m512 c1, __m512 d0,
		__m512 d1, __m512 e0, __m512 e1, long j, int nb, const float *bias, int relu, float *y, uint8_t *arg, float *y1,
		float *y2, float *y3) {
	if (y1) {
		_mm512_storeu_ps(y + j, a0); _mm512_storeu_ps(y1 + j, c0); _mm512_storeu_ps(y2 + j, d0); _mm512_storeu_ps(y3 + j, e0);
		if (nb == 2) {
			_mm512_storeu_ps(y + j + 16, a1); _mm512_storeu_ps(y1 + j + 16, c1);
			_mm512_storeu_ps(y2 + j + 16, d1); _mm512_storeu_ps(y3 + j + 16, e1);
		}
		return;
	}
	pool16(a0, c0, d0, e0, bias ? bias + j : 0, relu, y + j, arg + j);
	if (nb == 2) pool16(a1, c1, d1, e1, bias ? bias + j + 16 : 0, relu, y + j + 16, arg + j + 16);
}

// fwd_px512 computes four output pixels, whose first inputs are b0..b3,
// for channels [j, j+16*nb), nb 1 or 2 registers: with y1 NULL, pooled as
// one window of conv_pool_fwd512 into y and arg; else written to y, y1, y2
// and y3 (conv_small_fwd512). nb and the choice are constants where it is
// inlined.
T512 static inline __attribute__((always_inline)) void fwd_px512(const float *b0, const float *b1, const float *b2,
		const float *b3, const long *off, long kkc, const float *restrict wT, long O, long j, int nb,
		const float *bias, int relu, float *y, uint8_t *arg, float *y1, float *y2, float *y3) {
	__m512 a0 = _mm512_setzero_ps(), a1 = a0, c0 = a0, c1 = a0, d0 = a0, d1 = a0, e0 = a0, e1 = a0;
	for (long t = 0; t < kkc; t++) {
		const float *w = wT + t * O + j;
		__m512 w0 = _mm512_loadu_ps(w), w1 = nb == 2 ? _mm512_loadu_ps(w + 16) : w0;
		__m512 v = _mm512_set1_ps(b0[off[t]]);
		a0 = _mm512_fmadd_ps(v, w0, a0); if (nb == 2) a1 = _mm512_fmadd_ps(v, w1, a1);
		v = _mm512_set1_ps(b1[off[t]]);
		c0 = _mm512_fmadd_ps(v, w0, c0); if (nb == 2) c1 = _mm512_fmadd_ps(v, w1, c1);
		v = _mm512_set1_ps(b2[off[t]]);
		d0 = _mm512_fmadd_ps(v, w0, d0); if (nb == 2) d1 = _mm512_fmadd_ps(v, w1, d1);
		v = _mm512_set1_ps(b3[off[t]]);
		e0 = _mm512_fmadd_ps(v, w0, e0); if (nb == 2) e1 = _mm512_fmadd_ps(v, w1, e1);
	}
	px_out512(a0, a1, c0, c1, d0, d1, e0, e1, j, nb, bias, relu, y, arg, y1, y2, y3);
}

T512 static void conv_pool_fwd512(window g, long n, const float *x, const float *restrict wT, long O,
		const float *bias, int relu, float *y, uint8_t *arg, float *restrict xp) {
	long C = g.C, K = g.K, Wp = g.W + 2 * g.P, kkc = K * K * C, Hq = g.Ho / 2, Wq = g.Wo / 2;
	long off[32];
	tap_offsets(g, off);
	for (long i = 0; i < n; i++) {
		const float *xs = padded(g, x + i * g.H * g.W * C, xp);
		for (long ph = 0; ph < Hq; ph++)
		for (long pw = 0; pw < Wq; pw++) {
			long oh = 2 * ph, ow = 2 * pw, o = ((i * Hq + ph) * Wq + pw) * O;
			const float *b0 = xs + (oh * g.S * Wp + ow * g.S) * C, *b1 = b0 + g.S * C;
			const float *b2 = b0 + g.S * Wp * C, *b3 = b2 + g.S * C;
			long j = 0;
			for (; j + 32 <= O; j += 32) fwd_px512(b0, b1, b2, b3, off, kkc, wT, O, j, 2, bias, relu, y + o, arg + o, 0, 0, 0);
			if (j < O) fwd_px512(b0, b1, b2, b3, off, kkc, wT, O, j, 1, bias, relu, y + o, arg + o, 0, 0, 0);
		}
	}
}

// conv_small_fwd512 is conv_small_fwd four output pixels of a row at a
// time (the row's last up to three as the first of four, the other three
// copies of it written to the same place).
T512 static void conv_small_fwd512(window g, long n, const float *x, const float *restrict wT, long O, float *restrict y,
		float *restrict xp) {
	long C = g.C, K = g.K, Wp = g.W + 2 * g.P, kkc = K * K * C;
	long off[32];
	tap_offsets(g, off);
	for (long i = 0; i < n; i++) {
		const float *xs = padded(g, x + i * g.H * g.W * C, xp);
		for (long oh = 0; oh < g.Ho; oh++)
		for (long ow = 0; ow < g.Wo;) {
			long step = g.Wo - ow >= 4 ? 1 : 0; // the four pixels' spacing, in pixels
			const float *b0 = xs + (oh * g.S * Wp + ow * g.S) * C, *b1 = b0 + step * g.S * C;
			const float *b2 = b1 + step * g.S * C, *b3 = b2 + step * g.S * C;
			float *y0 = y + ((i * g.Ho + oh) * g.Wo + ow) * O, *y1 = y0 + step * O, *y2 = y1 + step * O, *y3 = y2 + step * O;
			long j = 0;
			for (; j + 32 <= O; j += 32) fwd_px512(b0, b1, b2, b3, off, kkc, wT, O, j, 2, 0, 0, y0, 0, y1, y2, y3);
			if (j < O) fwd_px512(b0, b1, b2, b3, off, kkc, wT, O, j, 1, 0, 0, y0, 0, y1, y2, y3);
			ow += step ? 4 : 1;
		}
	}
}

// dw_block512 is the inner loops of conv_pool_dw and conv_small_dw for
// one sample's taps tt (nine, from t) and channels [j, j+16*nb), nb 1 or
// 2 registers; bias: db is summed too. pooled: each pixel's gradient is
// routed from gm and af as conv_pool_dw routes it; else it is read from
// gm, the sample's dy (conv_small_dw). nb and pooled are constants where
// it is inlined.
#define DW9(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8)
#define DW_DECL(k) __m512 s##k = _mm512_setzero_ps(), u##k = s##k;
#define DW_FMA(k) { __m512 v = _mm512_set1_ps(xs[tt[k]]); s##k = _mm512_fmadd_ps(v, dv, s##k); if (nb == 2) u##k = _mm512_fmadd_ps(v, dv2, u##k); }
#define DW_ADD(d, r) _mm512_storeu_ps(d, _mm512_add_ps(_mm512_loadu_ps(d), r))
#define DW_STORE(k) if (t + k < kkc) { DW_ADD(dwT + (t + k) * O + j, s##k); if (nb == 2) DW_ADD(dwT + (t + k) * O + j + 16, u##k); }

T512 static inline __attribute__((always_inline)) void dw_block512(window g, const float *xp, const float *gm,
		const float *af, const long *tt, long t, long kkc, long O, long j, int nb, int pooled, int bias,
		float *restrict dwT, float *restrict db) {
	long C = g.C, Wp = g.W + 2 * g.P, Wq = g.Wo / 2;
	DW9(DW_DECL)
	__m512 sb = bias ? _mm512_loadu_ps(db + j) : _mm512_setzero_ps();
	__m512 sb2 = bias && nb == 2 ? _mm512_loadu_ps(db + j + 16) : _mm512_setzero_ps();
	for (long oh = 0; oh < g.Ho; oh++) {
		const float *row = xp + oh * g.S * Wp * C;
		__m512 q = _mm512_set1_ps((float)((oh & 1) * 2)), q1 = _mm512_add_ps(q, _mm512_set1_ps(1));
		const float *gr = gm + (pooled ? oh / 2 * Wq : oh * g.Wo) * O + j, *ar = pooled ? af + oh / 2 * Wq * O + j : 0;
		for (long ow = 0; ow < g.Wo; ow++) {
			__m512 dv, dv2;
			if (pooled) {
				// The pixel's gradient: gm where the maximum
				// came from it, else +0, as conv_pool_dw's mask
				// makes it.
				long p = ow / 2 * O;
				__m512 qq = ow & 1 ? q1 : q;
				dv = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(_mm512_loadu_ps(ar + p), qq, _CMP_EQ_OQ), _mm512_loadu_ps(gr + p));
				dv2 = dv;
				if (nb == 2) dv2 = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(_mm512_loadu_ps(ar + p + 16), qq, _CMP_EQ_OQ), _mm512_loadu_ps(gr + p + 16));
			} else {
				dv = _mm512_loadu_ps(gr + ow * O);
				dv2 = nb == 2 ? _mm512_loadu_ps(gr + ow * O + 16) : dv;
			}
			if (bias) { sb = _mm512_add_ps(sb, dv); if (nb == 2) sb2 = _mm512_add_ps(sb2, dv2); }
			const float *xs = row + ow * g.S * C;
			DW9(DW_FMA)
		}
	}
	DW9(DW_STORE)
	if (bias) _mm512_storeu_ps(db + j, sb);
	if (bias && nb == 2) _mm512_storeu_ps(db + j + 16, sb2);
}

// dw_blocks512 is one sample's tap group (tt, from t) of conv_pool_dw
// (af not NULL) or conv_small_dw (gm the sample's dy, af NULL), every
// channel, in dw_block512's 32- and 16-channel blocks.
T512 static void dw_blocks512(window g, const float *xp, const float *gm, const float *af, const long *tt, long t, long kkc,
		long O, int bias, float *restrict dwT, float *restrict db) {
	long j = 0;
	if (af) {
		for (; j + 32 <= O; j += 32) dw_block512(g, xp, gm, af, tt, t, kkc, O, j, 2, 1, bias, dwT, db);
		if (j < O) dw_block512(g, xp, gm, af, tt, t, kkc, O, j, 1, 1, bias, dwT, db);
		return;
	}
	for (; j + 32 <= O; j += 32) dw_block512(g, xp, gm, 0, tt, t, kkc, O, j, 2, 0, 0, dwT, 0);
	if (j < O) dw_block512(g, xp, gm, 0, tt, t, kkc, O, j, 1, 0, 0, dwT, 0);
}


// The bf16 forms of the direct kernels (Small16 on the Go side): x and dy
// rounded to bfloat16 (nearest even, as to_bf16 rounds them), the weights
// rounded once per step by the caller, the products summed in float32 by
// AVX512-BF16's vdpbf16ps, which multiplies the two bf16 halves of each
// 32-bit lane with another lane's and adds both products to a float32
// accumulator. The pairs run along the summed dimension: in the forward
// pass along each kernel row's K*C inputs, which lie side by side in the
// padded sample (so one 32-bit load gives a pair; an odd row ends with a
// weight of zero against the next value in memory); in the weight
// gradient along pairs of neighbouring output pixels of a row (a pooled
// layer's pair is one pooling window's, of which at most one pixel passes
// a channel's gradient). Against the float32 forms each output pixel
// takes ceil(K*C/2)*K products instead of K*K*C (6 for 9 taps), and each
// weight gradient half as many. The bias gradient sums the float32
// gradients, as before.
#define S16T __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma")))

// small16_ok reports whether the bf16 forms run for O output channels:
// O in 16s, AVX-512 allowed (hc_avx512) and AVX512-BF16 present.
static int small16_ok(long O) {
	static int has = -1;
	if (has < 0) has = __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw");
	return has && small_wide(O);
}

// rne16 rounds f to bfloat16 as to_bf16 does (nearest even, subnormals to
// signed zero, NaN kept quiet).
static inline uint16_t rne16(float f) {
	uint32_t u;
	__builtin_memcpy(&u, &f, 4);
	uint32_t z = (u & 0x7f800000u) == 0 ? (u & 0x80000000u) : u;
	uint16_t r = (uint16_t)((z + 0x7fffu + ((z >> 16) & 1)) >> 16);
	return (u & 0x7fffffffu) > 0x7f800000u ? (uint16_t)((u >> 16) | 0x40) : r;
}

// SLACK16 is the zeros after a padded bf16 sample: the forward's odd kernel
// rows read one value past their last, the weight gradient's pixel pairs
// up to S*C past a row's last pixel (SmallMax bounds both).
enum { SLACK16 = 2 * 32 + 2 };

// pad16 writes sample x (H, W, C) rounded to bf16 into xp (H+2P, W+2P, C)
// with a zero border, then SLACK16 zeros.
S16T static void pad16(window g, const float *x, uint16_t *xp) {
	long C = g.C, P = g.P, Wp = g.W + 2 * P, Hp = g.H + 2 * P, wc = g.W * C;
	memset(xp, 0, (Hp * Wp * C + SLACK16) * sizeof(uint16_t));
	for (long h = 0; h < g.H; h++) {
		const float *r = x + h * wc;
		uint16_t *d = xp + ((h + P) * Wp + P) * C;
		long k = 0;
		for (; k + 16 <= wc; k += 16)
			_mm256_storeu_si256((__m256i *)(d + k), (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(r + k)));
		for (; k < wc; k++) d[k] = rne16(r[k]);
	}
}

static inline uint32_t ld32(const uint16_t *p) {
	uint32_t v;
	__builtin_memcpy(&v, p, 4);
	return v;
}

// fwd16_px is fwd_px512 in bf16: four output pixels whose first inputs
// are b0..b3 (padded bf16 sample, rows ldr apart), channels [j, j+16*nb),
// w16 the weights as (K, NQ, O) pairs.
S16T static inline __attribute__((always_inline)) void fwd16_px(const uint16_t *b0, const uint16_t *b1, const uint16_t *b2,
		const uint16_t *b3, long ldr, long K, long NQ, const uint32_t *restrict w16, long O, long j, int nb,
		const float *bias, int relu, float *y, uint8_t *arg, float *y1, float *y2, float *y3) {
	__m512 a0 = _mm512_setzero_ps(), a1 = a0, c0 = a0, c1 = a0, d0 = a0, d1 = a0, e0 = a0, e1 = a0;
	for (long kh = 0; kh < K; kh++)
		for (long q = 0; q < NQ; q++) {
			const uint32_t *w = w16 + (kh * NQ + q) * O + j;
			__m512bh w0 = (__m512bh)_mm512_loadu_si512(w), w1 = nb == 2 ? (__m512bh)_mm512_loadu_si512(w + 16) : w0;
			long o = kh * ldr + 2 * q;
			__m512bh v = (__m512bh)_mm512_set1_epi32(ld32(b0 + o));
			a0 = _mm512_dpbf16_ps(a0, w0, v); if (nb == 2) a1 = _mm512_dpbf16_ps(a1, w1, v);
			v = (__m512bh)_mm512_set1_epi32(ld32(b1 + o));
			c0 = _mm512_dpbf16_ps(c0, w0, v); if (nb == 2) c1 = _mm512_dpbf16_ps(c1, w1, v);
			v = (__m512bh)_mm512_set1_epi32(ld32(b2 + o));
			d0 = _mm512_dpbf16_ps(d0, w0, v); if (nb == 2) d1 = _mm512_dpbf16_ps(d1, w1, v);
			v = (__m512bh)_mm512_set1_epi32(ld32(b3 + o));
			e0 = _mm512_dpbf16_ps(e0, w0, v); if (nb == 2) e1 = _mm512_dpbf16_ps(e1, w1, v);
		}
	px_out512(a0, a1, c0, c1, d0, d1, e0, e1, j, nb, bias, relu, y, arg, y1, y2, y3);
}

// conv16_fwd is conv_small_fwd (pooled 0) or conv_pool_fwd (pooled 1) in
// bf16, O a multiple of 16; xp holds Small16Scratch's values.
S16T static void conv16_fwd(window g, long n, const float *x, const uint32_t *restrict w16, long O, int pooled,
		const float *bias, int relu, float *y, uint8_t *arg, uint16_t *restrict xp) {
	long C = g.C, K = g.K, Wp = g.W + 2 * g.P, ldr = Wp * C, NQ = (K * C + 1) / 2;
	for (long i = 0; i < n; i++) {
		pad16(g, x + i * g.H * g.W * C, xp);
		if (pooled) {
			long Hq = g.Ho / 2, Wq = g.Wo / 2;
			for (long ph = 0; ph < Hq; ph++)
			for (long pw = 0; pw < Wq; pw++) {
				long oh = 2 * ph, ow = 2 * pw, o = ((i * Hq + ph) * Wq + pw) * O;
				const uint16_t *b0 = xp + (oh * g.S * Wp + ow * g.S) * C, *b1 = b0 + g.S * C;
				const uint16_t *b2 = b0 + g.S * ldr, *b3 = b2 + g.S * C;
				long j = 0;
				for (; j + 32 <= O; j += 32) fwd16_px(b0, b1, b2, b3, ldr, K, NQ, w16, O, j, 2, bias, relu, y + o, arg + o, 0, 0, 0);
				if (j < O) fwd16_px(b0, b1, b2, b3, ldr, K, NQ, w16, O, j, 1, bias, relu, y + o, arg + o, 0, 0, 0);
			}
			continue;
		}
		for (long oh = 0; oh < g.Ho; oh++)
		for (long ow = 0; ow < g.Wo;) {
			long step = g.Wo - ow >= 4 ? 1 : 0;
			const uint16_t *b0 = xp + (oh * g.S * Wp + ow * g.S) * C, *b1 = b0 + step * g.S * C;
			const uint16_t *b2 = b1 + step * g.S * C, *b3 = b2 + step * g.S * C;
			float *y0 = y + ((i * g.Ho + oh) * g.Wo + ow) * O, *y1 = y0 + step * O, *y2 = y1 + step * O, *y3 = y2 + step * O;
			long j = 0;
			for (; j + 32 <= O; j += 32) fwd16_px(b0, b1, b2, b3, ldr, K, NQ, w16, O, j, 2, 0, 0, y0, 0, y1, y2, y3);
			if (j < O) fwd16_px(b0, b1, b2, b3, ldr, K, NQ, w16, O, j, 1, 0, 0, y0, 0, y1, y2, y3);
			ow += step ? 4 : 1;
		}
	}
}

// DW16 runs X over the nine taps of a group.
#define DW16_DECL(k) __m512 s##k = _mm512_setzero_ps(), u##k = s##k;
#define DW16_DP(k) { __m512bh v = (__m512bh)_mm512_set1_epi32(adj ? ld32(xa + tt[k]) : \
	(uint32_t)xa[tt[k]] | (have1 ? (uint32_t)xa[tt[k] + sc] << 16 : 0)); \
	s##k = _mm512_dpbf16_ps(s##k, dv, v); if (nb == 2) u##k = _mm512_dpbf16_ps(u##k, dv2, v); }

// dw16_block is dw_block512 in bf16 for one sample: taps tt (nine, from
// t), channels [j, j+16*nb). Pooled: the gradient of each pixel pair is
// made from gx and ax (see conv16_dw); else from dyf (the sample's float32
// dy), rounded here. adj: a pixel pair's inputs lie side
// by side (S*C is 1). nb, pooled and adj are constants where inlined.
S16T static inline __attribute__((always_inline)) void dw16_block(window g, const uint16_t *xp, const uint32_t *gx,
		const uint32_t *ax, const float *dyf, const long *tt, long t, long kkc, long O, long j, int nb, int pooled,
		int adj, float *restrict dwT) {
	const __m512i ix = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21, 5,
		20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
	long C = g.C, Wp = g.W + 2 * g.P, Wq = g.Wo / 2, sc = g.S * C;
	DW9(DW16_DECL)
	for (long oh = 0; oh < g.Ho; oh++) {
		const uint16_t *row = xp + oh * g.S * Wp * C;
		__m512i q0 = _mm512_set1_epi32((oh & 1) * 32);
		for (long ow = 0; ow < g.Wo; ow += 2) {
			int have1 = ow + 1 < g.Wo;
			__m512bh dv, dv2;
			if (pooled) {
				// gx: the window's gradient in bf16 (low half), ax:
				// 16 x its argmax: shifted left by 16 x (argmax - the
				// pixel's index in the window), which is 0 for the
				// pair's first pixel, 16 for its second and 32 or more
				// (giving 0) for the other row's two.
				long p = (oh / 2 * Wq + ow / 2) * O + j;
				dv = (__m512bh)_mm512_sllv_epi32(_mm512_loadu_si512(gx + p), _mm512_sub_epi32(_mm512_loadu_si512(ax + p), q0));
				dv2 = dv;
				if (nb == 2)
					dv2 = (__m512bh)_mm512_sllv_epi32(_mm512_loadu_si512(gx + p + 16), _mm512_sub_epi32(_mm512_loadu_si512(ax + p + 16), q0));
			} else {
				const float *d0 = dyf + (oh * g.Wo + ow) * O + j, *d1 = d0 + O;
				__m512 z = _mm512_setzero_ps();
				dv = (__m512bh)_mm512_permutexvar_epi16(ix, (__m512i)_mm512_cvtne2ps_pbh(have1 ? _mm512_loadu_ps(d1) : z, _mm512_loadu_ps(d0)));
				dv2 = dv;
				if (nb == 2)
					dv2 = (__m512bh)_mm512_permutexvar_epi16(ix, (__m512i)_mm512_cvtne2ps_pbh(have1 ? _mm512_loadu_ps(d1 + 16) : z,
						_mm512_loadu_ps(d0 + 16)));
			}
			const uint16_t *xa = row + ow * sc;
			DW9(DW16_DP)
		}
	}
	DW9(DW_STORE)
}

// dw16_blocks is one sample's tap group of conv16_dw, every channel.
S16T static void dw16_blocks(window g, const uint16_t *xp, const uint32_t *gx, const uint32_t *ax, const float *dyf,
		const long *tt, long t, long kkc, long O, float *restrict dwT) {
	int adj = g.S * g.C == 1;
	long j = 0;
#define DW16_RUN(nb_, pooled_)                                                                       \
	if (adj) dw16_block(g, xp, gx, ax, dyf, tt, t, kkc, O, j, nb_, pooled_, 1, dwT);             \
	else dw16_block(g, xp, gx, ax, dyf, tt, t, kkc, O, j, nb_, pooled_, 0, dwT);
	if (gx) {
		for (; j + 32 <= O; j += 32) { DW16_RUN(2, 1) }
		if (j < O) { DW16_RUN(1, 1) }
		return;
	}
	for (; j + 32 <= O; j += 32) { DW16_RUN(2, 0) }
	if (j < O) { DW16_RUN(1, 0) }
#undef DW16_RUN
}

// conv16_dw is conv_small_dw (arg NULL: dy the (n, Ho, Wo, O) gradient) or
// conv_pool_dw (dy, y and arg the pooled output's) in bf16: dwT (K*K*C, O)
// and db (O, or NULL; pooled only, summed in float32) are set. xp holds
// Small16Scratch's values.
S16T static void conv16_dw(window g, long n, const float *x, const float *restrict dy, const float *restrict y,
		const uint8_t *restrict arg, int relu, long O, float *restrict dwT, float *restrict db, uint16_t *restrict xp) {
	long C = g.C, K = g.K, Wp = g.W + 2 * g.P, kkc = K * K * C;
	long out = arg ? (g.Ho / 2) * (g.Wo / 2) * O : g.Ho * g.Wo * O;
	// Pooled, per sample: gx the gradient each window passes (zero where
	// a fused ReLU cut it) in bf16, in the low half of 32 bits; ax 16 x
	// its argmax (dw16_block makes a pixel pair's gradient of the two).
	uint32_t *gx = (uint32_t *)(xp + (((g.H + 2 * g.P) * Wp * C + SLACK16 + 1) & ~1L)), *ax = gx + out;
	long off[32];
	tap_offsets(g, off);
	zero(dwT, kkc * O);
	if (db) zero(db, O);
	for (long i = 0; i < n; i++) {
		pad16(g, x + i * g.H * g.W * C, xp);
		const float *dys = dy + i * out;
		if (arg) {
			const float *ys = y + i * out;
			const uint8_t *as = arg + i * out;
			for (long k = 0; k < out; k += O)
				for (long c = 0; c < O; c += 16) {
					__m512 v = _mm512_loadu_ps(dys + k + c);
					if (relu) v = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(_mm512_loadu_ps(ys + k + c), _mm512_setzero_ps(), _CMP_NEQ_UQ), v);
					_mm512_storeu_si512(gx + k + c, _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(v)));
					_mm512_storeu_si512(ax + k + c, _mm512_slli_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(as + k + c))), 4));
					if (db) _mm512_storeu_ps(db + c, _mm512_add_ps(_mm512_loadu_ps(db + c), v));
				}
		}
		for (long t = 0; t < kkc; t += 9) {
			long tt[9];
			tap_group(off, t, kkc, tt);
			dw16_blocks(g, xp, arg ? gx : 0, ax, dys, tt, t, kkc, O, dwT);
		}
	}
}
#else
static int small_wide(long O) { return 0; }
static int small16_ok(long O) { return 0; }
static void conv16_fwd(window g, long n, const float *x, const uint32_t *w16, long O, int pooled, const float *bias,
		int relu, float *y, uint8_t *arg, uint16_t *xp) {}
static void conv16_dw(window g, long n, const float *x, const float *dy, const float *y, const uint8_t *arg, int relu,
		long O, float *dwT, float *db, uint16_t *xp) {}
#endif

// conv_small_fwd is a direct convolution for few input channels
// (K*K*C <= 32) and O a multiple of 8: y (n, Ho, Wo, O) = conv(x, W),
// no bias, with wT the weights transposed to (K*K*C, O). For each output
// pixel, 8 channels at a time are accumulated in registers over the taps.
CLONES static void conv_small_fwd(window g, long n, const float *x, const float *restrict wT, long O, float *restrict y, float *restrict xp) {
#ifdef SMALL512
	if (small_wide(O)) {
		conv_small_fwd512(g, n, x, wT, O, y, xp);
		return;
	}
#endif
	long C = g.C, K = g.K, Wp = g.W + 2 * g.P, kkc = K * K * C;
	long off[32];
	tap_offsets(g, off);
	for (long i = 0; i < n; i++) {
		const float *xs = padded(g, x + i * g.H * g.W * C, xp);
		float *ys = y + i * g.Ho * g.Wo * O;
		for (long oh = 0; oh < g.Ho; oh++)
		for (long ow = 0; ow < g.Wo; ow++) {
			const float *base = xs + (oh * g.S * Wp + ow * g.S) * C;
			v8 *yr = (v8 *)(ys + (oh * g.Wo + ow) * O);
			long j = 0;
			for (; j + 32 <= O; j += 32) {
				v8 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
				for (long t = 0; t < kkc; t++) {
					float v = base[off[t]];
					const v8 *w = (const v8 *)(wT + t * O + j);
					a0 += v * w[0]; a1 += v * w[1]; a2 += v * w[2]; a3 += v * w[3];
				}
				yr[j / 8] = a0; yr[j / 8 + 1] = a1; yr[j / 8 + 2] = a2; yr[j / 8 + 3] = a3;
			}
			for (; j < O; j += 8) {
				v8 a0 = {0};
				for (long t = 0; t < kkc; t++) a0 += base[off[t]] * *(const v8 *)(wT + t * O + j);
				yr[j / 8] = a0;
			}
		}
	}
}

// conv_small_dw is conv_small_fwd's weight gradient: dwT (K*K*C, O) =
// sum over the n samples' pixels of x(tap) dy(pixel). Three taps by 32
// channels at a time are accumulated in registers over the pixels.
CLONES static void conv_small_dw(window g, long n, const float *x, const float *restrict dy, long O, float *restrict dwT, float *restrict xp) {
	long C = g.C, K = g.K, Wp = g.W + 2 * g.P, kkc = K * K * C, P = g.Ho * g.Wo;
	long off[32];
	tap_offsets(g, off);
	zero(dwT, kkc * O);
#ifdef SMALL512
	int w512 = small_wide(O);
#endif
	for (long i = 0; i < n; i++) {
		const float *xs = padded(g, x + i * g.H * g.W * C, xp);
		const float *ds = dy + i * P * O;
#ifdef SMALL512
		if (w512) {
			for (long t = 0; t < kkc; t += 9) {
				long tt[9];
				tap_group(off, t, kkc, tt);
				dw_blocks512(g, xs, ds, 0, tt, t, kkc, O, 0, dwT, 0);
			}
			continue;
		}
#endif
		long t = 0;
		for (; t < kkc; t += 3) {
			long t1 = t + 1 < kkc ? t + 1 : t, t2 = t + 2 < kkc ? t + 2 : t;
			for (long j = 0; j < O; j += 8) {
				v8 a = {0}, b = {0}, c = {0};
				const float *d0 = ds + j;
				for (long oh = 0; oh < g.Ho; oh++) {
					const float *row = xs + oh * g.S * Wp * C;
					const float *x0 = row + off[t], *x1 = row + off[t1], *x2 = row + off[t2];
					for (long ow = 0; ow < g.Wo; ow++, d0 += O) {
						v8 d = *(const v8 *)d0;
						long q = ow * g.S * C;
						a += x0[q] * d; b += x1[q] * d; c += x2[q] * d;
					}
				}
				*(v8 *)(dwT + t * O + j) += a;
				if (t1 != t) *(v8 *)(dwT + t1 * O + j) += b;
				if (t2 != t) *(v8 *)(dwT + t2 * O + j) += c;
			}
		}
	}
}


// conv_pool_fwd is conv_small_fwd followed by pool_fwd's 2x2, stride-2
// max-pool (bias and ReLU after the pool), one pooling window at a time:
// the window's four output pixels are computed into tile (4*O values, in
// L1) with each weight vector loaded once for all four, then pooled as
// pool_fwd pools. y and arg are the pooled output, (n, Ho/2, Wo/2, O);
// Ho and Wo are even. The same bits as the two kernels in turn.
CLONES static void conv_pool_fwd(window g, long n, const float *x, const float *restrict wT, long O,
		const float *bias, int relu, float *y, uint8_t *arg, float *restrict xp, float *restrict tile) {
#ifdef SMALL512
	if (small_wide(O)) {
		conv_pool_fwd512(g, n, x, wT, O, bias, relu, y, arg, xp);
		return;
	}
#endif
	long C = g.C, K = g.K, Wp = g.W + 2 * g.P, kkc = K * K * C, Hq = g.Ho / 2, Wq = g.Wo / 2;
	long off[32];
	tap_offsets(g, off);
	float *t0 = tile, *t1 = tile + O, *t2 = tile + 2 * O, *t3 = tile + 3 * O;
	for (long i = 0; i < n; i++) {
		const float *xs = padded(g, x + i * g.H * g.W * C, xp);
		for (long ph = 0; ph < Hq; ph++)
		for (long pw = 0; pw < Wq; pw++) {
			long oh = 2 * ph, ow = 2 * pw;
			const float *b0 = xs + (oh * g.S * Wp + ow * g.S) * C, *b1 = b0 + g.S * C;
			const float *b2 = b0 + g.S * Wp * C, *b3 = b2 + g.S * C;
			long j = 0;
			for (; j + 16 <= O; j += 16) {
				v8 a0 = {0}, a1 = {0}, c0 = {0}, c1 = {0}, d0 = {0}, d1 = {0}, e0 = {0}, e1 = {0};
				for (long t = 0; t < kkc; t++) {
					const v8 *w = (const v8 *)(wT + t * O + j);
					v8 w0 = w[0], w1 = w[1];
					float v = b0[off[t]];
					a0 += v * w0; a1 += v * w1;
					v = b1[off[t]];
					c0 += v * w0; c1 += v * w1;
					v = b2[off[t]];
					d0 += v * w0; d1 += v * w1;
					v = b3[off[t]];
					e0 += v * w0; e1 += v * w1;
				}
				*(v8 *)(t0 + j) = a0; *(v8 *)(t0 + j + 8) = a1;
				*(v8 *)(t1 + j) = c0; *(v8 *)(t1 + j + 8) = c1;
				*(v8 *)(t2 + j) = d0; *(v8 *)(t2 + j + 8) = d1;
				*(v8 *)(t3 + j) = e0; *(v8 *)(t3 + j + 8) = e1;
			}
			for (; j < O; j += 8) {
				v8 a0 = {0}, c0 = {0}, d0 = {0}, e0 = {0};
				for (long t = 0; t < kkc; t++) {
					v8 w0 = *(const v8 *)(wT + t * O + j);
					a0 += b0[off[t]] * w0; c0 += b1[off[t]] * w0;
					d0 += b2[off[t]] * w0; e0 += b3[off[t]] * w0;
				}
				*(v8 *)(t0 + j) = a0; *(v8 *)(t1 + j) = c0;
				*(v8 *)(t2 + j) = d0; *(v8 *)(t3 + j) = e0;
			}
			long o = ((i * Hq + ph) * Wq + pw) * O;
			float *yr = y + o;
			max4(t0, t1, t2, t3, yr, arg + o, O);
			if (bias) for (long c = 0; c < O; c++) yr[c] += bias[c];
			if (relu) for (long c = 0; c < O; c++) yr[c] = yr[c] < 0 ? 0 : yr[c];
		}
	}
}

// conv_pool_dw is pool_bwd's 2x2, stride-2 routing of the pooled gradient
// dy, then conv_small_dw and the bias's column sums over the routed
// gradient, without writing it: each output pixel's gradient is made in
// registers from dy, y and arg as it is used. dwT (K*K*C, O) and db (O,
// or NULL) are set. Per tap and channel the pixels are summed in the
// order conv_small_dw and colsums sum them, so the bits are theirs. gm and
// af hold PooledOut values each.
CLONES static void conv_pool_dw(window g, long n, const float *x, const float *restrict dy, const float *restrict y,
		const uint8_t *restrict arg, int relu, long O, float *restrict dwT, float *restrict db, float *restrict xp,
		float *restrict gm, float *restrict af) {
	long C = g.C, K = g.K, Wp = g.W + 2 * g.P, kkc = K * K * C, Wq = g.Wo / 2, out = (g.Ho / 2) * Wq * O;
#ifdef SMALL512
	int w512 = small_wide(O);
#endif
	long off[32];
	tap_offsets(g, off);
	zero(dwT, kkc * O);
	if (db) zero(db, O);
	for (long i = 0; i < n; i++) {
		const float *xs = padded(g, x + i * g.H * g.W * C, xp);
		// Per pooled output, the gradient it passes (zero where a fused
		// ReLU cut it) and its argmax as a float, so that the loop
		// below compares and masks in one lane width.
		const float *dys = dy + i * out, *ys = y + i * out;
		const uint8_t *as = arg + i * out;
		for (long k = 0; k < out; k++) {
			gm[k] = relu && ys[k] == 0 ? 0 : dys[k];
			af[k] = (float)as[k];
		}
		for (long t = 0; t < kkc; t += 9) {
			long tt[9];
			tap_group(off, t, kkc, tt);
			int bias = db && t == 0;
#ifdef SMALL512
			if (w512) {
				dw_blocks512(g, xs, gm, af, tt, t, kkc, O, bias, dwT, db);
				continue;
			}
#endif
			for (long j = 0; j < O; j += 8) {
				v8 s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0}, s4 = {0}, s5 = {0}, s6 = {0}, s7 = {0}, s8 = {0};
				v8 sb = {0};
				if (bias) sb = *(const v8 *)(db + j);
				for (long oh = 0; oh < g.Ho; oh++) {
					const float *row = xs + oh * g.S * Wp * C;
					float q0 = (float)((oh & 1) * 2);
					for (long ow = 0; ow < g.Wo; ow++) {
						long p = (oh / 2 * Wq + ow / 2) * O + j;
						// The pixel's gradient: gm where the maximum
						// came from it, else +0 (a mask on the bits).
						v8i keep = *(const v8 *)(af + p) == q0 + (float)(ow & 1);
						v8 dv = (v8)(*(const v8i *)(gm + p) & keep);
						if (bias) sb += dv;
						const float *xs = row + ow * g.S * C;
						s0 += xs[tt[0]] * dv; s1 += xs[tt[1]] * dv; s2 += xs[tt[2]] * dv;
						s3 += xs[tt[3]] * dv; s4 += xs[tt[4]] * dv; s5 += xs[tt[5]] * dv;
						s6 += xs[tt[6]] * dv; s7 += xs[tt[7]] * dv; s8 += xs[tt[8]] * dv;
					}
				}
				v8 s[9] = {s0, s1, s2, s3, s4, s5, s6, s7, s8};
				for (int k = 0; k < 9 && t + k < kkc; k++) *(v8 *)(dwT + (t + k) * O + j) += s[k];
				if (bias) *(v8 *)(db + j) = sb;
			}
		}
	}
}

CLONES static void relu_fwd(const float *x, float *y, long n) {
	for (long i = 0; i < n; i++) y[i] = x[i] < 0 ? 0 : x[i];
}

CLONES static void relu_bwd(const float *y, const float *dy, float *dx, long n) {
	for (long i = 0; i < n; i++) dx[i] = y[i] > 0 ? dy[i] : 0;
}

// Batch normalisation's channel kernels and the residual add, in the
// order of operations of their Go twins (no fused multiply-add), so that
// both give the same bits. The loops run over the channels of a row, so
// they vectorise across channels and keep each channel's row order.
CLONES __attribute__((optimize("fp-contract=off")))
static void chan_moments_plain(const float *a, const float *b, long m, long c, const float *restrict mu,
		double *restrict sa, double *restrict sab) {
	for (long i = 0; i < m; i++) {
		const float *ar = a + i * c, *br = b + i * c;
		for (long j = 0; j < c; j++) {
			double av = ar[j];
			sa[j] += av;
			sab[j] += av * ((double)br[j] - (double)mu[j]);
		}
	}
}

CLONES __attribute__((optimize("fp-contract=off")))
static void chan_norm(float *y, const float *x, long m, long c, const float *restrict mu,
		const float *restrict s, const float *restrict t) {
	for (long i = 0; i < m; i++) {
		const float *xr = x + i * c;
		float *yr = y + i * c;
		for (long j = 0; j < c; j++) yr[j] = (xr[j] - mu[j]) * s[j] + t[j];
	}
}

CLONES __attribute__((optimize("fp-contract=off")))
static void chan_norm_bwd(float *dx, const float *dy, const float *x, long m, long c, const float *restrict mu,
		const float *restrict a, const float *restrict b, const float *restrict k) {
	for (long i = 0; i < m; i++) {
		const float *xr = x + i * c, *dyr = dy + i * c;
		float *dxr = dx + i * c;
		for (long j = 0; j < c; j++) dxr[j] = a[j] * dyr[j] + b[j] * (xr[j] - mu[j]) + k[j];
	}
}

CLONES static void add(float *dst, const float *a, const float *b, long n) {
	for (long i = 0; i < n; i++) dst[i] = a[i] + b[i];
}

// The same with the ReLU after them fused in: forward applies it to the
// result; backward passes dy only where batch norm's output,
// (x - mu)*s + t recomputed in the forward's order of operations, was
// positive, so that it gives the bits of ReLU's backward and then batch
// norm's without the pass over memory between them.
CLONES __attribute__((optimize("fp-contract=off")))
static void chan_norm_relu(float *y, const float *x, long m, long c, const float *restrict mu,
		const float *restrict s, const float *restrict t) {
	for (long i = 0; i < m; i++) {
		const float *xr = x + i * c;
		float *yr = y + i * c;
		for (long j = 0; j < c; j++) {
			float v = (xr[j] - mu[j]) * s[j] + t[j];
			yr[j] = v < 0 ? 0 : v;
		}
	}
}

// masked is a, or +0 where batch norm's output (x - mu)*s + t was not
// positive: integer masking, which vectorises where a select did not.
static inline __attribute__((always_inline, optimize("fp-contract=off"))) float
masked(float a, float x, float mu, float s, float t) {
	float v = (x - mu) * s + t, d;
	uint32_t u;
	memcpy(&u, &a, 4);
	u &= -(uint32_t)(v > 0);
	memcpy(&d, &u, 4);
	return d;
}

CLONES __attribute__((optimize("fp-contract=off")))
static void chan_moments_relu_plain(const float *a, const float *b, long m, long c, const float *restrict mu,
		const float *restrict s, const float *restrict t, double *restrict sa, double *restrict sab) {
	for (long i = 0; i < m; i++) {
		const float *ar = a + i * c, *br = b + i * c;
		for (long j = 0; j < c; j++) {
			double av = masked(ar[j], br[j], mu[j], s[j], t[j]);
			sa[j] += av;
			sab[j] += av * ((double)br[j] - (double)mu[j]);
		}
	}
}

CLONES __attribute__((optimize("fp-contract=off")))
static void chan_norm_bwd_relu(float *dx, const float *dy, const float *x, long m, long c, const float *restrict mu,
		const float *restrict a, const float *restrict b, const float *restrict k,
		const float *restrict s, const float *restrict t) {
	for (long i = 0; i < m; i++) {
		const float *xr = x + i * c, *dyr = dy + i * c;
		float *dxr = dx + i * c;
		for (long j = 0; j < c; j++) {
			float v = (xr[j] - mu[j]) * s[j] + t[j], d0 = dyr[j];
			float d = v > 0 ? d0 : 0.0f;
			dxr[j] = a[j] * d + b[j] * (xr[j] - mu[j]) + k[j];
		}
	}
}

CLONES static void add_relu(float *dst, const float *a, const float *b, long n) {
	for (long i = 0; i < n; i++) {
		float v = a[i] + b[i];
		dst[i] = v < 0 ? 0 : v;
	}
}

// Batch norm's moments convert every value to double before adding it,
// and with the sums in memory (the plain loops above, c not known) each row
// waits for the previous row's stores. The AVX2 versions below keep a block
// of 16 channels' sums in registers over all the rows, and convert a row of
// x once when a and b are the same buffer (forward). BenchmarkChanMoments,
// batch 64 at resnet8's widths, one Zen 4 core: forward 10-16 GB/s before,
// 21-24 after; backward with the ReLU 16-22 before, 22-24 after. That is
// not the memory's limit (one core sums floats from L3 at about 100 GB/s
// here) but the floating-point pipes': each 8 values take 8-13 double
// operations (conversions, the shift, products, two sums). Forward's sums of
// squares (shift +0) fuse the product into the sum, bits unchanged (see
// moments16): 22-23 GB/s before, 30-40 after. Each channel still adds its
// rows in order and every result is the plain loop's, bit for bit
// (TestChannelKernels and TestChanMomentsSquares compare with the Go twins).
#ifdef MOMENTS_AVX2
// sums8 adds 8 channels of one row to s (sums of a) and t (sums of
// a*(b-mu)), two halves of 4: av the row's a, xb its b, u mu (as doubles).
__attribute__((target("avx2"), always_inline)) static inline void
sums8(__m256 av, __m256 xb, const __m256d u[2], __m256d s[2], __m256d t[2]) {
	__m256d a0 = _mm256_cvtps_pd(_mm256_castps256_ps128(av)), a1 = _mm256_cvtps_pd(_mm256_extractf128_ps(av, 1));
	__m256d b0 = _mm256_cvtps_pd(_mm256_castps256_ps128(xb)), b1 = _mm256_cvtps_pd(_mm256_extractf128_ps(xb, 1));
	s[0] = _mm256_add_pd(s[0], a0);
	s[1] = _mm256_add_pd(s[1], a1);
	t[0] = _mm256_add_pd(t[0], _mm256_mul_pd(a0, _mm256_sub_pd(b0, u[0])));
	t[1] = _mm256_add_pd(t[1], _mm256_mul_pd(a1, _mm256_sub_pd(b1, u[1])));
}

// Channels [j0, j0+16) of the moments, over all m rows; with s and t non-NULL
// (the ReLU variant), a is taken as +0 wherever (b - mu)*s + t is not
// positive, computed in float as the plain loop computes it.
__attribute__((target("avx2,fma"), optimize("fp-contract=off"))) static void
moments16(const float *a, const float *b, long m, long c, long j0, const float *mu,
		const float *sc, const float *sh, double *sa, double *sab, int sq) {
	__m256d s[2][2], t[2][2], u[2][2];
	__m256 mf[2], sf[2], tf[2], zero = _mm256_setzero_ps();
	for (int h = 0; h < 2; h++) {
		const long j = j0 + 8 * h;
		for (int q = 0; q < 2; q++) {
			s[h][q] = _mm256_loadu_pd(sa + j + 4 * q);
			t[h][q] = _mm256_loadu_pd(sab + j + 4 * q);
			u[h][q] = _mm256_cvtps_pd(_mm_loadu_ps(mu + j + 4 * q));
		}
		mf[h] = _mm256_loadu_ps(mu + j);
		if (sc) sf[h] = _mm256_loadu_ps(sc + j), tf[h] = _mm256_loadu_ps(sh + j);
	}
	if (sc) {
		for (long i = 0; i < m; i++) {
			const float *ar = a + i * c + j0, *br = b + i * c + j0;
			for (int h = 0; h < 2; h++) {
				__m256 xb = _mm256_loadu_ps(br + 8 * h);
				__m256 v = _mm256_add_ps(_mm256_mul_ps(_mm256_sub_ps(xb, mf[h]), sf[h]), tf[h]);
				__m256 av = _mm256_and_ps(_mm256_loadu_ps(ar + 8 * h), _mm256_cmp_ps(v, zero, _CMP_GT_OQ));
				sums8(av, xb, u[h], s[h], t[h]);
			}
		}
	} else if (a == b && sq) {
		// Forward's sums of squares (mu is +0): x - 0 is x, and x*x of
		// two floats is exact in double, so one rounded fused multiply-add
		// gives the separate multiply and add's bits: besides the two
		// conversions, four operations per 8 values instead of eight.
		for (long i = 0; i < m; i++) {
			const float *br = b + i * c + j0;
			for (int h = 0; h < 2; h++) {
				__m256 xv = _mm256_loadu_ps(br + 8 * h);
				__m256d x0 = _mm256_cvtps_pd(_mm256_castps256_ps128(xv)), x1 = _mm256_cvtps_pd(_mm256_extractf128_ps(xv, 1));
				s[h][0] = _mm256_add_pd(s[h][0], x0);
				s[h][1] = _mm256_add_pd(s[h][1], x1);
				t[h][0] = _mm256_fmadd_pd(x0, x0, t[h][0]);
				t[h][1] = _mm256_fmadd_pd(x1, x1, t[h][1]);
			}
		}
	} else if (a == b) {
		for (long i = 0; i < m; i++) {
			const float *br = b + i * c + j0;
			// One load and, once inlined, one conversion per value.
			__m256 x0 = _mm256_loadu_ps(br), x1 = _mm256_loadu_ps(br + 8);
			sums8(x0, x0, u[0], s[0], t[0]);
			sums8(x1, x1, u[1], s[1], t[1]);
		}
	} else {
		for (long i = 0; i < m; i++) {
			const float *ar = a + i * c + j0, *br = b + i * c + j0;
			sums8(_mm256_loadu_ps(ar), _mm256_loadu_ps(br), u[0], s[0], t[0]);
			sums8(_mm256_loadu_ps(ar + 8), _mm256_loadu_ps(br + 8), u[1], s[1], t[1]);
		}
	}
	for (int h = 0; h < 2; h++)
		for (int q = 0; q < 2; q++) {
			_mm256_storeu_pd(sa + j0 + 8 * h + 4 * q, s[h][q]);
			_mm256_storeu_pd(sab + j0 + 8 * h + 4 * q, t[h][q]);
		}
}

// zero16 reports whether the 16 values at mu are all +0, bit for bit (with
// a shift of -0, x = -0 would give x*(x - mu) = -0 where x*x is +0).
static int zero16(const float *mu) {
	uint32_t any = 0;
	for (int j = 0; j < 16; j++) {
		uint32_t v;
		__builtin_memcpy(&v, mu + j, 4);
		any |= v;
	}
	return any == 0;
}

#endif

// The moments: blocks of 16 channels by moments16 where the CPU has AVX2,
// the rest (and everything elsewhere) by the plain loops.
__attribute__((optimize("fp-contract=off"))) static void chan_moments_any(const float *a, const float *b, long m, long c, const float *mu,
		const float *s, const float *t, double *sa, double *sab) {
	long j0 = 0;
#ifdef MOMENTS_AVX2
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
		for (; j0 + 16 <= c; j0 += 16) moments16(a, b, m, c, j0, mu, s, t, sa, sab, a == b && !s && zero16(mu + j0));
#endif
	if (j0 == 0) {
		if (s) chan_moments_relu_plain(a, b, m, c, mu, s, t, sa, sab);
		else chan_moments_plain(a, b, m, c, mu, sa, sab);
		return;
	}
	// The channels after the last block of 16 (c not a multiple of 16).
	for (long i = 0; i < m && j0 < c; i++) {
		const float *ar = a + i * c, *br = b + i * c;
		for (long j = j0; j < c; j++) {
			double av = s ? masked(ar[j], br[j], mu[j], s[j], t[j]) : ar[j];
			sa[j] += av;
			sab[j] += av * ((double)br[j] - (double)mu[j]);
		}
	}
}
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// Native reports whether the C kernels are in use (false under purego).
const Native = true

// ISA names the widest instruction set the C kernels use for float32
// work on this CPU: "avx512" (x86-64-v4), "avx2" (x86-64-v3) or
// "baseline". DNNL_MAX_CPU_ISA, where set below AVX-512, holds them to
// AVX2 as it holds oneDNN (the bf16 kernels, which need AVX512-BF16, are
// refused under such a cap anyway).
func ISA() string {
	switch {
	case C.hc_avx512() != 0:
		return "avx512"
	case C.hc_avx2() != 0:
		return "avx2"
	}
	return "baseline"
}

func (g Window) c() C.window {
	return C.window{C.long(g.H), C.long(g.W), C.long(g.C), C.long(g.K), C.long(g.S), C.long(g.P), C.long(g.Ho), C.long(g.Wo)}
}

func fp(s []float32) *C.float {
	if len(s) == 0 {
		return nil
	}
	return (*C.float)(unsafe.Pointer(&s[0]))
}

// Im2col is GoIm2col in C.
func Im2col(g Window, n int, x, col []float32) {
	if n == 0 {
		return
	}
	g.check(n, len(x), n*g.In(), len(col), n*g.Cols())
	w := g.c()
	C.im2col(w, C.long(n), fp(x), fp(col))
}

// Col2im is GoCol2im in C.
func Col2im(g Window, n int, col, dx []float32) {
	if n == 0 {
		return
	}
	g.check(n, len(col), n*g.Cols(), len(dx), n*g.In())
	w := g.c()
	C.col2im(w, C.long(n), fp(col), fp(dx))
}

// PoolForward is GoPoolForward in C.
func PoolForward(g Window, n int, x, bias []float32, relu bool, y []float32, arg []uint8) {
	if n == 0 {
		return
	}
	g.check(n, len(x), n*g.In(), len(y), n*g.Out(), len(arg), n*g.Out())
	if bias != nil && len(bias) < g.C || g.P != 0 || g.K*g.K > 256 {
		panic("kernels: bad pool arguments")
	}
	w := g.c()
	C.pool_fwd(w, C.long(n), fp(x), fp(bias), cbool(relu), fp(y), (*C.uint8_t)(unsafe.Pointer(&arg[0])))
}

// PoolBackward is GoPoolBackward in C.
func PoolBackward(g Window, n int, dy, y []float32, arg []uint8, relu bool, dx []float32) {
	if n == 0 {
		return
	}
	g.check(n, len(dy), n*g.Out(), len(y), n*g.Out(), len(arg), n*g.Out(), len(dx), n*g.In())
	w := g.c()
	C.pool_bwd(w, C.long(n), fp(dy), fp(y), (*C.uint8_t)(unsafe.Pointer(&arg[0])), cbool(relu), fp(dx))
}

// ColSums is GoColSums in C.
func ColSums(dst, a []float32, m, n, lda int) {
	checkColSums(dst, a, m, n, lda)
	if n == 0 {
		return
	}
	if m == 0 {
		clear(dst[:n])
		return
	}
	C.colsums(fp(dst), fp(a), C.long(m), C.long(n), C.long(lda))
}

// ReLU is GoReLU in C.
func ReLU(x, y []float32) {
	if len(y) < len(x) {
		panic("kernels: ReLU output shorter than input")
	}
	C.relu_fwd(fp(x), fp(y), C.long(len(x)))
}

// ReLUBackward is GoReLUBackward in C.
func ReLUBackward(y, dy, dx []float32) {
	if len(dy) < len(y) || len(dx) < len(y) {
		panic("kernels: ReLUBackward buffers shorter than y")
	}
	C.relu_bwd(fp(y), fp(dy), fp(dx), C.long(len(y)))
}

// ConvSmallWide reports whether ConvSmallForward and ConvSmallWeights
// (and the fused ConvPool ones) run their AVX-512 forms for o output
// channels: o in 16s where ISA is "avx512". Those beat oneDNN's bf16
// direct convolution on the zoo's first layers (see the model's Conv2D).
func ConvSmallWide(o int) bool { return C.small_wide(C.long(o)) != 0 }

// ConvSmallForward is GoConvSmallForward in C.
func ConvSmallForward(g Window, n int, x, wT []float32, o int, y, scratch []float32) {
	g.checkSmall(n, o, len(x), len(wT), len(y), len(scratch))
	if n == 0 {
		return
	}
	C.conv_small_fwd(g.c(), C.long(n), fp(x), fp(wT), C.long(o), fp(y), fp(scratch))
}

// ConvSmallWeights is GoConvSmallWeights in C.
func ConvSmallWeights(g Window, n int, x, dy []float32, o int, dwT, scratch []float32) {
	g.checkSmall(n, o, len(x), len(dwT), len(dy), len(scratch))
	C.conv_small_dw(g.c(), C.long(n), fp(x), fp(dy), C.long(o), fp(dwT), fp(scratch))
}

// ConvPoolForward is GoConvPoolForward in C.
func ConvPoolForward(g Window, n int, x, wT []float32, o int, bias []float32, relu bool, y []float32, arg []uint8, scratch []float32) {
	g.checkConvPool(n, o, len(x), len(wT), len(bias), len(y), len(arg), len(scratch))
	if n == 0 {
		return
	}
	pad := g.Padded()
	C.conv_pool_fwd(g.c(), C.long(n), fp(x), fp(wT), C.long(o), fp(bias), cbool(relu), fp(y),
		(*C.uint8_t)(unsafe.Pointer(&arg[0])), fp(scratch), fp(scratch[pad:]))
}

// Small16 reports whether the bf16 direct kernels (ConvSmallForward16 and
// the rest) run here for o output channels: o in 16s, ISA "avx512" and
// AVX512-BF16.
func Small16(o int) bool { return C.small16_ok(C.long(o)) != 0 }

func u32p(s []uint32) *C.uint32_t { return (*C.uint32_t)(unsafe.Pointer(unsafe.SliceData(s))) }

func u8p(s []uint8) *C.uint8_t { return (*C.uint8_t)(unsafe.Pointer(unsafe.SliceData(s))) }

func small16(o int) {
	if !Small16(o) {
		panic(fmt.Sprintf("kernels: the bf16 direct kernels need AVX512-BF16 and %d output channels in 16s", o))
	}
}

// ConvSmallForward16 is ConvSmallForward with x rounded to bf16 and the
// weights PackSmall16's w16. scratch holds Small16Scratch(o, false)
// values. It needs Small16(o).
func ConvSmallForward16(g Window, n int, x []float32, w16 []uint32, o int, y []float32, scratch []uint16) {
	small16(o)
	g.checkSmall16(n, o, len(x), len(w16), len(y), len(scratch), false)
	C.conv16_fwd(g.c(), C.long(n), fp(x), u32p(w16), C.long(o), 0, nil, 0, fp(y), nil, u16p(scratch))
}

// ConvPoolForward16 is ConvPoolForward in bf16, as ConvSmallForward16.
// scratch holds Small16Scratch(o, true) values.
func ConvPoolForward16(g Window, n int, x []float32, w16 []uint32, o int, bias []float32, relu bool, y []float32, arg []uint8,
	scratch []uint16) {
	small16(o)
	g.checkSmall16(n, o, len(x), len(w16), len(y), len(scratch), true)
	g.check(n, len(arg), n*g.PooledOut(o), len(bias), min(len(bias), 1)*o)
	C.conv16_fwd(g.c(), C.long(n), fp(x), u32p(w16), C.long(o), 1, fp(bias), cbool(relu), fp(y), u8p(arg), u16p(scratch))
}

// ConvSmallWeights16 is ConvSmallWeights with x and dy rounded to bf16.
// scratch holds Small16Scratch(o, false) values.
func ConvSmallWeights16(g Window, n int, x, dy []float32, o int, dwT []float32, scratch []uint16) {
	small16(o)
	g.checkSmall16(n, o, len(x), g.Small16Pairs(o), len(dy), len(scratch), false)
	g.check(n, len(dwT), g.K*g.K*g.C*o)
	C.conv16_dw(g.c(), C.long(n), fp(x), fp(dy), nil, nil, 0, C.long(o), fp(dwT), nil, u16p(scratch))
}

// ConvPoolWeights16 is ConvPoolWeights with x and the routed gradient
// rounded to bf16 (the bias's gradient sums the float32 values).
// scratch holds Small16Scratch(o, true) values.
func ConvPoolWeights16(g Window, n int, x, dy, y []float32, arg []uint8, relu bool, o int, dwT, db []float32, scratch []uint16) {
	small16(o)
	g.checkSmall16(n, o, len(x), g.Small16Pairs(o), len(dy), len(scratch), true)
	g.check(n, len(dwT), g.K*g.K*g.C*o, len(y), n*g.PooledOut(o), len(arg), n*g.PooledOut(o), len(db), min(len(db), 1)*o)
	C.conv16_dw(g.c(), C.long(n), fp(x), fp(dy), fp(y), u8p(arg), cbool(relu), C.long(o), fp(dwT), fp(db), u16p(scratch))
}

// ConvPoolWeights is GoConvPoolWeights in C.
func ConvPoolWeights(g Window, n int, x, dy, y []float32, arg []uint8, relu bool, o int, dwT, db, scratch []float32) {
	g.checkConvPool(n, o, len(x), len(dwT), len(db), len(dy), len(arg), len(scratch))
	g.check(n, len(y), n*(g.Ho/2)*(g.Wo/2)*o)
	if n == 0 {
		clear(dwT[:g.K*g.K*g.C*o])
		if len(db) > 0 {
			clear(db[:o])
		}
		return
	}
	pad, out := g.Padded(), g.PooledOut(o)
	C.conv_pool_dw(g.c(), C.long(n), fp(x), fp(dy), fp(y), (*C.uint8_t)(unsafe.Pointer(&arg[0])), cbool(relu),
		C.long(o), fp(dwT), fp(db), fp(scratch), fp(scratch[pad:]), fp(scratch[pad+out:]))
}

func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

// ChanMoments is GoChanMoments in C.
func ChanMoments(a, b []float32, m, c int, mu []float32, sa, sab []float64) {
	checkChan(m, c, len(a), len(b), -1, len(mu), len(sa), len(sab))
	if m == 0 {
		return
	}
	C.chan_moments_any(fp(a), fp(b), C.long(m), C.long(c), fp(mu), nil, nil, (*C.double)(unsafe.Pointer(&sa[0])), (*C.double)(unsafe.Pointer(&sab[0])))
}

// ChanNorm is GoChanNorm in C.
func ChanNorm(y, x []float32, m, c int, mu, s, t []float32) {
	checkChan(m, c, len(y), len(x), -1, len(mu), len(s), len(t))
	if m == 0 {
		return
	}
	C.chan_norm(fp(y), fp(x), C.long(m), C.long(c), fp(mu), fp(s), fp(t))
}

// ChanNormBackward is GoChanNormBackward in C.
func ChanNormBackward(dx, dy, x []float32, m, c int, mu, a, b, k []float32) {
	checkChan(m, c, len(dx), len(dy), len(x), len(mu), len(a), len(b), len(k))
	if m == 0 {
		return
	}
	C.chan_norm_bwd(fp(dx), fp(dy), fp(x), C.long(m), C.long(c), fp(mu), fp(a), fp(b), fp(k))
}

// Add is GoAdd in C.
func Add(dst, a, b []float32) {
	if len(a) < len(dst) || len(b) < len(dst) {
		panic("kernels: Add operands shorter than dst")
	}
	if len(dst) == 0 {
		return
	}
	C.add(fp(dst), fp(a), fp(b), C.long(len(dst)))
}

// ChanNormReLU is GoChanNormReLU in C.
func ChanNormReLU(y, x []float32, m, c int, mu, s, t []float32) {
	checkChan(m, c, len(y), len(x), -1, len(mu), len(s), len(t))
	if m == 0 {
		return
	}
	C.chan_norm_relu(fp(y), fp(x), C.long(m), C.long(c), fp(mu), fp(s), fp(t))
}

// ChanMomentsReLU is GoChanMomentsReLU in C.
func ChanMomentsReLU(a, b []float32, m, c int, mu, s, t []float32, sa, sab []float64) {
	checkChan(m, c, len(a), len(b), -1, len(mu), len(s), len(t), len(sa), len(sab))
	if m == 0 {
		return
	}
	C.chan_moments_any(fp(a), fp(b), C.long(m), C.long(c), fp(mu), fp(s), fp(t), (*C.double)(unsafe.Pointer(&sa[0])), (*C.double)(unsafe.Pointer(&sab[0])))
}

// ChanNormBackwardReLU is GoChanNormBackwardReLU in C.
func ChanNormBackwardReLU(dx, dy, x []float32, m, c int, mu, a, b, k, s, t []float32) {
	checkChan(m, c, len(dx), len(dy), len(x), len(mu), len(a), len(b), len(k), len(s), len(t))
	if m == 0 {
		return
	}
	C.chan_norm_bwd_relu(fp(dx), fp(dy), fp(x), C.long(m), C.long(c), fp(mu), fp(a), fp(b), fp(k), fp(s), fp(t))
}

// AddReLU is GoAddReLU in C.
func AddReLU(dst, a, b []float32) {
	if len(a) < len(dst) || len(b) < len(dst) {
		panic("kernels: AddReLU operands shorter than dst")
	}
	if len(dst) == 0 {
		return
	}
	C.add_relu(fp(dst), fp(a), fp(b), C.long(len(dst)))
}
