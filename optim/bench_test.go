package optim

import (
	"fmt"
	"testing"
)

// BenchmarkStep: one step of every optimizer over the reference CNN's
// 1,630,090 parameters, on the calling goroutine; then each again writing
// the bf16 copy (BF16Copier), whose cost is the difference.
func BenchmarkStep(b *testing.B) {
	const n = 1630090
	for _, name := range Names() {
		for _, copy16 := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/bf16copy=%v", name, copy16), func(b *testing.B) {
				o, err := New(Config{Name: name, Momentum: 0.9}.only(name), nil, n)
				if err != nil {
					b.Fatal(err)
				}
				if copy16 {
					o.(BF16Copier).SetBF16Copy(make([]uint16, n))
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
}

// only drops the momentum for optimizers without it.
func (c Config) only(name string) Config {
	if name != "sgd" {
		c.Momentum = 0
	}
	return c
}
