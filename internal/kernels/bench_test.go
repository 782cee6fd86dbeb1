package kernels

import (
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
	b.Run("direct-forward", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			ConvSmallForward(g, 4, x, w, n, c, scratch)
		}
		b.ReportMetric(flop*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	})
	b.Run("direct-weights", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			ConvSmallWeights(g, 4, x, d, n, w, scratch)
		}
		b.ReportMetric(flop*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	})
	b.Run("im2col", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			Im2col(g, 4, x, a)
		}
	})
}
