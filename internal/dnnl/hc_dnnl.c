//go:build cgo && !purego

// oneDNN (v2 C API) convolutions and matmuls for package dnnl. Every entry
// point sets OpenMP's thread count of the calling thread to 1 first, so that
// a primitive is created for and executed on the calling thread only.

#include <cpuid.h>
#include <immintrin.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#include <stdlib.h>
#include <string.h>

#include "hc_dnnl.h"

#define TRY(what, call)                                                        \
	do {                                                                   \
		dnnl_status_t st_ = (call);                                    \
		if (st_ != dnnl_success) {                                     \
			*stage = (what);                                       \
			return st_;                                            \
		}                                                              \
	} while (0)

#define RUN(call)                                                              \
	do {                                                                   \
		dnnl_status_t st_ = (call);                                    \
		if (st_ != dnnl_success) return st_;                           \
	} while (0)

static void one_thread(void) {
	if (omp_get_max_threads() != 1) omp_set_num_threads(1);
}

int hcdnnl_omp_max_threads(void) { return omp_get_max_threads(); }

// ---- bfloat16 conversion ----
// x and dy are converted with this loop rather than a oneDNN reorder: for
// conv2's x (200704 floats) both take ~14 us on one Zen4 core (the reorder
// is jit:uni), about 1.5% of the bf16 forward convolution, and the loop
// needs no primitive or scratchpad.

static inline uint16_t bf16_one(float f) {
	uint32_t u;
	memcpy(&u, &f, 4);
	if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
	if ((u & 0x7f800000u) == 0) u &= 0x80000000u;
	u += 0x7fffu + ((u >> 16) & 1);
	return (uint16_t)(u >> 16);
}

void hcdnnl_to_bf16_plain(uint16_t *dst, const float *src, long n) {
	for (long i = 0; i < n; i++) dst[i] = bf16_one(src[i]);
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) static void
to_bf16_avx512(uint16_t *dst, const float *src, long n) {
	long i = 0;
	for (; i + 32 <= n; i += 32) {
		__m512 lo = _mm512_loadu_ps(src + i);
		__m512 hi = _mm512_loadu_ps(src + i + 16);
		__m512bh v = _mm512_cvtne2ps_pbh(hi, lo);
		_mm512_storeu_si512((void *)(dst + i), (__m512i)v);
	}
	for (; i < n; i += 16) {
		long r = n - i;
		__mmask16 m = r >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << r) - 1);
		__m512 v = _mm512_maskz_loadu_ps(m, src + i);
		__m256bh b = _mm512_cvtneps_pbh(v);
		_mm256_mask_storeu_epi16((void *)(dst + i), m, (__m256i)b);
	}
}

static int cpu_bits = -1;

int hcdnnl_cpu_bf16(void) {
	if (cpu_bits >= 0) return cpu_bits;
	unsigned a, b, c, d;
	int bits = 0;
	if (__get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 5))) bits |= 1;
	if (__get_cpuid_count(7, 0, &a, &b, &c, &d) && (d & (1u << 22))) bits |= 2;
	if (__get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 27))) {
		unsigned lo, hi;
		__asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
		if ((lo & (3u << 17)) == (3u << 17)) bits |= 4;
	}
	// The AVX-512 conversion also needs AVX512F/BW/VL and the OS's ZMM
	// state; every CPU with AVX512-BF16 has the instructions, the state
	// is checked through XCR0 bits 1, 2, 5, 6, 7.
	if ((bits & 1) && __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 27))) {
		unsigned lo, hi;
		__asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
		if ((lo & 0xe6u) != 0xe6u) bits |= 8; // no ZMM state: no vector path
	}
	cpu_bits = bits;
	return bits;
}

int hcdnnl_bf16_vector(void) { return (hcdnnl_cpu_bf16() & 9) == 1; }

void hcdnnl_to_bf16(uint16_t *dst, const float *src, long n) {
	if (hcdnnl_bf16_vector())
		to_bf16_avx512(dst, src, n);
	else
		hcdnnl_to_bf16_plain(dst, src, n);
}

const char *hcdnnl_isa(void) {
	switch (dnnl_get_effective_cpu_isa()) {
	case dnnl_cpu_isa_sse41: return "sse41";
	case dnnl_cpu_isa_avx: return "avx";
	case dnnl_cpu_isa_avx2: return "avx2";
	case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
	case dnnl_cpu_isa_avx512_mic: return "avx512_mic";
	case dnnl_cpu_isa_avx512_mic_4ops: return "avx512_mic_4ops";
	case dnnl_cpu_isa_avx512_core: return "avx512_core";
	case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
	case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
	case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
	default: return "unknown";
	}
}

// ---- shared helpers ----

