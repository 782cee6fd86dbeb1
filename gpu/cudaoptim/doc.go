// Package cudaoptim runs hpctrain/optim's updates on parameter and gradient
// buffers in device memory: the step of a CUDA training run.
//
// SGD (momentum, dampening, Nesterov, weight decay with NoDecay groups),
// Adam and AdamW (AMSGrad, each with its own kind of weight decay) are
// kernels of gpu/kernels/optim.cu with their state in device memory. Every
// other optimizer of hpctrain/optim runs on the host: the step copies the
// gradients and parameters into page-locked memory, calls the CPU
// optimizer and copies the parameters back (OnDevice reports which).
//
// # Invariants
//   - The kernels do the CPU's arithmetic element by element (float64,
//     rounded to float32 once per stored value, no fused multiply-add), and
//     the bias corrections are the CPU's own float64 values computed on the
//     host: a step on the device gives the CPU's bits up to the device's
//     square root and division, which CUDA rounds correctly as Go does.
//   - State and Restore use optim.Optimizer's layout (the step counter as
//     two float32, then the buffers in the CPU's order and lengths), so a
//     checkpoint moves between CPU and CUDA runs either way.
//   - Step allocates nothing on the Go heap after the first call.
//   - Every call enqueues on the optimizer's stream; the caller binds the
//     context to its OS thread first (cuda.Context.Bind).
//
// Non-goals: gradient clipping, loss scaling (the all-reduce unscales,
// hpctrain/gpu/collective), mixed-precision master weights, fused
// multi-tensor kernels.
package cudaoptim
