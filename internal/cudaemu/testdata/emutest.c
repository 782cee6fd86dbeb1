// emutest: the emulated device's test program, one check per mode (argv[1]),
// driven by cudaemu_test.go. It prints "ok" when every check passed and
// "FAIL line: what" otherwise (exit 1).
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

// The entry points under test, declared as a client of the real libraries
// would (CUDA 12 prototypes).
typedef int CUresult;
typedef int CUdevice;
typedef uint64_t CUdeviceptr;
typedef void *CUcontext, *CUstream, *CUevent, *CUmodule, *CUfunction;
CUresult cuInit(unsigned int);
CUresult cuDriverGetVersion(int *);
CUresult cuGetErrorName(CUresult, const char **);
CUresult cuDeviceGetCount(int *);
CUresult cuDeviceGet(CUdevice *, int);
CUresult cuDeviceGetName(char *, int, CUdevice);
CUresult cuDeviceGetAttribute(int *, int, CUdevice);
CUresult cuDeviceTotalMem_v2(size_t *, CUdevice);
CUresult cuDevicePrimaryCtxRetain(CUcontext *, CUdevice);
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice);
CUresult cuCtxSetCurrent(CUcontext);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
CUresult cuMemFree_v2(CUdeviceptr);
CUresult cuMemHostAlloc(void **, size_t, unsigned int);
CUresult cuMemFreeHost(void *);
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr, const void *, size_t, CUstream);
CUresult cuMemcpyDtoHAsync_v2(void *, CUdeviceptr, size_t, CUstream);
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr, CUdeviceptr, size_t, CUstream);
CUresult cuMemsetD32Async(CUdeviceptr, unsigned int, size_t, CUstream);
CUresult cuStreamCreate(CUstream *, unsigned int);
CUresult cuStreamDestroy_v2(CUstream);
CUresult cuStreamSynchronize(CUstream);
CUresult cuStreamWaitEvent(CUstream, CUevent, unsigned int);
CUresult cuEventCreate(CUevent *, unsigned int);
CUresult cuEventRecord(CUevent, CUstream);
CUresult cuEventSynchronize(CUevent);
CUresult cuEventDestroy_v2(CUevent);
CUresult cuModuleLoadData(CUmodule *, const void *);
CUresult cuModuleGetFunction(CUfunction *, CUmodule, const char *);
CUresult cuModuleUnload(CUmodule);
CUresult cuLaunchKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                        unsigned, CUstream, void **, void **);

typedef void *cublasHandle_t;
int cublasCreate_v2(cublasHandle_t *);
int cublasDestroy_v2(cublasHandle_t);
int cublasSetStream_v2(cublasHandle_t, CUstream);
int cublasSetMathMode(cublasHandle_t, int);
int cublasSgemm_v2(cublasHandle_t, int, int, int, int, int, const float *, const float *, int,
                   const float *, int, const float *, float *, int);
int cublasGemmEx(cublasHandle_t, int, int, int, int, int, const void *, const void *, int, int,
                 const void *, int, int, const void *, void *, int, int, int, int);

typedef void *nvrtcProgram;
int nvrtcVersion(int *, int *);
int nvrtcGetNumSupportedArchs(int *);
int nvrtcGetSupportedArchs(int *);
int nvrtcCreateProgram(nvrtcProgram *, const char *, const char *, int, const char *const *,
                       const char *const *);
int nvrtcCompileProgram(nvrtcProgram, int, const char *const *);
int nvrtcGetPTXSize(nvrtcProgram, size_t *);
int nvrtcGetPTX(nvrtcProgram, char *);
int nvrtcGetProgramLogSize(nvrtcProgram, size_t *);
int nvrtcGetProgramLog(nvrtcProgram, char *);
int nvrtcDestroyProgram(nvrtcProgram *);
const char *nvrtcGetErrorString(int);

typedef struct {
	char internal[128];
} ncclUniqueId;
typedef void *ncclComm_t;
int ncclGetVersion(int *);
int ncclGetUniqueId(ncclUniqueId *);
int ncclCommInitRank(ncclComm_t *, int, ncclUniqueId, int);
int ncclAllReduce(const void *, void *, size_t, int, int, ncclComm_t, CUstream);
int ncclCommAbort(ncclComm_t);
int ncclCommDestroy(ncclComm_t);
int ncclCommGetAsyncError(ncclComm_t, int *);
const char *ncclGetErrorString(int);

