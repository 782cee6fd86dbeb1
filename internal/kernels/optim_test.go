package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// Every adaptive optimizer's kernel is bit for bit its Go twin's over three
// steps, at lengths that leave vector remainders, with and without weight
// decay and in each variant (RMSprop centered and with momentum), with
// special values (zeros of both signs, NaN, infinities) in the gradient
// and a NaN in the state;
// and each changes p (the test can fail).
func TestOptimizerKernels(t *testing.T) {
	type kernel struct {
		name   string
		states int // state buffers after p and g
		native func(p, g []float32, st [][]float32, wd float64)
		twin   func(p, g []float32, st [][]float32, wd float64)
	}
	rms := func(centered, momentum bool, f func(p, g, s, a, b []float32, alpha, m, wd, lr, eps float64)) func(p, g []float32, st [][]float32, wd float64) {
		return func(p, g []float32, st [][]float32, wd float64) {
			var a, b []float32
			if centered {
				a = st[1]
			}
			if momentum {
				b = st[2]
			}
			f(p, g, st[0], a, b, 0.99, 0.9, wd, 1e-2, 1e-8)
		}
	}
	var ks []kernel
	for _, c := range []bool{false, true} {
		for _, m := range []bool{false, true} {
			ks = append(ks, kernel{fmt.Sprintf("rmsprop centered %v momentum %v", c, m), 3, rms(c, m, RMSprop), rms(c, m, GoRMSprop)})
		}
	}
	ks = append(ks,
		kernel{"adagrad", 1,
			func(p, g []float32, st [][]float32, wd float64) { Adagrad(p, g, st[0], wd, 1e-2, 1e-10) },
			func(p, g []float32, st [][]float32, wd float64) { GoAdagrad(p, g, st[0], wd, 1e-2, 1e-10) }},
		kernel{"adamax", 2,
			func(p, g []float32, st [][]float32, wd float64) {
				Adamax(p, g, st[0], st[1], 0.9, 0.999, wd, 2e-2, 1e-8)
			},
			func(p, g []float32, st [][]float32, wd float64) {
				GoAdamax(p, g, st[0], st[1], 0.9, 0.999, wd, 2e-2, 1e-8)
			}},
		kernel{"nadam", 2,
			func(p, g []float32, st [][]float32, wd float64) {
				Nadam(p, g, st[0], st[1], 0.9, 0.999, wd, 1000, 2e-4, 1.8e-3, 1e-8)
			},
			func(p, g []float32, st [][]float32, wd float64) {
				GoNadam(p, g, st[0], st[1], 0.9, 0.999, wd, 1000, 2e-4, 1.8e-3, 1e-8)
			}},
		kernel{"adadelta", 2,
			func(p, g []float32, st [][]float32, wd float64) { Adadelta(p, g, st[0], st[1], 0.9, wd, 1, 1e-6) },
			func(p, g []float32, st [][]float32, wd float64) { GoAdadelta(p, g, st[0], st[1], 0.9, wd, 1, 1e-6) }},
	)
	rng := rand.New(rand.NewPCG(13, 14))
	for _, k := range ks {
		for _, n := range []int{1, 7, 8, 17, 1000, 4099} {
			for _, wd := range []float64{0, 1e-2} {
				p, g := randf(rng, n), randf(rng, n)
				st := make([][]float32, k.states)
				for i := range st {
					st[i] = randf(rng, n)
					for j := range st[i] {
						st[i][j] *= st[i][j] // second moments and sums of squares are not negative
					}
				}
				if n > 8 {
					g[1], g[2], g[3], g[4] = float32(math.Copysign(0, -1)), float32(math.NaN()), float32(math.Inf(-1)), 0
					st[len(st)-1][5] = float32(math.NaN())
				}
				pr, str := append([]float32(nil), p...), make([][]float32, len(st))
				for i := range st {
					str[i] = append([]float32(nil), st[i]...)
				}
				p0 := append([]float32(nil), p...)
				for range 3 {
					k.native(p, g, st, wd)
					k.twin(pr, g, str, wd)
				}
				what := fmt.Sprintf("%s n %d wd %v", k.name, n, wd)
				equalNaN(t, what+" p", p, pr)
				for i := range st {
					equalNaN(t, fmt.Sprintf("%s state %d", what, i), st[i], str[i])
				}
				if p[0] == p0[0] {
					t.Fatalf("%s: p unchanged", what)
				}
			}
		}
	}
}
