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

// The SGD update is bit for bit the reference's, plain, with LARS's ratio
// and with Nesterov's look-ahead, at lengths that leave vector remainders,
// and it changes p and v (the test can fail).
func TestSGDMomentum(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, n := range []int{1, 7, 8, 33, 1000, 4099} {
		for _, c := range []struct {
			ratio    float64
			nesterov bool
		}{{1, false}, {1, true}, {0.37, false}, {0.37, true}} {
			p, g, v := randf(rng, n), randf(rng, n), randf(rng, n)
			pr, vr := append([]float32(nil), p...), append([]float32(nil), v...)
			p0 := append([]float32(nil), p...)
			for step := 0; step < 3; step++ {
				SGDMomentum(p, g, v, 0.01, 0.9, 0.9, 1e-4, c.ratio, c.nesterov)
				GoSGDMomentum(pr, g, vr, 0.01, 0.9, 0.9, 1e-4, c.ratio, c.nesterov)
			}
			what := fmt.Sprintf("sgd n %d ratio %v nesterov %v", n, c.ratio, c.nesterov)
			equal(t, what+" p", p, pr)
			equal(t, what+" v", v, vr)
			if p[n-1] == p0[n-1] {
				t.Fatalf("%s: p unchanged", what)
			}
		}
	}
}

// bf16Ref is bfloat16 rounding written from its definition: the float32
// value's upper 16 bits, plus one where the lower 16 exceed half a unit in
// the last place, or equal it and the upper bits are odd; NaN stays NaN;
// subnormals flush to zero first.
func bf16Ref(f float32) uint16 {
	u := math.Float32bits(f)
	switch {
	case f != f:
		return uint16(u>>16) | 0x40
	case u&0x7f800000 == 0:
		u &= 0x80000000
	}
	hi, lo := u>>16, u&0xffff
	if lo > 0x8000 || lo == 0x8000 && hi&1 == 1 {
		hi++
	}
	return uint16(hi)
}

// ToBF16 and GoToBF16 round as the definition does, on random values and
// on every special case: zeros, subnormals, ties of both parities, values
// that round up to infinity, infinities and NaNs.
func TestToBF16(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	special := []uint32{0, 0x80000000, 1, 0x807fffff, 0x00800000, 0x3f808000, 0x3f818000, 0x3f808001,
		0x7f7fffff, 0xff7fffff, 0x7f800000, 0xff800000, 0x7fc00000, 0x7f800001, 0xffbfffff}
	for _, n := range []int{0, 1, 15, 33, 257, 1000} {
		p := randf(rng, n)
		for i := range p {
			if i < len(special) {
				p[i] = math.Float32frombits(special[i])
			} else if i%3 == 0 {
				p[i] = math.Float32frombits(rng.Uint32())
			}
		}
		h, hg := make([]uint16, n+1), make([]uint16, n+1)
		h[n], hg[n] = 0xbeef, 0xbeef
		ToBF16(h, p)
		GoToBF16(hg, p)
		for i, f := range p {
			if want := bf16Ref(f); h[i] != want || hg[i] != want {
				t.Fatalf("n %d: %#x -> %#x (Go %#x), want %#x", n, math.Float32bits(f), h[i], hg[i], want)
			}
		}
		if h[n] != 0xbeef || hg[n] != 0xbeef {
			t.Fatalf("n %d: wrote past the end", n)
		}
	}
}

// SGDMomentumBF16 updates p and v with SGDMomentum's bits and leaves the
// rounding of every new p in h, across the blocks it converts in.
func TestSGDMomentumBF16(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, n := range []int{1, 255, 256, 257, 1000, 4099} {
		for _, nesterov := range []bool{false, true} {
			p, g, v := randf(rng, n), randf(rng, n), randf(rng, n)
			pr, vr := append([]float32(nil), p...), append([]float32(nil), v...)
			h := make([]uint16, n)
			for step := 0; step < 2; step++ {
				SGDMomentumBF16(p, g, v, h, 0.01, 0.9, 0.9, 1e-4, 1, nesterov)
				SGDMomentum(pr, g, vr, 0.01, 0.9, 0.9, 1e-4, 1, nesterov)
			}
			what := fmt.Sprintf("sgd bf16 n %d nesterov %v", n, nesterov)
			equal(t, what+" p", p, pr)
			equal(t, what+" v", v, vr)
			for i := range p {
				if want := bf16Ref(p[i]); h[i] != want {
					t.Fatalf("%s: h[%d] = %#x, want %#x (p %v)", what, i, h[i], want, p[i])
				}
			}
		}
	}
}