// A step is one primitive with its user-mode scratchpad memory (NULL when
// the primitive needs none); every step of an object shares one buffer.
typedef struct {
	dnnl_primitive_desc_t pd;
	dnnl_primitive_t p;
	dnnl_memory_t sp;
	size_t spsize;
} step;

static dnnl_status_t step_make(step *s, dnnl_engine_t eng) {
	RUN(dnnl_primitive_create(&s->p, s->pd));
	const dnnl_memory_desc_t *md =
		dnnl_primitive_desc_query_md(s->pd, dnnl_query_scratchpad_md, 0);
	s->spsize = md ? dnnl_memory_desc_get_size(md) : 0;
	if (s->spsize > 0) RUN(dnnl_memory_create(&s->sp, md, eng, DNNL_MEMORY_NONE));
	return dnnl_success;
}

static void step_free(step *s) {
	if (s->sp) dnnl_memory_destroy(s->sp);
	if (s->p) dnnl_primitive_destroy(s->p);
	if (s->pd) dnnl_primitive_desc_destroy(s->pd);
	memset(s, 0, sizeof *s);
}

static dnnl_status_t step_run(step *s, dnnl_stream_t st, int n, dnnl_exec_arg_t *args) {
	if (s->sp) {
		args[n].arg = DNNL_ARG_SCRATCHPAD;
		args[n].memory = s->sp;
		n++;
	}
	return dnnl_primitive_execute(s->p, st, n, args);
}

static dnnl_status_t reorder_pd(step *s, const dnnl_memory_desc_t *from,
		const dnnl_memory_desc_t *to, dnnl_engine_t eng,
		const_dnnl_primitive_attr_t attr) {
	return dnnl_reorder_primitive_desc_create(&s->pd, from, eng, to, eng, attr);
}

static dnnl_status_t reorder_run(step *s, dnnl_stream_t st, dnnl_memory_t from, dnnl_memory_t to) {
	dnnl_exec_arg_t a[3] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
	return step_run(s, st, 2, a);
}

static void *scratch_alloc(size_t n) {
	if (n == 0) return NULL;
	return aligned_alloc(64, (n + 63) & ~(size_t)63);
}

// ---- convolution ----

// A Winograd operand: the nChw16c memory m a primitive reads or writes,
// and how it meets the caller's NHWC buffer of n samples of hw pixels of
// ch channels. With 16 channels the two layouts are the same bytes, and m
// is pointed at the caller's buffer (ALIAS); with a multiple of 16, a loop
// of ours copies 16-channel blocks (COPY: oneDNN's generic reorder ran at
// a third of the speed); else oneDNN's reorder r runs (REORDER).
enum { ALIAS, COPY, REORDER };
typedef struct {
	dnnl_memory_t m;
	int how;
	step r;
	long n, hw, ch;
} wop;

struct hcdnnl_conv {
	dnnl_engine_t eng;
	dnnl_stream_t st;
	int bf16;
	long nx, ny; // elements of x and y
	step fwd, bwd_d, bwd_w;
	step rw_f, rw_b, rdw; // weight reorders (p NULL when none is needed)
	dnnl_memory_t x_user, dy_user, y, dx, w_user, dw_user;
	dnnl_memory_t x_bf, dy_bf;  // bf16 copies of x and dy (bf16 only)
	dnnl_memory_t x_bfu, dy_bfu; // the caller's bf16 x and dy (bf16 only)
	dnnl_memory_t w_f, w_b, dw_p; // primitives' weight formats, or NULL
	// gen_f and gen_b: the generation of the weights now in w_f and w_b
	// (0: none); a call with the same nonzero generation skips the reorder.
	unsigned long gen_f, gen_b;
	// Winograd only: the primitives read and write nChw16c.
	int wino;
	wop x_in, dx_out, y_out, dy_in;
	void *spbuf;
};

void hcdnnl_conv_free(hcdnnl_conv *cv) {
	if (!cv) return;
	step *steps[] = {&cv->fwd, &cv->bwd_d, &cv->bwd_w, &cv->rw_f, &cv->rw_b, &cv->rdw,
		&cv->x_in.r, &cv->y_out.r, &cv->dy_in.r, &cv->dx_out.r};
	for (int i = 0; i < 10; i++) step_free(steps[i]);
	dnnl_memory_t mems[] = {cv->x_user, cv->dy_user, cv->y, cv->dx, cv->w_user,
		cv->dw_user, cv->x_bf, cv->dy_bf, cv->w_f, cv->w_b, cv->dw_p,
		cv->x_in.m, cv->y_out.m, cv->dy_in.m, cv->dx_out.m, cv->x_bfu, cv->dy_bfu};
	for (int i = 0; i < 17; i++)
		if (mems[i]) dnnl_memory_destroy(mems[i]);
	if (cv->st) dnnl_stream_destroy(cv->st);
	if (cv->eng) dnnl_engine_destroy(cv->eng);
	free(cv->spbuf);
	free(cv);
}

