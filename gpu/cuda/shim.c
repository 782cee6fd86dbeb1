// shim.c: the function pointers dlsym fills and the hc_ wrappers cgo calls
// (see shim.h).
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

#include "shim.h"

#define HC_DEFINE(ret, name, params, args) \
	static ret(*p_##name) params;       \
	ret hc_##name params { return p_##name args; }
HC_CUDA_FNS(HC_DEFINE)
HC_CUBLAS_FNS(HC_DEFINE)
HC_NVRTC_FNS(HC_DEFINE)
HC_NCCL_FNS(HC_DEFINE)

struct hc_sym {
	const char *name;
	void **slot;
};

#define HC_ENTRY(ret, name, params, args) {#name, (void **)&p_##name},
static struct hc_sym cuda_syms[] = {HC_CUDA_FNS(HC_ENTRY){0, 0}};
static struct hc_sym cublas_syms[] = {HC_CUBLAS_FNS(HC_ENTRY){0, 0}};
static struct hc_sym nvrtc_syms[] = {HC_NVRTC_FNS(HC_ENTRY){0, 0}};
static struct hc_sym nccl_syms[] = {HC_NCCL_FNS(HC_ENTRY){0, 0}};

void *hc_open(const char *name, char *err, size_t errlen) {
	dlerror();
	void *h = dlopen(name, RTLD_NOW | RTLD_GLOBAL);
	if (!h) {
		const char *e = dlerror();
		if (!e)
			e = "dlopen failed";
		strncpy(err, e, errlen - 1);
		err[errlen - 1] = 0;
	}
	return h;
}

const char *hc_resolve(void *h, int lib) {
	struct hc_sym *t;
	switch (lib) {
	case HC_LIB_CUDA: t = cuda_syms; break;
	case HC_LIB_CUBLAS: t = cublas_syms; break;
	case HC_LIB_NVRTC: t = nvrtc_syms; break;
	case HC_LIB_NCCL: t = nccl_syms; break;
	default: return "(unknown library)";
	}
	for (; t->name; t++) {
		void *f = dlsym(h, t->name);
		if (!f)
			return t->name;
		*t->slot = f;
	}
	return 0;
}

void hc_close(void *h) { dlclose(h); }

// NVRTC's list of architectures (nvrtcGetNumSupportedArchs and
// nvrtcGetSupportedArchs, from NVRTC 11.2; looked up apart from the rest,
// since NVRTC 11.0 and 11.1 lack them).
static int (*p_nvrtcGetNumSupportedArchs)(int *);
static int (*p_nvrtcGetSupportedArchs)(int *);

void hc_nvrtc_resolve_archs(void *h) {
	p_nvrtcGetNumSupportedArchs = (int (*)(int *))dlsym(h, "nvrtcGetNumSupportedArchs");
	p_nvrtcGetSupportedArchs = (int (*)(int *))dlsym(h, "nvrtcGetSupportedArchs");
}

int hc_nvrtc_supported_archs(int *out, int max) {
	int n = 0;
	if (!p_nvrtcGetNumSupportedArchs || !p_nvrtcGetSupportedArchs)
		return -1;
	if (p_nvrtcGetNumSupportedArchs(&n) != 0 || n < 0 || n > max)
		return -2;
	if (p_nvrtcGetSupportedArchs(out) != 0)
		return -2;
	return n;
}

cublasStatus_t hc_cublas_sgemm(cublasHandle_t h, int ta, int tb, int m, int n, int k, float alpha, CUdeviceptr a, int lda, CUdeviceptr b, int ldb, float beta, CUdeviceptr c, int ldc) {
	return p_cublasSgemm_v2(h, ta, tb, m, n, k, &alpha, (const float *)(uintptr_t)a, lda,
	                        (const float *)(uintptr_t)b, ldb, &beta, (float *)(uintptr_t)c, ldc);
}

cublasStatus_t hc_gemmex(cublasHandle_t h, int ta, int tb, int m, int n, int k, float alpha, CUdeviceptr a, int at, int lda, CUdeviceptr b, int bt, int ldb, float beta, CUdeviceptr c, int ct, int ldc) {
	// CUBLAS_COMPUTE_32F (68): fp32 accumulation and fp32 alpha, beta;
	// CUBLAS_GEMM_DEFAULT (-1).
	return p_cublasGemmEx(h, ta, tb, m, n, k, &alpha, (const void *)(uintptr_t)a, at, lda,
	                      (const void *)(uintptr_t)b, bt, ldb, &beta, (void *)(uintptr_t)c, ct, ldc, 68, -1);
}

ncclResult_t hc_nccl_unique_id(void *out) {
	ncclUniqueId id;
	ncclResult_t r = p_ncclGetUniqueId(&id);
	memcpy(out, &id, sizeof id);
	return r;
}

ncclResult_t hc_nccl_init_rank(ncclComm_t *comm, int nranks, const void *id, int rank) {
	ncclUniqueId u;
	memcpy(&u, id, sizeof u);
	return p_ncclCommInitRank(comm, nranks, u, rank);
}

ncclResult_t hc_nccl_allreduce_sum_f32(CUdeviceptr send, CUdeviceptr recv, size_t count, ncclComm_t comm, CUstream s) {
	// ncclFloat32 (7), ncclSum (0)
	return p_ncclAllReduce((const void *)(uintptr_t)send, (void *)(uintptr_t)recv, count, 7, 0, comm, s);
}

ncclResult_t hc_nccl_async_error(ncclComm_t comm, int *async) {
	ncclResult_t a = 0;
	ncclResult_t r = p_ncclCommGetAsyncError(comm, &a);
	*async = a;
	return r;
}