static int failures;
#define CHECK(cond, ...)                                                                      \
	do {                                                                                      \
		if (!(cond)) {                                                                        \
			failures++;                                                                       \
			printf("FAIL %d: %s: ", __LINE__, #cond);                                         \
			printf(__VA_ARGS__);                                                              \
			printf("\n");                                                                     \
			fflush(stdout);                                                                   \
		}                                                                                     \
	} while (0)
// EQ checks a call's result code.
#define EQ(call, want)                                                                        \
	do {                                                                                      \
		int got_ = (call);                                                                    \
		CHECK(got_ == (want), "got %d, want %d", got_, (want));                               \
	} while (0)

static CUcontext open_device(int ordinal) {
	CUcontext ctx = NULL;
	CUdevice dev;
	EQ(cuInit(0), 0);
	EQ(cuDeviceGet(&dev, ordinal), 0);
	EQ(cuDevicePrimaryCtxRetain(&ctx, dev), 0);
	EQ(cuCtxSetCurrent(ctx), 0);
	return ctx;
}

static void *alloc_on_thread(void *arg) {
	CUdeviceptr p;
	*(int *)arg = cuMemAlloc_v2(&p, 64);
	return NULL;
}

// ---- mode mem: devices, memory, copies and their bounds, streams, events

static void mode_mem(void) {
	CUdeviceptr p = 0;
	EQ(cuMemAlloc_v2(&p, 16), 3); // before cuInit: CUDA_ERROR_NOT_INITIALIZED
	int v;
	EQ(cuDriverGetVersion(&v), 0);
	CHECK(v >= 12000, "driver version %d", v);
	EQ(cuInit(0), 0);
	int n = 0;
	EQ(cuDeviceGetCount(&n), 0);
	CHECK(n == 2, "%d devices, want 2 (HPCTRAIN_CUDAEMU_DEVICES=2)", n);
	CUdevice dev;
	EQ(cuDeviceGet(&dev, 2), 101);
	EQ(cuDeviceGet(&dev, 1), 0);
	char name[64];
	EQ(cuDeviceGetName(name, sizeof name, dev), 0);
	CHECK(strcmp(name, "cudaemu (host memory)") == 0, "name %s", name);
	int maj = 0, min = 0;
	EQ(cuDeviceGetAttribute(&maj, 75, dev), 0);
	EQ(cuDeviceGetAttribute(&min, 76, dev), 0);
	CHECK(maj == 9 && min == 0, "compute capability %d.%d, want 9.0 (HPCTRAIN_CUDAEMU_CC)", maj, min);
	size_t total = 0;
	EQ(cuDeviceTotalMem_v2(&total, dev), 0);
	CHECK(total == (size_t)1 << 20, "total memory %zu, want 1 MiB (HPCTRAIN_CUDAEMU_MEM)", total);
	const char *s = NULL;
	EQ(cuGetErrorName(2, &s), 0);
	CHECK(s && strcmp(s, "CUDA_ERROR_OUT_OF_MEMORY") == 0, "name of 2: %s", s);
	EQ(cuGetErrorName(12345, &s), 1);

	EQ(cuMemAlloc_v2(&p, 16), 201); // no current context
	CUcontext ctx;
	EQ(cuDevicePrimaryCtxRetain(&ctx, dev), 0);
	EQ(cuCtxSetCurrent(ctx), 0);
	int other = -1;
	pthread_t th;
	pthread_create(&th, NULL, alloc_on_thread, &other);
	pthread_join(th, NULL);
	CHECK(other == 201, "alloc on a thread without a current context: %d, want 201", other);

	EQ(cuMemAlloc_v2(&p, 0), 1);
	EQ(cuMemAlloc_v2(&p, 2 << 20), 2); // beyond HPCTRAIN_CUDAEMU_MEM
	CUdeviceptr a, b;
	enum { N = 1000 };
	EQ(cuMemAlloc_v2(&a, N * 4), 0);
	EQ(cuMemAlloc_v2(&b, N * 4), 0);
	CHECK(a % 256 == 0 && b % 256 == 0, "alignment %llx %llx", (unsigned long long)a,
	      (unsigned long long)b);
	float *host = NULL, back[N];
	EQ(cuMemHostAlloc((void **)&host, N * 4, 1), 0);
	for (int i = 0; i < N; i++)
		host[i] = (float)i * 0.5f;
	CUstream st;
	EQ(cuStreamCreate(&st, 1), 0);
	EQ(cuMemcpyHtoDAsync_v2(a, host, N * 4, st), 0);
	EQ(cuMemcpyDtoDAsync_v2(b, a, N * 4, st), 0);
	EQ(cuMemsetD32Async(a + 8, 0x3f800000u, 10, st), 0); // 1.0f into a[2..11]
	EQ(cuMemcpyDtoHAsync_v2(back, b, N * 4, st), 0);
	EQ(cuStreamSynchronize(st), 0);
	int same = 1;
	for (int i = 0; i < N; i++)
		same &= back[i] == (float)i * 0.5f;
	CHECK(same, "round trip host -> a -> b -> host changed values");
	EQ(cuMemcpyDtoHAsync_v2(back, a, N * 4, NULL), 0);
	CHECK(back[1] == 0.5f && back[3] == 1.0f && back[11] == 1.0f && back[12] == 6.0f,
	      "memset: %g %g %g %g", back[1], back[3], back[11], back[12]);

	// Bounds: a copy, memset or free that is not inside one live allocation.
	EQ(cuMemcpyHtoDAsync_v2(a + 4, host, N * 4, st), 1);
	EQ(cuMemcpyDtoHAsync_v2(back, a + 4, N * 4, st), 1);
	EQ(cuMemcpyDtoDAsync_v2(a, b + 4, N * 4, st), 1);
	EQ(cuMemsetD32Async(b + 4, 0, N, st), 1);
	EQ(cuMemcpyHtoDAsync_v2(a - 256, host, 4, st), 1);
	EQ(cuMemcpyHtoDAsync_v2(a + N * 4 - 4, host, 4, st), 0); // the last element is fine
	EQ(cuMemFree_v2(a + 4), 1);
	EQ(cuMemFree_v2(a), 0);
	EQ(cuMemFree_v2(a), 1);
	EQ(cuMemcpyHtoDAsync_v2(a, host, 4, st), 1); // freed
	EQ(cuMemFreeHost(host + 1), 1);
	EQ(cuMemFreeHost(host), 0);

	CUevent ev;
	EQ(cuEventCreate(&ev, 2), 0);
	EQ(cuEventRecord(ev, st), 0);
	EQ(cuStreamWaitEvent(NULL, ev, 0), 0);
	EQ(cuEventSynchronize(ev), 0);
	EQ(cuEventDestroy_v2(ev), 0);
	EQ(cuEventDestroy_v2(ev), 400);
	EQ(cuStreamDestroy_v2(st), 0);
	EQ(cuStreamDestroy_v2(st), 400);
	EQ(cuMemcpyDtoHAsync_v2(back, b, 4, st), 400); // destroyed stream
	EQ(cuMemFree_v2(b), 0);
	EQ(cuDevicePrimaryCtxRelease_v2(dev), 0);
	EQ(cuDevicePrimaryCtxRelease_v2(dev), 201);
}

static void mode_nodevice(void) {
	EQ(cuInit(0), 100);
	const char *s = NULL;
	EQ(cuGetErrorName(100, &s), 0);
	CHECK(s && strcmp(s, "CUDA_ERROR_NO_DEVICE") == 0, "%s", s);
}

// mode_visible prints what cuInit left visible: "NODEVICE" when it failed
// with CUDA_ERROR_NO_DEVICE, else "BUS b" for each ordinal's PCI bus (the
// emulated device i is on bus i + 1).
static void mode_visible(void) {
	CUresult r = cuInit(0);
	if (r == 100) {
		printf("NODEVICE\n");
		return;
	}
	EQ(r, 0);
	int n = -1;
	EQ(cuDeviceGetCount(&n), 0);
	for (int i = 0; i < n; i++) {
		CUdevice dev;
		int bus = -1;
		EQ(cuDeviceGet(&dev, i), 0);
		EQ(cuDeviceGetAttribute(&bus, 33, dev), 0);
		printf("BUS %d\n", bus);
	}
	CUdevice dev;
	EQ(cuDeviceGet(&dev, n), 101); // CUDA_ERROR_INVALID_DEVICE past the last
}

// ---- kernels

static char *read_file(const char *path) {
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *b = calloc(1, (size_t)n + 1);
	if (fread(b, 1, (size_t)n, f) != (size_t)n)
		n = 0;
	fclose(f);
	return b;
}

// compile returns the program's PTX, or NULL with the log printed.
static char *compile(const char *src, const char *name, int want) {
	nvrtcProgram prog;
	EQ(nvrtcCreateProgram(&prog, src, name, 0, NULL, NULL), 0);
	const char *opts[] = {"--gpu-architecture=compute_90", "-DSCALE=3", "--use_fast_math"};
	int r = nvrtcCompileProgram(prog, 3, opts);
	CHECK(r == want, "compile %s: %d (%s), want %d", name, r, nvrtcGetErrorString(r), want);
	size_t n = 0;
	EQ(nvrtcGetProgramLogSize(prog, &n), 0);
	char *log = malloc(n);
	EQ(nvrtcGetProgramLog(prog, log), 0);
	CHECK(strlen(log) + 1 == n, "log size %zu for a log of %zu bytes", n, strlen(log));
	char *ptx = NULL;
	if (r == 0) {
		EQ(nvrtcGetPTXSize(prog, &n), 0);
		ptx = malloc(n);
		EQ(nvrtcGetPTX(prog, ptx), 0);
		CHECK(strlen(ptx) + 1 == n, "PTX size %zu for %zu bytes", n, strlen(ptx));
	} else {
		printf("LOG %s\nENDLOG\n", log);
		EQ(nvrtcGetPTXSize(prog, &n), 3);
	}
	free(log);
	EQ(nvrtcDestroyProgram(&prog), 0);
	CHECK(prog == NULL, "program not cleared");
	return ptx;
}

// mode_convert launches to_bf16 (gpu/kernels/convert.cu) over n values with
// a grid smaller than n, and prints each input and output for the Go test.
static void mode_convert(const char *file) {
	open_device(0);
	char *src = read_file(file);
	CHECK(src, "read %s", file);
	if (!src)
		return;
	char *ptx = compile(src, "convert.cu", 0);
	if (!ptx)
		return;
	CUmodule mod;
	EQ(cuModuleLoadData(&mod, ptx), 0);
	EQ(cuModuleLoadData(&mod, "//\n// Generated by NVIDIA NVVM Compiler\n"), 218);
	CUfunction f;
	EQ(cuModuleGetFunction(&f, mod, "no_such_kernel"), 500);
	EQ(cuModuleGetFunction(&f, mod, "to_bf16"), 0);
	enum { N = 1000 };
	float x[N];
	unsigned short y[N];
	for (int i = 0; i < N; i++) // values whose low bits exercise rounding, and specials
		x[i] = (float)((i * 2654435761u) % 100003u) / 977.0f - 50.0f;
	x[0] = INFINITY;
	x[1] = -0.0f;
	x[2] = NAN;
	x[3] = 1.0f + 1.0f / 256.0f; // a tie: rounds to even (1.0)
	x[4] = 1.0f + 3.0f / 256.0f; // a tie: rounds up to even
	CUdeviceptr dx, dy;
	EQ(cuMemAlloc_v2(&dx, sizeof x), 0);
	EQ(cuMemAlloc_v2(&dy, sizeof y), 0);
	EQ(cuMemsetD32Async(dy, 0xffffffffu, sizeof y / 4, NULL), 0);
	EQ(cuMemcpyHtoDAsync_v2(dx, x, sizeof x, NULL), 0);
	long long n = N;
	void *args[] = {&dy, &dx, &n};
	EQ(cuLaunchKernel(f, 3, 1, 1, 64, 1, 1, 0, NULL, args, NULL), 0); // 192 threads, grid-stride
	EQ(cuLaunchKernel(f, 3, 1, 1, 64, 1, 1, 16, NULL, args, NULL), 1); // shared memory
	EQ(cuLaunchKernel(f, 1, 1, 1, 2048, 1, 1, 0, NULL, args, NULL), 1); // block too large
	EQ(cuLaunchKernel(f, 1, 1, 1, 32, 32, 2, 0, NULL, args, NULL), 1); // 2048 threads
	EQ(cuMemcpyDtoHAsync_v2(y, dy, sizeof y, NULL), 0);
	for (int i = 0; i < N; i++) {
		uint32_t u;
		memcpy(&u, &x[i], 4);
		printf("VAL %08x %04x\n", u, y[i]);
	}
	EQ(cuModuleUnload(mod), 0);
	EQ(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL), 400); // unloaded module
	free(ptx);
	free(src);
}

