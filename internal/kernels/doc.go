// Package kernels holds the model's memory-bound CPU kernels: im2col and
// col2im, max-pooling with a fused bias and ReLU, column sums, ReLU, batch
// normalisation's per-channel statistics and affine maps, and the residual
// add, on channels-last (NHWC) float32 samples; and the element-wise
// updates of package optim's optimizers. One compute kernel is here too,
// in two precisions: Winograd's F(2x2, 3x3) convolution, in float32 (Wino)
// for the CPUs where oneDNN has no Winograd of its own (below AVX-512),
// and on bf16 operands (Wino16, AVX512-BF16), which oneDNN 2.6 has none
// of anywhere. Wino16 alone has no Go twin: bf16 needs oneDNN, so cgo.
//
// Each kernel exists twice: in plain Go (the reference, always compiled,
// named with a Go prefix) and in C compiled by cgo, vectorised by the
// compiler for AVX2 with a generic fallback chosen at load time (batch
// norm's statistics: AVX2 intrinsics, chosen at run time, because the
// compiler's vectorisation of them ran at half the memory rate; the
// adaptive optimizers: AVX2 intrinsics too, because the compiler does not
// vectorise a square root that may set errno, and cgo refuses
// -fno-math-errno). Built with
// -tags purego, or without cgo, the exported kernels are the Go ones.
// The arithmetic (GEMM) is not here: it goes through gonum's blas32
// interface (see hpctrain/internal/openblas).
package kernels
