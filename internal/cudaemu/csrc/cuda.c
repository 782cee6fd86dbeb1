// cuda.c: the emulated CUDA driver (libcuda.so.1). Device memory is host
// memory; every stream operation runs at once, on the calling thread.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu.h"

typedef int CUresult;
typedef int CUdevice;
typedef uint64_t CUdeviceptr;
typedef struct emu_ctx *CUcontext;
typedef struct emu_stream *CUstream;
typedef struct emu_event *CUevent;
typedef struct emu_module *CUmodule;
typedef struct emu_function *CUfunction;

enum {
	CUDA_SUCCESS = 0,
	CUDA_ERROR_INVALID_VALUE = 1,
	CUDA_ERROR_OUT_OF_MEMORY = 2,
	CUDA_ERROR_NOT_INITIALIZED = 3,
	CUDA_ERROR_NO_DEVICE = 100,
	CUDA_ERROR_INVALID_DEVICE = 101,
	CUDA_ERROR_INVALID_CONTEXT = 201,
	CUDA_ERROR_INVALID_PTX = 218,
	CUDA_ERROR_INVALID_HANDLE = 400,
	CUDA_ERROR_NOT_FOUND = 500,
	CUDA_ERROR_NOT_SUPPORTED = 801,
};

static const struct {
	int code;
	const char *name;
} error_names[] = {
	{0, "CUDA_SUCCESS"},
	{1, "CUDA_ERROR_INVALID_VALUE"},
	{2, "CUDA_ERROR_OUT_OF_MEMORY"},
	{3, "CUDA_ERROR_NOT_INITIALIZED"},
	{100, "CUDA_ERROR_NO_DEVICE"},
	{101, "CUDA_ERROR_INVALID_DEVICE"},
	{201, "CUDA_ERROR_INVALID_CONTEXT"},
	{218, "CUDA_ERROR_INVALID_PTX"},
	{400, "CUDA_ERROR_INVALID_HANDLE"},
	{500, "CUDA_ERROR_NOT_FOUND"},
	{801, "CUDA_ERROR_NOT_SUPPORTED"},
};

#define MAX_DEVICES 64
#define ALIGN 256
#define MODULE_MARKER "// cudaemu module\n"

struct emu_ctx {
	int device;
	int refs; // primary context retains
};

struct emu_stream {
	uint32_t magic;
};
struct emu_event {
	uint32_t magic;
};
struct emu_module {
	uint32_t magic;
	void *handle;
};
typedef void (*launcher_fn)(unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void **);
struct emu_function {
	uint32_t magic;
	launcher_fn launch;
	struct emu_module *module;
};

#define STREAM_MAGIC 0x5354524dU
#define EVENT_MAGIC 0x4556454eU
#define MODULE_MAGIC 0x4d4f4455U
#define FUNCTION_MAGIC 0x46554e43U

// Everything below is guarded by mu.
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int initialized;
static int ndevices;        // the devices CUDA_VISIBLE_DEVICES leaves
static int phys[MAX_DEVICES]; // ordinal -> emulated device (its PCI bus is phys + 1)
static int cc_major = 8, cc_minor = 0;
static size_t total_mem = (size_t)16 << 30;
static size_t used_mem;
static struct emu_ctx contexts[MAX_DEVICES];

// A sorted set of live ranges: device allocations and pinned host buffers.
struct range {
	uint64_t start;
	size_t bytes;
};
struct rangeset {
	struct range *r;
	size_t n, cap;
};
static struct rangeset device_allocs, host_allocs;
// Live handles, so that a stale or foreign one is an error, not a crash.
struct handleset {
	void **h;
	size_t n, cap;
};
static struct handleset streams, events, modules, functions;

static __thread CUcontext current;