// reordered_mem makes the memory a primitive reads an operand from (or
// writes it to) where the caller's is in format user: none when the
// formats match (the caller's memory serves), else its own buffer *m and
// the reorder r between the two.
static dnnl_status_t reordered_mem(hcdnnl_conv *cv, const dnnl_memory_desc_t *want,
		const dnnl_memory_desc_t *user, int to_user, step *r, dnnl_memory_t *m,
		const_dnnl_primitive_attr_t attr) {
	if (dnnl_memory_desc_equal(want, user)) return dnnl_success;
	RUN(dnnl_memory_create(m, want, cv->eng, DNNL_MEMORY_ALLOCATE));
	if (to_user)
		RUN(reorder_pd(r, want, user, cv->eng, attr));
	else
		RUN(reorder_pd(r, user, want, cv->eng, attr));
	return step_make(r, cv->eng);
}

// blocked makes op, a Winograd operand with memory desc blk (nChw16c)
// for a caller's NHWC buffer of desc user (to_user: written back to it).
static dnnl_status_t blocked(hcdnnl_conv *cv, wop *op, long n, long hw, long ch,
		const dnnl_memory_desc_t *blk, const dnnl_memory_desc_t *user, int to_user,
		const_dnnl_primitive_attr_t attr) {
	op->n = n, op->hw = hw, op->ch = ch;
	op->how = ch == 16 ? ALIAS : ch % 16 == 0 ? COPY : REORDER;
	switch (op->how) {
	case ALIAS: return dnnl_memory_create(&op->m, blk, cv->eng, DNNL_MEMORY_NONE);
	case COPY: return dnnl_memory_create(&op->m, blk, cv->eng, DNNL_MEMORY_ALLOCATE);
	}
	return reordered_mem(cv, blk, user, to_user, &op->r, &op->m, attr);
}

// nchw16c copies between NHWC nhwc and nChw16c blk (to_blk: that way),
// for ch a multiple of 16.
static void nchw16c(float *restrict blk, float *restrict nhwc, long n, long hw, long ch, int to_blk) {
	long cb = ch / 16;
	for (long s = 0; s < n; s++)
		for (long b = 0; b < cb; b++) {
			float *pb = blk + (s * cb + b) * hw * 16;
			float *pn = nhwc + s * hw * ch + b * 16;
			for (long q = 0; q < hw; q++) {
				if (to_blk)
					memcpy(pb + q * 16, pn + q * ch, 64);
				else
					memcpy(pn + q * ch, pb + q * 16, 64);
			}
		}
}

