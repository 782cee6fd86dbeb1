// Package data turns files of labelled samples into the batches a rank
// trains on: it reads data sets, keeps samples as uint8 in memory, decides
// which samples each rank sees in each step (Sampler), and assembles them
// into reused float32 buffers.
//
// # Invariants
//
//   - The shuffle of an epoch depends only on (seed, epoch): every rank
//     computes the same permutation without communicating.
//   - In one step the ranks' shards are disjoint, and over an epoch their
//     union is the permutation less a dropped tail (see Sampler).
//   - Pixels are stored channels-last (H, W, C) as uint8, 4x smaller than
//     float32; conversion happens once, at batch assembly.
//
// Non-goals: knowing models or MPI; the training loop passes rank and world
// size in.
package data
