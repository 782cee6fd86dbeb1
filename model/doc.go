// Package model computes forward and backward passes of small feed-forward
// networks (linear, 2-D convolution, ReLU, max-pool, flatten, softmax
// cross-entropy) on float32 data.
//
// # Layout
//
// Dimension letters, used in every shape comment: N batch, H height, W width,
// C input channels, O output channels or features, K kernel size, S stride,
// P padding. Activations are stored channels-last, (N, H, W, C), so that a
// convolution is one im2col copy and one GEMM over the whole batch with the
// batch and spatial positions as the long M dimension.
//
// All parameters of a network live in one contiguous []float32 (Net.Params)
// and all gradients in another of the same length (Net.Grads); each layer
// holds views into both, in layer order. Reducing the gradients across ranks
// is therefore one call, or one call per bucket of adjacent layers.
//
// # Invariants
//
//   - A Net is built for a largest batch; Forward, Loss and Backward take any
//     batch up to it and allocate nothing.
//   - Backward overwrites every gradient (it does not accumulate), so no
//     zeroing is needed between steps.
//   - Matrix products go through gonum's blas32 interface: whatever
//     implementation blas32.Use installed (pure Go, or OpenBLAS through
//     hpctrain/internal/openblas) does the arithmetic.
//
// Non-goals: automatic differentiation, arbitrary graphs, communication. The
// package knows nothing of MPI; the training loop joins the two.
package model