static int conv_new(hcdnnl_conv *cv, long n, long h, long w, long c, long o, long k,
		long s, long p, int bf16, int plainw, int wino, const char **stage) {
	one_thread();
	long ho = (h + 2 * p - k) / s + 1, wo = (w + 2 * p - k) / s + 1;
	cv->bf16 = bf16;
	cv->nx = n * h * w * c;
	cv->ny = n * ho * wo * o;
	dnnl_data_type_t lo = bf16 ? dnnl_bf16 : dnnl_f32;
	TRY("engine", dnnl_engine_create(&cv->eng, dnnl_cpu, 0));
	TRY("stream", dnnl_stream_create(&cv->st, cv->eng, dnnl_stream_default_flags));

	dnnl_dims_t dx = {n, c, h, w}, dy = {n, o, ho, wo}, dw = {o, c, k, k};
	dnnl_dims_t strides = {s, s}, pad = {p, p};
	dnnl_memory_desc_t xf, yf, wf, xl, yl, wl;
	TRY("memory desc", dnnl_memory_desc_init_by_tag(&xf, 4, dx, dnnl_f32, dnnl_nhwc));
	TRY("memory desc", dnnl_memory_desc_init_by_tag(&yf, 4, dy, dnnl_f32, dnnl_nhwc));
	TRY("memory desc", dnnl_memory_desc_init_by_tag(&wf, 4, dw, dnnl_f32, dnnl_ohwi));
	// Winograd (f32 only): oneDNN's implementation reads and writes
	// nChw16c and picks its own weight format.
	cv->wino = wino && !bf16;
	dnnl_format_tag_t act = cv->wino ? dnnl_nChw16c : dnnl_nhwc;
	if (cv->wino) plainw = 0;
	dnnl_alg_kind_t alg = cv->wino ? dnnl_convolution_winograd : dnnl_convolution_direct;
	TRY("memory desc", dnnl_memory_desc_init_by_tag(&xl, 4, dx, lo, act));
	TRY("memory desc", dnnl_memory_desc_init_by_tag(&yl, 4, dy, lo, act));
	TRY("memory desc", dnnl_memory_desc_init_by_tag(&wl, 4, dw, lo,
		plainw ? dnnl_ohwi : dnnl_format_tag_any));
	dnnl_memory_desc_t dwd; // diff weights: f32, primitive's choice
	TRY("memory desc", dnnl_memory_desc_init_by_tag(&dwd, 4, dw, dnnl_f32,
		plainw ? dnnl_ohwi : dnnl_format_tag_any));

	dnnl_primitive_attr_t attr;
	TRY("attr", dnnl_primitive_attr_create(&attr));
	dnnl_status_t st = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
	if (st != dnnl_success) {
		dnnl_primitive_attr_destroy(attr);
		*stage = "attr";
		return st;
	}
#define ATRY(what, call)                                                       \
	do {                                                                   \
		st = (call);                                                   \
		if (st != dnnl_success) {                                      \
			dnnl_primitive_attr_destroy(attr);                     \
			*stage = (what);                                       \
			return st;                                             \
		}                                                              \
	} while (0)

	// Forward: src x (f32 or bf16), weights (any), dst y f32.
	dnnl_convolution_desc_t d;
	ATRY("convolution forward", dnnl_convolution_forward_desc_init(&d, dnnl_forward_training,
		alg, &xl, &wl, NULL, cv->wino ? &yl : &yf, strides, pad, pad));
	ATRY("convolution forward", dnnl_primitive_desc_create(&cv->fwd.pd, &d, attr, cv->eng, NULL));
	ATRY("convolution forward", step_make(&cv->fwd, cv->eng));
	// Backward data: diff_dst dy (f32 or bf16), weights, diff_src dx f32.
	ATRY("convolution backward data", dnnl_convolution_backward_data_desc_init(&d,
		alg, cv->wino ? &xl : &xf, &wl, &yl, strides, pad, pad));
	ATRY("convolution backward data",
		dnnl_primitive_desc_create(&cv->bwd_d.pd, &d, attr, cv->eng, cv->fwd.pd));
	ATRY("convolution backward data", step_make(&cv->bwd_d, cv->eng));
	// Backward weights: src x, diff_dst dy, diff_weights f32.
	ATRY("convolution backward weights", dnnl_convolution_backward_weights_desc_init(&d,
		alg, &xl, &dwd, NULL, &yl, strides, pad, pad));
	ATRY("convolution backward weights",
		dnnl_primitive_desc_create(&cv->bwd_w.pd, &d, attr, cv->eng, cv->fwd.pd));
	ATRY("convolution backward weights", step_make(&cv->bwd_w, cv->eng));

	// User memories: handles set for the length of one call.
	ATRY("memory", dnnl_memory_create(&cv->x_user, &xf, cv->eng, DNNL_MEMORY_NONE));
	ATRY("memory", dnnl_memory_create(&cv->dy_user, &yf, cv->eng, DNNL_MEMORY_NONE));
	ATRY("memory", dnnl_memory_create(&cv->y, &yf, cv->eng, DNNL_MEMORY_NONE));
	ATRY("memory", dnnl_memory_create(&cv->dx, &xf, cv->eng, DNNL_MEMORY_NONE));
	ATRY("memory", dnnl_memory_create(&cv->w_user, &wf, cv->eng, DNNL_MEMORY_NONE));
	ATRY("memory", dnnl_memory_create(&cv->dw_user, &wf, cv->eng, DNNL_MEMORY_NONE));
	if (bf16) {
		ATRY("memory", dnnl_memory_create(&cv->x_bf, &xl, cv->eng, DNNL_MEMORY_ALLOCATE));
		ATRY("memory", dnnl_memory_create(&cv->dy_bf, &yl, cv->eng, DNNL_MEMORY_ALLOCATE));
		ATRY("memory", dnnl_memory_create(&cv->x_bfu, &xl, cv->eng, DNNL_MEMORY_NONE));
		ATRY("memory", dnnl_memory_create(&cv->dy_bfu, &yl, cv->eng, DNNL_MEMORY_NONE));
	}
	if (cv->wino) {
		ATRY("winograd reorder", blocked(cv, &cv->x_in, n, h * w, c, &xl, &xf, 0, attr));
		ATRY("winograd reorder", blocked(cv, &cv->dx_out, n, h * w, c, &xl, &xf, 1, attr));
		ATRY("winograd reorder", blocked(cv, &cv->y_out, n, ho * wo, o, &yl, &yf, 1, attr));
		ATRY("winograd reorder", blocked(cv, &cv->dy_in, n, ho * wo, o, &yl, &yf, 0, attr));
	}
	ATRY("weights reorder", reordered_mem(cv,
		dnnl_primitive_desc_query_md(cv->fwd.pd, dnnl_query_weights_md, 0), &wf, 0,
		&cv->rw_f, &cv->w_f, attr));
	ATRY("weights reorder", reordered_mem(cv,
		dnnl_primitive_desc_query_md(cv->bwd_d.pd, dnnl_query_weights_md, 0), &wf, 0,
		&cv->rw_b, &cv->w_b, attr));
	ATRY("diff weights reorder", reordered_mem(cv,
		dnnl_primitive_desc_query_md(cv->bwd_w.pd, dnnl_query_diff_weights_md, 0), &wf, 1,
		&cv->rdw, &cv->dw_p, attr));
	dnnl_primitive_attr_destroy(attr);
#undef ATRY

	step *steps[] = {&cv->fwd, &cv->bwd_d, &cv->bwd_w, &cv->rw_f, &cv->rw_b, &cv->rdw,
		&cv->x_in.r, &cv->y_out.r, &cv->dy_in.r, &cv->dx_out.r};
	size_t sp = 0;
	for (int i = 0; i < 10; i++)
		if (steps[i]->spsize > sp) sp = steps[i]->spsize;
	if (sp > 0) {
		cv->spbuf = scratch_alloc(sp);
		if (!cv->spbuf) {
			*stage = "scratchpad";
			return dnnl_out_of_memory;
		}
		for (int i = 0; i < 10; i++)
			if (steps[i]->sp) TRY("scratchpad", dnnl_memory_set_data_handle(steps[i]->sp, cv->spbuf));
	}
	return dnnl_success;
}

