package model

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
)

// smallResNet has every new piece in one network: convolutions without
// bias, stride 2, batch norm, residual blocks with identity, conv and
// projection shortcuts, a conv+ReLU+max-pool fused inside a block, global
// average pooling.
func smallResNet() []Spec {
	return []Spec{
		conv(4, 3, 1, 1, false), batchNorm(0.1, 1e-5), Rectifier(),
		residual("identity", []Spec{
			conv(4, 3, 1, 1, false), batchNorm(0.1, 1e-5), Rectifier(),
			conv(4, 3, 1, 1, false), batchNorm(0.1, 1e-5),
		}),
		Rectifier(),
		residual("conv", []Spec{Conv(5, 3, 1, 1), Rectifier(), MaxPool(2, 2)}),
		Rectifier(),
		residual("projection", []Spec{
			conv(6, 3, 2, 1, false), batchNorm(0.1, 1e-5), Rectifier(),
			conv(6, 3, 1, 1, false), batchNorm(0.1, 1e-5),
		}),
		Rectifier(),
		globalAvgPool(),
		FullyConnected(3),
	}
}

// refSmallResNet is smallResNet in float64 on n samples of x (6x6x2),
// parameters p, batch statistics.
func refSmallResNet(x, p []float64, n int) []float64 {
	o := 0
	take := func(k int) []float64 { s := p[o : o+k]; o += k; return s }
	zeros := func(k int) []float64 { return make([]float64, k) }
	bn := func(h []float64, c int) []float64 { g, b := take(c), take(c); return refBN(h, g, b, c, 1e-5, nil, nil) }
	s66 := Shape{6, 6, 4}
	h := refConv(x, take(4*9*2), zeros(4), Shape{6, 6, 2}, 4, 3, 1, 1, n)
	h = refReLU(bn(h, 4))
	// Block 1: identity.
	b := refConv(h, take(4*9*4), zeros(4), s66, 4, 3, 1, 1, n)
	b = refReLU(bn(b, 4))
	b = refConv(b, take(4*9*4), zeros(4), s66, 4, 3, 1, 1, n)
	b = bn(b, 4)
	h = refReLU(refAdd(b, h))
	// Block 2: conv, ReLU, max-pool; shortcut 1x1 conv with bias, stride 2.
	b = refConv(h, take(5*9*4), take(5), s66, 5, 3, 1, 1, n)
	b = refPool(refReLU(b), Shape{6, 6, 5}, 2, 2, n)
	sc := refConv(h, take(5*4), take(5), s66, 5, 1, 2, 0, n)
	h = refReLU(refAdd(b, sc))
	// Block 3: stride 2, projection shortcut with batch norm.
	s33 := Shape{3, 3, 5}
	b = refConv(h, take(6*9*5), zeros(6), s33, 6, 3, 2, 1, n)
	b = refReLU(bn(b, 6))
	b = refConv(b, take(6*9*6), zeros(6), Shape{2, 2, 6}, 6, 3, 1, 1, n)
	b = bn(b, 6)
	sc = refConv(h, take(6*5), zeros(6), s33, 6, 1, 2, 0, n)
	sc = bn(sc, 6)
	h = refReLU(refAdd(b, sc))
	h = refGAP(h, Shape{2, 2, 6}, n)
	return refLinear(h, take(3*6), take(3), 6, 3, n)
}

// hookRecorder is a GradHook that keeps each offset it is told and a copy
// of the gradients that were final then.
type hookRecorder struct {
	grads []float32
	offs  []int
	snaps [][]float32
}

func (h *hookRecorder) Ready(off int) {
	h.offs = append(h.offs, off)
	h.snaps = append(h.snaps, append([]float32(nil), h.grads[off:]...))
}

// checkHook: offsets strictly decrease, each is a layer's first parameter
// (every weight group's start is told), and the gradients told final did
// not change afterwards.
func checkHook(t *testing.T, net *Net, h *hookRecorder) {
	t.Helper()
	var starts []int
	for _, g := range net.Groups() {
		if !g.Bias {
			starts = append(starts, g.Off)
		}
	}
	sort.Sort(sort.Reverse(sort.IntSlice(starts)))
	if fmt.Sprint(h.offs) != fmt.Sprint(starts) {
		t.Errorf("hook offsets %v, want the weight groups' starts %v", h.offs, starts)
	}
	for i, off := range h.offs {
		if !equal32(h.snaps[i], net.Grads[off:]) {
			t.Errorf("gradients from %d changed after the hook was told they were final", off)
		}
	}
}

func TestResNetGradient(t *testing.T) {
	in := Shape{6, 6, 2}
	const n = 3
	net, err := NewNet(in, n, 5, smallResNet()...)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 8))
	copy(net.Input(), randSlice(rng, n*in.Size()))
	for i := range net.Params {
		net.Params[i] += 0.1 * float32(rng.NormFloat64()) // batch norm's gamma and beta away from 1 and 0
	}
	labels := []int32{2, 0, 1}
	logits := net.Forward(n)
	x := to64(net.Input()[:n*in.Size()])
	p := to64(net.Params)
	assertClose(t, "logits", logits, refSmallResNet(x, p, n), 1e-4)
	net.Loss(labels)
	h := &hookRecorder{grads: net.Grads}
	net.Backward(h)
	ref := func() float64 { return refCE(refSmallResNet(x, p, n), labels, 3) }
	assertClose(t, "resnet gradient", net.Grads, numGrad(p, ref), 1e-3)
	checkHook(t, net, h)
}

// fakeReducer sums over replicas in one process: each replica's goroutine
// calls AllreduceSum64 with its buffer, and all return with the sum once
// every replica has called (a barrier per call).
type fakeReducer struct {
	n     int
	mu    sync.Mutex
	cond  *sync.Cond
	bufs  [][]float64
	round int
}

