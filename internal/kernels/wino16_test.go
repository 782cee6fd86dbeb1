package kernels

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

// bf16Round returns s rounded to bfloat16 (GoToBF16), and the values
// those bits stand for.
func bf16Round(s []float32) ([]uint16, []float32) {
	h, f := make([]uint16, len(s)), make([]float32, len(s))
	GoToBF16(h, s)
	for i, v := range h {
		f[i] = bf16Value(v)
	}
	return h, f
}

// TestWino16 holds the three bf16 passes to the float64 direct
// convolution of the bf16 inputs with the float32 weights, on TestWino's
// shapes. The bound, 2^-6 of the largest value: the products' operands are
// rounded to bf16 (2^-9 relative each) after transforms that add up to
// four values, and the output transform adds up to nine products' sums;
// a wrong transform or layout errs by the values' own scale.
func TestWino16(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, sh := range []struct{ n, h, w, c, o int }{
		{3, 14, 14, 32, 64},
		{2, 7, 5, 16, 32},
		{1, 1, 1, 16, 16},
		{5, 8, 8, 64, 16},
		{3, 5, 7, 48, 80}, // odd tile count per block, 16 columns left over
	} {
		g := Window{H: sh.h, W: sh.w, C: sh.c, K: 3, S: 1, P: 1, Ho: sh.h, Wo: sh.w}
		k, err := NewWino16(g, sh.o)
		if errors.Is(err, ErrNoBF16) {
			t.Skip("no AVX512-BF16 on this CPU (or no cgo): nothing to test; bf16 is refused here")
		}
		if err != nil {
			t.Fatal(err)
		}
		x16, x := bf16Round(randSlice(r, sh.n*g.In()))
		dy16, dy := bf16Round(randSlice(r, sh.n*sh.h*sh.w*sh.o))
		wt := randSlice(r, sh.o*9*sh.c)
		ry, rdx, rdw := convRef(sh.n, sh.h, sh.w, sh.c, sh.o, x, wt, dy)
		y, dx, dw := make([]float32, len(ry)), make([]float32, len(rdx)), make([]float32, len(rdw))
		k.ForwardGen16(x16, wt, y, 0)
		k.BackwardDataGen16(dy16, wt, dx, 0)
		k.BackwardWeights16(x16, dy16, dw)
		for _, c := range []struct {
			name string
			got  []float32
			want []float64
		}{{"forward", y, ry}, {"backward data", dx, rdx}, {"weights", dw, rdw}} {
			e := relErr(c.got, c.want)
			if !(e < 1.0/64) {
				t.Errorf("%+v: %s: error %.3g of the largest value, want < 2^-6", sh, c.name, e)
			}
			t.Logf("%+v: %s: error %.3g of the largest value", sh, c.name, e)
		}
	}
}

func bf16Value(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// BenchmarkWino16 is BenchmarkWino for the bf16 passes (GFLOP/s counting
// the direct convolution's multiply-adds).
func BenchmarkWino16(b *testing.B) { benchWino16(b, 8, 14, 14, 32, 64) }

// BenchmarkWino16Narrow is BenchmarkWino16 at resnet8's first stage, 16
// -> 16 channels at 28x28 (4 samples, the model's chunk there): where the
// transforms, whose cost grows with the channels and not with their
// square, cost as much as the products, and oneDNN's direct convolution
// is as fast (docs/cpu-kernels.md).
func BenchmarkWino16Narrow(b *testing.B) { benchWino16(b, 4, 28, 28, 16, 16) }

// benchWino16 times the three passes of a Wino16 of n samples of h x w x
// c to o channels.
func benchWino16(b *testing.B, n, h, w, c, o int) {
	r := rand.New(rand.NewPCG(5, 6))
	g := Window{H: h, W: w, C: c, K: 3, S: 1, P: 1, Ho: h, Wo: w}
	k, err := NewWino16(g, o)
	if err != nil {
		b.Skip(err)
	}
	x, _ := bf16Round(randSlice(r, n*g.In()))
	dy, _ := bf16Round(randSlice(r, n*h*w*o))
	wt := randSlice(r, o*9*c)
	y, dx, dw := make([]float32, n*h*w*o), make([]float32, n*g.In()), make([]float32, o*9*c)
	benchWinoPasses(b, float64(2*n*h*w*o*9*c),
		func() { k.ForwardGen16(x, wt, y, 1) },
		func() { k.BackwardDataGen16(dy, wt, dx, 1) },
		func() { k.BackwardWeights16(x, dy, dw) })
}