// mode_launch checks the order threads run in, the built-in variables,
// arguments of every scalar type, -D macros, and a __launch_bounds__ kernel.
static const char launch_src[] =
	"#define IDX3(v) ((v).x + 100 * (v).y + 10000 * (v).z)\n"
	"extern \"C\" __global__ void order(int* out, int* next, long long big, float f, double d,\n"
	"                                  unsigned int u, const float* __restrict__ unused) {\n"
	"\tint k = (*next)++;\n"
	"\tout[2 * k] = IDX3(blockIdx) + 1000000 * (int)(big - 5000000000LL) + (int)(f * d) + u;\n"
	"\tout[2 * k + 1] = IDX3(threadIdx) + 1000000 * (IDX3(blockDim) == 10203 && IDX3(gridDim) == 20102);\n"
	"}\n"
	"// __global__ void in_a_comment( is not a kernel\n"
	"extern \"C\" __global__ void __launch_bounds__(256, 2) scale(float* x, int n) {\n"
	"\tfor (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)\n"
	"\t\tx[i] = x[i] * SCALE + rsqrtf(4.0f) + __uint_as_float(__float_as_uint(0.25f));\n"
	"}\n";

static void mode_launch(void) {
	open_device(0);
	char *ptx = compile(launch_src, "launch.cu", 0);
	if (!ptx)
		return;
	CUmodule mod;
	CUfunction order, scale;
	EQ(cuModuleLoadData(&mod, ptx), 0);
	EQ(cuModuleGetFunction(&order, mod, "order"), 0);
	EQ(cuModuleGetFunction(&scale, mod, "scale"), 0);
	EQ(cuModuleGetFunction(&scale, mod, "in_a_comment"), 500);
	EQ(cuModuleGetFunction(&scale, mod, "scale"), 0);
	// grid (2,1,2), block (3,2,1): 24 threads
	enum { T = 24 };
	int host[2 * T], zero = 0;
	CUdeviceptr out, next;
	EQ(cuMemAlloc_v2(&out, sizeof host), 0);
	EQ(cuMemAlloc_v2(&next, 4), 0);
	EQ(cuMemcpyHtoDAsync_v2(next, &zero, 4, NULL), 0);
	long long big = 5000000000LL + 7;
	float f = 2.5f;
	double d = 4.0;
	unsigned int u = 3;
	CUdeviceptr unused = 0;
	void *args[] = {&out, &next, &big, &f, &d, &u, &unused};
	CUstream st;
	EQ(cuStreamCreate(&st, 0), 0);
	EQ(cuLaunchKernel(order, 2, 1, 2, 3, 2, 1, 0, st, args, NULL), 0);
	EQ(cuMemcpyDtoHAsync_v2(host, out, sizeof host, st), 0);
	int k = 0, inorder = 1;
	for (unsigned bz = 0; bz < 2; bz++)
		for (unsigned bx = 0; bx < 2; bx++)
			for (unsigned ty = 0; ty < 2; ty++)
				for (unsigned tx = 0; tx < 3; tx++, k++) {
					int wb = (int)(bx + 10000 * bz) + 7000000 + 10 + 3;
					int wt = (int)(tx + 100 * ty) + 1000000;
					if (host[2 * k] != wb || host[2 * k + 1] != wt) {
						inorder = 0;
						printf("thread %d: block %d thread %d, want %d %d\n", k, host[2 * k],
						       host[2 * k + 1], wb, wt);
					}
				}
	CHECK(inorder, "threads ran out of order or saw wrong built-ins or arguments");

	float x[100];
	for (int i = 0; i < 100; i++)
		x[i] = (float)i;
	CUdeviceptr dx;
	EQ(cuMemAlloc_v2(&dx, sizeof x), 0);
	EQ(cuMemcpyHtoDAsync_v2(dx, x, sizeof x, st), 0);
	int n = 100;
	void *sargs[] = {&dx, &n};
	EQ(cuLaunchKernel(scale, 7, 1, 1, 5, 1, 1, 0, st, sargs, NULL), 0);
	EQ(cuMemcpyDtoHAsync_v2(x, dx, sizeof x, st), 0);
	int ok = 1;
	for (int i = 0; i < 100; i++)
		ok &= x[i] == (float)i * 3 + 0.75f;
	CHECK(ok, "scale: x[1] = %g, want 3.75", x[1]);
	free(ptx);
}

