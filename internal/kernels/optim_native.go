//go:build cgo && !purego

package kernels

/*
#cgo CFLAGS: -O3
#cgo LDFLAGS: -lm
#include <stdint.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define OPT_AVX2 1
#endif

// The optimizers' updates (see optim.go). SGD's is a plain loop the
// compiler vectorises (cloned per ISA). The adaptive ones are each a plain
// loop in its Go twin's order of operations (no fused multiply-add) and,
// for the common case, an AVX2 loop four doubles at a time, chosen at run
// time: the compiler does not vectorise their plain loops, whose square
// roots may set errno, and cgo refuses -fno-math-errno. vsqrtpd and vdivpd are
// correctly rounded, as math.Sqrt and Go's division are. Each AVX2 loop
// returns how many elements it did; the plain loop does the rest.

#define PLAIN __attribute__((optimize("fp-contract=off")))
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
// SGD's update in float64 runs 10-25% faster in AVX-512 on Zen 4 (fewer
// instructions for the conversions); the bits are the same in every clone
// (no fused multiply-add, no reassociation).
#define OPT_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define OPT_CLONES
#endif
#define AVX2 __attribute__((target("avx2"), optimize("fp-contract=off")))

static int has_avx2(void) {
#ifdef OPT_AVX2
	return __builtin_cpu_supports("avx2");
#else
	return 0;
#endif
}

// gomax is Go's max for float64: NaN if either is, +0 over -0.
static inline double gomax(double a, double b) {
	if (a != a || b != b) return a + b;
	if (a == b) return __builtin_signbit(a) ? b : a;
	return a > b ? a : b;
}

#ifdef OPT_AVX2
#define LD(q) _mm256_cvtps_pd(_mm_loadu_ps(q))
#define ST(q, x) _mm_storeu_ps(q, _mm256_cvtpd_ps(x))
#define SET _mm256_set1_pd
#define ADD _mm256_add_pd
#define SUB _mm256_sub_pd
#define MUL _mm256_mul_pd
#define DIV _mm256_div_pd
#define SQRT _mm256_sqrt_pd
#endif

// In double, each operation rounded on its own (no fused multiply-add):
// the same bits as GoSGDMomentum. Plain SGD (ratio 1, no Nesterov) has a
// loop of its own without the multiplication by 1, which is exact.
static inline __attribute__((always_inline, optimize("fp-contract=off"))) void sgd_core(float *restrict p,
		const float *restrict g, float *restrict v, long n, double lr, double m, double damp, double wd,
		double ratio, int nesterov) {
	if (ratio == 1 && !nesterov) {
		for (long i = 0; i < n; i++) {
			double vi = m * (double)v[i] + damp * ((double)g[i] + wd * (double)p[i]);
			v[i] = (float)vi;
			p[i] = (float)((double)p[i] - lr * vi);
		}
		return;
	}
	for (long i = 0; i < n; i++) {
		double d = ((double)g[i] + wd * (double)p[i]) * ratio;
		double vi = m * (double)v[i] + damp * d;
		v[i] = (float)vi;
		d = nesterov ? d + m * vi : vi;
		p[i] = (float)((double)p[i] - lr * d);
	}
}

OPT_CLONES __attribute__((optimize("fp-contract=off")))
static void sgd_momentum(float *restrict p, const float *restrict g, float *restrict v, long n,
		double lr, double m, double damp, double wd, double ratio, int nesterov) {
	sgd_core(p, g, v, n, lr, m, damp, wd, ratio, nesterov);
}

// to_bf16_core is GoToBF16, branch-free so that the compiler vectorises it.
static inline __attribute__((always_inline)) void to_bf16_core(uint16_t *restrict h, const float *restrict p,
		long n) {
	for (long i = 0; i < n; i++) {
		uint32_t u;
		__builtin_memcpy(&u, p + i, 4);
		uint32_t z = (u & 0x7f800000u) == 0 ? (u & 0x80000000u) : u;
		uint16_t r = (uint16_t)((z + 0x7fffu + ((z >> 16) & 1)) >> 16);
		h[i] = (u & 0x7fffffffu) > 0x7f800000u ? (uint16_t)((u >> 16) | 0x40) : r;
	}
}

OPT_CLONES static void to_bf16_plain(uint16_t *restrict h, const float *restrict p, long n) { to_bf16_core(h, p, n); }

#ifdef OPT_AVX2
// to_bf16_vcvt is to_bf16_core in AVX512-BF16's vcvtne2ps2bf16, which
// rounds the same way (nearest even, NaN quieted, subnormals to zero) and
// runs twice as fast as the compiler's vectorisation of the plain loop.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) static void to_bf16_vcvt(uint16_t *restrict h,
		const float *restrict p, long n) {
	long i = 0;
	for (; i + 32 <= n; i += 32) {
		__m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(p + i + 16), _mm512_loadu_ps(p + i));
		_mm512_storeu_si512((void *)(h + i), (__m512i)v);
	}
	to_bf16_core(h + i, p + i, n - i);
}
#endif

static int has_vcvt(void) {
#ifdef OPT_AVX2
	static int c = -1;
	if (c < 0) c = __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw");
	return c;
#else
	return 0;
#endif
}

static void to_bf16(uint16_t *restrict h, const float *restrict p, long n) {
#ifdef OPT_AVX2
	if (has_vcvt()) {
		to_bf16_vcvt(h, p, n);
		return;
	}
#endif
	to_bf16_plain(h, p, n);
}

// sgd_momentum_bf16 is sgd_momentum, then to_bf16 of p, bf16_block values
// at a time: each block's new values are converted while they are still in
// L1. On the CNN's 1.63 million parameters, one Zen 4 core: SGD 0.78 ms,
// with the copy 0.83-0.92 ms; a separate conversion 0.12-0.14 ms when p is
// in cache, 0.5 ms in the training step's forward, where it is not.
#define bf16_block 256
static void sgd_momentum_bf16(float *restrict p, const float *restrict g, float *restrict v, uint16_t *restrict h,
		long n, double lr, double m, double damp, double wd, double ratio, int nesterov) {
	for (long lo = 0; lo < n; lo += bf16_block) {
		long k = n - lo < bf16_block ? n - lo : bf16_block;
		sgd_momentum(p + lo, g + lo, v + lo, k, lr, m, damp, wd, ratio, nesterov);
		to_bf16(h + lo, p + lo, k);
	}
}

// Adam's update, GoAdam's operations in its order (no fused
// multiply-add): adam_plain for every CPU, with AMSGrad's maximum when
// vmax is not NULL; adam4 in AVX2, four doubles at a time (the compiler
// does not vectorise the plain loop's square root, which may set errno).
// vsqrtpd and vdivpd are correctly rounded, as math.Sqrt and Go's
// division are, so both give GoAdam's bits.
__attribute__((optimize("fp-contract=off")))
static void adam_plain(float *restrict p, const float *restrict gr, float *restrict m, float *restrict v,
		float *restrict vmax, long n, double b1, double b2, double l2, double shrink, double step,
		double bc2sqrt, double eps) {
	for (long i = 0; i < n; i++) {
		double th = p[i];
		double g = (double)gr[i] + l2 * th;
		double mi = b1 * (double)m[i] + (1 - b1) * g;
		double vi = b2 * (double)v[i] + (1 - b2) * g * g;
		m[i] = (float)mi;
		v[i] = (float)vi;
		if (vmax) {
			vi = gomax(vi, (double)vmax[i]);
			vmax[i] = (float)vi;
		}
		p[i] = (float)(th * shrink - step * mi / (__builtin_sqrt(vi) / bc2sqrt + eps));
	}
}

#ifdef OPT_AVX2
__attribute__((target("avx2"), optimize("fp-contract=off")))
static long adam4(float *restrict p, const float *restrict gr, float *restrict m, float *restrict v, long n,
		double b1, double b2, double l2, double shrink, double step, double bc2sqrt, double eps) {
	__m256d B1 = _mm256_set1_pd(b1), B2 = _mm256_set1_pd(b2), C1 = _mm256_set1_pd(1 - b1),
		C2 = _mm256_set1_pd(1 - b2), L2 = _mm256_set1_pd(l2), S = _mm256_set1_pd(shrink),
		ST = _mm256_set1_pd(step), BC = _mm256_set1_pd(bc2sqrt), E = _mm256_set1_pd(eps);
	long i = 0;
	for (; i + 4 <= n; i += 4) {
		__m256d th = _mm256_cvtps_pd(_mm_loadu_ps(p + i));
		__m256d g = _mm256_add_pd(_mm256_cvtps_pd(_mm_loadu_ps(gr + i)), _mm256_mul_pd(L2, th));
		__m256d mi = _mm256_add_pd(_mm256_mul_pd(B1, _mm256_cvtps_pd(_mm_loadu_ps(m + i))), _mm256_mul_pd(C1, g));
		__m256d vi = _mm256_add_pd(_mm256_mul_pd(B2, _mm256_cvtps_pd(_mm_loadu_ps(v + i))),
			_mm256_mul_pd(_mm256_mul_pd(C2, g), g));
		_mm_storeu_ps(m + i, _mm256_cvtpd_ps(mi));
		_mm_storeu_ps(v + i, _mm256_cvtpd_ps(vi));
		__m256d den = _mm256_add_pd(_mm256_div_pd(_mm256_sqrt_pd(vi), BC), E);
		__m256d pn = _mm256_sub_pd(_mm256_mul_pd(th, S), _mm256_div_pd(_mm256_mul_pd(ST, mi), den));
		_mm_storeu_ps(p + i, _mm256_cvtpd_ps(pn));
	}
	return i;
}
#endif

static void adam(float *p, const float *gr, float *m, float *v, float *vmax, long n, double b1, double b2,
		double l2, double shrink, double step, double bc2sqrt, double eps) {
	long i = 0;
#ifdef OPT_AVX2
	if (!vmax && __builtin_cpu_supports("avx2"))
		i = adam4(p, gr, m, v, n, b1, b2, l2, shrink, step, bc2sqrt, eps);
#endif
	adam_plain(p + i, gr + i, m + i, v + i, vmax ? vmax + i : 0, n - i, b1, b2, l2, shrink, step, bc2sqrt, eps);
}

// LAMB's two passes, GoLAMBMoments' and GoLAMBApply's operations in their
// order: lamb_u is one element's update direction from the stored float32
// moments; the AVX2 loops compute it four at a time, and the moments pass
// adds the four lanes' squares to its sums one after another, in element
// order, as the Go loop does.
__attribute__((optimize("fp-contract=off")))
static inline double lamb_u(float m, float v, double th, double bc1, double bc2, double eps, double wd) {
	return (double)m / bc1 / (__builtin_sqrt((double)v / bc2) + eps) + wd * th;
}

#ifdef OPT_AVX2
__attribute__((target("avx2"), optimize("fp-contract=off")))
static inline __m256d lamb_u4(__m128 m, __m128 v, __m256d th, __m256d BC1, __m256d BC2, __m256d E, __m256d WD) {
	__m256d d = _mm256_add_pd(_mm256_sqrt_pd(_mm256_div_pd(_mm256_cvtps_pd(v), BC2)), E);
	return _mm256_add_pd(_mm256_div_pd(_mm256_div_pd(_mm256_cvtps_pd(m), BC1), d), _mm256_mul_pd(WD, th));
}

__attribute__((target("avx2"), optimize("fp-contract=off")))
static long lamb_moments4(float *restrict p, const float *restrict gr, float *restrict m, float *restrict v, long n,
		double b1, double b2, double bc1, double bc2, double eps, double wd, double *ws, double *us) {
	__m256d B1 = _mm256_set1_pd(b1), B2 = _mm256_set1_pd(b2), C1 = _mm256_set1_pd(1 - b1),
		C2 = _mm256_set1_pd(1 - b2), BC1 = _mm256_set1_pd(bc1), BC2 = _mm256_set1_pd(bc2),
		E = _mm256_set1_pd(eps), WD = _mm256_set1_pd(wd);
	double w = *ws, u = *us, tt[4], uu[4];
	long i = 0;
	for (; i + 4 <= n; i += 4) {
		__m256d th = _mm256_cvtps_pd(_mm_loadu_ps(p + i));
		__m256d g = _mm256_cvtps_pd(_mm_loadu_ps(gr + i));
		__m128 mi = _mm256_cvtpd_ps(_mm256_add_pd(_mm256_mul_pd(B1, _mm256_cvtps_pd(_mm_loadu_ps(m + i))), _mm256_mul_pd(C1, g)));
		__m128 vi = _mm256_cvtpd_ps(_mm256_add_pd(_mm256_mul_pd(B2, _mm256_cvtps_pd(_mm_loadu_ps(v + i))),
			_mm256_mul_pd(_mm256_mul_pd(C2, g), g)));
		_mm_storeu_ps(m + i, mi);
		_mm_storeu_ps(v + i, vi);
		__m256d ui = lamb_u4(mi, vi, th, BC1, BC2, E, WD);
		_mm256_storeu_pd(tt, _mm256_mul_pd(th, th));
		_mm256_storeu_pd(uu, _mm256_mul_pd(ui, ui));
		w += tt[0]; u += uu[0];
		w += tt[1]; u += uu[1];
		w += tt[2]; u += uu[2];
		w += tt[3]; u += uu[3];
	}
	*ws = w, *us = u;
	return i;
}

__attribute__((target("avx2"), optimize("fp-contract=off")))
static long lamb_apply4(float *restrict p, const float *restrict m, const float *restrict v, long n,
		double bc1, double bc2, double eps, double wd, double s) {
	__m256d BC1 = _mm256_set1_pd(bc1), BC2 = _mm256_set1_pd(bc2), E = _mm256_set1_pd(eps),
		WD = _mm256_set1_pd(wd), S = _mm256_set1_pd(s);
	long i = 0;
	for (; i + 4 <= n; i += 4) {
		__m256d th = _mm256_cvtps_pd(_mm_loadu_ps(p + i));
		__m256d ui = lamb_u4(_mm_loadu_ps(m + i), _mm_loadu_ps(v + i), th, BC1, BC2, E, WD);
		_mm_storeu_ps(p + i, _mm256_cvtpd_ps(_mm256_sub_pd(th, _mm256_mul_pd(S, ui))));
	}
	return i;
}
#endif

typedef struct { double ws, us; } sums2;

__attribute__((optimize("fp-contract=off")))
static sums2 lamb_moments(float *p, const float *gr, float *m, float *v, long n, double b1, double b2,
		double bc1, double bc2, double eps, double wd) {
	long i = 0;
	sums2 r = {0, 0};
#ifdef OPT_AVX2
	if (__builtin_cpu_supports("avx2"))
		i = lamb_moments4(p, gr, m, v, n, b1, b2, bc1, bc2, eps, wd, &r.ws, &r.us);
#endif
	for (; i < n; i++) {
		double th = p[i], g = gr[i];
		m[i] = (float)(b1 * (double)m[i] + (1 - b1) * g);
		v[i] = (float)(b2 * (double)v[i] + (1 - b2) * g * g);
		double u = lamb_u(m[i], v[i], th, bc1, bc2, eps, wd);
		r.ws += th * th;
		r.us += u * u;
	}
	return r;
}

__attribute__((optimize("fp-contract=off")))
static void lamb_apply(float *p, const float *m, const float *v, long n, double bc1, double bc2, double eps,
		double wd, double s) {
	long i = 0;
#ifdef OPT_AVX2
	if (__builtin_cpu_supports("avx2"))
		i = lamb_apply4(p, m, v, n, bc1, bc2, eps, wd, s);
#endif
	for (; i < n; i++) {
		double th = p[i];
		p[i] = (float)(th - s * lamb_u(m[i], v[i], th, bc1, bc2, eps, wd));
	}
}

// ---- Adagrad ----
#ifdef OPT_AVX2
AVX2 static long adagrad4(float *restrict p, const float *restrict gr, float *restrict s, long n, double wd, double clr, double eps) {
	__m256d WD = SET(wd), CLR = SET(clr), E = SET(eps);
	long i = 0;
	for (; i + 4 <= n; i += 4) {
		__m256d th = LD(p + i), g = ADD(LD(gr + i), MUL(WD, th));
		__m256d si = ADD(LD(s + i), MUL(g, g));
		ST(s + i, si);
		ST(p + i, SUB(th, DIV(MUL(CLR, g), ADD(SQRT(si), E))));
	}
	return i;
}
#endif

PLAIN static void adagrad(float *p, const float *gr, float *s, long n, double wd, double clr, double eps) {
	long i = 0;
#ifdef OPT_AVX2
	if (has_avx2()) i = adagrad4(p, gr, s, n, wd, clr, eps);
#endif
	for (; i < n; i++) {
		double th = p[i], g = (double)gr[i] + wd * th;
		double si = (double)s[i] + g * g;
		s[i] = (float)si;
		p[i] = (float)(th - clr * g / (__builtin_sqrt(si) + eps));
	}
}

// ---- RMSprop (AVX2: not centered) ----
#ifdef OPT_AVX2
AVX2 static long rmsprop4(float *restrict p, const float *restrict gr, float *restrict s, float *restrict b, long n,
		double al, double m, double wd, double lr, double eps) {
	__m256d AL = SET(al), C = SET(1 - al), M = SET(m), WD = SET(wd), LR = SET(lr), E = SET(eps);
	long i = 0;
	for (; i + 4 <= n; i += 4) {
		__m256d th = LD(p + i), g = ADD(LD(gr + i), MUL(WD, th));
		__m256d si = ADD(MUL(AL, LD(s + i)), MUL(MUL(C, g), g));
		ST(s + i, si);
		__m256d d = ADD(SQRT(si), E);
		if (b) {
			__m256d bi = ADD(MUL(M, LD(b + i)), DIV(g, d));
			ST(b + i, bi);
			ST(p + i, SUB(th, MUL(LR, bi)));
		} else {
			ST(p + i, SUB(th, DIV(MUL(LR, g), d)));
		}
	}
	return i;
}
#endif

PLAIN static void rmsprop(float *p, const float *gr, float *s, float *a, float *b, long n,
		double al, double m, double wd, double lr, double eps) {
	long i = 0;
#ifdef OPT_AVX2
	if (!a && has_avx2()) i = rmsprop4(p, gr, s, b, n, al, m, wd, lr, eps);
#endif
	for (; i < n; i++) {
		double th = p[i], g = (double)gr[i] + wd * th;
		double si = al * (double)s[i] + (1 - al) * g * g;
		s[i] = (float)si;
		double d;
		if (a) {
			double ai = al * (double)a[i] + (1 - al) * g;
			a[i] = (float)ai;
			d = __builtin_sqrt(gomax(0, si - ai * ai)) + eps;
		} else {
			d = __builtin_sqrt(si) + eps;
		}
		if (b) {
			double bi = m * (double)b[i] + g / d;
			b[i] = (float)bi;
			p[i] = (float)(th - lr * bi);
		} else {
			p[i] = (float)(th - lr * g / d);
		}
	}
}

// ---- Adamax ----
#ifdef OPT_AVX2
// max4 is Go's max of a and b, four at a time, for b never -0 (|g| + eps
// is not): vmaxpd gives its second operand on ties and on NaN, so NaNs are
// put back as a + b.
AVX2 static inline __m256d max4(__m256d a, __m256d b) {
	__m256d nan = _mm256_cmp_pd(a, b, _CMP_UNORD_Q);
	return _mm256_blendv_pd(_mm256_max_pd(a, b), ADD(a, b), nan);
}

AVX2 static long adamax4(float *restrict p, const float *restrict gr, float *restrict m, float *restrict u, long n,
		double b1, double b2, double wd, double step, double eps) {
	__m256d B1 = SET(b1), C1 = SET(1 - b1), B2 = SET(b2), WD = SET(wd), S = SET(step), E = SET(eps);
	__m256d ABS = _mm256_castsi256_pd(_mm256_set1_epi64x(0x7fffffffffffffffLL));
	long i = 0;
	for (; i + 4 <= n; i += 4) {
		__m256d th = LD(p + i), g = ADD(LD(gr + i), MUL(WD, th));
		__m256d mi = ADD(MUL(B1, LD(m + i)), MUL(C1, g));
		__m256d ui = max4(MUL(B2, LD(u + i)), ADD(_mm256_and_pd(g, ABS), E));
		ST(m + i, mi);
		ST(u + i, ui);
		ST(p + i, SUB(th, DIV(MUL(S, mi), ui)));
	}
	return i;
}
#endif

PLAIN static void adamax(float *p, const float *gr, float *m, float *u, long n, double b1, double b2, double wd,
		double step, double eps) {
	long i = 0;
#ifdef OPT_AVX2
	if (has_avx2()) i = adamax4(p, gr, m, u, n, b1, b2, wd, step, eps);
#endif
	for (; i < n; i++) {
		double th = p[i], g = (double)gr[i] + wd * th;
		double mi = b1 * (double)m[i] + (1 - b1) * g;
		double ui = gomax(b2 * (double)u[i], __builtin_fabs(g) + eps);
		m[i] = (float)mi;
		u[i] = (float)ui;
		p[i] = (float)(th - step * mi / ui);
	}
}

// ---- NAdam ----
#ifdef OPT_AVX2
AVX2 static long nadam4(float *restrict p, const float *restrict gr, float *restrict m, float *restrict v, long n,
		double b1, double b2, double wd, double bc2inv, double cg, double cm, double eps) {
	__m256d B1 = SET(b1), C1 = SET(1 - b1), B2 = SET(b2), C2 = SET(1 - b2), WD = SET(wd), BC = SET(bc2inv),
		CG = SET(cg), CM = SET(cm), E = SET(eps);
	long i = 0;
	for (; i + 4 <= n; i += 4) {
		__m256d th = LD(p + i), g = ADD(LD(gr + i), MUL(WD, th));
		__m256d mi = ADD(MUL(B1, LD(m + i)), MUL(C1, g));
		__m256d vi = ADD(MUL(B2, LD(v + i)), MUL(MUL(C2, g), g));
		ST(m + i, mi);
		ST(v + i, vi);
		__m256d d = ADD(SQRT(MUL(vi, BC)), E);
		ST(p + i, SUB(SUB(th, DIV(MUL(CG, g), d)), DIV(MUL(CM, mi), d)));
	}
	return i;
}
#endif

PLAIN static void nadam(float *p, const float *gr, float *m, float *v, long n, double b1, double b2, double wd,
		double bc2inv, double cg, double cm, double eps) {
	long i = 0;
#ifdef OPT_AVX2
	if (has_avx2()) i = nadam4(p, gr, m, v, n, b1, b2, wd, bc2inv, cg, cm, eps);
#endif
	for (; i < n; i++) {
		double th = p[i], g = (double)gr[i] + wd * th;
		double mi = b1 * (double)m[i] + (1 - b1) * g;
		double vi = b2 * (double)v[i] + (1 - b2) * g * g;
		m[i] = (float)mi;
		v[i] = (float)vi;
		double d = __builtin_sqrt(vi * bc2inv) + eps;
		p[i] = (float)(th - cg * g / d - cm * mi / d);
	}
}

// ---- Adadelta ----
#ifdef OPT_AVX2
AVX2 static long adadelta4(float *restrict p, const float *restrict gr, float *restrict sq, float *restrict acc, long n,
		double rho, double wd, double lr, double eps) {
	__m256d R = SET(rho), C = SET(1 - rho), WD = SET(wd), LR = SET(lr), E = SET(eps);
	long i = 0;
	for (; i + 4 <= n; i += 4) {
		__m256d th = LD(p + i), g = ADD(LD(gr + i), MUL(WD, th));
		__m256d s = ADD(MUL(R, LD(sq + i)), MUL(MUL(C, g), g));
		__m256d a = LD(acc + i);
		__m256d dx = MUL(DIV(SQRT(ADD(a, E)), SQRT(ADD(s, E))), g);
		ST(sq + i, s);
		ST(acc + i, ADD(MUL(R, a), MUL(MUL(C, dx), dx)));
		ST(p + i, SUB(th, MUL(LR, dx)));
	}
	return i;
}
#endif

PLAIN static void adadelta(float *p, const float *gr, float *sq, float *acc, long n, double rho, double wd,
		double lr, double eps) {
	long i = 0;
#ifdef OPT_AVX2
	if (has_avx2()) i = adadelta4(p, gr, sq, acc, n, rho, wd, lr, eps);
#endif
	for (; i < n; i++) {
		double th = p[i], g = (double)gr[i] + wd * th;
		double s = rho * (double)sq[i] + (1 - rho) * g * g;
		double dx = __builtin_sqrt((double)acc[i] + eps) / __builtin_sqrt(s + eps) * g;
		sq[i] = (float)s;
		acc[i] = (float)(rho * (double)acc[i] + (1 - rho) * dx * dx);
		p[i] = (float)(th - lr * dx);
	}
}
*/
import "C"

