package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Flat is a layer that only reinterprets its input's shape: flattening
// (N, H, W, C) into (N, H*W*C) moves no data in a channels-last layout, so
// the network gives it the same buffer as input and output. Inside a
// residual block, whose input and output buffers come per call, it copies.
type Flat struct {
	noParams
	name string
	out  Shape
	copy bool
}

// Flatten returns the Spec of a flatten layer.
func Flatten() Spec {
	return Spec{prefix: "flatten", kind: "flatten", make: func(in Shape, name, path string) (Layer, error) {
		return &Flat{name: name, out: Shape{1, 1, in.Size()}}, nil
	}}
}

func (l *Flat) Name() string { return l.name }
func (l *Flat) Out() Shape   { return l.out }
func (l *Flat) bind(s slot)  {}
func (l *Flat) forward(x, y []float32, n int) {
	if l.copy {
		copy(y[:n*l.out.C], x)
	}
}
func (l *Flat) backward(x, y, dy, dx []float32, n int) {
	if l.copy && dx != nil {
		copy(dx[:n*l.out.C], dy)
	}
}

// SumReducer sums a vector over the replicas of a data-parallel job, in
// place (hpctrain/mpi.Comm is one). Synchronised batch normalisation
// reduces its statistics with it.
type SumReducer interface {
	AllreduceSum64(buf []float64) error
}

// Net is a network ending in softmax cross-entropy: a sequence of layers,
// some of which (residual blocks) hold sequences of their own.
type Net struct {
	In      Shape
	Classes int
	Layers  []Layer
	// Params holds every parameter, layer after layer (a residual block's
	// body, then its shortcut), each layer's weights then its biases;
	// Grads has the same layout. Buffers holds the non-trainable state
	// (batch norm's running mean and variance) in the same layer order.
	Params, Grads, Buffers []float32
	// Desc is the description the network was built from (Build), empty
	// for NewNet.
	Desc Desc

	body   chain
	batch  int       // largest batch
	probs  []float32 // (N, Classes) softmax of the last forward
	n      int       // batch of the last forward
	scale  float32   // see SetGradScale
	smooth float64   // see SetLabelSmoothing
	x      exec      // workers, reusable tasks and the mode, shared by the layers
}

// GradHook is told during Backward that the gradients from off to the end
// of Net.Grads are final, so that a caller can start reducing them while
// earlier layers are still being computed. The offsets it is given
// decrease strictly, and each is where a layer's parameters start.
type GradHook interface {
	Ready(off int)
}

// NewNet builds a network for input shape in and batches of up to batch
// samples from specs, naming layers by kind and position, and initialises
// its parameters from seed.
func NewNet(in Shape, batch int, seed uint64, specs ...Spec) (*Net, error) {
	layers, _, err := stack(in, specs, "", "")
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	net, err := newNet(in, batch, seed, layers)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	return net, nil
}

// scoresLast checks that layers end in a vector of class scores.
func scoresLast(layers []Layer) error {
	if len(layers) == 0 {
		return fmt.Errorf("no layers")
	}
	if out := layers[len(layers)-1].Out(); out.H != 1 || out.W != 1 {
		return fmt.Errorf("the last layer's output %v is not a vector of class scores (end with globalavgpool or flatten, then linear)", out)
	}
	return nil
}

func newNet(in Shape, batch int, seed uint64, layers []Layer, opts ...Option) (*Net, error) {
	var o options
	for _, f := range opts {
		f(&o)
	}
	if batch < 1 {
		return nil, fmt.Errorf("batch %d < 1", batch)
	}
	if err := scoresLast(layers); err != nil {
		return nil, err
	}
	shape := layers[len(layers)-1].Out()
	if tooLarge(batch, in.Size()) {
		return nil, fmt.Errorf("input %v too large for batch %d", in, batch)
	}
	n := &Net{In: in, Classes: shape.C, Layers: layers, batch: batch, scale: 1}
	n.x = exec{par: Serial{}, train: true, kern: DefaultKernels()}
	np, nb := 0, 0
	for _, l := range layers {
		np += l.NumParams()
		nb += numBuffers(l)
	}
	n.Params = make([]float32, np)
	if n.Grads = o.grads; n.Grads == nil {
		n.Grads = make([]float32, np)
	} else if len(n.Grads) != np {
		return nil, fmt.Errorf("gradient memory of %d values for %d parameters", len(n.Grads), np)
	} else {
		clear(n.Grads)
	}
	n.Buffers = make([]float32, nb)
	n.body.bind(layers, in, slot{p: n.Params, g: n.Grads, buf: n.Buffers, n: batch, x: &n.x}, false)
	n.probs = make([]float32, batch*n.Classes)
	n.Init(seed)
	return n, nil
}