static void emu_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void emu_log(const char *fmt, ...) {
	char buf[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	fprintf(stderr, "cudaemu: %s\n", buf);
}

// rs_upper returns the index of the first range whose start is > addr.
static size_t rs_upper(const struct rangeset *s, uint64_t addr) {
	size_t lo = 0, hi = s->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (s->r[mid].start <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static int rs_add(struct rangeset *s, uint64_t start, size_t bytes) {
	if (s->n == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 64;
		struct range *r = realloc(s->r, cap * sizeof *r);
		if (!r)
			return 0;
		s->r = r;
		s->cap = cap;
	}
	size_t i = rs_upper(s, start);
	memmove(&s->r[i + 1], &s->r[i], (s->n - i) * sizeof *s->r);
	s->r[i].start = start;
	s->r[i].bytes = bytes;
	s->n++;
	return 1;
}

// rs_remove removes the range starting exactly at start; its size goes to
// *bytes. It returns 0 when there is none.
static int rs_remove(struct rangeset *s, uint64_t start, size_t *bytes) {
	size_t i = rs_upper(s, start);
	if (i == 0 || s->r[i - 1].start != start)
		return 0;
	*bytes = s->r[i - 1].bytes;
	memmove(&s->r[i - 1], &s->r[i], (s->n - i) * sizeof *s->r);
	s->n--;
	return 1;
}

// rs_contains reports whether [addr, addr+bytes) lies inside one range.
static int rs_contains(const struct rangeset *s, uint64_t addr, size_t bytes) {
	size_t i = rs_upper(s, addr);
	if (i == 0)
		return 0;
	const struct range *r = &s->r[i - 1];
	return addr - r->start <= r->bytes && bytes <= r->bytes - (addr - r->start);
}

static int hs_add(struct handleset *s, void *h) {
	if (s->n == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 16;
		void **n = realloc(s->h, cap * sizeof *n);
		if (!n)
			return 0;
		s->h = n;
		s->cap = cap;
	}
	s->h[s->n++] = h;
	return 1;
}

static int hs_has(const struct handleset *s, const void *h) {
	for (size_t i = 0; i < s->n; i++)
		if (s->h[i] == h)
			return 1;
	return 0;
}

static int hs_remove(struct handleset *s, const void *h) {
	for (size_t i = 0; i < s->n; i++)
		if (s->h[i] == h) {
			s->h[i] = s->h[--s->n];
			return 1;
		}
	return 0;
}

EMU_EXPORT int cudaemu_check_range(const char *call, uint64_t addr, size_t bytes) {
	pthread_mutex_lock(&mu);
	int ok = rs_contains(&device_allocs, addr, bytes);
	pthread_mutex_unlock(&mu);
	if (!ok)
		emu_log("%s: device range [0x%" PRIx64 ", +%zu) is not inside one live allocation", call, addr,
		        bytes);
	return ok;
}

// need_context checks the calling thread has a live current context.
static CUresult need_context(const char *call) {
	CUcontext c = current;
	if (!initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!c || c->refs <= 0) {
		emu_log("%s: no current context on this thread (cuCtxSetCurrent)", call);
		return CUDA_ERROR_INVALID_CONTEXT;
	}
	return CUDA_SUCCESS;
}

// check_stream accepts the legacy and per-thread default streams and live
// streams. Callers hold mu.
static CUresult check_stream(CUstream s) {
	if (s == NULL || s == (CUstream)1 || s == (CUstream)2)
		return CUDA_SUCCESS;
	return hs_has(&streams, s) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

static CUresult check_copy(const char *call, CUstream s, uint64_t dst, int dst_dev, uint64_t src,
                           int src_dev, size_t bytes) {
	CUresult r = need_context(call);
	if (r)
		return r;
	pthread_mutex_lock(&mu);
	r = check_stream(s);
	int dok = !dst_dev || rs_contains(&device_allocs, dst, bytes);
	int sok = !src_dev || rs_contains(&device_allocs, src, bytes);
	pthread_mutex_unlock(&mu);
	if (r)
		return r;
	if (!dok)
		emu_log("%s: destination [0x%" PRIx64 ", +%zu) is not inside one live device allocation", call,
		        dst, bytes);
	if (!sok)
		emu_log("%s: source [0x%" PRIx64 ", +%zu) is not inside one live device allocation", call, src,
		        bytes);
	if (!dok || !sok)
		return CUDA_ERROR_INVALID_VALUE;
	if ((!dst_dev && !dst && bytes) || (!src_dev && !src && bytes))
		return CUDA_ERROR_INVALID_VALUE;
	return CUDA_SUCCESS;
}

// ---- initialisation and devices

// visible_devices applies CUDA_VISIBLE_DEVICES as the driver does: the
// devices listed, in the order listed, renumbered from 0. An entry is read
// as strtoul reads it, its leading digits ("1gpu2" is 1); the list ends at
// the first entry that names no device (no leading digit, a negative or too
// large index; the emulated devices have no UUIDs), and an empty value
// shows none. A device listed twice shows none at all ("0,0"). That is
// what PyTorch's _parse_visible_devices restates of the driver (pytorch
// PR 84879, observed with driver 510). With no device left cuInit fails
// with CUDA_ERROR_NO_DEVICE, as on a GPU node with CUDA_VISIBLE_DEVICES=-1.
static void visible_devices(void) {
	const char *v = getenv("CUDA_VISIBLE_DEVICES");
	if (!v)
		return;
	int n = 0, seen[MAX_DEVICES] = {0};
	for (const char *p = v;;) {
		char *end;
		while (*p == ' ' || *p == '\t')
			p++;
		long i = strtol(p, &end, 10);
		if (end == p || i < 0 || i >= ndevices)
			break;
		if (seen[i]) {
			n = 0;
			break;
		}
		seen[i] = 1;
		phys[n++] = (int)i;
		const char *comma = strchr(end, ',');
		if (!comma)
			break;
		p = comma + 1;
	}
	ndevices = n;
}

static int parse_env(void) {
	const char *d = getenv("HPCTRAIN_CUDAEMU_DEVICES");
	ndevices = 1;
	if (d && *d) {
		char *end;
		long v = strtol(d, &end, 10);
		if (*end || v < 0 || v > MAX_DEVICES) {
			emu_log("HPCTRAIN_CUDAEMU_DEVICES=%s: want a count from 0 to %d", d, MAX_DEVICES);
			return CUDA_ERROR_INVALID_VALUE;
		}
		ndevices = (int)v;
	}
	for (int i = 0; i < ndevices; i++)
		phys[i] = i;
	visible_devices();
	const char *cc = getenv("HPCTRAIN_CUDAEMU_CC");
	if (cc && *cc) {
		int maj, min;
		char extra;
		if (sscanf(cc, "%d.%d%c", &maj, &min, &extra) != 2 || maj < 1 || maj > 99 || min < 0 ||
		    min > 9) {
			emu_log("HPCTRAIN_CUDAEMU_CC=%s: want MAJOR.MINOR such as 8.0", cc);
			return CUDA_ERROR_INVALID_VALUE;
		}
		cc_major = maj;
		cc_minor = min;
	}
	const char *m = getenv("HPCTRAIN_CUDAEMU_MEM");
	if (m && *m) {
		char *end;
		unsigned long long v = strtoull(m, &end, 10);
		if (*end || v == 0) {
			emu_log("HPCTRAIN_CUDAEMU_MEM=%s: want a size in bytes", m);
			return CUDA_ERROR_INVALID_VALUE;
		}
		total_mem = (size_t)v;
	}
	return CUDA_SUCCESS;
}

EMU_EXPORT CUresult cuInit(unsigned int flags) {
	if (flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&mu);
	CUresult r = CUDA_SUCCESS;
	if (!initialized) {
		r = parse_env();
		if (r == CUDA_SUCCESS && ndevices == 0)
			r = CUDA_ERROR_NO_DEVICE;
		if (r == CUDA_SUCCESS) {
			for (int i = 0; i < MAX_DEVICES; i++)
				contexts[i].device = i;
			initialized = 1;
		}
	}
	pthread_mutex_unlock(&mu);
	return r;
}

EMU_EXPORT CUresult cuDriverGetVersion(int *version) {
	if (!version)
		return CUDA_ERROR_INVALID_VALUE;
	*version = 12040;
	return CUDA_SUCCESS;
}

EMU_EXPORT CUresult cuGetErrorName(CUresult error, const char **str) {
	if (!str)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < sizeof error_names / sizeof error_names[0]; i++)
		if (error_names[i].code == error) {
			*str = error_names[i].name;
			return CUDA_SUCCESS;
		}
	*str = NULL;
	return CUDA_ERROR_INVALID_VALUE;
}

EMU_EXPORT CUresult cuDeviceGetCount(int *count) {
	if (!count)
		return CUDA_ERROR_INVALID_VALUE;
	if (!initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	*count = ndevices;
	return CUDA_SUCCESS;
}

static CUresult check_device(CUdevice dev) {
	if (!initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (dev < 0 || dev >= ndevices)
		return CUDA_ERROR_INVALID_DEVICE;
	return CUDA_SUCCESS;
}

EMU_EXPORT CUresult cuDeviceGet(CUdevice *device, int ordinal) {
	if (!device)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = check_device(ordinal);
	if (r)
		return r;
	*device = ordinal;
	return CUDA_SUCCESS;
}

EMU_EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice dev) {
	if (!name || len <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = check_device(dev);
	if (r)
		return r;
	snprintf(name, (size_t)len, "%s", "cudaemu (host memory)");
	return CUDA_SUCCESS;
}

EMU_EXPORT CUresult cuDeviceGetAttribute(int *pi, int attrib, CUdevice dev) {
	if (!pi)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = check_device(dev);
	if (r)
		return r;
	switch (attrib) {
	case 1: // MAX_THREADS_PER_BLOCK
	case 2: // MAX_BLOCK_DIM_X
	case 3: // MAX_BLOCK_DIM_Y
		*pi = 1024;
		break;
	case 4: // MAX_BLOCK_DIM_Z
		*pi = 64;
		break;
	case 5: // MAX_GRID_DIM_X
		*pi = 2147483647;
		break;
	case 6: // MAX_GRID_DIM_Y
	case 7: // MAX_GRID_DIM_Z
		*pi = 65535;
		break;
	case 8: // MAX_SHARED_MEMORY_PER_BLOCK
		*pi = 49152;
		break;
	case 10: // WARP_SIZE
		*pi = 32;
		break;
	case 16: // MULTIPROCESSOR_COUNT
		*pi = 4;
		break;
	case 33: // PCI_BUS_ID
		*pi = phys[dev] + 1;
		break;
	case 34: // PCI_DEVICE_ID
	case 50: // PCI_DOMAIN_ID
		*pi = 0;
		break;
	case 41: // UNIFIED_ADDRESSING
		*pi = 1;
		break;
	case 75: // COMPUTE_CAPABILITY_MAJOR
		*pi = cc_major;
		break;
	case 76: // COMPUTE_CAPABILITY_MINOR
		*pi = cc_minor;
		break;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
	return CUDA_SUCCESS;
}

EMU_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
	if (!bytes)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = check_device(dev);
	if (r)
		return r;
	*bytes = total_mem;
	return CUDA_SUCCESS;
}

// ---- contexts

EMU_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = check_device(dev);
	if (r)
		return r;
	pthread_mutex_lock(&mu);
	contexts[dev].refs++;
	*pctx = &contexts[dev];
	pthread_mutex_unlock(&mu);
	return CUDA_SUCCESS;
}

EMU_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
	CUresult r = check_device(dev);
	if (r)
		return r;
	pthread_mutex_lock(&mu);
	if (contexts[dev].refs <= 0)
		r = CUDA_ERROR_INVALID_CONTEXT;
	else
		contexts[dev].refs--;
	pthread_mutex_unlock(&mu);
	return r;
}

EMU_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx) {
	if (!initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (ctx && (ctx < &contexts[0] || ctx >= &contexts[ndevices] || ctx->refs <= 0))
		return CUDA_ERROR_INVALID_CONTEXT;
	current = ctx;
	return CUDA_SUCCESS;
}

// ---- memory

EMU_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes) {
	if (!dptr || bytes == 0)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = need_context("cuMemAlloc");
	if (r)
		return r;
	size_t rounded = (bytes + ALIGN - 1) / ALIGN * ALIGN;
	if (rounded < bytes)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&mu);
	int room = rounded <= total_mem - used_mem;
	if (room)
		used_mem += rounded;
	pthread_mutex_unlock(&mu);
	if (!room)
		return CUDA_ERROR_OUT_OF_MEMORY;
	void *p = NULL;
	if (posix_memalign(&p, ALIGN, rounded) != 0) {
		pthread_mutex_lock(&mu);
		used_mem -= rounded;
		pthread_mutex_unlock(&mu);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	pthread_mutex_lock(&mu);
	int ok = rs_add(&device_allocs, (uint64_t)(uintptr_t)p, bytes);
	if (!ok)
		used_mem -= rounded;
	pthread_mutex_unlock(&mu);
	if (!ok) {
		free(p);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*dptr = (uint64_t)(uintptr_t)p;
	return CUDA_SUCCESS;
}

EMU_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
	CUresult r = need_context("cuMemFree");
	if (r)
		return r;
	size_t bytes;
	pthread_mutex_lock(&mu);
	int ok = rs_remove(&device_allocs, dptr, &bytes);
	if (ok)
		used_mem -= (bytes + ALIGN - 1) / ALIGN * ALIGN;
	pthread_mutex_unlock(&mu);
	if (!ok) {
		emu_log("cuMemFree: 0x%" PRIx64 " is not the start of a live allocation", dptr);
		return CUDA_ERROR_INVALID_VALUE;
	}
	free((void *)(uintptr_t)dptr);
	return CUDA_SUCCESS;
}

EMU_EXPORT CUresult cuMemHostAlloc(void **pp, size_t bytes, unsigned int flags) {
	(void)flags;
	if (!pp || bytes == 0)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = need_context("cuMemHostAlloc");
	if (r)
		return r;
	void *p = NULL;
	if (posix_memalign(&p, 4096, bytes) != 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&mu);
	int ok = rs_add(&host_allocs, (uint64_t)(uintptr_t)p, bytes);
	pthread_mutex_unlock(&mu);
	if (!ok) {
		free(p);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*pp = p;
	return CUDA_SUCCESS;
}

EMU_EXPORT CUresult cuMemFreeHost(void *p) {
	CUresult r = need_context("cuMemFreeHost");
	if (r)
		return r;
	size_t bytes;
	pthread_mutex_lock(&mu);
	int ok = rs_remove(&host_allocs, (uint64_t)(uintptr_t)p, &bytes);
	pthread_mutex_unlock(&mu);
	if (!ok) {
		emu_log("cuMemFreeHost: %p is not a live pinned allocation", p);
		return CUDA_ERROR_INVALID_VALUE;
	}
	free(p);
	return CUDA_SUCCESS;
}

EMU_EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t bytes, CUstream s) {
	CUresult r = check_copy("cuMemcpyHtoDAsync", s, dst, 1, (uint64_t)(uintptr_t)src, 0, bytes);
	if (r)
		return r;
	if (bytes)
		memmove((void *)(uintptr_t)dst, src, bytes);
	return CUDA_SUCCESS;
}

EMU_EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t bytes, CUstream s) {
	CUresult r = check_copy("cuMemcpyDtoHAsync", s, (uint64_t)(uintptr_t)dst, 0, src, 1, bytes);
	if (r)
		return r;
	if (bytes)
		memmove(dst, (const void *)(uintptr_t)src, bytes);
	return CUDA_SUCCESS;
}

EMU_EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream s) {
	CUresult r = check_copy("cuMemcpyDtoDAsync", s, dst, 1, src, 1, bytes);
	if (r)
		return r;
	if (bytes)
		memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, bytes);
	return CUDA_SUCCESS;
}