import "unsafe"

func f32(s []float32) *C.float {
	if len(s) == 0 {
		return nil
	}
	return (*C.float)(unsafe.Pointer(&s[0]))
}

// Adagrad is GoAdagrad in C.
func Adagrad(p, g, s []float32, wd, clr, eps float64) {
	checkState("Adagrad", p, g, s)
	if len(p) > 0 {
		C.adagrad(f32(p), f32(g), f32(s), C.long(len(p)), C.double(wd), C.double(clr), C.double(eps))
	}
}

// RMSprop is GoRMSprop in C.
func RMSprop(p, g, s, a, b []float32, alpha, m, wd, lr, eps float64) {
	checkState("RMSprop", p, g, s, a, b)
	if len(p) > 0 {
		C.rmsprop(f32(p), f32(g), f32(s), f32(a), f32(b), C.long(len(p)), C.double(alpha), C.double(m),
			C.double(wd), C.double(lr), C.double(eps))
	}
}

// Adamax is GoAdamax in C.
func Adamax(p, g, m, u []float32, b1, b2, wd, step, eps float64) {
	checkState("Adamax", p, g, m, u)
	if len(p) > 0 {
		C.adamax(f32(p), f32(g), f32(m), f32(u), C.long(len(p)), C.double(b1), C.double(b2), C.double(wd),
			C.double(step), C.double(eps))
	}
}