// chain runs layers one after another: the body of a Net, and the branches
// of a residual block.
type chain struct {
	layers      []Layer
	offs        []int       // offs[i]: start of layer i's parameters in Net.Params
	acts, dacts [][]float32 // acts[0] is the input; acts[i+1] is layer i's output (nil when fused away)
	out         []int       // layer i writes acts[out[i]]: i+1, or past its fused pool
}

// bind binds the layers to consecutive parts of s, fuses what can be
// fused, and allocates the activations between the layers and their
// gradients for batches of up to s.n. A nested chain (a residual block's
// branch) is given its input, input gradient and output gradient per call
// (setInput, setOutGrad); its last layer is never in place.
func (c *chain) bind(layers []Layer, in Shape, s slot, nested bool) {
	c.layers = layers
	fuse(layers, nested)
	link16(layers)
	nl := len(layers)
	c.acts = make([][]float32, nl+1)
	c.dacts = make([][]float32, nl+1) // dacts[0] stays nil: the first layer needs no input gradient
	c.out = make([]int, nl)
	c.offs = make([]int, nl)
	if !nested {
		c.acts[0] = make([]float32, s.n*in.Size())
	}
	p, b := 0, 0
	for i, l := range layers {
		if f, ok := l.(*Flat); ok && nested {
			f.copy = true
		}
		np, nb := l.NumParams(), numBuffers(l)
		c.offs[i] = s.off + p
		l.bind(s.sub(p, np, b, nb))
		p, b = p+np, b+nb
		c.out[i] = i + 1
		switch {
		case inPlace(l):
			c.acts[i+1], c.dacts[i+1] = c.acts[i], c.dacts[i]
		case pooled(l):
			// Its output is the pool's: acts[i+1] stays nil.
		default:
			c.acts[i+1] = make([]float32, s.n*l.Out().Size())
			if !nested || i < nl-1 {
				c.dacts[i+1] = make([]float32, s.n*l.Out().Size())
			}
		}
	}
	for i, l := range layers {
		if cv, ok := l.(*Conv2D); ok && cv.pool != nil {
			for j := i + 1; j < nl; j++ {
				if layers[j] == Layer(cv.pool) {
					c.out[i] = j + 1
				}
			}
		}
	}
}

// setInput gives a nested chain its input and input gradient (nil: none
// wanted), and to the leading in-place layers, which share them.
func (c *chain) setInput(x, dx []float32) {
	c.acts[0], c.dacts[0] = x, dx
	for i, l := range c.layers {
		if !inPlace(l) {
			break
		}
		c.acts[i+1], c.dacts[i+1] = c.acts[i], c.dacts[i]
	}
}

// setOutGrad gives a nested chain the gradient of its output.
func (c *chain) setOutGrad(dy []float32) { c.dacts[len(c.layers)] = dy }

// output is the chain's output buffer.
func (c *chain) output() []float32 { return c.acts[len(c.layers)] }

func (c *chain) forward(n int) {
	for i, l := range c.layers {
		l.forward(c.acts[i], c.acts[c.out[i]], n)
	}
}

// backward runs the layers' backward passes from the last, computing input
// gradients only for layers after first, and tells x's hook where each
// layer's gradients start once they are final.
func (c *chain) backward(n, first int, x *exec) {
	for i := len(c.layers) - 1; i >= 0; i-- {
		l := c.layers[i]
		var dx []float32
		if i > first {
			dx = c.dacts[i]
		}
		l.backward(c.acts[i], c.acts[c.out[i]], c.dacts[c.out[i]], dx, n)
		if _, block := l.(container); !block && l.NumParams() > 0 {
			x.ready(c.offs[i])
		}
	}
}

// container is a layer made of layers (a residual block): it binds,
// initialises and reports its children itself.
type container interface {
	children() []Layer
}

// walk calls f for every layer that is not a container, in buffer order.
func walk(ls []Layer, f func(Layer)) {
	for _, l := range ls {
		if c, ok := l.(container); ok {
			walk(c.children(), f)
			continue
		}
		f(l)
	}
}

