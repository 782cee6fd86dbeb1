package model

import (
	"math"
	"math/rand/v2"
	"testing"
)

// Float64 references of the layers descriptions added (see grad_test.go
// for the pattern): batch norm, average pools, residual add, dropout.

// refBN normalises each of the c channels of x (rows of c values) with
// the rows' mean and biased variance (batch, true) or with the given
// mean and var (evaluation).
func refBN(x, gamma, beta []float64, c int, eps float64, mean, vr []float64) []float64 {
	m := len(x) / c
	if mean == nil {
		mean, vr = make([]float64, c), make([]float64, c)
		for i := 0; i < m; i++ {
			for j := 0; j < c; j++ {
				mean[j] += x[i*c+j] / float64(m)
			}
		}
		for i := 0; i < m; i++ {
			for j := 0; j < c; j++ {
				d := x[i*c+j] - mean[j]
				vr[j] += d * d / float64(m)
			}
		}
	}
	y := make([]float64, len(x))
	for i := 0; i < m; i++ {
		for j := 0; j < c; j++ {
			y[i*c+j] = (x[i*c+j]-mean[j])/math.Sqrt(vr[j]+eps)*gamma[j] + beta[j]
		}
	}
	return y
}

func refAvgPool(x []float64, in Shape, k, s, n int) []float64 {
	ho, wo := (in.H-k)/s+1, (in.W-k)/s+1
	y := make([]float64, n*ho*wo*in.C)
	for i := 0; i < n; i++ {
		for oh := 0; oh < ho; oh++ {
			for ow := 0; ow < wo; ow++ {
				for c := 0; c < in.C; c++ {
					var sum float64
					for kh := 0; kh < k; kh++ {
						for kw := 0; kw < k; kw++ {
							sum += x[((i*in.H+oh*s+kh)*in.W+ow*s+kw)*in.C+c]
						}
					}
					y[((i*ho+oh)*wo+ow)*in.C+c] = sum / float64(k*k)
				}
			}
		}
	}
	return y
}

func refGAP(x []float64, in Shape, n int) []float64 {
	y := make([]float64, n*in.C)
	hw := in.H * in.W
	for i := 0; i < n; i++ {
		for r := 0; r < hw; r++ {
			for c := 0; c < in.C; c++ {
				y[i*in.C+c] += x[(i*hw+r)*in.C+c] / float64(hw)
			}
		}
	}
	return y
}

func refAdd(a, b []float64) []float64 {
	y := make([]float64, len(a))
	for i := range a {
		y[i] = a[i] + b[i]
	}
	return y
}

func TestBatchNormGradients(t *testing.T) {
	for _, in := range []Shape{{3, 4, 5}, {1, 1, 7}, {5, 5, 16}} {
		const n = 3
		c := in.C
		checkLayer(t, batchNorm(0.1, 1e-5), in, n, func(x, p []float64) []float64 {
			return refBN(x, p[:c], p[c:], c, 1e-5, nil, nil)
		})
	}
}

// TestBatchNormEval: in evaluation the running statistics normalise, and
// the gradients are those of that fixed affine map.
func TestBatchNormEval(t *testing.T) {
	in := Shape{3, 2, 4}
	const n = 2
	rng := rand.New(rand.NewPCG(4, 4))
	rmean, rvar := randSlice(rng, 4), randSlice(rng, 4)
	for i := range rvar {
		rvar[i] = 0.5 + rvar[i]*rvar[i]
	}
	checkLayerWith(t, batchNorm(0.1, 1e-5), in, n, false, func(l Layer) {
		b := l.(*BatchNorm)
		copy(b.rmean, rmean)
		copy(b.rvar, rvar)
	}, func(x, p []float64) []float64 {
		return refBN(x, p[:4], p[4:], 4, 1e-5, to64(rmean), to64(rvar))
	})
}

