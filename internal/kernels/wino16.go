package kernels

import (
	"errors"
	"fmt"
)

// Wino16 is Wino for bfloat16 operands: the same F(2x2, 3x3) on bf16
// inputs (x in the forward and weight passes, dy in the backward ones),
// with the transforms computed in float32 and rounded to bf16 once, the
// products run on AVX512-BF16 (vdpbf16ps: pairs of bf16 products summed
// into float32) and every sum in float32. Filters are transformed from the
// float32 weights and then rounded. The rounding of the transforms is the
// same 8-bit mantissa as the direct bf16 convolution's rounding of its
// operands, applied to sums of at most four of them: its error is of the
// order of 2^-8 of the outputs' scale, as the direct one's is. For a
// given input the result depends on nothing but n. It needs AVX512-BF16
// (NewWino16 says so where there is none).
//
// Like a Wino, it holds the transformed filters of the last weights it
// saw and is not safe for concurrent use.
type Wino16 struct {
	g           Window
	o           int
	uf          []float32 // filters transformed in float32, before rounding
	u, ub       []uint16  // forward (16, C/2, O, 2) and backward data (16, O/2, C, 2)
	ugen, ubgen uint64
	du, m       []float32 // weight gradient sums (16, C, O); a block's products (16, tiles, channels)
	v, z        []uint16  // a block's transforms
	zero        []uint16  // a pixel of zeros to read
	junk        []float32 // one to write
}

// ErrNoBF16 is NewWino16's answer on a CPU without AVX512-BF16 (or in a
// build without cgo).
var ErrNoBF16 = errors.New("kernels: bf16 Winograd needs AVX512-BF16 (and cgo)")

// HasWino16 reports whether NewWino16 can run here: AVX512-BF16 (and
// cgo).
func HasWino16() bool { return winoBF16() }

// NewWino16 makes the bf16 convolution of window g to o output channels,
// or says why it cannot: g not as WinoFits takes it, or no AVX512-BF16.
func NewWino16(g Window, o int) (*Wino16, error) {
	if !WinoFits(g, o) {
		return nil, fmt.Errorf("kernels: Winograd F(2x2, 3x3) needs a 3x3, stride-1, pad-1 window and channels in 16s: %+v to %d", g, o)
	}
	if !winoBF16() {
		return nil, ErrNoBF16
	}
	c, t := max(g.C, o), winoTiles()
	return &Wino16{g: g, o: o,
		uf: make([]float32, 16*g.C*o), u: make([]uint16, 16*g.C*o), ub: make([]uint16, 16*g.C*o), du: make([]float32, 16*g.C*o),
		v: make([]uint16, 16*t*c), z: make([]uint16, 16*t*o), m: make([]float32, 16*t*c),
		zero: make([]uint16, c), junk: make([]float32, c),
	}, nil
}

func (k *Wino16) check(op string, a []uint16, per int, b []float32, bper int, w []float32) int {
	n := len(a) / per
	if len(a) != n*per || len(b) != n*bper || len(w) != 9*k.g.C*k.o {
		panic(fmt.Sprintf("kernels: Wino16.%s %+v to %d: %d, %d and %d values, not whole samples of %d and %d and %d weights",
			op, k.g, k.o, len(a), len(b), len(w), per, bper, 9*k.g.C*k.o))
	}
	return n
}

// ForwardGen16 sets y (n, H, W, O) to the convolution of x (n, H, W, C,
// bf16) with w. gen as in Wino.ForwardGen.
func (k *Wino16) ForwardGen16(x []uint16, w, y []float32, gen uint64) {
	g := k.g
	n := k.check("Forward", x, g.In(), y, g.H*g.W*k.o, w)
	if gen == 0 || gen != k.ugen {
		winoFilters(g.C, k.o, w, false, k.uf)
		winoPack16(g.C, k.o, k.uf, k.u)
		k.ugen = gen
	}
	winoConv16(n, g.H, g.W, g.C, k.o, x, k.u, y, k.v, k.m, k.zero, k.junk)
}

// BackwardDataGen16 sets dx (n, H, W, C) to the gradient of the input
// given dy (n, H, W, O, bf16). gen as in Wino.ForwardGen.
func (k *Wino16) BackwardDataGen16(dy []uint16, w, dx []float32, gen uint64) {
	g := k.g
	n := k.check("BackwardData", dy, g.H*g.W*k.o, dx, g.In(), w)
	if gen == 0 || gen != k.ubgen {
		winoFilters(g.C, k.o, w, true, k.uf)
		winoPack16(k.o, g.C, k.uf, k.ub)
		k.ubgen = gen
	}
	winoConv16(n, g.H, g.W, k.o, g.C, dy, k.ub, dx, k.v, k.m, k.zero, k.junk)
}

// BackwardWeights16 sets dw (O, 3, 3, C) to the gradient of the weights
// given x (n, H, W, C) and dy (n, H, W, O), both bf16.
func (k *Wino16) BackwardWeights16(x, dy []uint16, dw []float32) {
	g := k.g
	n := len(x) / g.In()
	if len(x) != n*g.In() || len(dy) != n*g.H*g.W*k.o || len(dw) != 9*g.C*k.o {
		panic(fmt.Sprintf("kernels: Wino16.BackwardWeights %+v to %d: %d, %d and %d values, not whole samples of %d and %d and %d weights",
			g, k.o, len(x), len(dy), len(dw), g.In(), g.H*g.W*k.o, 9*g.C*k.o))
	}
	winoWeights16(n, g.H, g.W, g.C, k.o, x, dy, dw, k.du, k.v, k.z, k.zero)
}

// Close does nothing (Go memory only), as Wino.Close.
func (k *Wino16) Close() {}
