package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"hpctrain/internal/dnnl"
)

// Plain float64 reference layers: obvious loops, no im2col, no BLAS. The
// optimised float32 layers are compared against them, and finite differences
// of them are the oracle for every gradient.

func refConv(x, w, b []float64, in Shape, o, k, s, p, n int) []float64 {
	ho, wo := (in.H+2*p-k)/s+1, (in.W+2*p-k)/s+1
	y := make([]float64, n*ho*wo*o)
	for i := 0; i < n; i++ {
		for oh := 0; oh < ho; oh++ {
			for ow := 0; ow < wo; ow++ {
				for oc := 0; oc < o; oc++ {
					sum := b[oc]
					for kh := 0; kh < k; kh++ {
						for kw := 0; kw < k; kw++ {
							ih, iw := oh*s-p+kh, ow*s-p+kw
							if ih < 0 || ih >= in.H || iw < 0 || iw >= in.W {
								continue
							}
							for c := 0; c < in.C; c++ {
								sum += x[((i*in.H+ih)*in.W+iw)*in.C+c] * w[((oc*k+kh)*k+kw)*in.C+c]
							}
						}
					}
					y[((i*ho+oh)*wo+ow)*o+oc] = sum
				}
			}
		}
	}
	return y
}

func refLinear(x, w, b []float64, in, o, n int) []float64 {
	y := make([]float64, n*o)
	for i := 0; i < n; i++ {
		for j := 0; j < o; j++ {
			s := b[j]
			for q := 0; q < in; q++ {
				s += x[i*in+q] * w[j*in+q]
			}
			y[i*o+j] = s
		}
	}
	return y
}

func refPool(x []float64, in Shape, k, s, n int) []float64 {
	ho, wo := (in.H-k)/s+1, (in.W-k)/s+1
	y := make([]float64, n*ho*wo*in.C)
	for i := 0; i < n; i++ {
		for oh := 0; oh < ho; oh++ {
			for ow := 0; ow < wo; ow++ {
				for c := 0; c < in.C; c++ {
					m := math.Inf(-1)
					for kh := 0; kh < k; kh++ {
						for kw := 0; kw < k; kw++ {
							m = math.Max(m, x[((i*in.H+oh*s+kh)*in.W+ow*s+kw)*in.C+c])
						}
					}
					y[((i*ho+oh)*wo+ow)*in.C+c] = m
				}
			}
		}
	}
	return y
}

func refReLU(x []float64) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = math.Max(v, 0)
	}
	return y
}

// refCE is the mean softmax cross-entropy, in float64.
func refCE(z []float64, labels []int32, k int) float64 {
	n := len(labels)
	var loss float64
	for i := 0; i < n; i++ {
		row := z[i*k : (i+1)*k]
		m := row[0]
		for _, v := range row {
			m = math.Max(m, v)
		}
		var s float64
		for _, v := range row {
			s += math.Exp(v - m)
		}
		loss += m + math.Log(s) - row[labels[i]]
	}
	return loss / float64(n)
}

func to64(a []float32) []float64 {
	b := make([]float64, len(a))
	for i, v := range a {
		b[i] = float64(v)
	}
	return b
}

func randSlice(rng *rand.Rand, n int) []float32 {
	a := make([]float32, n)
	for i := range a {
		a[i] = float32(rng.NormFloat64())
	}
	return a
}

// dot is the scalar loss the layer tests differentiate: sum(y * r).
func dot(a, b []float64) float64 {
	var s float64
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

// numGrad returns d f / d v[i] for every i by central differences.
func numGrad(v []float64, f func() float64) []float64 {
	g := make([]float64, len(v))
	const h = 1e-6
	for i := range v {
		old := v[i]
		v[i] = old + h
		fp := f()
		v[i] = old - h
		fm := f()
		v[i] = old
		g[i] = (fp - fm) / (2 * h)
	}
	return g
}

func assertClose(t *testing.T, what string, got []float32, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: length %d, want %d", what, len(got), len(want))
	}
	var scale float64
	for _, v := range want {
		scale = math.Max(scale, math.Abs(v))
	}
	for i := range want {
		if d := math.Abs(float64(got[i]) - want[i]); d > tol*math.Max(scale, 1) {
			t.Fatalf("%s[%d] = %v, want %v (|diff| %.3g, scale %.3g)", what, i, got[i], want[i], d, scale)
		}
	}
}

