package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// convRef is the 3x3, pad-1 convolution of x (n, h, w, c) with wt (o, 3, 3,
// c) in float64, and its two gradients given dy (n, h, w, o).
func convRef(n, h, w, c, o int, x, wt, dy []float32) (y, dx, dw []float64) {
	y, dx, dw = make([]float64, n*h*w*o), make([]float64, n*h*w*c), make([]float64, o*9*c)
	for s := 0; s < n; s++ {
		for oy := 0; oy < h; oy++ {
			for ox := 0; ox < w; ox++ {
				for oc := 0; oc < o; oc++ {
					yi := ((s*h+oy)*w+ox)*o + oc
					for ky := 0; ky < 3; ky++ {
						for kx := 0; kx < 3; kx++ {
							iy, ix := oy+ky-1, ox+kx-1
							if iy < 0 || iy >= h || ix < 0 || ix >= w {
								continue
							}
							for ic := 0; ic < c; ic++ {
								xi, wi := ((s*h+iy)*w+ix)*c+ic, oc*9*c+(ky*3+kx)*c+ic
								y[yi] += float64(x[xi]) * float64(wt[wi])
								dx[xi] += float64(dy[yi]) * float64(wt[wi])
								dw[wi] += float64(dy[yi]) * float64(x[xi])
							}
						}
					}
				}
			}
		}
	}
	return y, dx, dw
}

// relErr is the largest |got - want| over the largest |want|.
func relErr(got []float32, want []float64) float64 {
	var e, s float64
	for i, v := range want {
		e = math.Max(e, math.Abs(float64(got[i])-v))
		s = math.Max(s, math.Abs(v))
	}
	return e / s
}

func randSlice(r *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(r.NormFloat64())
	}
	return s
}

// TestWino holds the three passes, in C and in Go, to the float64 direct
// convolution, on shapes with whole and partial tiles and with a last
// block of tiles cut short.
func TestWino(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, sh := range []struct{ n, h, w, c, o int }{
		{3, 14, 14, 32, 64}, // the CNN's conv2: 49 tiles a sample
		{2, 7, 5, 16, 32},   // odd sizes: tiles hang over the edge
		{1, 1, 1, 16, 16},
		{5, 8, 8, 64, 16},
	} {
		g := Window{H: sh.h, W: sh.w, C: sh.c, K: 3, S: 1, P: 1, Ho: sh.h, Wo: sh.w}
		x, wt, dy := randSlice(r, sh.n*g.In()), randSlice(r, sh.o*9*sh.c), randSlice(r, sh.n*sh.h*sh.w*sh.o)
		ry, rdx, rdw := convRef(sh.n, sh.h, sh.w, sh.c, sh.o, x, wt, dy)
		k, err := NewWino(g, sh.o)
		if err != nil {
			t.Fatal(err)
		}
		y, dx, dw := make([]float32, len(ry)), make([]float32, len(rdx)), make([]float32, len(rdw))
		k.ForwardGen(x, wt, y, 0)
		k.BackwardDataGen(dy, wt, dx, 0)
		k.BackwardWeights(x, dy, dw)
		gy, gdx, gdw := make([]float32, len(ry)), make([]float32, len(rdx)), make([]float32, len(rdw))
		u, v, m := make([]float32, 16*sh.c*sh.o), make([]float32, 16*max(sh.c, sh.o)), make([]float32, 16*max(sh.c, sh.o))
		goWinoFilters(sh.c, sh.o, wt, false, u)
		goWinoConv(sh.n, sh.h, sh.w, sh.c, sh.o, x, u, gy, v, m, nil, nil)
		goWinoFilters(sh.c, sh.o, wt, true, u)
		goWinoConv(sh.n, sh.h, sh.w, sh.o, sh.c, dy, u, gdx, v, m, nil, nil)
		goWinoWeights(sh.n, sh.h, sh.w, sh.c, sh.o, x, dy, gdw, u, v, m, nil)
		for _, c := range []struct {
			name string
			got  []float32
			want []float64
		}{{"forward", y, ry}, {"backward data", dx, rdx}, {"weights", dw, rdw},
			{"Go forward", gy, ry}, {"Go backward data", gdx, rdx}, {"Go weights", gdw, rdw}} {
			if e := relErr(c.got, c.want); !(e < 1e-5) {
				t.Errorf("%+v: %s: error %.3g of the largest value, want < 1e-5", sh, c.name, e)
			}
		}
	}
}

