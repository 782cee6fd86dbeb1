// bn_bf16.c: what bf16 activations between layers would save in batch
// norm's passes over memory (docs/cpu-kernels.md, "Batch norm on bf16
// activations, measured"). A standalone loop, not part of the build:
//
//	gcc -O2 -march=native -o /tmp/bn_bf16 docs/experiments/bn_bf16.c && taskset -c 1 /tmp/bn_bf16 200
//
// For resnet8's three batch-norm shapes at batch 64 (16 channels at 28x28,
// 32 at 14x14, 64 at 7x7), it times each pass two ways, side by side in one
// run: as hpctrain runs it today (float32 activations, float64 sums per
// channel and row, the order model.BatchNorm's statistics keep) and as it
// would run on bf16 activations (the convolution's output stored in bf16,
// sums in float32 over blocks of 8 rows, float64 between blocks; the
// normalised output and the input gradient written in bf16). The passes:
// forward moments (sums of x and x^2), forward normalisation with ReLU,
// backward moments with the ReLU mask (sums of dy and dy*(x-mean)), and the
// input gradient. It needs AVX512-BF16 (vcvtneps2bf16).
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

// 16 bf16 values widened to float32, and 16 float32 values rounded to bf16.
static inline __m512 ld16(const uint16_t *p) {
	return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}
static inline void st16(uint16_t *p, __m512 v) { _mm256_storeu_si256((__m256i *)p, (__m256i)_mm512_cvtneps_pbh(v)); }

// The low and high 8 lanes of v as doubles.
static inline __m512d lo(__m512 v) { return _mm512_cvtps_pd(_mm512_castps512_ps256(v)); }
static inline __m512d hi(__m512 v) { return _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))); }

static void store(double *sa, double *sab, long j, __m512d s0, __m512d s1, __m512d t0, __m512d t1) {
	_mm512_storeu_pd(sa + j, s0), _mm512_storeu_pd(sa + j + 8, s1);
	_mm512_storeu_pd(sab + j, t0), _mm512_storeu_pd(sab + j + 8, t1);
}

// Today: forward moments, float64 sums of x and x^2 row by row.
__attribute__((optimize("fp-contract=off"))) static void mom_f32_sq(const float *x, long m, long c, double *sa, double *sab) {
	for (long j = 0; j < c; j += 16) {
		__m512d s0 = _mm512_setzero_pd(), s1 = s0, t0 = s0, t1 = s0;
		for (long i = 0; i < m; i++) {
			__m512 v = _mm512_loadu_ps(x + i * c + j);
			__m512d a = lo(v), b = hi(v);
			s0 = _mm512_add_pd(s0, a), s1 = _mm512_add_pd(s1, b);
			t0 = _mm512_fmadd_pd(a, a, t0), t1 = _mm512_fmadd_pd(b, b, t1);
		}
		store(sa, sab, j, s0, s1, t0, t1);
	}
}

// Today: backward moments with the ReLU mask, float64 sums of dy and
// dy*(x-mean) row by row, dy taken as 0 where (x-mean)*s+t was not positive.
__attribute__((optimize("fp-contract=off"))) static void mom_f32_relu(const float *dy, const float *x, long m, long c,
		const float *mu, const float *s, const float *t, double *sa, double *sab) {
	for (long j = 0; j < c; j += 16) {
		__m512d s0 = _mm512_setzero_pd(), s1 = s0, t0 = s0, t1 = s0;
		__m512 mf = _mm512_loadu_ps(mu + j), sf = _mm512_loadu_ps(s + j), tf = _mm512_loadu_ps(t + j);
		__m512d u0 = lo(mf), u1 = hi(mf);
		for (long i = 0; i < m; i++) {
			__m512 xv = _mm512_loadu_ps(x + i * c + j);
			__m512 y = _mm512_add_ps(_mm512_mul_ps(_mm512_sub_ps(xv, mf), sf), tf);
			__m512 g = _mm512_maskz_loadu_ps(_mm512_cmp_ps_mask(y, _mm512_setzero_ps(), _CMP_GT_OQ), dy + i * c + j);
			__m512d g0 = lo(g), g1 = hi(g);
			s0 = _mm512_add_pd(s0, g0), s1 = _mm512_add_pd(s1, g1);
			t0 = _mm512_add_pd(t0, _mm512_mul_pd(g0, _mm512_sub_pd(lo(xv), u0)));
			t1 = _mm512_add_pd(t1, _mm512_mul_pd(g1, _mm512_sub_pd(hi(xv), u1)));
		}
		store(sa, sab, j, s0, s1, t0, t1);
	}
}