EMU_EXPORT CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned int value, size_t n, CUstream s) {
	if (dst % 4 != 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (n > SIZE_MAX / 4)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = check_copy("cuMemsetD32Async", s, dst, 1, dst, 1, n * 4);
	if (r)
		return r;
	uint32_t *p = (uint32_t *)(uintptr_t)dst;
	for (size_t i = 0; i < n; i++)
		p[i] = value;
	return CUDA_SUCCESS;
}

// ---- streams and events: every operation has already run when it returns

EMU_EXPORT CUresult cuStreamCreate(CUstream *ps, unsigned int flags) {
	if (!ps || flags > 1)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = need_context("cuStreamCreate");
	if (r)
		return r;
	CUstream s = calloc(1, sizeof *s);
	if (!s)
		return CUDA_ERROR_OUT_OF_MEMORY;
	s->magic = STREAM_MAGIC;
	pthread_mutex_lock(&mu);
	int ok = hs_add(&streams, s);
	pthread_mutex_unlock(&mu);
	if (!ok) {
		free(s);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*ps = s;
	return CUDA_SUCCESS;
}

EMU_EXPORT CUresult cuStreamDestroy_v2(CUstream s) {
	pthread_mutex_lock(&mu);
	int ok = s && hs_remove(&streams, s);
	pthread_mutex_unlock(&mu);
	if (!ok)
		return CUDA_ERROR_INVALID_HANDLE;
	free(s);
	return CUDA_SUCCESS;
}

EMU_EXPORT CUresult cuStreamSynchronize(CUstream s) {
	pthread_mutex_lock(&mu);
	CUresult r = check_stream(s);
	pthread_mutex_unlock(&mu);
	return r;
}

EMU_EXPORT CUresult cuEventCreate(CUevent *pe, unsigned int flags) {
	if (!pe || flags > 0xf)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = need_context("cuEventCreate");
	if (r)
		return r;
	CUevent e = calloc(1, sizeof *e);
	if (!e)
		return CUDA_ERROR_OUT_OF_MEMORY;
	e->magic = EVENT_MAGIC;
	pthread_mutex_lock(&mu);
	int ok = hs_add(&events, e);
	pthread_mutex_unlock(&mu);
	if (!ok) {
		free(e);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*pe = e;
	return CUDA_SUCCESS;
}

EMU_EXPORT CUresult cuEventRecord(CUevent e, CUstream s) {
	pthread_mutex_lock(&mu);
	CUresult r = hs_has(&events, e) ? check_stream(s) : CUDA_ERROR_INVALID_HANDLE;
	pthread_mutex_unlock(&mu);
	return r;
}

EMU_EXPORT CUresult cuEventSynchronize(CUevent e) {
	pthread_mutex_lock(&mu);
	CUresult r = hs_has(&events, e) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
	pthread_mutex_unlock(&mu);
	return r;
}

EMU_EXPORT CUresult cuEventDestroy_v2(CUevent e) {
	pthread_mutex_lock(&mu);
	int ok = e && hs_remove(&events, e);
	pthread_mutex_unlock(&mu);
	if (!ok)
		return CUDA_ERROR_INVALID_HANDLE;
	free(e);
	return CUDA_SUCCESS;
}

EMU_EXPORT CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned int flags) {
	if (flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&mu);
	CUresult r = hs_has(&events, e) ? check_stream(s) : CUDA_ERROR_INVALID_HANDLE;
	pthread_mutex_unlock(&mu);
	return r;
}

// ---- modules and launches

EMU_EXPORT CUresult cuModuleLoadData(CUmodule *pm, const void *image) {
	if (!pm || !image)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = need_context("cuModuleLoadData");
	if (r)
		return r;
	const char *s = image;
	size_t ml = strlen(MODULE_MARKER);
	if (strncmp(s, MODULE_MARKER, ml) != 0)
		return CUDA_ERROR_INVALID_PTX;
	const char *path = s + ml;
	const char *nl = strchr(path, '\n');
	size_t n = nl ? (size_t)(nl - path) : strlen(path);
	if (n == 0 || n >= 4096)
		return CUDA_ERROR_INVALID_PTX;
	char buf[4096];
	memcpy(buf, path, n);
	buf[n] = 0;
	void *h = dlopen(buf, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		emu_log("cuModuleLoadData: %s", dlerror());
		return CUDA_ERROR_INVALID_PTX;
	}
	CUmodule m = calloc(1, sizeof *m);
	if (!m) {
		dlclose(h);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	m->magic = MODULE_MAGIC;
	m->handle = h;
	pthread_mutex_lock(&mu);
	int ok = hs_add(&modules, m);
	pthread_mutex_unlock(&mu);
	if (!ok) {
		dlclose(h);
		free(m);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*pm = m;
	return CUDA_SUCCESS;
}

EMU_EXPORT CUresult cuModuleGetFunction(CUfunction *pf, CUmodule m, const char *name) {
	if (!pf || !name)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&mu);
	int ok = hs_has(&modules, m);
	pthread_mutex_unlock(&mu);
	if (!ok)
		return CUDA_ERROR_INVALID_HANDLE;
	char sym[512];
	if (snprintf(sym, sizeof sym, "__cudaemu_launch_%s", name) >= (int)sizeof sym)
		return CUDA_ERROR_NOT_FOUND;
	launcher_fn fn = (launcher_fn)dlsym(m->handle, sym);
	if (!fn)
		return CUDA_ERROR_NOT_FOUND;
	CUfunction f = calloc(1, sizeof *f);
	if (!f)
		return CUDA_ERROR_OUT_OF_MEMORY;
	f->magic = FUNCTION_MAGIC;
	f->launch = fn;
	f->module = m;
	pthread_mutex_lock(&mu);
	ok = hs_add(&functions, f);
	pthread_mutex_unlock(&mu);
	if (!ok) {
		free(f);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*pf = f;
	return CUDA_SUCCESS;
}

// cuModuleUnload closes the module. The module and its functions stay
// allocated (a few bytes each, never reused), so that launching a function
// of an unloaded module is CUDA_ERROR_INVALID_HANDLE rather than a crash.
EMU_EXPORT CUresult cuModuleUnload(CUmodule m) {
	pthread_mutex_lock(&mu);
	int ok = m && hs_remove(&modules, m);
	pthread_mutex_unlock(&mu);
	if (!ok)
		return CUDA_ERROR_INVALID_HANDLE;
	dlclose(m->handle);
	m->handle = NULL;
	return CUDA_SUCCESS;
}

EMU_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                   unsigned by, unsigned bz, unsigned shared, CUstream s,
                                   void **params, void **extra) {
	CUresult r = need_context("cuLaunchKernel");
	if (r)
		return r;
	pthread_mutex_lock(&mu);
	r = hs_has(&functions, f) && hs_has(&modules, f->module) ? check_stream(s)
	                                                         : CUDA_ERROR_INVALID_HANDLE;
	pthread_mutex_unlock(&mu);
	if (r)
		return r;
	if (shared != 0 || extra != NULL) {
		emu_log("cuLaunchKernel: sharedMemBytes must be 0 and extra NULL");
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0 || gx > 2147483647u ||
	    gy > 65535 || gz > 65535 || bx > 1024 || by > 1024 || bz > 64 ||
	    (unsigned long long)bx * by * bz > 1024) {
		emu_log("cuLaunchKernel: grid (%u,%u,%u) block (%u,%u,%u) out of the device's limits", gx, gy,
		        gz, bx, by, bz);
		return CUDA_ERROR_INVALID_VALUE;
	}
	f->launch(gx, gy, gz, bx, by, bz, params);
	return CUDA_SUCCESS;
}