// TestWinoFiltersBits: the filter transform (C, vectorised along the
// channels it stores contiguously) gives goWinoFilters' bits, in both
// forms, channel counts in 16s or not.
func TestWinoFiltersBits(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, sh := range []struct{ c, o int }{{16, 16}, {32, 64}, {64, 16}, {48, 80}, {3, 5}} {
		w := randSlice(r, sh.o*9*sh.c)
		for _, flip := range []bool{false, true} {
			got, want := make([]float32, 16*sh.c*sh.o), make([]float32, 16*sh.c*sh.o)
			winoFilters(sh.c, sh.o, w, flip, got)
			goWinoFilters(sh.c, sh.o, w, flip, want)
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%d to %d, flip %v: [%d] %v, Go %v", sh.c, sh.o, flip, i, got[i], want[i])
				}
			}
		}
	}
}

// TestWinoGen checks that a Wino transforms its filters again for a new
// gen (and for 0), and reuses them for the same one.
func TestWinoGen(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	g := Window{H: 4, W: 4, C: 16, K: 3, S: 1, P: 1, Ho: 4, Wo: 4}
	k, _ := NewWino(g, 16)
	x, w1, w2 := randSlice(r, g.In()), randSlice(r, 16*9*16), randSlice(r, 16*9*16)
	y1, y2, y := make([]float32, 4*4*16), make([]float32, 4*4*16), make([]float32, 4*4*16)
	k.ForwardGen(x, w1, y1, 0)
	k.ForwardGen(x, w2, y2, 0)
	k.ForwardGen(x, w1, y, 7)
	k.ForwardGen(x, w2, y, 7) // same gen: still w1's filters
	if y[0] != y1[0] || y[5] != y1[5] {
		t.Errorf("same gen: got %v, want w1's %v", y[:2], y1[:2])
	}
	k.ForwardGen(x, w2, y, 8)
	if y[0] != y2[0] || y[5] != y2[5] {
		t.Errorf("new gen: got %v, want w2's %v", y[:2], y2[:2])
	}
	if _, err := NewWino(Window{H: 4, W: 4, C: 8, K: 3, S: 1, P: 1, Ho: 4, Wo: 4}, 16); err == nil {
		t.Error("NewWino took 8 input channels")
	}
}

// BenchmarkWino times the three passes on the reference CNN's conv2 for
// a chunk of 8 samples (14x14x32 to 64 channels); GFLOP/s count the
// direct convolution's multiply-adds, as oneDNN's figures do.
func BenchmarkWino(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 6))
	const n, h, w, c, o = 8, 14, 14, 32, 64
	g := Window{H: h, W: w, C: c, K: 3, S: 1, P: 1, Ho: h, Wo: w}
	k, _ := NewWino(g, o)
	x, wt, dy := randSlice(r, n*g.In()), randSlice(r, o*9*c), randSlice(r, n*h*w*o)
	y, dx, dw := make([]float32, n*h*w*o), make([]float32, n*g.In()), make([]float32, o*9*c)
	benchWinoPasses(b, float64(2*n*h*w*o*9*c),
		func() { k.ForwardGen(x, wt, y, 1) },
		func() { k.BackwardDataGen(dy, wt, dx, 1) },
		func() { k.BackwardWeights(x, dy, dw) })
}

// benchWinoPasses times a convolution's forward, backward data and
// weights passes as sub-benchmarks, reporting GFLOP/s for flop per call.
func benchWinoPasses(b *testing.B, flop float64, fwd, bwdData, weights func()) {
	for _, p := range []struct {
		name string
		f    func()
	}{{"forward", fwd}, {"backward-data", bwdData}, {"weights", weights}} {
		b.Run(p.name, func(b *testing.B) {
			for b.Loop() {
				p.f()
			}
			b.ReportMetric(flop*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}