// checkLayer runs layer l forward and backward on random data and compares
// y with ref(x, params) and every gradient with finite differences of
// sum(ref(x, params) * r).
func checkLayer(t *testing.T, spec Spec, in Shape, n int, ref func(x, p []float64) []float64) {
	t.Helper()
	checkLayerWith(t, spec, in, n, true, nil, ref)
}

// checkLayerWith is checkLayer in training or evaluation mode, with setup
// called on the bound layer before the first forward, for every kernel
// choice this machine has (testKernels).
func checkLayerWith(t *testing.T, spec Spec, in Shape, n int, train bool, setup func(Layer), ref func(x, p []float64) []float64) {
	t.Helper()
	for _, k := range testKernels(t) {
		checkLayerKernels(t, k, spec, in, n, train, setup, ref)
	}
}

// testKernels are the kernel choices the gradient checks run: the BLAS,
// and where linked in, oneDNN in fp32 and, on a CPU with bf16 dot
// products, in bf16.
func testKernels(t *testing.T) []Kernels {
	ks := []Kernels{{}}
	if !dnnl.Native {
		t.Log("oneDNN not linked in (purego): checking the BLAS kernels only")
		return ks
	}
	// dnnl runs Winograd where a layer allows it and oneDNN has it; dnnl
	// direct keeps the direct convolutions checked too.
	// dnnl wino-f2 checks hpctrain's own Winograd on the same layers;
	// dnnl all (what bf16 gets on a CPU with AMX-BF16) oneDNN's
	// convolutions on the layers of few input channels too.
	ks = append(ks, Kernels{DNNL: true}, Kernels{DNNL: true, Direct: true}, Kernels{DNNL: true, OwnWinograd: true},
		Kernels{DNNL: true, AllDNNL: true})
	if ok, missing := dnnl.HasBF16(); ok {
		ks = append(ks, Kernels{DNNL: true, BF16: true}, Kernels{DNNL: true, BF16: true, AllDNNL: true})
	} else {
		t.Logf("bf16 kernels not checked: %s", missing)
	}
	return ks
}

// bf16Bound is the rounding error bf16 operands may add to one output of
// a sum of products: rounding each of x and w to bf16's 8-bit significand
// (relative error at most u = 2^-8, round to nearest) perturbs x*w by at
// most (2u + u^2)|x||w|, so an output may move by 2^-7 (with a little to
// spare for u^2) times sum |x||w|: the layer's reference on the absolute
// values.
const bf16Bound = 1.01 * 0x1p-7