// fuse folds a ReLU into the max-pool after it, and a max-pool (with its
// ReLU) into the convolution before it (see MaxPool2D): conv, [relu,] pool.
// A ReLU after a batch norm or a residual block that no pool took is
// folded into that layer, which then applies it (see BatchNorm, Residual);
// except a nested chain's last one, whose output gradient its chain shares
// with the other branch of the block, so that a block cannot mask it in
// place. A fused ReLU's output is its input, and it does nothing.
func fuse(ls []Layer, nested bool) {
	for i, l := range ls {
		p, ok := l.(*MaxPool2D)
		if !ok {
			continue
		}
		j := i - 1
		if r, ok := at(ls, j).(*ReLU); ok {
			r.fused, p.relu = true, true
			j--
		}
		if c, ok := at(ls, j).(*Conv2D); ok {
			c.pool, p.inConv = p, true
		}
	}
	if !fuseReLU {
		return
	}
	for i, l := range ls {
		r, ok := l.(*ReLU)
		if !ok || r.fused || (nested && i == len(ls)-1) {
			continue
		}
		switch prev := at(ls, i-1).(type) {
		case *BatchNorm:
			r.fused, prev.relu = true, true
		case *Residual:
			r.fused, prev.relu = true, true
		}
	}
}

// link16 points each batch norm at the convolutions beside it, for the
// bf16 hand-off (BatchNorm.next, prev): prev computes its input (no pool
// fused in), next takes its output, past a fused ReLU. In a chain each is
// the only reader of what they share.
func link16(ls []Layer) {
	for i, l := range ls {
		bn, ok := l.(*BatchNorm)
		if !ok {
			continue
		}
		bn.prev, bn.next = nil, nil
		if c, ok := at(ls, i-1).(*Conv2D); ok && c.pool == nil {
			bn.prev = c
		}
		j := i + 1
		for j < len(ls) && inPlace(ls[j]) {
			j++
		}
		if j < len(ls) {
			if c, ok := ls[j].(*Conv2D); ok {
				bn.next = c
			}
		}
	}
}

// fuseReLU switches the folding of ReLUs into batch norm and residual
// blocks (tests compare the two).
var fuseReLU = true

func at(ls []Layer, i int) Layer {
	if i < 0 {
		return nil
	}
	return ls[i]
}

// inPlace reports whether a layer's output is its input: a flatten (outside
// residual blocks), or a fused ReLU.
func inPlace(l Layer) bool {
	switch l := l.(type) {
	case *Flat:
		return !l.copy
	case *ReLU:
		return l.fused
	}
	return false
}

// pooled reports whether l is a convolution that runs the pool after it:
// its own output is never stored.
func pooled(l Layer) bool {
	c, ok := l.(*Conv2D)
	return ok && c.pool != nil
}

// Init sets every parameter from seed: He-normal weights, zero biases, batch
// norm's scale 1 and shift 0; and resets the buffers (running mean 0,
// running variance 1). The seed also keys the dropout noise (SetStep).
func (n *Net) Init(seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x6870637472616e)) // "hpctran"
	for _, l := range n.Layers {
		l.initParams(rng)
	}
	n.x.seed = seed
}

// SetParallel makes the network run its work on p's workers (Serial{}
// until called). The results do not depend on the number of workers.
func (n *Net) SetParallel(p Parallel) { n.x.par = p }

// SetGradScale makes Backward's gradients those of the mean loss times s
// (1 until called): replicas that sum their gradients set s to 1/replicas
// to get the gradient of the mean over the global batch. A power of two
// scales exactly.
func (n *Net) SetGradScale(s float32) { n.scale = s }

// SetTraining switches between training (true, the default) and
// evaluation. In training, batch normalisation normalises with the batch's
// statistics and updates its running statistics, and dropout drops; in
// evaluation, batch normalisation uses the running statistics and dropout
// passes its input through.
func (n *Net) SetTraining(on bool) { n.x.train = on }

// Training reports whether the network is in training mode.
func (n *Net) Training() bool { return n.x.train }

// SetSyncBN makes batch normalisation in training reduce its statistics
// over the replicas with r (nil: each replica normalises with its own
// batch's, the default, as PyTorch's DistributedDataParallel does):
// forward sums the per-channel sums, sums of squares and sample counts,
// backward the per-channel sums of dy and dy*(x-mean). Every replica must
// then run the same number of training Forward and Backward calls, with a
// reduction per batch-norm layer in layer order (backward in reverse);
// evaluation reduces nothing. A failed reduction is reported by Err.
func (n *Net) SetSyncBN(r SumReducer) { n.x.sync = r }

