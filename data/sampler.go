package data

import "math/rand/v2"

// Sampler decides which samples each rank trains on in each step: a
// distributed sampler as in PyTorch's DistributedSampler, with whole global
// batches.
//
// Each epoch is one permutation of [0, N) drawn from (seed, epoch), the same
// on every rank. Step s of the epoch takes the global batch at positions
// [s*B*R, (s+1)*B*R) of the permutation (B the per-rank batch, R the number
// of ranks); rank r takes the B positions starting at s*B*R + r*B.
//
// Drop-last policy: the tail of fewer than B*R samples that does not fill a
// global batch is skipped for that epoch (a different tail each epoch, since
// the permutation changes). Every rank therefore runs the same number of
// equal steps, and R ranks with batch B see exactly the samples of one rank
// with batch R*B, in the same steps.
type Sampler struct {
	n, batch, rank, ranks int
	seed                  uint64
	perm                  []int
	epoch                 int
}

// NewSampler returns the sampler of rank in ranks over n samples with
// per-rank batch. It panics on misuse (batch < 1, rank out of range).
func NewSampler(n, batch, rank, ranks int, seed uint64) *Sampler {
	if batch < 1 || ranks < 1 || rank < 0 || rank >= ranks || n < 0 {
		panic("data: sampler arguments out of range")
	}
	s := &Sampler{n: n, batch: batch, rank: rank, ranks: ranks, seed: seed, perm: make([]int, n), epoch: -1}
	return s
}

// Steps is the number of steps in an epoch: N / (B*R), rounded down.
func (s *Sampler) Steps() int { return s.n / (s.batch * s.ranks) }

// SetEpoch draws the permutation of epoch (any integer; training counts
// from 1).
func (s *Sampler) SetEpoch(epoch int) {
	s.epoch = epoch
	for i := range s.perm {
		s.perm[i] = i
	}
	rng := rand.New(rand.NewPCG(s.seed, uint64(epoch)))
	rng.Shuffle(len(s.perm), func(i, j int) { s.perm[i], s.perm[j] = s.perm[j], s.perm[i] })
}

// Batch returns this rank's sample indices of step in the current epoch.
// The slice is a view into the sampler's permutation: do not modify it.
func (s *Sampler) Batch(step int) []int {
	if s.epoch < 0 {
		panic("data: Sampler.Batch before SetEpoch")
	}
	if step < 0 || step >= s.Steps() {
		panic("data: step outside [0, Sampler.Steps())")
	}
	start := step*s.batch*s.ranks + s.rank*s.batch
	return s.perm[start : start+s.batch]
}

// Shard returns the contiguous range [lo, hi) of n evaluation samples that
// rank of ranks evaluates: near-equal shards, no padding, no sample twice, so
// that summing counts over ranks gives the exact metric over all n.
func Shard(n, rank, ranks int) (lo, hi int) {
	return rank * n / ranks, (rank + 1) * n / ranks
}