static void mode_compile_error(void) {
	compile("extern \"C\" __global__ void k(float* x) {\n"
	        "\tx[0] = 1;\n"
	        "\tx[1] = undefined_name;\n"
	        "}\n",
	        "bad.cu", 6);
	compile("extern \"C\" __global__ void k(float* x) {\n"
	        "\t__syncthreads();\n"
	        "}\n",
	        "sync.cu", 6);
	compile("extern \"C\" __global__ void k(float* x) {\n"
	        "\t__shared__ float tile[32];\n"
	        "\tx[0] = tile[0];\n"
	        "}\n",
	        "shared.cu", 6);
	nvrtcProgram prog;
	EQ(nvrtcCreateProgram(&prog, "extern \"C\" __global__ void k(){}", "k.cu", 0, NULL, NULL), 0);
	const char *bad[] = {"--gpu-architecture=compute_x"};
	EQ(nvrtcCompileProgram(prog, 1, bad), 5);
	const char *arch[] = {"-arch", "sm_80"};
	EQ(nvrtcCompileProgram(prog, 2, arch), 0);
	// NVRTC 12.4 has neither Kepler nor Blackwell (NVRTC_ERROR_INVALID_OPTION).
	const char *kepler[] = {"--gpu-architecture=compute_35"};
	EQ(nvrtcCompileProgram(prog, 1, kepler), 5);
	const char *blackwell[] = {"--gpu-architecture=compute_100"};
	EQ(nvrtcCompileProgram(prog, 1, blackwell), 5);
	int na = 0, list[64];
	EQ(nvrtcGetNumSupportedArchs(&na), 0);
	CHECK(na == 14, "%d architectures, want 14", na);
	EQ(nvrtcGetSupportedArchs(list), 0);
	CHECK(list[0] == 50 && list[na - 1] == 90, "architectures %d to %d, want 50 to 90", list[0], list[na - 1]);
	EQ(nvrtcDestroyProgram(&prog), 0);
	int maj, min;
	EQ(nvrtcVersion(&maj, &min), 0);
	CHECK(maj == 12, "NVRTC %d.%d", maj, min);
}