// bf16 activations: the same sums, float32 within blocks of 8 rows.
static void mom_b16_sq(const uint16_t *x, long m, long c, double *sa, double *sab) {
	for (long j = 0; j < c; j += 16) {
		__m512d s0 = _mm512_setzero_pd(), s1 = s0, t0 = s0, t1 = s0;
		for (long i0 = 0; i0 < m; i0 += 8) {
			__m512 fs = _mm512_setzero_ps(), ft = fs;
			for (long i = i0; i < i0 + 8 && i < m; i++) {
				__m512 v = ld16(x + i * c + j);
				fs = _mm512_add_ps(fs, v), ft = _mm512_fmadd_ps(v, v, ft);
			}
			s0 = _mm512_add_pd(s0, lo(fs)), s1 = _mm512_add_pd(s1, hi(fs));
			t0 = _mm512_add_pd(t0, lo(ft)), t1 = _mm512_add_pd(t1, hi(ft));
		}
		store(sa, sab, j, s0, s1, t0, t1);
	}
}

static void mom_b16_relu(const float *dy, const uint16_t *x, long m, long c, const float *mu, const float *s, const float *t,
		double *sa, double *sab) {
	for (long j = 0; j < c; j += 16) {
		__m512d s0 = _mm512_setzero_pd(), s1 = s0, t0 = s0, t1 = s0;
		__m512 mf = _mm512_loadu_ps(mu + j), sf = _mm512_loadu_ps(s + j), tf = _mm512_loadu_ps(t + j);
		for (long i0 = 0; i0 < m; i0 += 8) {
			__m512 fs = _mm512_setzero_ps(), ft = fs;
			for (long i = i0; i < i0 + 8 && i < m; i++) {
				__m512 d = _mm512_sub_ps(ld16(x + i * c + j), mf);
				__mmask16 k = _mm512_cmp_ps_mask(_mm512_fmadd_ps(d, sf, tf), _mm512_setzero_ps(), _CMP_GT_OQ);
				__m512 g = _mm512_maskz_loadu_ps(k, dy + i * c + j);
				fs = _mm512_add_ps(fs, g), ft = _mm512_fmadd_ps(g, d, ft);
			}
			s0 = _mm512_add_pd(s0, lo(fs)), s1 = _mm512_add_pd(s1, hi(fs));
			t0 = _mm512_add_pd(t0, lo(ft)), t1 = _mm512_add_pd(t1, hi(ft));
		}
		store(sa, sab, j, s0, s1, t0, t1);
	}
}

// Normalisation with ReLU: y = max((x-mean)*s+t, 0), float32 in and out
// (today) or bf16 in and out.
static void norm_f32(float *y, const float *x, long m, long c, const float *mu, const float *s, const float *t) {
	for (long i = 0; i < m; i++)
		for (long j = 0; j < c; j += 16) {
			__m512 v = _mm512_fmadd_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i * c + j), _mm512_loadu_ps(mu + j)), _mm512_loadu_ps(s + j),
				_mm512_loadu_ps(t + j));
			_mm512_storeu_ps(y + i * c + j, _mm512_max_ps(v, _mm512_setzero_ps()));
		}
}

static void norm_b16(uint16_t *y, const uint16_t *x, long m, long c, const float *mu, const float *s, const float *t) {
	for (long i = 0; i < m; i++)
		for (long j = 0; j < c; j += 16) {
			__m512 v = _mm512_fmadd_ps(_mm512_sub_ps(ld16(x + i * c + j), _mm512_loadu_ps(mu + j)), _mm512_loadu_ps(s + j), _mm512_loadu_ps(t + j));
			st16(y + i * c + j, _mm512_max_ps(v, _mm512_setzero_ps()));
		}
}

// Input gradient with the ReLU mask: dx = a*dy' + b*(x-mean) + k; float32
// (today) or bf16 x and dx (dy float32 in both: the convolution's input
// gradient).
static void bwd_f32(float *dx, const float *dy, const float *x, long m, long c, const float *mu, const float *a, const float *b,
		const float *k, const float *s, const float *t) {
	for (long i = 0; i < m; i++)
		for (long j = 0; j < c; j += 16) {
			__m512 d = _mm512_sub_ps(_mm512_loadu_ps(x + i * c + j), _mm512_loadu_ps(mu + j));
			__mmask16 q = _mm512_cmp_ps_mask(_mm512_fmadd_ps(d, _mm512_loadu_ps(s + j), _mm512_loadu_ps(t + j)), _mm512_setzero_ps(), _CMP_GT_OQ);
			__m512 g = _mm512_maskz_loadu_ps(q, dy + i * c + j);
			__m512 r = _mm512_fmadd_ps(_mm512_loadu_ps(a + j), g, _mm512_mul_ps(_mm512_loadu_ps(b + j), d));
			_mm512_storeu_ps(dx + i * c + j, _mm512_add_ps(r, _mm512_loadu_ps(k + j)));
		}
}

