// Package kernels holds the CUDA C source of every kernel the GPU backend
// launches (elementwise, im2col, pooling, batch norm, softmax
// cross-entropy, precision conversions, optimizer updates), embedded in the
// binary and compiled at start-up by NVRTC for the device's compute
// capability.
//
// # Writing a kernel
//
// One source compiles two ways: under NVRTC for a GPU, and under the host's
// C++ compiler through the emulated device's shim (hpctrain/internal/cudaemu),
// which defines __global__, __device__, blockIdx, threadIdx, blockDim and
// gridDim and runs a launch as a loop over the grid, one thread at a time,
// in order. So a kernel
//
//   - is declared extern "C" __global__ void name(...), with parameters of
//     types float*, const float*, int*, const int*, unsigned short*, const
//     unsigned short*, int, long long, unsigned int, float, double;
//   - uses neither shared memory nor __syncthreads nor warp functions:
//     every thread computes its own outputs (grid-stride loops, KLOOP), and
//     a reduction is two launches (partial sums over fixed chunks, then the
//     chunks in order), which also makes results deterministic;
//   - uses only the C math functions (expf, logf, sqrtf, fmaxf, ...), the
//     helpers of prelude.cuh, and __float_as_uint / __uint_as_float.
//
// Source gives the prelude and the named files (all, in name order, when
// none are named) as one compilation unit: one module, one NVRTC compile,
// cached per device architecture.
package kernels