// Nadam is GoNadam in C.
func Nadam(p, g, m, v []float32, b1, b2, wd, bc2inv, cg, cm, eps float64) {
	checkState("Nadam", p, g, m, v)
	if len(p) > 0 {
		C.nadam(f32(p), f32(g), f32(m), f32(v), C.long(len(p)), C.double(b1), C.double(b2), C.double(wd),
			C.double(bc2inv), C.double(cg), C.double(cm), C.double(eps))
	}
}

// Adadelta is GoAdadelta in C.
func Adadelta(p, g, sq, acc []float32, rho, wd, lr, eps float64) {
	checkState("Adadelta", p, g, sq, acc)
	if len(p) > 0 {
		C.adadelta(f32(p), f32(g), f32(sq), f32(acc), C.long(len(p)), C.double(rho), C.double(wd),
			C.double(lr), C.double(eps))
	}
}

// SGDMomentum is GoSGDMomentum in C.
func SGDMomentum(p, g, v []float32, lr, m, damp, wd, ratio float64, nesterov bool) {
	checkState("SGDMomentum", p, g, v)
	nest := C.int(0)
	if nesterov {
		nest = 1
	}
	C.sgd_momentum(f32(p), f32(g), f32(v), C.long(len(p)), C.double(lr), C.double(m), C.double(damp), C.double(wd),
		C.double(ratio), nest)
}