func checkLayerKernels(t *testing.T, k Kernels, spec Spec, in Shape, n int, train bool, setup func(Layer), ref func(x, p []float64) []float64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	l, err := spec.make(in, "test", "1.")
	if err != nil {
		t.Fatal(err)
	}
	p := randSlice(rng, l.NumParams())
	g := make([]float32, len(p))
	x := &exec{par: Serial{}, train: train, seed: 1, step: 2, kern: k}
	defer x.closeKernels()
	l.bind(slot{p: p, g: g, buf: make([]float32, numBuffers(l)), n: n, x: x})
	if setup != nil {
		setup(l)
	}
	xs := randSlice(rng, n*in.Size())
	y := make([]float32, n*l.Out().Size())
	l.forward(xs, y, n)

	// With bf16 operands, a convolution's or linear layer's outputs and
	// gradients may each be off by bf16Bound times the same sum over
	// absolute values; every other layer computes in fp32 as before. A
	// convolution on hpctrain's direct kernels (few input channels, where
	// they beat oneDNN's bf16: Conv2D.useDNNL) runs its forward in bf16
	// where its output channels come in 16s (small16), its weight gradient
	// too where a pixel pair's inputs are neighbours (small16dw), and its
	// input gradient in fp32.
	conv, isConv := l.(*Conv2D)
	_, isLinear := l.(*Linear)
	bf16 := k.BF16 && (isLinear || isConv && conv.useDNNL(k))
	fwd16 := bf16 || k.BF16 && isConv && conv.small16
	dp16 := bf16 || k.BF16 && isConv && conv.small16dw
	what := func(s string) string { return fmt.Sprintf("%s (%s kernels)", s, k) }

	x64, p64 := to64(xs), to64(p)
	abs := func(v []float64) []float64 {
		a := make([]float64, len(v))
		for i, e := range v {
			a[i] = math.Abs(e)
		}
		return a
	}
	var bound []float64
	if fwd16 {
		bound = scaled(bf16Bound, ref(abs(x64), abs(p64)))
	}
	// A bf16 Winograd convolution rounds transforms of the operands
	// instead: its bounds are its own (winoBounds).
	c, wino := l.(*Conv2D)
	wino = wino && bf16 && k.winograd(c)
	r := to64(randSlice(rng, len(y)))
	var wy, wdx, wdw []float64
	if wino {
		wy, wdx, wdw = winoBounds(c, n, abs(x64), abs(p64), abs(r))
		bound = wy
	}
	assertCloseBound(t, what("forward"), y, ref(x64, p64), 1e-5, bound)

	dy := make([]float32, len(y))
	for i, v := range r {
		dy[i] = float32(v)
	}
	dx := make([]float32, len(xs))
	l.backward(xs, y, dy, dx, n)
	f := func() float64 { return dot(ref(x64, p64), r) }
	// The bounds of the gradients: the same sums of absolute values,
	// which are the gradients of sum |r| ref(|x|, |p|) (the layers are
	// linear in x and in p).
	fAbs := func() float64 { return dot(ref(abs(x64), abs(p64)), abs(r)) }
	var dxBound, dpBound []float64
	if bf16 {
		dxBound = scaled(bf16Bound, abs(numGrad(x64, fAbs)))
	}
	if dp16 {
		dpBound = scaled(bf16Bound, abs(numGrad(p64, fAbs)))
	}
	if wino {
		dxBound = wdx
		copy(dpBound, wdw) // the biases' gradients stay float32 sums of dy
	}
	assertCloseBound(t, what("dx"), dx, numGrad(x64, f), 1e-4, dxBound)
	if len(p) > 0 {
		assertCloseBound(t, what("dparams"), g, numGrad(p64, f), 1e-4, dpBound)
	}
	// dx == nil (first layer) must still give the parameter gradients.
	// backward may consume forward's workspace (conv reuses its col buffer
	// for dcol), so forward runs again first, as in training.
	clear(g)
	l.forward(xs, y, n)
	l.backward(xs, y, dy, nil, n)
	if len(p) > 0 {
		assertCloseBound(t, what("dparams without dx"), g, numGrad(p64, f), 1e-4, dpBound)
	}
}

// scaled returns v times f.
func scaled(f float64, v []float64) []float64 {
	for i := range v {
		v[i] *= f
	}
	return v
}

// assertCloseBound is assertClose with, where bound is not nil, each
// element also allowed bound[i].
func assertCloseBound(t *testing.T, what string, got []float32, want []float64, tol float64, bound []float64) {
	t.Helper()
	if bound == nil {
		assertClose(t, what, got, want, tol)
		return
	}
	var scale float64
	for _, v := range want {
		scale = math.Max(scale, math.Abs(v))
	}
	exact := true
	for i := range want {
		d := math.Abs(float64(got[i]) - want[i])
		if d > tol*math.Max(scale, 1)+bound[i] {
			t.Fatalf("%s[%d] = %v, want %v (|diff| %.3g, bf16 bound %.3g)", what, i, got[i], want[i], d, bound[i])
		}
		exact = exact && d <= tol*math.Max(scale, 1)
	}
	if exact {
		// Rounding to bf16 must show: if every element is within fp32's
		// tolerance, the operands were not rounded.
		t.Fatalf("%s: within fp32 tolerance everywhere: were the operands rounded to bf16?", what)
	}
}