// ---- cuBLAS

static uint32_t bits(float f) {
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}
static float from_bits(uint32_t u) {
	float f;
	memcpy(&f, &u, 4);
	return f;
}
static float tf32_ref(float f) { // round to 10 mantissa bits, to nearest even
	uint32_t u = bits(f);
	u += 0xfffu + ((u >> 13) & 1u);
	return from_bits(u & ~0x1fffu);
}

// naive: C = alpha op(A) op(B) + beta C, column-major, in double.
static void naive(int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
                  const float *b, int ldb, float beta, float *c, int ldc) {
	for (int j = 0; j < n; j++)
		for (int i = 0; i < m; i++) {
			double s = 0;
			for (int l = 0; l < k; l++) {
				double av = ta ? a[l + (size_t)i * lda] : a[i + (size_t)l * lda];
				double bv = tb ? b[j + (size_t)l * ldb] : b[l + (size_t)j * ldb];
				s += av * bv;
			}
			c[i + (size_t)j * ldc] = (float)(alpha * s + beta * c[i + (size_t)j * ldc]);
		}
}

static float maxdiff(const float *x, const float *y, int n) {
	float d = 0;
	for (int i = 0; i < n; i++)
		if (fabsf(x[i] - y[i]) > d || x[i] != x[i] || y[i] != y[i])
			d = x[i] == x[i] && y[i] == y[i] ? fabsf(x[i] - y[i]) : INFINITY;
	return d;
}

static CUdeviceptr upload(const void *p, size_t bytes) {
	CUdeviceptr d = 0;
	EQ(cuMemAlloc_v2(&d, bytes), 0);
	EQ(cuMemcpyHtoDAsync_v2(d, p, bytes, NULL), 0);
	return d;
}

static float rnd(unsigned *s) {
	*s = *s * 1103515245u + 12345u;
	return (float)((*s >> 8) & 0xffff) / 65536.0f - 0.5f;
}