func newFakeReducer(n int) *fakeReducer {
	r := &fakeReducer{n: n}
	r.cond = sync.NewCond(&r.mu)
	return r
}

// replica is one replica's handle on the reducer.
type replica struct{ r *fakeReducer }

func (p replica) AllreduceSum64(buf []float64) error {
	r := p.r
	r.mu.Lock()
	defer r.mu.Unlock()
	round := r.round
	r.bufs = append(r.bufs, buf)
	if len(r.bufs) == r.n {
		sum := make([]float64, len(buf))
		for _, b := range r.bufs {
			if len(b) != len(buf) {
				panic("fakeReducer: replicas reduce different lengths")
			}
			for i, v := range b {
				sum[i] += v
			}
		}
		for _, b := range r.bufs {
			copy(b, sum)
		}
		r.bufs = nil
		r.round++
		r.cond.Broadcast()
		return nil
	}
	for r.round == round {
		r.cond.Wait()
	}
	return nil
}

// TestSyncBN: two replicas with synchronised batch norm, each on half the
// batch with gradient scale 1/2, give the logits, the summed gradients and
// the running statistics of one replica on the whole batch; without
// synchronisation they do not.
func TestSyncBN(t *testing.T) {
	in := Shape{6, 6, 2}
	const n = 6
	rng := rand.New(rand.NewPCG(1, 9))
	x := randSlice(rng, n*in.Size())
	labels := []int32{2, 0, 1, 1, 2, 0}
	whole, err := NewNet(in, n, 5, smallResNet()...)
	if err != nil {
		t.Fatal(err)
	}
	copy(whole.Input(), x)
	logits := append([]float32(nil), whole.Forward(n)...)
	loss, _ := whole.Loss(labels)
	whole.Backward(nil)

	for _, synced := range []bool{true, false} {
		red := newFakeReducer(2)
		var halves [2]*Net
		var losses [2]float64
		var wg sync.WaitGroup
		for r := range halves {
			net, err := NewNet(in, n/2, 5, smallResNet()...)
			if err != nil {
				t.Fatal(err)
			}
			halves[r] = net
			if synced {
				net.SetSyncBN(replica{red})
			}
			net.SetGradScale(0.5)
			copy(net.Input(), x[r*n/2*in.Size():])
			wg.Add(1)
			go func() {
				defer wg.Done()
				net.Forward(n / 2)
				losses[r], _ = net.Loss(labels[r*n/2:])
				net.Backward(nil)
			}()
		}
		wg.Wait()
		var got []float32
		for _, h := range halves {
			got = append(got, h.body.output()[:n/2*3]...)
			if err := h.Err(); err != nil {
				t.Fatal(err)
			}
		}
		sum := make([]float32, len(whole.Grads))
		for i := range sum {
			sum[i] = halves[0].Grads[i] + halves[1].Grads[i]
		}
		same := relErr(got, logits) < 1e-5 && relErr(sum, whole.Grads) < 1e-4 &&
			relErr(halves[0].Buffers, whole.Buffers) < 1e-5 && relErr(halves[1].Buffers, whole.Buffers) < 1e-5
		if synced && !same {
			t.Errorf("synchronised: logits differ by %.3g, gradients by %.3g, buffers by %.3g",
				relErr(got, logits), relErr(sum, whole.Grads), relErr(halves[0].Buffers, whole.Buffers))
		}
		if d := (losses[0]+losses[1])/2 - loss; synced && (d > 1e-5 || d < -1e-5) {
			t.Errorf("synchronised: mean loss %v, whole batch %v", (losses[0]+losses[1])/2, loss)
		}
		if !synced && same {
			t.Error("per-replica statistics gave the whole batch's results: the test cannot tell")
		}
	}
}

// TestFusedReLUSameBits: with the ReLUs after batch norm and residual
// blocks folded into them, training and evaluation give the bits they
// give with every ReLU a pass of its own; and the folding happens (all
// but a nested chain's last ReLU).
func TestFusedReLUSameBits(t *testing.T) {
	run := func(fused bool, name string, in Shape) (losses [3]float64, params string, eval []float32, nfused int) {
		fuseReLU = fused
		defer func() { fuseReLU = true }()
		var net *Net
		var err error
		if name == "" {
			net, err = NewNet(in, 4, 5, smallResNet()...)
		} else {
			net, err = New(name, in, 10, 4, 5)
		}
		if err != nil {
			t.Fatal(err)
		}
		walk(net.Layers, func(l Layer) {
			if r, ok := l.(*ReLU); ok && r.fused {
				nfused++
			}
		})
		losses, params = goldenSteps(net)
		net.SetTraining(false)
		eval = append([]float32(nil), net.Forward(net.Batch())...)
		return
	}
	for _, c := range []struct {
		name  string
		in    Shape
		fused int // ReLUs folded, of pools and of batch norms and blocks
	}{{"", Shape{6, 6, 2}, 1 + 6}, {"resnet8", Shape{28, 28, 1}, 0 + 7}, {"resnet20", Shape{32, 32, 3}, 0 + 19}} {
		l0, p0, e0, n0 := run(false, c.name, c.in)
		l1, p1, e1, n1 := run(true, c.name, c.in)
		if n1 != c.fused || n0 >= n1 {
			t.Errorf("%s: %d ReLUs fused, want %d (%d without folding into batch norm and blocks)", c.name, n1, c.fused, n0)
		}
		if l0 != l1 || p0 != p1 {
			t.Errorf("%s: fused losses %v, params %s; unfused %v, %s", c.name, l1, p1, l0, p0)
		}
		if !equal32(e0, e1) {
			t.Errorf("%s: evaluation logits differ fused and unfused", c.name)
		}
	}
}