func TestConvGradients(t *testing.T) {
	for _, c := range []struct {
		in         Shape
		o, k, s, p int
	}{
		{Shape{6, 5, 1}, 3, 3, 1, 1},
		{Shape{7, 7, 3}, 4, 3, 2, 0},
		{Shape{5, 6, 2}, 2, 2, 1, 1},
		{Shape{4, 4, 3}, 5, 1, 1, 0},
		// 8 or 16 outputs and K*K*C <= 32: the direct kernels (in
		// bf16, 16 outputs: forward and, one input channel at stride
		// 1, weight gradient on the bf16 direct kernels).
		{Shape{6, 5, 1}, 8, 3, 1, 1},
		{Shape{7, 7, 3}, 16, 3, 2, 0},
		{Shape{6, 5, 1}, 16, 3, 1, 1},
	} {
		in, o, k, s, p := c.in, c.o, c.k, c.s, c.p
		checkLayer(t, Conv(o, k, s, p), in, 2, func(x, prm []float64) []float64 {
			nw := o * k * k * in.C
			return refConv(x, prm[:nw], prm[nw:], in, o, k, s, p, 2)
		})
	}
}

func TestLinearGradients(t *testing.T) {
	in := Shape{2, 3, 2}
	checkLayer(t, FullyConnected(5), in, 3, func(x, p []float64) []float64 {
		return refLinear(x, p[:5*12], p[5*12:], 12, 5, 3)
	})
}

func TestPoolGradients(t *testing.T) {
	for _, c := range []struct {
		in   Shape
		k, s int
	}{{Shape{4, 6, 3}, 2, 2}, {Shape{5, 5, 2}, 3, 1}, {Shape{7, 7, 1}, 2, 2}} {
		checkLayer(t, MaxPool(c.k, c.s), c.in, 2, func(x, p []float64) []float64 {
			return refPool(x, c.in, c.k, c.s, 2)
		})
	}
}

func TestReLUGradients(t *testing.T) {
	checkLayer(t, Rectifier(), Shape{3, 3, 2}, 2, func(x, p []float64) []float64 { return refReLU(x) })
}

// TestLossGradient checks the softmax cross-entropy value and its gradient
// (what Loss leaves for Backward) against finite differences.
func TestLossGradient(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const n, k = 4, 10
	net, err := NewNet(Shape{1, 1, 6}, n, 1, FullyConnected(k))
	if err != nil {
		t.Fatal(err)
	}
	copy(net.Input(), randSlice(rng, n*6))
	labels := []int32{3, 0, 9, 3}
	z := net.Forward(n)
	for i := range z {
		z[i] *= 20 // large logits: the loss must stay exact
	}
	loss, _ := net.Loss(labels)
	z64 := to64(z)
	if want := refCE(z64, labels, k); math.Abs(loss-want) > 1e-5*math.Max(1, want) {
		t.Fatalf("loss %v, want %v", loss, want)
	}
	want := numGrad(z64, func() float64 { return refCE(z64, labels, k) })
	assertClose(t, "dlogits", net.body.dacts[len(net.Layers)][:n*k], want, 1e-5)

	// SetGradScale(1/4): the gradient of a quarter of the mean loss, as
	// each of 4 replicas that sum their gradients needs.
	net.SetGradScale(0.25)
	net.Loss(labels)
	for i := range want {
		want[i] /= 4
	}
	assertClose(t, "dlogits scaled", net.body.dacts[len(net.Layers)][:n*k], want, 1e-5)
}

// TestNetGradient checks the whole CNN-shaped stack end to end: analytic
// parameter gradients of the loss against finite differences of a float64
// reference of the same network, on a small input.
func TestNetGradient(t *testing.T) {
	in := Shape{8, 8, 2}
	const n = 2
	net, err := NewNet(in, n, 5,
		Conv(3, 3, 1, 1), Rectifier(), MaxPool(2, 2),
		Conv(4, 3, 1, 1), Rectifier(), MaxPool(2, 2),
		Flatten(), FullyConnected(6), FullyConnected(3))
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 8))
	copy(net.Input(), randSlice(rng, n*in.Size()))
	labels := []int32{2, 0}
	logits := net.Forward(n)

	x := to64(net.Input()[:n*in.Size()])
	p := to64(net.Params)
	refLogits := func() []float64 {
		o := 0
		take := func(k int) []float64 { s := p[o : o+k]; o += k; return s }
		h := refConv(x, take(3*9*2), take(3), in, 3, 3, 1, 1, n)
		h = refPool(refReLU(h), Shape{8, 8, 3}, 2, 2, n)
		h = refConv(h, take(4*9*3), take(4), Shape{4, 4, 3}, 4, 3, 1, 1, n)
		h = refPool(refReLU(h), Shape{4, 4, 4}, 2, 2, n)
		h = refLinear(h, take(6*16), take(6), 16, 6, n)
		return refLinear(h, take(3*6), take(3), 6, 3, n)
	}
	// Conv, ReLU and pool run fused (bias and ReLU after the pool): the
	// scores must still be those of the plain layer sequence.
	assertClose(t, "logits", logits, refLogits(), 1e-5)
	net.Loss(labels)
	net.Backward(nil)
	ref := func() float64 { return refCE(refLogits(), labels, 3) }
	assertClose(t, "net gradient", net.Grads, numGrad(p, ref), 1e-3)
}