static void mode_gemm(void) {
	open_device(0);
	cublasHandle_t h;
	EQ(cublasCreate_v2(&h), 0);
	CUstream st;
	EQ(cuStreamCreate(&st, 1), 0);
	EQ(cublasSetStream_v2(h, st), 0);
	enum { M = 13, N = 7, K = 9, LD = 20 };
	unsigned seed = 1;
	float a[LD * LD], b[LD * LD], c0[LD * LD], c[LD * LD], want[LD * LD];
	for (int i = 0; i < LD * LD; i++) {
		a[i] = rnd(&seed);
		b[i] = rnd(&seed);
		c0[i] = rnd(&seed);
	}
	CUdeviceptr da = upload(a, sizeof a), db = upload(b, sizeof b), dc = upload(c0, sizeof c0);
	float alpha = 1.5f, beta = -0.5f;
	for (int ta = 0; ta < 2; ta++)
		for (int tb = 0; tb < 2; tb++) {
			int lda = ta ? K + 1 : M + 2, ldb = tb ? N + 3 : K, ldc = M + 1;
			EQ(cuMemcpyHtoDAsync_v2(dc, c0, sizeof c0, NULL), 0);
			EQ(cublasSgemm_v2(h, ta, tb, M, N, K, &alpha, (float *)da, lda, (float *)db, ldb, &beta,
			                  (float *)dc, ldc),
			   0);
			EQ(cuMemcpyDtoHAsync_v2(c, dc, sizeof c, NULL), 0);
			memcpy(want, c0, sizeof want);
			naive(ta, tb, M, N, K, alpha, a, lda, b, ldb, beta, want, ldc);
			float d = maxdiff(c, want, LD * LD); // also checks C outside m x n is untouched
			CHECK(d < 1e-5f, "Sgemm ta=%d tb=%d: max diff %g", ta, tb, d);
		}
	// beta = 0: C is not read, so NaN in C does not propagate.
	float nan[LD * LD], zero = 0;
	for (int i = 0; i < LD * LD; i++)
		nan[i] = NAN;
	EQ(cuMemcpyHtoDAsync_v2(dc, nan, sizeof nan, NULL), 0);
	EQ(cublasSgemm_v2(h, 0, 0, M, N, K, &alpha, (float *)da, M, (float *)db, K, &zero, (float *)dc, M), 0);
	EQ(cuMemcpyDtoHAsync_v2(c, dc, sizeof c, NULL), 0);
	memset(want, 0, sizeof want);
	naive(0, 0, M, N, K, alpha, a, M, b, K, 0, want, M);
	CHECK(maxdiff(c, want, M * N) < 1e-5f, "beta = 0 with NaN in C: %g", maxdiff(c, want, M * N));

	// Arguments as cuBLAS checks them.
	EQ(cublasSgemm_v2(h, 0, 0, M, N, K, &alpha, (float *)da, M - 1, (float *)db, K, &beta, (float *)dc, M), 7);
	EQ(cublasSgemm_v2(h, 1, 0, M, N, K, &alpha, (float *)da, K - 1, (float *)db, K, &beta, (float *)dc, M), 7);
	EQ(cublasSgemm_v2(h, 0, 0, M, N, K, &alpha, (float *)da, M, (float *)db, K - 1, &beta, (float *)dc, M), 7);
	EQ(cublasSgemm_v2(h, 0, 0, M, N, K, &alpha, (float *)da, M, (float *)db, K, &beta, (float *)dc, M - 1), 7);
	EQ(cublasSgemm_v2(h, 0, 3, M, N, K, &alpha, (float *)da, M, (float *)db, K, &beta, (float *)dc, M), 7);
	EQ(cublasSgemm_v2(h, 0, 0, -1, N, K, &alpha, (float *)da, M, (float *)db, K, &beta, (float *)dc, M), 7);
	// Operands beyond their allocations (C of 60 x 7 with ld 60 is 1680 bytes > 1600).
	EQ(cublasSgemm_v2(h, 0, 0, 60, N, K, &alpha, (float *)da, 60, (float *)db, K, &beta, (float *)dc, 60), 7);

	// TF32: the product of the operands rounded to TF32, unlike fp32's.
	float ta32[M * K], tb32[K * N];
	for (int i = 0; i < M * K; i++)
		ta32[i] = 1.0f + (float)(i % 7 + 1) / 16384.0f; // below TF32's resolution of 2^-10
	for (int i = 0; i < K * N; i++)
		tb32[i] = 1.0f + (float)(i % 5 + 1) / 8192.0f;
	CUdeviceptr dta = upload(ta32, sizeof ta32), dtb = upload(tb32, sizeof tb32);
	float c32[M * N], ctf[M * N], wtf[M * N] = {0}, w32[M * N] = {0}, ra[M * K], rb[K * N];
	float one = 1.0f;
	EQ(cublasSgemm_v2(h, 0, 0, M, N, K, &one, (float *)dta, M, (float *)dtb, K, &zero, (float *)dc, M), 0);
	EQ(cuMemcpyDtoHAsync_v2(c32, dc, sizeof c32, NULL), 0);
	EQ(cublasSetMathMode(h, 3), 0);
	EQ(cublasSgemm_v2(h, 0, 0, M, N, K, &one, (float *)dta, M, (float *)dtb, K, &zero, (float *)dc, M), 0);
	EQ(cuMemcpyDtoHAsync_v2(ctf, dc, sizeof ctf, NULL), 0);
	for (int i = 0; i < M * K; i++)
		ra[i] = tf32_ref(ta32[i]);
	for (int i = 0; i < K * N; i++)
		rb[i] = tf32_ref(tb32[i]);
	naive(0, 0, M, N, K, 1, ra, M, rb, K, 0, wtf, M);
	naive(0, 0, M, N, K, 1, ta32, M, tb32, K, 0, w32, M);
	CHECK(maxdiff(ctf, wtf, M * N) < 1e-5f, "TF32 vs rounded operands: %g", maxdiff(ctf, wtf, M * N));
	CHECK(maxdiff(c32, w32, M * N) < 1e-5f, "fp32: %g", maxdiff(c32, w32, M * N));
	CHECK(maxdiff(ctf, c32, M * N) > 1e-3f, "TF32 and fp32 agree: %g", maxdiff(ctf, c32, M * N));
	// GemmEx with compute 32F follows the math mode; 32F_PEDANTIC does not.
	EQ(cublasGemmEx(h, 0, 0, M, N, K, &one, (void *)dta, 0, M, (void *)dtb, 0, K, &zero, (void *)dc, 0, M, 68, -1), 0);
	EQ(cuMemcpyDtoHAsync_v2(c, dc, sizeof ctf, NULL), 0);
	CHECK(maxdiff(c, ctf, M * N) == 0, "GemmEx 32F in TF32 mode differs from Sgemm: %g", maxdiff(c, ctf, M * N));
	EQ(cublasGemmEx(h, 0, 0, M, N, K, &one, (void *)dta, 0, M, (void *)dtb, 0, K, &zero, (void *)dc, 0, M, 69, -1), 0);
	EQ(cuMemcpyDtoHAsync_v2(c, dc, sizeof ctf, NULL), 0);
	CHECK(maxdiff(c, c32, M * N) == 0, "GemmEx 32F_PEDANTIC is not fp32: %g", maxdiff(c, c32, M * N));
	EQ(cublasSetMathMode(h, 0), 0);
	EQ(cublasGemmEx(h, 0, 0, M, N, K, &one, (void *)dta, 0, M, (void *)dtb, 0, K, &zero, (void *)dc, 0, M, 77, -1), 0);
	EQ(cuMemcpyDtoHAsync_v2(c, dc, sizeof ctf, NULL), 0);
	CHECK(maxdiff(c, ctf, M * N) == 0, "GemmEx FAST_TF32 differs from TF32 mode: %g", maxdiff(c, ctf, M * N));
	EQ(cublasSetMathMode(h, 7), 7);

	// bf16 and fp16 operands: values exact in both, fp32 accumulation.
	for (int t = 0; t < 2; t++) {
		int type = t == 0 ? 14 : 2;
		for (int ta = 0; ta < 2; ta++)
			for (int tb = 0; tb < 2; tb++) {
				unsigned short ha[M * K], hb[K * N];
				float fa[M * K], fb[K * N];
				for (int i = 0; i < M * K; i++) {
					int q = (int)(i * 37 % 61) - 30; // q/32: exact in bf16 and fp16
					fa[i] = (float)q / 32.0f;
					if (type == 14)
						ha[i] = (unsigned short)(bits(fa[i]) >> 16);
					else // fp16 of q/32: sign, exponent and 10 mantissa bits
						ha[i] = 0;
				}
				for (int i = 0; i < K * N; i++) {
					int q = (int)(i * 53 % 41) - 20;
					fb[i] = (float)q / 16.0f;
					if (type == 14)
						hb[i] = (unsigned short)(bits(fb[i]) >> 16);
				}
				if (type == 2) { // convert through the fp16 layout by hand
					for (int i = 0; i < M * K + K * N; i++) {
						float v = i < M * K ? fa[i] : fb[i - M * K];
						unsigned short hv = 0;
						if (v != 0) {
							uint32_t u = bits(v);
							hv = (unsigned short)(((u >> 16) & 0x8000u) |
							                      ((((u >> 23) & 0xff) - 112) << 10) |
							                      ((u >> 13) & 0x3ffu));
						}
						if (i < M * K)
							ha[i] = hv;
						else
							hb[i - M * K] = hv;
					}
				}
				int lda = ta ? K : M, ldb = tb ? N : K;
				CUdeviceptr dha = upload(ha, sizeof ha), dhb = upload(hb, sizeof hb);
				EQ(cuMemcpyHtoDAsync_v2(dc, c0, sizeof c0, NULL), 0);
				EQ(cublasGemmEx(h, ta, tb, M, N, K, &alpha, (void *)dha, type, lda, (void *)dhb, type,
				                ldb, &beta, (void *)dc, 0, M, 68, -1),
				   0);
				EQ(cuMemcpyDtoHAsync_v2(c, dc, sizeof c, NULL), 0);
				memcpy(want, c0, sizeof want);
				naive(ta, tb, M, N, K, alpha, fa, lda, fb, ldb, beta, want, M);
				CHECK(maxdiff(c, want, M * N) < 1e-5f, "GemmEx type %d ta=%d tb=%d: %g", type, ta, tb,
				      maxdiff(c, want, M * N));
				// bf16 output: the fp32 result rounded
				if (ta == 0 && tb == 0) {
					unsigned short hc[M * N];
					CUdeviceptr dhc;
					EQ(cuMemAlloc_v2(&dhc, sizeof hc), 0);
					EQ(cublasGemmEx(h, 0, 0, M, N, K, &one, (void *)dha, type, M, (void *)dhb, type, K,
					                &zero, (void *)dhc, type, M, 68, -1),
					   0);
					EQ(cuMemcpyDtoHAsync_v2(hc, dhc, sizeof hc, NULL), 0);
					memset(want, 0, sizeof want);
					naive(0, 0, M, N, K, 1, fa, M, fb, K, 0, want, M);
					if (type == 14) {
						int same = 1;
						for (int i = 0; i < M * N; i++) {
							uint32_t u = bits(want[i]);
							u += 0x7fffu + ((u >> 16) & 1u);
							same &= hc[i] == (unsigned short)(u >> 16);
						}
						CHECK(same, "GemmEx bf16 output is not the rounded fp32 result");
					}
					EQ(cuMemFree_v2(dhc), 0);
				}
				EQ(cuMemFree_v2(dha), 0);
				EQ(cuMemFree_v2(dhb), 0);
			}
	}
	EQ(cublasGemmEx(h, 0, 0, M, N, K, &one, (void *)da, 14, M, (void *)db, 2, K, &zero, (void *)dc, 0, M, 68, -1), 15);
	EQ(cublasGemmEx(h, 0, 0, M, N, K, &one, (void *)da, 0, M, (void *)db, 0, K, &zero, (void *)dc, 0, M, 64, -1), 15);
	EQ(cublasDestroy_v2(h), 0);
}

