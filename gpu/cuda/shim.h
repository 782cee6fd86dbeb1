// shim.h: the few CUDA, cuBLAS, NVRTC and NCCL types and prototypes the
// package calls, written from the public headers' documented signatures (no
// CUDA headers at build time). Each library's functions are listed once
// (X-macros); shim.c turns each entry into a function pointer filled by
// dlsym and a hc_<name> wrapper cgo can call.
#ifndef HPCTRAIN_CUDA_SHIM_H
#define HPCTRAIN_CUDA_SHIM_H

#include <stddef.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;

typedef int cublasStatus_t;
typedef struct cublasContext *cublasHandle_t;

typedef int nvrtcResult;
typedef struct _nvrtcProgram *nvrtcProgram;

typedef int ncclResult_t;
typedef struct ncclComm *ncclComm_t;
typedef struct { char internal[128]; } ncclUniqueId;

// X(return type, name, (parameters), (arguments))
#define HC_CUDA_FNS(X) \
	X(CUresult, cuInit, (unsigned int a), (a)) \
	X(CUresult, cuDriverGetVersion, (int *a), (a)) \
	X(CUresult, cuGetErrorName, (CUresult a, const char **b), (a, b)) \
	X(CUresult, cuDeviceGetCount, (int *a), (a)) \
	X(CUresult, cuDeviceGet, (CUdevice *a, int b), (a, b)) \
	X(CUresult, cuDeviceGetName, (char *a, int b, CUdevice c), (a, b, c)) \
	X(CUresult, cuDeviceGetAttribute, (int *a, int b, CUdevice c), (a, b, c)) \
	X(CUresult, cuDeviceTotalMem_v2, (size_t *a, CUdevice b), (a, b)) \
	X(CUresult, cuDevicePrimaryCtxRetain, (CUcontext *a, CUdevice b), (a, b)) \
	X(CUresult, cuDevicePrimaryCtxRelease_v2, (CUdevice a), (a)) \
	X(CUresult, cuCtxSetCurrent, (CUcontext a), (a)) \
	X(CUresult, cuMemAlloc_v2, (CUdeviceptr *a, size_t b), (a, b)) \
	X(CUresult, cuMemFree_v2, (CUdeviceptr a), (a)) \
	X(CUresult, cuMemHostAlloc, (void **a, size_t b, unsigned int c), (a, b, c)) \
	X(CUresult, cuMemFreeHost, (void *a), (a)) \
	X(CUresult, cuMemcpyHtoDAsync_v2, (CUdeviceptr a, const void *b, size_t c, CUstream d), (a, b, c, d)) \
	X(CUresult, cuMemcpyDtoHAsync_v2, (void *a, CUdeviceptr b, size_t c, CUstream d), (a, b, c, d)) \
	X(CUresult, cuMemcpyDtoDAsync_v2, (CUdeviceptr a, CUdeviceptr b, size_t c, CUstream d), (a, b, c, d)) \
	X(CUresult, cuMemsetD32Async, (CUdeviceptr a, unsigned int b, size_t c, CUstream d), (a, b, c, d)) \
	X(CUresult, cuStreamCreate, (CUstream *a, unsigned int b), (a, b)) \
	X(CUresult, cuStreamDestroy_v2, (CUstream a), (a)) \
	X(CUresult, cuStreamSynchronize, (CUstream a), (a)) \
	X(CUresult, cuStreamWaitEvent, (CUstream a, CUevent b, unsigned int c), (a, b, c)) \
	X(CUresult, cuEventCreate, (CUevent *a, unsigned int b), (a, b)) \
	X(CUresult, cuEventRecord, (CUevent a, CUstream b), (a, b)) \
	X(CUresult, cuEventSynchronize, (CUevent a), (a)) \
	X(CUresult, cuEventDestroy_v2, (CUevent a), (a)) \
	X(CUresult, cuModuleLoadData, (CUmodule *a, const void *b), (a, b)) \
	X(CUresult, cuModuleGetFunction, (CUfunction *a, CUmodule b, const char *c), (a, b, c)) \
	X(CUresult, cuModuleUnload, (CUmodule a), (a)) \
	X(CUresult, cuLaunchKernel, (CUfunction a, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by, unsigned int bz, unsigned int shm, CUstream s, void **p, void **e), (a, gx, gy, gz, bx, by, bz, shm, s, p, e))