// Err returns the first failed reduction of synchronised batch norm since
// the last call, and clears it. After a failure, layers use this replica's
// own statistics until Err is called.
func (n *Net) Err() error {
	err := n.x.err
	n.x.err = nil
	return err
}

// SetStep keys the dropout noise of the following passes: step is the
// training step and first the index, within the step's global batch, of
// this replica's first sample (rank*batch). A sample's mask depends only
// on the seed, the step, the number of training forwards since SetStep,
// its global index and the layer, so runs repeat exactly, whatever the
// number of workers, and R replicas of batch B drop what one replica of
// batch R*B drops. Without SetStep, each training forward still draws a
// new mask (the count of forwards tells them apart).
func (n *Net) SetStep(step, first int) {
	n.x.step, n.x.first, n.x.pass = uint64(step), first, 0
}

// SetLabelSmoothing makes Loss the cross-entropy against targets
// (1-eps)*onehot + eps/Classes, PyTorch's CrossEntropyLoss(label_smoothing
// = eps): 0 (the default) is the plain cross-entropy.
func (n *Net) SetLabelSmoothing(eps float64) {
	if !(eps >= 0 && eps <= 1) {
		panic("model: label smoothing outside [0, 1]")
	}
	n.smooth = eps
}

// LabelSmoothing is the loss's label smoothing (SetLabelSmoothing).
func (n *Net) LabelSmoothing() float64 { return n.smooth }

// Batch is the largest batch the network was built for.
func (n *Net) Batch() int { return n.batch }

// Input returns the buffer Forward reads: (N, H, W, C) for up to Batch()
// samples. Callers may assemble a batch directly into it.
func (n *Net) Input() []float32 { return n.body.acts[0] }

// MACs is the number of multiply-adds of one sample's forward pass.
func (n *Net) MACs() int {
	t := 0
	for _, l := range n.Layers {
		t += l.MACs()
	}
	return t
}

// Forward runs the network on the first nb samples of Input() and returns
// the class scores (logits), (N, Classes).
func (n *Net) Forward(nb int) []float32 {
	if nb < 1 || nb > n.batch {
		panic("model: batch outside [1, Net.Batch()]")
	}
	n.n = nb
	n.x.wgen++
	// A training forward uses up WeightsUpdated's word: the update after
	// it must give it again. Evaluation leaves the parameters as they are.
	n.x.p16use = n.x.p16ok
	if n.x.train {
		n.x.p16ok = false
	}
	n.body.forward(nb)
	if n.x.train {
		n.x.pass++
	}
	return n.body.output()[:nb*n.Classes]
}

// Loss computes the mean softmax cross-entropy of the last Forward's scores
// against labels (with label smoothing if set), sets up the gradient for
// Backward, and returns the loss and the number of samples whose highest
// score is their label.
//
// The gradient is of the mean over the local batch (times SetGradScale's
// factor): ranks that average their gradients then hold the gradient of the
// mean over the global batch.
func (n *Net) Loss(labels []int32) (loss float64, correct int) {
	nb := n.n
	if len(labels) < nb {
		panic("model: fewer labels than samples")
	}
	logits := n.body.output()
	dl := n.body.dacts[len(n.Layers)]
	k := n.Classes
	eps := n.smooth
	inv := n.scale / float32(nb)
	off := float32(eps/float64(k)) * inv // the smoothed target's share of every class
	on := float32(1-eps) * inv
	for i := 0; i < nb; i++ {
		z := logits[i*k : (i+1)*k]
		p := n.probs[i*k : (i+1)*k]
		y := int(labels[i])
		if y < 0 || y >= k {
			panic("model: label outside [0, Classes)")
		}
		// -log softmax(z)[j] = logsumexp(z) - z[j], exact even where p[j]
		// underflows. Smoothed: (1-eps)(lse - z[y]) + eps/K sum_j (lse - z[j]).
		lse := softmax(p, z)
		l := lse - float64(z[y])
		if eps != 0 {
			var sz float64
			for _, v := range z {
				sz += float64(v)
			}
			l = (1-eps)*l + eps*(lse-sz/float64(k))
		}
		loss += l
		if argmax(z) == y {
			correct++
		}
		d := dl[i*k : (i+1)*k]
		if eps == 0 {
			for j := range d {
				d[j] = p[j] * inv
			}
			d[y] -= inv
			continue
		}
		for j := range d {
			d[j] = p[j]*inv - off
		}
		d[y] -= on
	}
	return loss / float64(nb), correct
}