int hcdnnl_conv_new(hcdnnl_conv **out, long n, long h, long w, long c, long o, long k,
		long s, long p, int bf16, int plainw, int wino, const char **stage) {
	*out = NULL;
	hcdnnl_conv *cv = calloc(1, sizeof *cv);
	if (!cv) {
		*stage = "allocation";
		return dnnl_out_of_memory;
	}
	int st = conv_new(cv, n, h, w, c, o, k, s, p, bf16, plainw, wino, stage);
	if (st != dnnl_success) {
		hcdnnl_conv_free(cv);
		return st;
	}
	*out = cv;
	return dnnl_success;
}

static void *handle(dnnl_memory_t m) {
	void *h = NULL;
	dnnl_memory_get_data_handle(m, &h);
	return h;
}

// set points m at a caller's buffer for one call; clear forgets it again,
// so that no Go pointer outlives the call.
static dnnl_status_t set(dnnl_memory_t m, const void *p) {
	return dnnl_memory_set_data_handle(m, (void *)p);
}

static void clear(dnnl_memory_t m) { dnnl_memory_set_data_handle(m, NULL); }

// operand makes *m the memory a primitive reads p (n floats) from: p
// itself through user, or in bf16 its conversion into bf; or, when p16
// is not NULL (bf16 only), the caller's bf16 copy p16 through bfu.
static dnnl_status_t operand(const hcdnnl_conv *cv, dnnl_memory_t user, dnnl_memory_t bf, dnnl_memory_t bfu,
		const float *p, const uint16_t *p16, long n, dnnl_memory_t *m) {
	if (p16) {
		*m = bfu;
		return set(bfu, p16);
	}
	if (cv->bf16) {
		hcdnnl_to_bf16(handle(bf), p, n);
		*m = bf;
		return dnnl_success;
	}
	*m = user;
	return set(user, p);
}

// weights makes *m the memory a primitive reads the weights w from: w
// itself, or reordered by r into packed (the primitive's format) when
// packed is not NULL, unless packed already holds generation gen of them
// (*have; gen 0 always reorders).
static dnnl_status_t weights(hcdnnl_conv *cv, step *r, dnnl_memory_t packed, const float *w,
		unsigned long gen, unsigned long *have, dnnl_memory_t *m) {
	RUN(set(cv->w_user, w));
	*m = cv->w_user;
	if (packed) {
		*m = packed;
		if (gen != 0 && gen == *have) return dnnl_success;
		*have = 0;
		RUN(reorder_run(r, cv->st, cv->w_user, packed));
		*have = gen;
	}
	return dnnl_success;
}

// in makes op's memory hold the caller's NHWC buffer p before a Winograd
// primitive reads it.
static dnnl_status_t in(hcdnnl_conv *cv, wop *op, dnnl_memory_t user, const float *p) {
	switch (op->how) {
	case ALIAS: return set(op->m, p);
	case COPY:
		nchw16c(handle(op->m), (float *)p, op->n, op->hw, op->ch, 1);
		return dnnl_success;
	}
	RUN(set(user, p));
	return reorder_run(&op->r, cv->st, user, op->m);
}

// out points op's memory at the caller's buffer p (ALIAS) before a
// Winograd primitive writes it; done copies it into p after, otherwise.
static dnnl_status_t out(wop *op, float *p) {
	return op->how == ALIAS ? set(op->m, p) : dnnl_success;
}