#define HC_CUBLAS_FNS(X) \
	X(cublasStatus_t, cublasCreate_v2, (cublasHandle_t *a), (a)) \
	X(cublasStatus_t, cublasDestroy_v2, (cublasHandle_t a), (a)) \
	X(cublasStatus_t, cublasSetStream_v2, (cublasHandle_t a, CUstream b), (a, b)) \
	X(cublasStatus_t, cublasSetMathMode, (cublasHandle_t a, int b), (a, b)) \
	X(cublasStatus_t, cublasSgemm_v2, (cublasHandle_t h, int ta, int tb, int m, int n, int k, const float *al, const float *A, int lda, const float *B, int ldb, const float *be, float *C, int ldc), (h, ta, tb, m, n, k, al, A, lda, B, ldb, be, C, ldc)) \
	X(cublasStatus_t, cublasGemmEx, (cublasHandle_t h, int ta, int tb, int m, int n, int k, const void *al, const void *A, int at, int lda, const void *B, int bt, int ldb, const void *be, void *C, int ct, int ldc, int comp, int algo), (h, ta, tb, m, n, k, al, A, at, lda, B, bt, ldb, be, C, ct, ldc, comp, algo))

#define HC_NVRTC_FNS(X) \
	X(nvrtcResult, nvrtcVersion, (int *a, int *b), (a, b)) \
	X(nvrtcResult, nvrtcCreateProgram, (nvrtcProgram *a, const char *b, const char *c, int d, const char *const *e, const char *const *f), (a, b, c, d, e, f)) \
	X(nvrtcResult, nvrtcCompileProgram, (nvrtcProgram a, int b, const char *const *c), (a, b, c)) \
	X(nvrtcResult, nvrtcGetPTXSize, (nvrtcProgram a, size_t *b), (a, b)) \
	X(nvrtcResult, nvrtcGetPTX, (nvrtcProgram a, char *b), (a, b)) \
	X(nvrtcResult, nvrtcGetProgramLogSize, (nvrtcProgram a, size_t *b), (a, b)) \
	X(nvrtcResult, nvrtcGetProgramLog, (nvrtcProgram a, char *b), (a, b)) \
	X(nvrtcResult, nvrtcDestroyProgram, (nvrtcProgram *a), (a)) \
	X(const char *, nvrtcGetErrorString, (nvrtcResult a), (a))

#define HC_NCCL_FNS(X) \
	X(ncclResult_t, ncclGetVersion, (int *a), (a)) \
	X(ncclResult_t, ncclGetUniqueId, (ncclUniqueId *a), (a)) \
	X(ncclResult_t, ncclCommInitRank, (ncclComm_t *a, int b, ncclUniqueId c, int d), (a, b, c, d)) \
	X(ncclResult_t, ncclAllReduce, (const void *a, void *b, size_t c, int d, int e, ncclComm_t f, CUstream g), (a, b, c, d, e, f, g)) \
	X(ncclResult_t, ncclCommAbort, (ncclComm_t a), (a)) \
	X(ncclResult_t, ncclCommDestroy, (ncclComm_t a), (a)) \
	X(ncclResult_t, ncclCommGetAsyncError, (ncclComm_t a, ncclResult_t *b), (a, b)) \
	X(const char *, ncclGetErrorString, (ncclResult_t a), (a))

#define HC_DECLARE(ret, name, params, args) ret hc_##name params;
HC_CUDA_FNS(HC_DECLARE)
HC_CUBLAS_FNS(HC_DECLARE)
HC_NVRTC_FNS(HC_DECLARE)
HC_NCCL_FNS(HC_DECLARE)

void hc_nvrtc_resolve_archs(void *h);
int hc_nvrtc_supported_archs(int *out, int max);

// Libraries, as hc_open and hc_resolve number them.
enum { HC_LIB_CUDA, HC_LIB_CUBLAS, HC_LIB_NVRTC, HC_LIB_NCCL };

// hc_open dlopens name (RTLD_NOW | RTLD_GLOBAL); on failure it returns NULL
// with dlerror's message in err.
void *hc_open(const char *name, char *err, size_t errlen);
// hc_resolve fills library lib's function pointers from handle h; it
// returns NULL, or the name of the first symbol h lacks.
const char *hc_resolve(void *h, int lib);
void hc_close(void *h);

// Wrappers that keep Go pointers and by-value structs out of the calls.
cublasStatus_t hc_cublas_sgemm(cublasHandle_t h, int ta, int tb, int m, int n, int k, float alpha, CUdeviceptr a, int lda, CUdeviceptr b, int ldb, float beta, CUdeviceptr c, int ldc);
cublasStatus_t hc_gemmex(cublasHandle_t h, int ta, int tb, int m, int n, int k, float alpha, CUdeviceptr a, int at, int lda, CUdeviceptr b, int bt, int ldb, float beta, CUdeviceptr c, int ct, int ldc);
ncclResult_t hc_nccl_unique_id(void *out);
ncclResult_t hc_nccl_init_rank(ncclComm_t *comm, int nranks, const void *id, int rank);
ncclResult_t hc_nccl_allreduce_sum_f32(CUdeviceptr send, CUdeviceptr recv, size_t count, ncclComm_t comm, CUstream s);
// hc_nccl_async_error returns the call's result, and the communicator's
// asynchronous error in *async.
ncclResult_t hc_nccl_async_error(ncclComm_t comm, int *async);
#endif