// ---- NCCL

static ncclComm_t init_comm(int rank, int size, int shared_id, int want) {
	ncclUniqueId id;
	if (rank == 0 || !shared_id)
		EQ(ncclGetUniqueId(&id), 0);
	if (shared_id)
		MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
	ncclComm_t comm = NULL;
	EQ(ncclCommInitRank(&comm, size, id, rank), want);
	return comm;
}

static void mode_nccl(void) {
	int provided, rank, size;
	MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	open_device(0);
	int v;
	EQ(ncclGetVersion(&v), 0);
	CHECK(v >= 21000, "version %d", v);
	ncclComm_t comm = init_comm(rank, size, 1, 0);
	enum { N = 1001 };
	float x[N], y[N];
	for (int i = 0; i < N; i++)
		x[i] = (float)(rank + 1) * (float)i;
	CUdeviceptr dx = upload(x, sizeof x), dy;
	EQ(cuMemAlloc_v2(&dy, sizeof y), 0);
	CUstream st;
	EQ(cuStreamCreate(&st, 1), 0);
	float tri = (float)(size * (size + 1) / 2);
	EQ(ncclAllReduce((void *)dx, (void *)dy, N, 7, 0, comm, st), 0); // out of place
	EQ(cuMemcpyDtoHAsync_v2(y, dy, sizeof y, st), 0);
	int ok = 1;
	for (int i = 0; i < N; i++)
		ok &= y[i] == tri * (float)i;
	CHECK(ok, "out-of-place sum: y[1] = %g, want %g", y[1], tri);
	EQ(cuMemcpyDtoHAsync_v2(y, dx, sizeof y, st), 0);
	CHECK(y[1] == (float)(rank + 1), "out of place changed the send buffer");
	EQ(ncclAllReduce((void *)dx, (void *)dx, N, 7, 0, comm, st), 0); // in place
	EQ(cuMemcpyDtoHAsync_v2(y, dx, sizeof y, st), 0);
	ok = 1;
	for (int i = 0; i < N; i++)
		ok &= y[i] == tri * (float)i;
	CHECK(ok, "in-place sum: y[1] = %g", y[1]);
	EQ(ncclAllReduce((void *)dx, (void *)dx, N, 7, 4, comm, st), 0); // average of equal values
	EQ(cuMemcpyDtoHAsync_v2(y, dx, sizeof y, st), 0);
	CHECK(y[2] == tri * 2, "average %g, want %g", y[2], tri * 2);

	double dv[3] = {rank + 0.25, -rank, 1e300};
	int iv[2] = {rank * 10, -rank};
	CUdeviceptr ddv = upload(dv, sizeof dv), div = upload(iv, sizeof iv);
	EQ(ncclAllReduce((void *)ddv, (void *)ddv, 3, 8, 0, comm, NULL), 0);
	EQ(cuMemcpyDtoHAsync_v2(dv, ddv, sizeof dv, NULL), 0);
	CHECK(dv[0] == size * 0.25 + (size * (size - 1)) / 2, "double sum %g", dv[0]);
	EQ(ncclAllReduce((void *)div, (void *)div, 2, 2, 2, comm, NULL), 0); // int32 max
	EQ(cuMemcpyDtoHAsync_v2(iv, div, sizeof iv, NULL), 0);
	CHECK(iv[0] == (size - 1) * 10 && iv[1] == 0, "int max %d %d", iv[0], iv[1]);

	// Misuse, checked locally before any communication.
	EQ(ncclAllReduce((void *)dx, (void *)dy, N + 1, 7, 0, comm, st), 4); // beyond the buffers
	EQ(ncclAllReduce((void *)dx, (void *)(dx + 4), 10, 7, 0, comm, st), 4); // overlap
	EQ(ncclAllReduce((void *)dx, (void *)dy, N, 9, 0, comm, st), 4); // bf16: not emulated

	int err = -1;
	EQ(ncclCommGetAsyncError(comm, &err), 0);
	CHECK(err == 0, "async error %d before abort", err);
	EQ(ncclCommAbort(comm), 0);
	EQ(ncclCommGetAsyncError(comm, &err), 0);
	CHECK(err == 2, "async error %d after abort, want ncclSystemError", err);
	EQ(ncclAllReduce((void *)dx, (void *)dy, N, 7, 0, comm, st), 5);
	EQ(ncclCommDestroy(comm), 0);
	CHECK(strlen(ncclGetErrorString(5)) > 0, "error string");

	comm = init_comm(rank, size, 1, 0); // a second communicator works after an abort
	EQ(ncclAllReduce((void *)dy, (void *)dy, N, 7, 0, comm, st), 0);
	EQ(cuMemcpyDtoHAsync_v2(y, dy, sizeof y, st), 0);
	CHECK(y[1] == tri * size, "second communicator: %g", y[1]);
	EQ(ncclCommDestroy(comm), 0);

	int all;
	MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	failures = all;
	MPI_Finalize();
}

