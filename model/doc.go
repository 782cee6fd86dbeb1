// Package model computes forward and backward passes of feed-forward
// networks, described as data, on float32 data: convolution (any stride and
// padding, with or without bias), linear, ReLU, max- and average pooling,
// global average pooling, flatten, batch normalisation, dropout and
// residual blocks, ending in softmax cross-entropy (with optional label
// smoothing).
//
// # Descriptions
//
// A network is a Desc: a list of layers (LayerDesc: a kind and its keys),
// residual blocks holding lists of their own. ParseDesc reads one from
// TOML, Desc.TOML prints it back (every key, defaults filled in, so that
// ParseDesc(d.TOML()) == d), Desc.Hash identifies it and Desc.Diff names
// the first difference between two. LoadDesc takes a built-in model's name
// (Zoo: TOML files in models/, embedded in the binary) or a file's path.
// Build makes a Net of it for an input shape, a number of classes (a
// layer's out may be "classes") and a largest batch; New does both. The
// description is the single source every backend builds from. Mistakes are
// errors of one line naming the file, the layer ("layer 5.2 (conv)" is the
// second layer of block 5) and the key or the shapes at fault.
//
// # Layout
//
// Dimension letters, used in every shape comment: N batch, H height, W width,
// C input channels, O output channels or features, K kernel size, S stride,
// P padding. Activations are stored channels-last, (N, H, W, C), so that a
// convolution is one im2col copy and one GEMM over the whole batch with the
// batch and spatial positions as the long M dimension, and batch norm's
// per-channel statistics are sums down the columns of an (N*H*W, C)
// matrix.
//
// All parameters of a network live in one contiguous []float32 (Net.Params)
// and all gradients in another of the same length (Net.Grads); each layer
// holds views into both, in layer order, a residual block's body before its
// shortcut. Reducing the gradients across ranks is therefore one call, or
// one call per bucket of adjacent layers. Net.Groups names every tensor as
// PyTorch would ("conv1.weight", "res2.bn1.bias"): each layer's weight
// (batch norm: gamma) then its bias (beta). Batch norm's running mean and
// variance are not parameters: they live in a third flat buffer,
// Net.Buffers, in the same layer order, named by Net.BufferGroups
// ("bn1.running_mean", "bn1.running_var"), so that a checkpoint, a
// broadcast or a restore of them is one call each.
//
// # Invariants
//
//   - A Net is built for a largest batch; Forward, Loss and Backward take any
//     batch up to it and allocate nothing, in training and in evaluation.
//   - Backward overwrites every gradient (it does not accumulate), so no
//     zeroing is needed between steps. Its GradHook is told, in strictly
//     decreasing order, the offset where each layer's parameters start
//     (inside residual blocks too) once every gradient from there on is
//     final.
//   - Results do not depend on the number of workers: work is split into
//     chunks fixed by the batch, and partial sums (convolution weight
//     gradients, batch norm statistics) are added in chunk order.
//   - A Net starts in training mode (SetTraining): batch norm normalises
//     with the batch's statistics and updates the running ones, dropout
//     drops. In evaluation batch norm uses the running statistics and
//     dropout passes through; nothing in Buffers changes.
//   - Batch norm's statistics are the replica's own unless SetSyncBN gives
//     a SumReducer: then forward reduces the per-channel sums, sums of
//     squares and counts, and backward the per-channel sums of dy and
//     dy*(x-mean), so every replica normalises with the global batch's
//     statistics (PyTorch's SyncBatchNorm).
//   - Dropout's mask is a hash of the seed, the step and the value's global
//     position (SetStep), so it repeats exactly and R replicas of batch B
//     drop what one replica of batch R*B drops.
//   - Convolutions and linear layers compute with the Kernels chosen by
//     SetKernels: oneDNN's primitives (hpctrain/internal/dnnl, the default
//     where linked in) in fp32 or with bf16 operands, or im2col and gonum's
//     blas32 interface, whatever implementation blas32.Use installed (pure
//     Go, or OpenBLAS through hpctrain/internal/openblas). Either way each
//     worker computes fixed chunks, so results do not depend on the number
//     of workers. The memory-bound kernels are in hpctrain/internal/kernels,
//     each with a Go twin.
//
// Non-goals: automatic differentiation, arbitrary graphs (a residual block
// is the one branch), communication. The package knows nothing of MPI; the
// training loop joins the two, through SumReducer and GradHook.
package model