static dnnl_status_t done(hcdnnl_conv *cv, wop *op, dnnl_memory_t user, float *p) {
	switch (op->how) {
	case ALIAS: return dnnl_success;
	case COPY:
		nchw16c(handle(op->m), p, op->n, op->hw, op->ch, 0);
		return dnnl_success;
	}
	RUN(set(user, p));
	return reorder_run(&op->r, cv->st, op->m, user);
}

static dnnl_status_t conv_fwd(hcdnnl_conv *cv, const float *x, const uint16_t *x16, const float *w, unsigned long gen, float *y) {
	dnnl_memory_t src, wm;
	if (cv->wino) {
		RUN(in(cv, &cv->x_in, cv->x_user, x));
		RUN(weights(cv, &cv->rw_f, cv->w_f, w, gen, &cv->gen_f, &wm));
		RUN(out(&cv->y_out, y));
		dnnl_exec_arg_t a[3] = {{DNNL_ARG_SRC, cv->x_in.m}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DST, cv->y_out.m}};
		RUN(step_run(&cv->fwd, cv->st, 3, a));
		return done(cv, &cv->y_out, cv->y, y);
	}
	RUN(operand(cv, cv->x_user, cv->x_bf, cv->x_bfu, x, x16, cv->nx, &src));
	RUN(weights(cv, &cv->rw_f, cv->w_f, w, gen, &cv->gen_f, &wm));
	RUN(set(cv->y, y));
	dnnl_exec_arg_t a[3] = {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DST, cv->y}};
	return step_run(&cv->fwd, cv->st, 3, a);
}

// clear_blk forgets the caller's buffers in the blocked memories and the
// caller's bf16 operands.
static void clear_blk(hcdnnl_conv *cv) {
	wop *ops[] = {&cv->x_in, &cv->y_out, &cv->dy_in, &cv->dx_out};
	for (int i = 0; i < 4; i++)
		if (ops[i]->m && ops[i]->how == ALIAS) clear(ops[i]->m);
	if (cv->x_bfu) clear(cv->x_bfu);
	if (cv->dy_bfu) clear(cv->dy_bfu);
}

int hcdnnl_conv_fwd(hcdnnl_conv *cv, const float *x, const uint16_t *x16, const float *w, unsigned long gen, float *y) {
	one_thread();
	dnnl_status_t st = conv_fwd(cv, x, x16, w, gen, y);
	clear(cv->x_user);
	clear(cv->w_user);
	clear(cv->y);
	clear_blk(cv);
	return st;
}

static dnnl_status_t conv_bwd_data(hcdnnl_conv *cv, const float *dy, const uint16_t *dy16, const float *w, unsigned long gen, float *dx) {
	dnnl_memory_t ddst, wm;
	if (cv->wino) {
		RUN(in(cv, &cv->dy_in, cv->dy_user, dy));
		RUN(weights(cv, &cv->rw_b, cv->w_b, w, gen, &cv->gen_b, &wm));
		RUN(out(&cv->dx_out, dx));
		dnnl_exec_arg_t a[3] = {{DNNL_ARG_DIFF_DST, cv->dy_in.m}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DIFF_SRC, cv->dx_out.m}};
		RUN(step_run(&cv->bwd_d, cv->st, 3, a));
		return done(cv, &cv->dx_out, cv->dx, dx);
	}
	RUN(operand(cv, cv->dy_user, cv->dy_bf, cv->dy_bfu, dy, dy16, cv->ny, &ddst));
	RUN(weights(cv, &cv->rw_b, cv->w_b, w, gen, &cv->gen_b, &wm));
	RUN(set(cv->dx, dx));
	dnnl_exec_arg_t a[3] = {{DNNL_ARG_DIFF_DST, ddst}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DIFF_SRC, cv->dx}};
	return step_run(&cv->bwd_d, cv->st, 3, a);
}

int hcdnnl_conv_bwd_data(hcdnnl_conv *cv, const float *dy, const uint16_t *dy16, const float *w, unsigned long gen, float *dx) {
	one_thread();
	dnnl_status_t st = conv_bwd_data(cv, dy, dy16, w, gen, dx);
	clear(cv->dy_user);
	clear(cv->w_user);
	clear(cv->dx);
	clear_blk(cv);
	return st;
}