static void bwd_b16(uint16_t *dx, const float *dy, const uint16_t *x, long m, long c, const float *mu, const float *a, const float *b,
		const float *k, const float *s, const float *t) {
	for (long i = 0; i < m; i++)
		for (long j = 0; j < c; j += 16) {
			__m512 d = _mm512_sub_ps(ld16(x + i * c + j), _mm512_loadu_ps(mu + j));
			__mmask16 q = _mm512_cmp_ps_mask(_mm512_fmadd_ps(d, _mm512_loadu_ps(s + j), _mm512_loadu_ps(t + j)), _mm512_setzero_ps(), _CMP_GT_OQ);
			__m512 g = _mm512_maskz_loadu_ps(q, dy + i * c + j);
			__m512 r = _mm512_fmadd_ps(_mm512_loadu_ps(a + j), g, _mm512_mul_ps(_mm512_loadu_ps(b + j), d));
			st16(dx + i * c + j, _mm512_add_ps(r, _mm512_loadu_ps(k + j)));
		}
}

static int cmp(const void *a, const void *b) {
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv) {
	// resnet8's batch norms at batch 64: channels, rows (samples x pixels);
	// three layers of each shape in a step.
	const long shapes[3][2] = {{16, 64 * 784}, {32, 64 * 196}, {64, 64 * 49}};
	const char *pass[4] = {"forward moments", "normalisation", "backward moments", "input gradient"};
	int reps = argc > 1 ? atoi(argv[1]) : 200;
	if (reps < 1) reps = 1;
	double step[2] = {0, 0};
	double *d = malloc(sizeof(double) * 8 * reps);
	for (int sh = 0; sh < 3; sh++) {
		long c = shapes[sh][0], m = shapes[sh][1], n = c * m;
		float *x = aligned_alloc(64, n * 4), *dy = aligned_alloc(64, n * 4), *y = aligned_alloc(64, n * 4), *dx = aligned_alloc(64, n * 4);
		uint16_t *x16 = aligned_alloc(64, n * 2), *y16 = aligned_alloc(64, n * 2), *dx16 = aligned_alloc(64, n * 2);
		float mu[64], s[64], t[64], a[64], b[64], k[64];
		double sa[64], sab[64];
		srand(1);
		for (long i = 0; i < n; i++) {
			x[i] = (float)rand() / RAND_MAX - 0.4f, dy[i] = (float)rand() / RAND_MAX - 0.5f;
			uint32_t u;
			memcpy(&u, x + i, 4);
			x16[i] = u >> 16;
		}
		for (int j = 0; j < 64; j++) mu[j] = 0.1f, s[j] = 1.1f, t[j] = 0.05f, a[j] = 0.9f, b[j] = -0.01f, k[j] = 0.001f;
		for (int r = 0; r < reps; r++) {
			double t0 = now();
			mom_f32_sq(x, m, c, sa, sab);
			double t1 = now();
			mom_b16_sq(x16, m, c, sa, sab);
			double t2 = now();
			norm_f32(y, x, m, c, mu, s, t);
			double t3 = now();
			norm_b16(y16, x16, m, c, mu, s, t);
			double t4 = now();
			mom_f32_relu(dy, x, m, c, mu, s, t, sa, sab);
			double t5 = now();
			mom_b16_relu(dy, x16, m, c, mu, s, t, sa, sab);
			double t6 = now();
			bwd_f32(dx, dy, x, m, c, mu, a, b, k, s, t);
			double t7 = now();
			bwd_b16(dx16, dy, x16, m, c, mu, a, b, k, s, t);
			double t8 = now();
			double v[8] = {t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5, t7 - t6, t8 - t7};
			for (int q = 0; q < 8; q++) d[q * reps + r] = v[q];
		}
		printf("%ld channels, %ld rows: median us, float32 today / bf16 activations\n", c, m);
		for (int q = 0; q < 8; q++) qsort(d + q * reps, reps, sizeof(double), cmp);
		for (int p = 0; p < 4; p++) {
			double f = d[(2 * p) * reps + reps / 2], h = d[(2 * p + 1) * reps + reps / 2];
			printf("  %-17s %7.1f / %7.1f\n", pass[p], f * 1e6, h * 1e6);
			step[0] += 3 * f, step[1] += 3 * h;
		}
		free(x), free(dy), free(y), free(dx), free(x16), free(y16), free(dx16);
	}
	printf("per step (3 batch norms of each shape): %.2f ms today, %.2f ms on bf16 activations\n", step[0] * 1e3, step[1] * 1e3);
	free(d);
	return 0;
}