static void mode_nccl_badid(void) {
	int provided, rank, size;
	MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	init_comm(rank, size, 0, 5); // every rank its own id: ncclInvalidUsage on all
	ncclComm_t c = init_comm(rank, size, 1, 0); // then a broadcast id works
	EQ(ncclCommDestroy(c), 0);
	MPI_Finalize();
}

// mode_nccl_self: a process that never initialised MPI; NCCL does it.
static void mode_nccl_self(void) {
	open_device(0);
	ncclUniqueId id;
	EQ(ncclGetUniqueId(&id), 0);
	ncclComm_t comm;
	EQ(ncclCommInitRank(&comm, 2, id, 0), 5); // a world of 1
	EQ(ncclCommInitRank(&comm, 1, id, 1), 4);
	ncclUniqueId junk = {{0}};
	EQ(ncclCommInitRank(&comm, 1, junk, 0), 4);
	EQ(ncclCommInitRank(&comm, 1, id, 0), 0);
	float x[4] = {1, 2, 3, 4};
	CUdeviceptr dx = upload(x, sizeof x);
	EQ(ncclAllReduce((void *)dx, (void *)dx, 4, 7, 0, comm, NULL), 0);
	EQ(cuMemcpyDtoHAsync_v2(x, dx, sizeof x, NULL), 0);
	CHECK(x[3] == 4, "world of 1: %g", x[3]);
	EQ(ncclCommDestroy(comm), 0);
	int init = 0;
	MPI_Initialized(&init);
	CHECK(init, "MPI not initialised by ncclCommInitRank");
}

int main(int argc, char **argv) {
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 2) {
		fprintf(stderr, "usage: emutest MODE [ARGS]\n");
		return 2;
	}
	const char *m = argv[1];
	if (strcmp(m, "mem") == 0)
		mode_mem();
	else if (strcmp(m, "nodevice") == 0)
		mode_nodevice();
	else if (strcmp(m, "visible") == 0)
		mode_visible();
	else if (strcmp(m, "convert") == 0 && argc == 3)
		mode_convert(argv[2]);
	else if (strcmp(m, "launch") == 0)
		mode_launch();
	else if (strcmp(m, "compile-error") == 0)
		mode_compile_error();
	else if (strcmp(m, "gemm") == 0)
		mode_gemm();
	else if (strcmp(m, "nccl") == 0)
		mode_nccl();
	else if (strcmp(m, "nccl-badid") == 0)
		mode_nccl_badid();
	else if (strcmp(m, "nccl-self") == 0)
		mode_nccl_self();
	else {
		fprintf(stderr, "emutest: unknown mode %s\n", m);
		return 2;
	}
	if (failures) {
		printf("%d failures\n", failures);
		return 1;
	}
	printf("ok\n");
	return 0;
}