static dnnl_status_t conv_bwd_weights(hcdnnl_conv *cv, const float *x, const uint16_t *x16, const float *dy, const uint16_t *dy16, float *dw) {
	dnnl_memory_t src, ddst;
	if (cv->wino) {
		RUN(in(cv, &cv->x_in, cv->x_user, x));
		RUN(in(cv, &cv->dy_in, cv->dy_user, dy));
		src = cv->x_in.m;
		ddst = cv->dy_in.m;
	} else {
		RUN(operand(cv, cv->x_user, cv->x_bf, cv->x_bfu, x, x16, cv->nx, &src));
		RUN(operand(cv, cv->dy_user, cv->dy_bf, cv->dy_bfu, dy, dy16, cv->ny, &ddst));
	}
	RUN(set(cv->dw_user, dw));
	dnnl_memory_t dwm = cv->dw_p ? cv->dw_p : cv->dw_user;
	dnnl_exec_arg_t a[3] = {{DNNL_ARG_SRC, src}, {DNNL_ARG_DIFF_DST, ddst}, {DNNL_ARG_DIFF_WEIGHTS, dwm}};
	RUN(step_run(&cv->bwd_w, cv->st, 3, a));
	if (cv->dw_p) RUN(reorder_run(&cv->rdw, cv->st, cv->dw_p, cv->dw_user));
	return dnnl_success;
}

int hcdnnl_conv_bwd_weights(hcdnnl_conv *cv, const float *x, const uint16_t *x16, const float *dy, const uint16_t *dy16, float *dw) {
	one_thread();
	dnnl_status_t st = conv_bwd_weights(cv, x, x16, dy, dy16, dw);
	clear(cv->x_user);
	clear(cv->dy_user);
	clear(cv->dw_user);
	clear_blk(cv);
	return st;
}

