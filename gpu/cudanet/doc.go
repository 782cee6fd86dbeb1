// Package cudanet trains a network described by a model.Desc on one CUDA
// device: the same layers, initialisation and flat parameter layout as the
// CPU network of hpctrain/model, computed with cuBLAS GEMMs and the CUDA C
// kernels of hpctrain/gpu/kernels. *Net implements model.Replica, so the
// training loop drives a device replica as it drives a host one.
//
// A Device (Open) is one GPU's primary context with the kernels compiled
// (NVRTC, cached on disk) into one module. New builds a Net on it: the host
// copy is model.Build(desc, ...) with the same seed, pushed to the device.
//
// # Invariants
//
//   - Parameters, gradients and buffers (batch norm's running statistics)
//     are one flat device buffer each, laid out exactly as the host Net's
//     Params, Grads and Buffers, so Pull and Push are one copy each and a
//     checkpoint written from either device resumes on the other.
//   - Every kernel and GEMM of a Net runs in order on its compute stream
//     (Stream); Forward and Loss sync it (they return host values),
//     Backward does not: it tells the GradHook, in strictly decreasing
//     order, where each layer's gradients start, right after enqueuing
//     that layer's gradient kernels, so a reducer can record an event on
//     Stream and start NCCL on its own stream.
//   - Reductions are deterministic: column sums and batch norm's
//     statistics are two launches over fixed chunks, no atomics; col2im
//     and the pools' backward gather their contributions.
//   - Dropout masks equal the CPU's bit for bit (same hash of seed, step,
//     pass, layer and global position); batch norm's statistics are
//     summed in double as the CPU's are.
//   - After the first step, Forward, Loss and Backward allocate nothing
//     on the Go heap.
//   - The context must be current on the calling OS thread: Open binds it
//     on the thread that calls it; a caller that uses a Device or its
//     Nets from a goroutine locks that goroutine to its thread
//     (runtime.LockOSThread) and calls Device.Context().Bind() there
//     first. A Net is used from one goroutine at a time.
//
// Precision: FP32 uses cublasSgemm; TF32 lets cuBLAS use TF32 tensor cores
// for it; BF16 and FP16 convert the GEMM operands (im2col output or
// activations, weights, and the output gradient in backward) into device
// scratch and call cublasGemmEx with fp32 output and accumulation.
// Everything else (activations, batch norm, the loss, the master weights
// and the gradients) stays fp32. FP16 overflow shows as Inf in the loss or
// the gradients: loss scaling is the caller's (SetGradScale).
//
// Non-goals: more than one device per Net, communication (the GradHook and
// the SumReducer are the caller's), layers the CPU package lacks.
package cudanet