func TestReferenceCNNSize(t *testing.T) {
	net, err := New("cnn", Shape{}, 10, 4, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(net.Params); got != 1630090 {
		t.Errorf("cnn has %d parameters, want 1,630,090 (docs/background.md)", got)
	}
	var w int
	for _, g := range net.Groups() {
		if !g.Bias {
			w += g.Len
		}
	}
	if w != 1629472 {
		t.Errorf("cnn has %d weights without biases, want 1,629,472", w)
	}
	if got := net.MACs(); got != 5449216 {
		t.Errorf("cnn forward MACs %d, want 5,449,216 (docs/background.md)", got)
	}
	// BASELINES.md: backward repeats every layer's MACs for the weights and
	// all but the first layer's for the inputs: 16.1 M MACs in all.
	if got := net.TrainMACs(); got != 2*5449216+5449216-225792 {
		t.Errorf("cnn training-step MACs %d, want %d", got, 2*5449216+5449216-225792)
	}
	mlp, _ := New("mlp", Shape{}, 10, 4, 1)
	if got := len(mlp.Params); got != 784*512+512+512*10+10 {
		t.Errorf("mlp has %d parameters", got)
	}
	if _, err := New("resnet", Shape{}, 10, 4, 1); err == nil {
		t.Error("unknown model accepted")
	}
}

// TestStridedConvPoolFused: stride-2 convolutions, direct and through
// im2col, each running a fused ReLU and max-pool (one with an overlapping
// window), against the plain layer sequence in float64.
func TestStridedConvPoolFused(t *testing.T) {
	in := Shape{9, 9, 3}
	const n = 2
	net, err := NewNet(in, n, 5,
		Conv(8, 3, 2, 1), Rectifier(), MaxPool(2, 1),
		Conv(6, 3, 2, 1), Rectifier(), MaxPool(2, 2),
		Flatten(), FullyConnected(3))
	if err != nil {
		t.Fatal(err)
	}
	c1, c2 := net.Layers[0].(*Conv2D), net.Layers[3].(*Conv2D)
	if !c1.direct || c2.direct || c1.pool == nil || c2.pool == nil {
		t.Fatalf("want conv1 direct and conv2 im2col, both with the pool fused: direct %v %v, pools %v %v", c1.direct, c2.direct, c1.pool, c2.pool)
	}
	rng := rand.New(rand.NewPCG(7, 9))
	copy(net.Input(), randSlice(rng, n*in.Size()))
	for i := range net.Params {
		net.Params[i] += 0.05 * float32(rng.NormFloat64()) // non-zero biases
	}
	labels := []int32{2, 1}
	logits := net.Forward(n)
	x := to64(net.Input()[:n*in.Size()])
	p := to64(net.Params)
	refLogits := func() []float64 {
		o := 0
		take := func(k int) []float64 { s := p[o : o+k]; o += k; return s }
		h := refConv(x, take(8*9*3), take(8), in, 8, 3, 2, 1, n)
		h = refPool(refReLU(h), Shape{5, 5, 8}, 2, 1, n)
		h = refConv(h, take(6*9*8), take(6), Shape{4, 4, 8}, 6, 3, 2, 1, n)
		h = refPool(refReLU(h), Shape{2, 2, 6}, 2, 2, n)
		return refLinear(h, take(3*6), take(3), 6, 3, n)
	}
	assertClose(t, "logits", logits, refLogits(), 1e-5)
	net.Loss(labels)
	net.Backward(nil)
	ref := func() float64 { return refCE(refLogits(), labels, 3) }
	assertClose(t, "gradient", net.Grads, numGrad(p, ref), 1e-3)
}
