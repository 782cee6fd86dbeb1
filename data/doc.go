// Package data turns files of labelled samples into the batches a rank
// trains on: it reads data sets, keeps samples as uint8 in memory, decides
// which samples each rank sees in each step (Sampler), augments them, and
// assembles them into reused float32 buffers, ahead of the trainer when
// asked (Loader).
//
// Data sets: MNIST and Fashion-MNIST (LoadMNIST, IDX files), CIFAR-10
// binary batches (LoadCIFAR10), a directory of images with one
// sub-directory per class (LoadImageFolder, PNG, JPEG and GIF, eager or
// lazy), and generated samples for benchmarks (NewSynthetic).
//
// # Invariants
//
//   - The shuffle of an epoch depends only on (seed, epoch): every rank
//     computes the same permutation without communicating.
//   - In one step the ranks' shards are disjoint, and over an epoch their
//     union is the permutation less a dropped tail (see Sampler).
//   - Pixels are stored channels-last (H, W, C) as uint8, 4x smaller than
//     float32; conversion happens once, at batch assembly.
//   - The augmentation of sample i in epoch e is a function of (seed, e, i)
//     alone (Scratch.Seed), not of the worker, batch or rank that does it.
//     Hence a Loader's batches, contents and order, are identical for any
//     number of workers and any prefetch depth, and R ranks with batch B
//     see exactly what one rank with batch R*B sees.
//   - In steady state, assembling a batch allocates nothing: each worker
//     owns its sample and transform buffers (Scratch), batches cycle
//     through a fixed pool of Prefetch+1 buffers (Next hands one out,
//     Release returns it), and queues are channels of pointers.
//     LoadImageFolder's lazy mode is the exception: image decoders allocate.
//
// # Loader workers and the trainer's compute threads
//
// Loader workers are goroutines, not processes: they share the data set
// in memory, so a batch costs no serialisation and no copy between
// processes. They are not locked to OS threads. Go runs them on the rank's
// GOMAXPROCS threads, which the affinity package confines to the rank's
// cores, so loading never spills onto another rank's cores. Pinning is per
// OS thread: the trainer's compute workers, each locked to its own thread
// and pinned to one core, keep their pinning; a loader goroutine that the
// scheduler places on a pinned thread's core merely time-shares that core
// while it works. Loading therefore competes with compute for the rank's
// cores: Workers 0 assembles in the trainer's goroutine between steps (no
// overlap, no contention); Workers 1 or 2 overlap loading with compute and
// pay off when a batch's augmentation costs a noticeable fraction of a
// step. More workers than the rank's spare cores only add contention; as
// measured in class, 8 workers give far less than 8x.
//
// # Laziness
//
// MNIST, CIFAR-10, synthetic sets and eager image folders are decoded once
// into memory. A lazy image folder keeps only its file list and decodes on
// every Sample, with no cache of its own (the OS page cache holds the
// files): for sets larger than memory, at the cost of decoding every
// epoch, which Loader workers overlap with training.
//
// Non-goals: knowing models or MPI (the training loop passes rank and world
// size in); pinned (page-locked) host memory for GPU copies, which belongs
// with the CUDA backend.
package data