// SGDMomentumBF16 is SGDMomentum that also writes p's new values rounded
// to bfloat16 (GoToBF16) into h, a block at a time while they are in cache.
func SGDMomentumBF16(p, g, v []float32, h []uint16, lr, m, damp, wd, ratio float64, nesterov bool) {
	checkState("SGDMomentumBF16", p, g, v)
	checkBF16(p, h)
	if len(p) == 0 {
		return
	}
	nest := C.int(0)
	if nesterov {
		nest = 1
	}
	C.sgd_momentum_bf16(f32(p), f32(g), f32(v), (*C.uint16_t)(unsafe.Pointer(&h[0])), C.long(len(p)), C.double(lr),
		C.double(m), C.double(damp), C.double(wd), C.double(ratio), nest)
}

// ToBF16 is GoToBF16 in C.
func ToBF16(h []uint16, p []float32) {
	checkBF16(p, h)
	if len(p) > 0 {
		C.to_bf16((*C.uint16_t)(unsafe.Pointer(&h[0])), f32(p), C.long(len(p)))
	}
}

// Adam is GoAdam in C.
func Adam(p, g, m, v, vmax []float32, a AdamArgs) {
	checkState("Adam", p, g, m, v, vmax)
	if len(p) == 0 {
		return
	}
	var vm *C.float
	if vmax != nil {
		vm = f32(vmax)
	}
	C.adam(f32(p), f32(g), f32(m), f32(v), vm, C.long(len(p)), C.double(a.B1), C.double(a.B2), C.double(a.L2),
		C.double(a.Shrink), C.double(a.Step), C.double(a.BC2Sqrt), C.double(a.Eps))
}

// LAMBMoments is GoLAMBMoments in C.
func LAMBMoments(p, g, m, v []float32, a LAMBArgs) (ws, us float64) {
	checkState("LAMB", p, g, m, v)
	if len(p) == 0 {
		return 0, 0
	}
	r := C.lamb_moments(f32(p), f32(g), f32(m), f32(v), C.long(len(p)), C.double(a.B1), C.double(a.B2), C.double(a.BC1),
		C.double(a.BC2), C.double(a.Eps), C.double(a.WD))
	return float64(r.ws), float64(r.us)
}

// LAMBApply is GoLAMBApply in C.
func LAMBApply(p, m, v []float32, a LAMBArgs, s float64) {
	checkState("LAMB", p, m, v)
	if len(p) == 0 {
		return
	}
	C.lamb_apply(f32(p), f32(m), f32(v), C.long(len(p)), C.double(a.BC1), C.double(a.BC2), C.double(a.Eps),
		C.double(a.WD), C.double(s))
}