// TestBatchNormRunningStats: training updates the running statistics as
// PyTorch does (momentum 0.1, unbiased variance), from mean 0 and var 1.
func TestBatchNormRunningStats(t *testing.T) {
	in := Shape{2, 3, 2}
	const n = 4
	net, err := NewNet(in, n, 1, batchNorm(0.1, 1e-5), Flatten(), FullyConnected(3))
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(9, 9))
	x := randSlice(rng, n*in.Size())
	for i := range x {
		x[i] = 2 + 3*x[i]
	}
	copy(net.Input(), x)
	net.Forward(n)
	m := n * in.H * in.W
	for j := 0; j < 2; j++ {
		var mean, sq float64
		for i := 0; i < m; i++ {
			mean += float64(x[i*2+j]) / float64(m)
		}
		for i := 0; i < m; i++ {
			d := float64(x[i*2+j]) - mean
			sq += d * d
		}
		wantMean, wantVar := 0.1*mean, 0.9+0.1*sq/float64(m-1)
		gotMean, gotVar := float64(net.Buffers[j]), float64(net.Buffers[2+j])
		if math.Abs(gotMean-wantMean) > 1e-6 || math.Abs(gotVar-wantVar) > 1e-5 {
			t.Errorf("channel %d: running mean %v var %v, want %v %v", j, gotMean, gotVar, wantMean, wantVar)
		}
	}
	bg := net.BufferGroups()
	if len(bg) != 2 || bg[0].Name != "bn1.running_mean" || bg[1].Name != "bn1.running_var" || bg[1].Off != 2 || bg[1].Len != 2 {
		t.Errorf("buffer groups %+v", bg)
	}
	// Evaluation leaves them alone.
	before := append([]float32(nil), net.Buffers...)
	net.SetTraining(false)
	net.Forward(n)
	for i := range before {
		if net.Buffers[i] != before[i] {
			t.Fatalf("evaluation changed the running statistics")
		}
	}
}

func TestAvgPoolGradients(t *testing.T) {
	for _, c := range []struct {
		in   Shape
		k, s int
	}{{Shape{4, 6, 3}, 2, 2}, {Shape{5, 5, 2}, 3, 1}, {Shape{7, 7, 1}, 2, 2}, {Shape{6, 6, 4}, 3, 2}} {
		checkLayer(t, avgPool(c.k, c.s), c.in, 2, func(x, p []float64) []float64 {
			return refAvgPool(x, c.in, c.k, c.s, 2)
		})
	}
}

func TestGlobalAvgPoolGradients(t *testing.T) {
	for _, in := range []Shape{{4, 3, 5}, {1, 1, 3}} {
		checkLayer(t, globalAvgPool(), in, 3, func(x, p []float64) []float64 { return refGAP(x, in, 3) })
	}
}

func TestNoBiasGradients(t *testing.T) {
	// The last is 3x3, stride 1, 32 channels in, 16 out: Winograd on
	// oneDNN where it has it (AVX-512).
	for _, c := range []struct {
		in         Shape
		o, k, s, p int
	}{{Shape{6, 5, 3}, 4, 3, 2, 1}, {Shape{6, 5, 3}, 8, 3, 2, 1}, {Shape{6, 5, 3}, 5, 1, 2, 0},
		{Shape{3, 3, 32}, 16, 3, 1, 1}} {
		in, o, k, s, p := c.in, c.o, c.k, c.s, c.p
		checkLayer(t, conv(o, k, s, p, false), in, 2, func(x, prm []float64) []float64 {
			return refConv(x, prm, make([]float64, o), in, o, k, s, p, 2)
		})
	}
	checkLayer(t, linear(4, false), Shape{1, 1, 6}, 3, func(x, p []float64) []float64 {
		return refLinear(x, p, make([]float64, 4), 6, 4, 3)
	})
}

// refDropout is dropout with the mask of Dropout's hash, spelled out.
func refDropout(x []float64, size, first int, key uint64, p float64) []float64 {
	y := make([]float64, len(x))
	for i := range x {
		s, j := i/size, i%size
		h := mix(key+uint64(first+s)*0x9e3779b97f4a7c15+uint64(j)) >> 32
		if float64(h) >= p*(1<<32) {
			y[i] = x[i] / (1 - p)
		}
	}
	return y
}

