// Package cudaemu builds an emulated CUDA device: four host libraries
// exporting the entry points of the CUDA driver (libcuda.so.1), cuBLAS
// (libcublas.so.12), NVRTC (libnvrtc.so.12) and NCCL (libnccl.so.2) that the
// GPU backend (hpctrain/gpu/cuda) loads, so that the backend is tested end
// to end on a machine without a GPU. It is test-only: the product meets it
// only through LD_LIBRARY_PATH.
//
// Dir builds the libraries once per source hash under os.TempDir() and
// returns their directory; a test puts it in LD_LIBRARY_PATH of a process
// it starts (dlopen reads LD_LIBRARY_PATH at process start).
//
// # What is emulated, and how
//
//   - Devices: HPCTRAIN_CUDAEMU_DEVICES of them (default 1; 0 makes cuInit
//     fail with CUDA_ERROR_NO_DEVICE), named "cudaemu (host memory)", of
//     compute capability HPCTRAIN_CUDAEMU_CC (default "8.0") and
//     HPCTRAIN_CUDAEMU_MEM bytes (default 16 GiB, enforced by cuMemAlloc).
//     CUDA_VISIBLE_DEVICES applies as in the driver: the devices listed, in
//     the order listed, an entry being its leading digits, up to the first
//     entry naming none (the emulated devices have no UUIDs); emulated
//     device i is on PCI bus i + 1. A value that leaves none (empty, -1,
//     NoDevFiles, an index listed twice) makes cuInit fail with
//     CUDA_ERROR_NO_DEVICE.
//   - Memory: device memory is host memory (256-byte aligned); a device
//     pointer is its host address. Every allocation is tracked: freeing an
//     unknown pointer, and a copy, memset, GEMM operand or all-reduce buffer
//     not inside one live allocation, is CUDA_ERROR_INVALID_VALUE (or the
//     library's own invalid-value code) with a line on stderr.
//   - Contexts: one primary context per device; allocation, copies, streams,
//     events, modules and launches need one current on the calling OS thread
//     (cuCtxSetCurrent), as on a GPU.
//   - Streams and events: every operation runs at once, in order, on the
//     calling thread; synchronising only checks the handle.
//   - NVRTC: a program compiles with the host's g++ (HPCTRAIN_CUDAEMU_CXX)
//     behind shim.h into a shared library cached under
//     os.TempDir()/hpctrain-cudaemu-<uid>-modules; its "PTX" is
//     "// cudaemu module\n<path>\n", which cuModuleLoadData dlopens (any
//     other image is CUDA_ERROR_INVALID_PTX). It is NVRTC 12.4: it compiles
//     for 12.4's architectures (compute_50 to compute_90, as
//     nvrtcGetSupportedArchs lists them) and refuses others with
//     NVRTC_ERROR_INVALID_OPTION. A launch loops over the grid
//     and each block in z, y, x order, one thread at a time.
//   - cuBLAS: Sgemm and GemmEx (fp32, fp16 and bf16 operands, fp32
//     accumulation) by OpenBLAS, column-major; TF32 mode rounds fp32
//     operands to TF32 (round to nearest even) first.
//   - NCCL: a communicator is a duplicate of MPI_COMM_WORLD (MPI is
//     initialised with MPI_THREAD_SERIALIZED if the process has not done it,
//     and finalised at C exit); ranks must be the MPI ranks, and
//     ncclCommInitRank fails with ncclInvalidUsage on every rank unless all
//     pass rank 0's unique id. HPCTRAIN_CUDAEMU_NCCL_FAIL_AT=N makes the Nth
//     ncclAllReduce of the process fail with ncclSystemError (only on rank
//     HPCTRAIN_CUDAEMU_NCCL_FAIL_RANK when set).
//
// # Non-goals
//
// No concurrency between streams or devices, no timing, no shared memory,
// __syncthreads or warp functions in kernels (a compile error), no
// performance resemblance to a GPU, no NVRTC headers, no fp16/bf16 NCCL
// reductions, no ncclCommAbort interrupting an MPI call in progress.
package cudaemu
