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
// Config is the data section of a run's configuration (its keys, flags,
// defaults and validation); a run embeds it and calls Open and
// LoaderOptions, so that what the data sets are stays in this package.
// Sizes that come from users (a batch, a transform, an image header, an
// IDX header) are checked before they are allocated: against MaxSide and
// MaxImagePixels, against the file, and against the memory a rank may use
// (Budget, Memory), so that a size that cannot fit is an error naming it,
// not an out-of-memory crash.
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
// processes. They run on the rank's cores and leave the compute workers'
// pinning alone, by three rules (affinity and train/placement.go set up
// the first two, the trainer the third):
//
//   - Confined, not pinned. affinity.Apply gives every thread of the
//     process the rank's CPU mask (Plan.CPUs), and threads the Go runtime
//     creates later inherit it. Loader goroutines run on those ordinary
//     threads, so they run on the rank's cores and never on another
//     rank's. They are not locked to threads or pinned to a core.
//   - Compute threads are private. Each compute worker (affinity.Workers)
//     is a goroutine locked to its own OS thread, pinned to one core, and
//     a locked thread runs nothing but its goroutine: no loader goroutine
//     ever runs on it, and nothing changes its one-CPU mask.
//   - A P each. Go runs at most GOMAXPROCS goroutines at once, and
//     affinity.Apply sets GOMAXPROCS to the compute threads plus a spare
//     one (affinity.Procs). A loader
//     goroutine could then take the P of a compute worker that had gone
//     into a BLAS call or a futex wait, and on return the worker would
//     wait for a P, up to the scheduler's 10 ms time slice, while its
//     chunk of the step stalled. With workers the trainer therefore
//     raises GOMAXPROCS to threads + 1 + workers (Procs): a P is left for
//     every compute worker while all loaders run, and loaders and compute
//     threads share the rank's cores through the kernel's scheduler, which
//     switches threads far more finely than Go's 10 ms slice.
//     hpctrain bench data -gomaxprocs threads measures the alternative.
//
// Loading still costs CPU time on the rank's cores. Workers 0 assembles
// each batch in the trainer's goroutine between steps, on one core, while
// the compute workers wait: the step grows by the whole assembly time.
// With workers the assembly overlaps the step and spreads over the rank's
// cores, so the step grows by at most about the assembly time divided by
// the cores; CPUs in the rank's mask that no compute worker is pinned to
// (-cpu-list 0-3 -threads 3) absorb it entirely. More workers than that
// only add contention; as measured in class, 8 workers give far less than
// 8x. hpctrain bench data measures the step with and without the loader.
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