func TestDropoutGradients(t *testing.T) {
	in := Shape{2, 3, 4}
	var l *Dropout
	checkLayerWith(t, dropout(0.3), in, 3, true, func(ll Layer) { l = ll.(*Dropout) }, func(x, p []float64) []float64 {
		return refDropout(x, in.Size(), 0, l.key, 0.3)
	})
}

// TestDropoutMask: about p of the values are dropped; the mask depends on
// the seed, the step and the sample's global index, not on the number of
// workers nor on the split over replicas; evaluation passes through.
func TestDropoutMask(t *testing.T) {
	in := Shape{1, 1, 1000}
	build := func(batch int) *Net {
		net, err := NewNet(in, batch, 3, dropout(0.25), FullyConnected(2))
		if err != nil {
			t.Fatal(err)
		}
		for i := range net.Input() {
			net.Input()[i] = 1
		}
		return net
	}
	mask := func(net *Net, nb int) []float32 {
		net.Forward(nb)
		return append([]float32(nil), net.body.acts[1][:nb*in.Size()]...)
	}
	whole := build(8)
	whole.SetStep(5, 0)
	ref := mask(whole, 8)
	if equal32(mask(whole, 8), ref) {
		t.Error("a second forward without SetStep dropped what the first dropped")
	}
	whole.SetStep(5, 0)
	if !equal32(mask(whole, 8), ref) {
		t.Error("SetStep(5, 0) again did not repeat the mask")
	}
	dropped := 0
	for _, v := range ref {
		switch v {
		case 0:
			dropped++
		case 1 / 0.75:
		default:
			t.Fatalf("dropout output %v, want 0 or 1/(1-p)", v)
		}
	}
	if f := float64(dropped) / float64(len(ref)); math.Abs(f-0.25) > 0.02 {
		t.Errorf("dropped %.3f of the values, want 0.25", f)
	}
	// Three workers.
	whole.SetParallel(goPar(3))
	whole.SetStep(5, 0)
	if got := mask(whole, 8); !equal32(got, ref) {
		t.Error("the mask changed with the number of workers")
	}
	// Two replicas of 4: the second starts at global index 4.
	half := build(4)
	half.SetStep(5, 4)
	if got := mask(half, 4); !equal32(got, ref[4*in.Size():]) {
		t.Error("replica 2 of 2 does not drop what one replica of the whole batch drops")
	}
	// Another step, another mask.
	whole.SetStep(6, 0)
	if equal32(mask(whole, 8), ref) {
		t.Error("step 6 dropped what step 5 dropped")
	}
	whole.SetTraining(false)
	for _, v := range mask(whole, 8) {
		if v != 1 {
			t.Fatal("evaluation dropped")
		}
	}
}

func equal32(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestLabelSmoothing checks the smoothed cross-entropy and its gradient
// against a float64 restatement of PyTorch's definition:
// loss = (1-eps)*CE(z, y) + eps/K * sum_j CE(z, j).
func TestLabelSmoothing(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const n, k, eps = 4, 10, 0.1
	net, err := NewNet(Shape{1, 1, 6}, n, 1, FullyConnected(k))
	if err != nil {
		t.Fatal(err)
	}
	net.SetLabelSmoothing(eps)
	copy(net.Input(), randSlice(rng, n*6))
	labels := []int32{3, 0, 9, 3}
	z := net.Forward(n)
	for i := range z {
		z[i] *= 20
	}
	loss, _ := net.Loss(labels)
	z64 := to64(z)
	ref := func() float64 {
		l := (1 - eps) * refCE(z64, labels, k)
		for j := 0; j < k; j++ {
			l += eps / k * refCE(z64, []int32{int32(j), int32(j), int32(j), int32(j)}, k)
		}
		return l
	}
	if want := ref(); math.Abs(loss-want) > 1e-5*math.Max(1, want) {
		t.Fatalf("loss %v, want %v", loss, want)
	}
	assertClose(t, "dlogits", net.body.dacts[len(net.Layers)][:n*k], numGrad(z64, ref), 1e-5)
}
