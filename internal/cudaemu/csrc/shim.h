// cudaemu shim: compiled before a module's CUDA C source so that the host's
// g++ builds it. A launch runs every thread of the grid one after the other
// on the calling OS thread (blocks in z, y, x order, x fastest; threads
// likewise within a block), with blockIdx, threadIdx, blockDim and gridDim
// thread_local, so that kernels may run on several OS threads at once.
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <type_traits>
#include <utility>

#define __global__ __attribute__((visibility("hidden")))
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __restrict__ __restrict
#define __launch_bounds__(...)

// Shared memory and barriers need the threads of a block to run together;
// the emulator runs them one after another, so using either is an error.
#define __shared__ static_assert(false, "cudaemu: __shared__ memory is not supported (kernels must not use shared memory)");
#define __syncthreads() static_assert(false, "cudaemu: __syncthreads is not supported (kernels must not use barriers)")

struct uint3 {
	unsigned int x, y, z;
};
struct dim3 {
	unsigned int x, y, z;
	dim3(unsigned int x_ = 1, unsigned int y_ = 1, unsigned int z_ = 1) : x(x_), y(y_), z(z_) {}
};

static thread_local uint3 blockIdx, threadIdx;
static thread_local dim3 blockDim, gridDim;
static const int warpSize = 32;

static inline unsigned int __float_as_uint(float f) {
	unsigned int u;
	memcpy(&u, &f, sizeof u);
	return u;
}
static inline float __uint_as_float(unsigned int u) {
	float f;
	memcpy(&f, &u, sizeof f);
	return f;
}
static inline int __float_as_int(float f) {
	int i;
	memcpy(&i, &f, sizeof i);
	return i;
}
static inline float __int_as_float(int i) {
	float f;
	memcpy(&f, &i, sizeof f);
	return f;
}
// A few CUDA math intrinsics, as their plain C equivalents (glibc declares
// __expf and __logf itself, hence macros).
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
#define __expf(x) expf(x)
#define __logf(x) logf(x)
#define __fdividef(a, b) ((a) / (b))
static inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }

// __cudaemu_call calls f with its parameters read from the kernelParams
// array, each element pointing at one argument of the parameter's own type.
template <class... A, size_t... I>
static inline void __cudaemu_call(void (*f)(A...), void **a, std::index_sequence<I...>) {
	f(*(std::remove_reference_t<A> *)a[I]...);
}

template <class... A>
static void __cudaemu_launch(void (*f)(A...), unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                             unsigned by, unsigned bz, void **a) {
	gridDim = dim3(gx, gy, gz);
	blockDim = dim3(bx, by, bz);
	for (unsigned z = 0; z < gz; z++)
		for (unsigned y = 0; y < gy; y++)
			for (unsigned x = 0; x < gx; x++) {
				blockIdx = uint3{x, y, z};
				for (unsigned tz = 0; tz < bz; tz++)
					for (unsigned ty = 0; ty < by; ty++)
						for (unsigned tx = 0; tx < bx; tx++) {
							threadIdx = uint3{tx, ty, tz};
							__cudaemu_call(f, a, std::index_sequence_for<A...>{});
						}
			}
}