// softmax writes softmax(z) into p and returns logsumexp(z). It subtracts
// max(z) before exponentiating, so no term overflows.
func softmax(p, z []float32) float64 {
	m := z[0]
	for _, v := range z {
		m = max(m, v)
	}
	var s float64
	for j, v := range z {
		e := math.Exp(float64(v - m))
		p[j] = float32(e)
		s += e
	}
	inv := 1 / s
	for j := range p {
		p[j] = float32(float64(p[j]) * inv)
	}
	return float64(m) + math.Log(s)
}

func argmax(z []float32) int {
	b := 0
	for j, v := range z {
		if v > z[b] {
			b = j
		}
	}
	return b
}

// firstParam is the index of the first layer with parameters: no layer up
// to it needs an input gradient.
func (n *Net) firstParam() int {
	for i, l := range n.Layers {
		if l.NumParams() > 0 {
			return i
		}
	}
	return len(n.Layers)
}

// TrainMACs is the number of multiply-adds of one sample's training step:
// forward, weight gradients, and input gradients of every layer after the
// first one with parameters (docs/background.md counts the same way).
func (n *Net) TrainMACs() int {
	t := 0
	for i, l := range n.Layers {
		t += 2 * l.MACs()
		if i > n.firstParam() {
			t += l.MACs()
		}
	}
	return t
}

// Backward computes every gradient from the last Forward and Loss. If hook
// is not nil it is told, layer by layer from the last (inside residual
// blocks too), which suffix of Grads is final.
func (n *Net) Backward(hook GradHook) {
	n.x.hook = hook
	n.body.backward(n.n, n.firstParam(), &n.x)
	n.x.hook = nil
}

// Group is one parameter (or buffer) tensor's range in the flat buffers.
type Group struct {
	Name     string // e.g. "conv1.weight", "res2.bn1.bias", "bn1.running_mean"
	Off, Len int
	Bias     bool // a bias: training recipes exempt it from weight decay
	Norm     bool // batch norm's weight (scale) or bias (shift)
}

// Groups lists the parameter tensors in buffer order, for optimizers that
// treat tensors differently (no weight decay on biases, layer-wise trust
// ratios) and for exporters: every tensor has a stable, PyTorch-like name.
// Batch norm's weight (gamma) has Norm set, its bias (beta) Bias and Norm.
func (n *Net) Groups() []Group {
	var gs []Group
	off := 0
	walk(n.Layers, func(l Layer) {
		for _, t := range l.tensors() {
			gs = append(gs, Group{Name: l.Name() + "." + t.name, Off: off, Len: t.len, Bias: t.bias, Norm: t.norm})
			off += t.len
		}
	})
	return gs
}

// BufferGroups lists the tensors of Buffers in order, named as Groups names
// parameters ("bn1.running_mean", "bn1.running_var").
func (n *Net) BufferGroups() []Group {
	var gs []Group
	off := 0
	walk(n.Layers, func(l Layer) {
		for _, t := range l.buffers() {
			gs = append(gs, Group{Name: l.Name() + "." + t.name, Off: off, Len: t.len})
			off += t.len
		}
	})
	return gs
}

// TimeLayers runs one forward, loss and backward pass of nb samples layer by
// layer and adds each layer's forward and backward time to fwd[i] and
// bwd[i] (for benchmarks; len(fwd) and len(bwd) must be len(Layers)).
func (n *Net) TimeLayers(nb int, labels []int32, fwd, bwd []time.Duration) {
	if nb < 1 || nb > n.batch {
		panic("model: batch outside [1, Net.Batch()]")
	}
	n.n = nb
	n.x.p16use = n.x.p16ok // no update here: the weights stay as they are
	c := &n.body
	for i, l := range n.Layers {
		t := time.Now()
		l.forward(c.acts[i], c.acts[c.out[i]], nb)
		fwd[i] += time.Since(t)
	}
	n.Loss(labels)
	first := n.firstParam()
	for i := len(n.Layers) - 1; i >= 0; i-- {
		var dx []float32
		if i > first {
			dx = c.dacts[i]
		}
		t := time.Now()
		n.Layers[i].backward(c.acts[i], c.acts[c.out[i]], c.dacts[c.out[i]], dx, nb)
		bwd[i] += time.Since(t)
	}
}
