package optim

import (
	"testing"
)

// BenchmarkStep: one step of every optimizer over the reference CNN's
// 1,630,090 parameters, on the calling goroutine.
func BenchmarkStep(b *testing.B) {
	const n = 1630090
	for _, name := range Names() {
		b.Run(name, func(b *testing.B) {
			o, err := New(Config{Name: name, Momentum: 0.9}.only(name), nil, n)
			if err != nil {
				b.Fatal(err)
			}
			p, g := make([]float32, n), make([]float32, n)
			for i := range g {
				g[i] = float32(i%13) * 1e-3
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				o.Step(p, g, 0.01)
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "Gparams/s")
		})
	}
}

// only drops the momentum for optimizers without it.
func (c Config) only(name string) Config {
	if name != "sgd" {
		c.Momentum = 0
	}
	return c
}
