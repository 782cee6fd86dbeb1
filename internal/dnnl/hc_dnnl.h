// C side of package dnnl: oneDNN primitives wrapped so that one Go call is
// one C call (handles set, primitives executed, handles cleared).

#ifndef HC_DNNL_H
#define HC_DNNL_H

#include <stddef.h>
#include <stdint.h>

typedef struct hc_conv hc_conv;
typedef struct hc_gemm hc_gemm;

// hc_conv_new builds the primitives; on failure it returns the dnnl status
// and sets *stage to what failed (a static string).
int hc_conv_new(hc_conv **out, long n, long h, long w, long c, long o, long k,
		long s, long p, int bf16, int plainw, const char **stage);
int hc_conv_fwd(hc_conv *cv, const float *x, const float *w, float *y);
int hc_conv_bwd_data(hc_conv *cv, const float *dy, const float *w, float *dx);
int hc_conv_bwd_weights(hc_conv *cv, const float *x, const float *dy, float *dw);
// which: 0 forward, 1 backward data, 2 backward weights.
const char *hc_conv_impl(hc_conv *cv, int which);
void hc_conv_free(hc_conv *cv);

int hc_gemm_new(hc_gemm **out, int ta, int tb, long m, long n, long k, long lda,
		long ldb, long ldc, int acc, int bf16, const char **stage);
int hc_gemm_run(hc_gemm *g, const float *a, const float *b, float *c);
const char *hc_gemm_impl(hc_gemm *g);
void hc_gemm_free(hc_gemm *g);

int hc_sgemm(int ta, int tb, long m, long n, long k, float alpha, const float *a,
		long lda, const float *b, long ldb, float beta, float *c, long ldc);

// hc_to_bf16 converts n floats to bfloat16 (round to nearest even, denormals
// to zero as VCVTNEPS2BF16 does); hc_to_bf16_plain is the portable loop.
void hc_to_bf16(uint16_t *dst, const float *src, long n);
void hc_to_bf16_plain(uint16_t *dst, const float *src, long n);
int hc_bf16_vector(void);

// hc_cpu_bf16: bit 0 AVX512-BF16, bit 1 AMX-BF16 (cpuid), bit 2 AMX tile
// state enabled by the OS (XCR0 bits 17 and 18).
int hc_cpu_bf16(void);
const char *hc_isa(void);
int hc_omp_max_threads(void);

#endif
