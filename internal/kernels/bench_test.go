package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkConv1: the first convolution of the reference CNN (28x28x1,
// 32 channels, 3x3), 4 samples per call, forward and weight gradient.
func BenchmarkConv1(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	m, k, n := 4*784, 9, 32
	a, w, d, c := make([]float32, m*k), randf(rng, k*n), randf(rng, m*n), make([]float32, m*n)
	flop := 2 * float64(m*k*n)
	g := Window{H: 28, W: 28, C: 1, K: 3, S: 1, P: 1, Ho: 28, Wo: 28}
	x, scratch := randf(rng, 4*g.In()), make([]float32, g.Padded())
	// rate runs f as a sub-benchmark reporting conv1's GFLOP/s.
	rate := func(name string, f func()) {
		b.Run(name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				f()
			}
			b.ReportMetric(flop*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
	rate("direct-forward", func() {
		ConvSmallForward(g, 4, x, w, n, c, scratch)
	})
	rate("direct-weights", func() {
		ConvSmallWeights(g, 4, x, d, n, w, scratch)
	})
	// With the 2x2 max-pool after it (the CNN's conv1 and pool1, ReLU
	// fused): unfused as the kernels in turn, and fused.
	pw := Window{H: 28, W: 28, C: n, K: 2, S: 2, Ho: 14, Wo: 14}
	y, arg, bias := make([]float32, 4*pw.Out()), make([]uint8, 4*pw.Out()), randf(rng, n)
	dp, db, big := randf(rng, 4*pw.Out()), make([]float32, n), make([]float32, g.ConvPoolScratch(n))
	rate("pool-forward-unfused", func() {
		ConvSmallForward(g, 4, x, w, n, c, scratch)
		PoolForward(pw, 4, c, bias, true, y, arg)
	})
	rate("pool-forward-fused", func() {
		ConvPoolForward(g, 4, x, w, n, bias, true, y, arg, big)
	})
	rate("pool-weights-unfused", func() {
		PoolBackward(pw, 4, dp, y, arg, true, d)
		ConvSmallWeights(g, 4, x, d, n, w, scratch)
		ColSums(db, d, m, n, n)
	})
	rate("pool-weights-fused", func() {
		ConvPoolWeights(g, 4, x, dp, y, arg, true, n, w, db, big)
	})
	// The bf16 forms (the weights as packed once per step, not timed).
	if !Small16(n) {
		return
	}
	w16, s16 := make([]uint32, g.Small16Pairs(n)), make([]uint16, g.Small16Scratch(n, true))
	PackSmall16(g, n, w, w16)
	rate("bf16-forward", func() {
		ConvSmallForward16(g, 4, x, w16, n, c, s16)
	})
	rate("bf16-weights", func() {
		ConvSmallWeights16(g, 4, x, d, n, w, s16)
	})
	rate("bf16-pool-forward", func() {
		ConvPoolForward16(g, 4, x, w16, n, bias, true, y, arg, s16)
	})
	rate("bf16-pool-weights", func() {
		ConvPoolWeights16(g, 4, x, dp, y, arg, true, n, w, db, s16)
	})
	b.Run("im2col", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			Im2col(g, 4, x, a)
		}
	})
}

// BenchmarkChanMoments: batch norm's statistics over a batch of 64 at
// resnet8's three widths (28x28x16, 14x14x32, 7x7x64), forward (a and b the
// same buffer) and backward with the ReLU fused (dy masked by the output).
func BenchmarkChanMoments(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, sh := range []struct{ hw, c int }{{784, 16}, {196, 32}, {49, 64}} {
		m, c := 64*sh.hw, sh.c
		x, dy := randf(rng, m*c), randf(rng, m*c)
		mu, s, t := randf(rng, c), randf(rng, c), randf(rng, c)
		sa, sab := make([]float64, c), make([]float64, c)
		mb := float64(4*m*c) / 1e6
		zero := make([]float32, c) // forward's shift, as batch norm passes it
		b.Run(fmt.Sprintf("forward-c%d", c), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				ChanMoments(x, x, m, c, zero, sa, sab)
			}
			b.ReportMetric(mb*float64(b.N)/b.Elapsed().Seconds()/1e3, "GB/s")
		})
		b.Run(fmt.Sprintf("backward-relu-c%d", c), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				ChanMomentsReLU(dy, x, m, c, mu, s, t, sa, sab)
			}
			b.ReportMetric(2*mb*float64(b.N)/b.Elapsed().Seconds()/1e3, "GB/s")
		})
	}
}
