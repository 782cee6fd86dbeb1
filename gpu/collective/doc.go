// Package collective sums the gradients of data-parallel replicas in device
// memory across the ranks of a job: the all-reduce of a CUDA training run.
//
// A Reducer splits the flat gradient buffer into buckets whose edges fall
// on layer edges (the rule of the CPU trainer's buckets, hpctrain/train),
// and starts each bucket's reduction as soon as backward has enqueued the
// kernels of its layers (Ready, the model's GradHook), so that the sums of
// the last layers travel while the first layers still compute. Two ways to
// sum:
//
//   - NCCL: ncclAllReduce in place on a stream of its own, ordered after
//     the compute stream by an event per bucket, and the compute stream
//     after it by another.
//   - MPI: each bucket copied into page-locked host memory, summed by the
//     host communicator (MPI_Allreduce) and copied back; with an MPI
//     library that takes device pointers (MPIX_Query_cuda_support), the
//     device memory goes to MPI directly.
//
// Finish then unscales the sums (fp16 loss scaling) and reports whether
// all are finite. All ranks hold the same sums, so all ranks get the same
// answer without another collective: that is how a rank whose loss is not
// finite (Poison) stops every rank at the same step, and how an fp16
// overflow on any rank makes every rank skip the step.
//
// # Invariants
//   - Buckets tile [0, n); bucket 0 covers the end of the buffer (backward
//     produces it first) and reductions start in bucket order, on every rank
//     in the same order (NCCL and MPI both require it).
//   - Ready, Wait, Finish and Poison are called from one goroutine, whose OS
//     thread has the context bound (cuda.Context.Bind); Abort may be called
//     from any goroutine.
//   - In steady state no call allocates on the Go heap.
//
// Non-goals: other collectives, gradient compression, hierarchical
// (node-local then global) reduction, reducing anything but float32.
package collective