// The Adam update is bit for bit GoAdam's, with and without AMSGrad's
// maximum, L2 decay or AdamW's shrink, at lengths that leave vector
// remainders; special values (zeros of both signs, NaN, infinities)
// come out as in Go, and the update changes p (the test can fail).
func TestAdam(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, n := range []int{1, 7, 8, 17, 1000, 4099} {
		for _, amsgrad := range []bool{false, true} {
			for _, a := range []AdamArgs{
				{B1: 0.9, B2: 0.999, L2: 0, Shrink: 1, Step: 1e-3 / (1 - 0.9), BC2Sqrt: math.Sqrt(1 - 0.999), Eps: 1e-8},
				{B1: 0.8, B2: 0.99, L2: 1e-2, Shrink: 1, Step: 3e-3, BC2Sqrt: 0.3, Eps: 1e-6},
				{B1: 0.9, B2: 0.999, L2: 0, Shrink: 1 - 1e-3*1e-2, Step: 1e-3, BC2Sqrt: 0.05, Eps: 1e-8},
			} {
				p, g := randf(rng, n), randf(rng, n)
				m, v := randf(rng, n), randf(rng, n)
				for i := range v {
					v[i] *= v[i] // second moments are not negative
				}
				if n > 8 {
					g[1], g[2], g[3], g[4] = float32(math.Copysign(0, -1)), float32(math.NaN()), float32(math.Inf(1)), 0
					p[5], v[6], m[7] = float32(math.Inf(-1)), 0, float32(math.Copysign(0, -1))
				}
				var vmax, vmaxr []float32
				if amsgrad {
					vmax = randf(rng, n)
					for i := range vmax {
						vmax[i] *= vmax[i]
					}
					vmaxr = append([]float32(nil), vmax...)
				}
				pr, mr, vr := append([]float32(nil), p...), append([]float32(nil), m...), append([]float32(nil), v...)
				p0 := append([]float32(nil), p...)
				for step := 0; step < 3; step++ {
					Adam(p, g, m, v, vmax, a)
					GoAdam(pr, g, mr, vr, vmaxr, a)
				}
				what := fmt.Sprintf("adam n %d amsgrad %v %+v", n, amsgrad, a)
				equalNaN(t, what+" p", p, pr)
				equalNaN(t, what+" m", m, mr)
				equalNaN(t, what+" v", v, vr)
				if amsgrad {
					equalNaN(t, what+" vmax", vmax, vmaxr)
				}
				if p[0] == p0[0] {
					t.Fatalf("%s: p unchanged", what)
				}
			}
		}
	}
}

// LAMB's passes are bit for bit GoLAMB's, sums included (added in element
// order), with and without weight decay, at lengths that leave vector
// remainders; the apply pass changes p (the test can fail).
func TestLAMB(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, n := range []int{1, 7, 8, 17, 1000, 4099} {
		for _, a := range []LAMBArgs{
			{B1: 0.9, B2: 0.999, BC1: 1 - 0.9, BC2: 1 - 0.999, Eps: 1e-6, WD: 0},
			{B1: 0.8, B2: 0.99, BC1: 1 - 0.8*0.8, BC2: 1 - 0.99*0.99, Eps: 1e-4, WD: 0.1},
		} {
			p, g, m, v := randf(rng, n), randf(rng, n), randf(rng, n), randf(rng, n)
			for i := range v {
				v[i] *= v[i]
			}
			pr, mr, vr := append([]float32(nil), p...), append([]float32(nil), m...), append([]float32(nil), v...)
			p0 := append([]float32(nil), p...)
			what := fmt.Sprintf("lamb n %d %+v", n, a)
			for step := 0; step < 3; step++ {
				ws, us := LAMBMoments(p, g, m, v, a)
				wr, ur := GoLAMBMoments(pr, g, mr, vr, a)
				if math.Float64bits(ws) != math.Float64bits(wr) || math.Float64bits(us) != math.Float64bits(ur) {
					t.Fatalf("%s: sums %v, %v, want %v, %v", what, ws, us, wr, ur)
				}
				s := 0.01 * math.Sqrt(ws) / math.Sqrt(us)
				LAMBApply(p, m, v, a, s)
				GoLAMBApply(pr, mr, vr, a, s)
			}
			equalNaN(t, what+" p", p, pr)
			equalNaN(t, what+" m", m, mr)
			equalNaN(t, what+" v", v, vr)
			if p[0] == p0[0] {
				t.Fatalf("%s: p unchanged", what)
			}
		}
	}
}

// equalNaN is equal where a NaN equals any NaN (its payload is the
// hardware's, not Go's).
func equalNaN(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i := range got {
		g, w := got[i], want[i]
		if g != g && w != w {
			continue
		}
		if math.Float32bits(g) != math.Float32bits(w) {
			t.Fatalf("%s: [%d] = %v (%#x), want %v (%#x)", what, i, g, math.Float32bits(g), w, math.Float32bits(w))
		}
	}
}