static const char *impl_of(step *s) {
	const char *impl = NULL;
	if (!s->pd || dnnl_primitive_desc_query(s->pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success || !impl)
		return "";
	return impl;
}

const char *hcdnnl_conv_impl(hcdnnl_conv *cv, int which) {
	switch (which) {
	case 0: return impl_of(&cv->fwd);
	case 1: return impl_of(&cv->bwd_d);
	case 2: return impl_of(&cv->bwd_w);
	}
	return "";
}

// ---- matmul ----

struct hcdnnl_gemm {
	dnnl_engine_t eng;
	dnnl_stream_t st;
	int bf16, ta, tb; // bf16: 1 converts f32 operands, 2 takes bf16 ones
	long m, n, k, lda, ldb, ldc;
	step mm;
	dnnl_memory_t a, b, c; // the caller's; bf16 1: a and b own dense buffers
	void *spbuf;
};

void hcdnnl_gemm_free(hcdnnl_gemm *g) {
	if (!g) return;
	step_free(&g->mm);
	if (g->a) dnnl_memory_destroy(g->a);
	if (g->b) dnnl_memory_destroy(g->b);
	if (g->c) dnnl_memory_destroy(g->c);
	if (g->st) dnnl_stream_destroy(g->st);
	if (g->eng) dnnl_engine_destroy(g->eng);
	free(g->spbuf);
	free(g);
}

// operand_md describes a (rows x cols) operand of the product stored with
// leading dimension ld, transposed (stored cols x rows) when t.
static dnnl_status_t operand_md(dnnl_memory_desc_t *md, long rows, long cols, int t, long ld,
		dnnl_data_type_t dt) {
	dnnl_dims_t dims = {rows, cols};
	dnnl_dims_t strides = {ld, 1};
	if (t) {
		strides[0] = 1;
		strides[1] = ld;
	}
	return dnnl_memory_desc_init_by_strides(md, 2, dims, dt, strides);
}

static int gemm_new(hcdnnl_gemm *g, int acc, const char **stage) {
	one_thread();
	TRY("engine", dnnl_engine_create(&g->eng, dnnl_cpu, 0));
	TRY("stream", dnnl_stream_create(&g->st, g->eng, dnnl_stream_default_flags));
	dnnl_memory_desc_t a, b, c;
	if (g->bf16 == 1) {
		// Dense bf16 copies: leading dimension = stored width.
		TRY("memory desc", operand_md(&a, g->m, g->k, g->ta, g->ta ? g->m : g->k, dnnl_bf16));
		TRY("memory desc", operand_md(&b, g->k, g->n, g->tb, g->tb ? g->k : g->n, dnnl_bf16));
	} else if (g->bf16 == 2) {
		TRY("memory desc", operand_md(&a, g->m, g->k, g->ta, g->lda, dnnl_bf16));
		TRY("memory desc", operand_md(&b, g->k, g->n, g->tb, g->ldb, dnnl_bf16));
	} else {
		TRY("memory desc", operand_md(&a, g->m, g->k, g->ta, g->lda, dnnl_f32));
		TRY("memory desc", operand_md(&b, g->k, g->n, g->tb, g->ldb, dnnl_f32));
	}
	TRY("memory desc", operand_md(&c, g->m, g->n, 0, g->ldc, dnnl_f32));
	dnnl_matmul_desc_t d;
	TRY("matmul", dnnl_matmul_desc_init(&d, &a, &b, NULL, &c));
	dnnl_primitive_attr_t attr;
	TRY("attr", dnnl_primitive_attr_create(&attr));
	dnnl_post_ops_t po = NULL;
	dnnl_status_t st = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
	if (st == dnnl_success && acc) {
		st = dnnl_post_ops_create(&po);
		if (st == dnnl_success) st = dnnl_post_ops_append_sum(po, 1.0f);
		if (st == dnnl_success) st = dnnl_primitive_attr_set_post_ops(attr, po);
	}
	if (st == dnnl_success) st = dnnl_primitive_desc_create(&g->mm.pd, &d, attr, g->eng, NULL);
	if (po) dnnl_post_ops_destroy(po);
	dnnl_primitive_attr_destroy(attr);
	TRY("matmul", st);
	TRY("matmul", step_make(&g->mm, g->eng));
	void *init = g->bf16 == 1 ? DNNL_MEMORY_ALLOCATE : DNNL_MEMORY_NONE;
	TRY("memory", dnnl_memory_create(&g->a, &a, g->eng, init));
	TRY("memory", dnnl_memory_create(&g->b, &b, g->eng, init));
	TRY("memory", dnnl_memory_create(&g->c, &c, g->eng, DNNL_MEMORY_NONE));
	if (g->mm.spsize > 0) {
		g->spbuf = scratch_alloc(g->mm.spsize);
		if (!g->spbuf) {
			*stage = "scratchpad";
			return dnnl_out_of_memory;
		}
		TRY("scratchpad", dnnl_memory_set_data_handle(g->mm.sp, g->spbuf));
	}
	return dnnl_success;
}

int hcdnnl_gemm_new(hcdnnl_gemm **out, int ta, int tb, long m, long n, long k, long lda,
		long ldb, long ldc, int acc, int bf16, const char **stage) {
	*out = NULL;
	hcdnnl_gemm *g = calloc(1, sizeof *g);
	if (!g) {
		*stage = "allocation";
		return dnnl_out_of_memory;
	}
	g->bf16 = bf16;
	g->ta = ta;
	g->tb = tb;
	g->m = m;
	g->n = n;
	g->k = k;
	g->lda = lda;
	g->ldb = ldb;
	g->ldc = ldc;
	int st = gemm_new(g, acc, stage);
	if (st != dnnl_success) {
		hcdnnl_gemm_free(g);
		return st;
	}
	*out = g;
	return dnnl_success;
}

// dense_bf16 converts a rows x cols f32 matrix with leading dimension ld to
// a dense bf16 one.
static void dense_bf16(uint16_t *dst, const float *src, long rows, long cols, long ld) {
	if (ld == cols) {
		hcdnnl_to_bf16(dst, src, rows * cols);
		return;
	}
	for (long i = 0; i < rows; i++) hcdnnl_to_bf16(dst + i * cols, src + i * ld, cols);
}

// gemm_run computes c from a and b: float operands converted into the
// Gemm's dense bf16 buffers (bf16 1), else the caller's operands as they
// are (f32, or bf16 2: already bfloat16).
static dnnl_status_t gemm_run(hcdnnl_gemm *g, const void *a, const void *b, float *c) {
	if (g->bf16 == 1) {
		dense_bf16(handle(g->a), a, g->ta ? g->k : g->m, g->ta ? g->m : g->k, g->lda);
		dense_bf16(handle(g->b), b, g->tb ? g->n : g->k, g->tb ? g->k : g->n, g->ldb);
	} else {
		RUN(set(g->a, a));
		RUN(set(g->b, b));
	}
	RUN(set(g->c, c));
	dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, g->a}, {DNNL_ARG_WEIGHTS, g->b}, {DNNL_ARG_DST, g->c}};
	return step_run(&g->mm, g->st, 3, args);
}

// gemm_call is gemm_run on one thread, the caller's buffers let go after.
static int gemm_call(hcdnnl_gemm *g, const void *a, const void *b, float *c) {
	one_thread();
	dnnl_status_t st = gemm_run(g, a, b, c);
	if (g->bf16 != 1) {
		clear(g->a);
		clear(g->b);
	}
	clear(g->c);
	return st;
}

int hcdnnl_gemm_run(hcdnnl_gemm *g, const float *a, const float *b, float *c) {
	return gemm_call(g, a, b, c);
}

int hcdnnl_gemm_run_bf16(hcdnnl_gemm *g, const uint16_t *a, const uint16_t *b, float *c) {
	return gemm_call(g, a, b, c);
}

const char *hcdnnl_gemm_impl(hcdnnl_gemm *g) { return impl_of(&g->mm); }

int hcdnnl_sgemm(int ta, int tb, long m, long n, long k, float alpha, const float *a,
		long lda, const float *b, long ldb, float beta, float *c, long ldc) {
	one_thread();
	return dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
