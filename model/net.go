package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Flat is a layer that only reinterprets its input's shape: flattening
// (N, H, W, C) into (N, H*W*C) moves no data in a channels-last layout, so
// the network gives it the same buffer as input and output.
type Flat struct {
	name string
	out  Shape
}

// Flatten returns the Spec of a flatten layer.
func Flatten() Spec {
	return func(in Shape, name string) (Layer, error) {
		return &Flat{name: name, out: Shape{1, 1, in.Size()}}, nil
	}
}

func (l *Flat) Name() string                           { return l.name }
func (l *Flat) Out() Shape                             { return l.out }
func (l *Flat) NumParams() int                         { return 0 }
func (l *Flat) MACs() int                              { return 0 }
func (l *Flat) bind(p, g []float32, n int, x *exec)    {}
func (l *Flat) initParams(rng *rand.Rand)              {}
func (l *Flat) forward(x, y []float32, n int)          {}
func (l *Flat) backward(x, y, dy, dx []float32, n int) {}

// Net is a sequential network ending in softmax cross-entropy.
type Net struct {
	In      Shape
	Classes int
	Layers  []Layer
	// Params holds every parameter, layer after layer, each layer's weights
	// then its biases; Grads has the same layout.
	Params, Grads []float32
	offsets       []int // offsets[i]: start of layer i's parameters

	batch int         // largest batch
	acts  [][]float32 // acts[0] is the input; acts[i+1] is layer i's output (nil when fused away)
	dacts [][]float32 // gradients of acts; dacts[0] is unused
	out   []int       // layer i writes acts[out[i]]: i+1, or past its fused pool
	probs []float32   // (N, Classes) softmax of the last forward
	n     int         // batch of the last forward
	scale float32     // see SetGradScale
	x     exec        // workers and reusable tasks shared by the layers
}

// GradHook is told during Backward that the gradients from off to the end
// of Net.Grads are final, so that a caller can start reducing them while
// earlier layers are still being computed.
type GradHook interface {
	Ready(off int)
}

// NewNet builds a network for input shape in and batches of up to batch
// samples from specs, naming layers by kind and position, and initialises
// its parameters from seed.
func NewNet(in Shape, batch int, seed uint64, specs ...Spec) (*Net, error) {
	if batch < 1 {
		return nil, fmt.Errorf("model: batch %d < 1", batch)
	}
	n := &Net{In: in, batch: batch, x: exec{par: Serial{}}, scale: 1}
	shape := in
	counts := map[string]int{}
	total := 0
	for _, s := range specs {
		probe, err := s(shape, "")
		if err != nil {
			return nil, err
		}
		kind := kindOf(probe)
		counts[kind]++
		l, err := s(shape, fmt.Sprintf("%s%d", kind, counts[kind]))
		if err != nil {
			return nil, err
		}
		n.Layers = append(n.Layers, l)
		n.offsets = append(n.offsets, total)
		total += l.NumParams()
		shape = l.Out()
	}
	if shape.H != 1 || shape.W != 1 {
		return nil, fmt.Errorf("model: last layer's output %v is not a vector of class scores", shape)
	}
	n.Classes = shape.C
	n.Params = make([]float32, total)
	n.Grads = make([]float32, total)

	fuse(n.Layers)
	n.acts = [][]float32{make([]float32, batch*in.Size())}
	n.dacts = [][]float32{nil}
	for i, l := range n.Layers {
		p := n.Params[n.offsets[i] : n.offsets[i]+l.NumParams()]
		g := n.Grads[n.offsets[i] : n.offsets[i]+l.NumParams()]
		l.bind(p, g, batch, &n.x)
		n.out = append(n.out, i+1)
		if inPlace(l) {
			n.acts = append(n.acts, n.acts[i])
			n.dacts = append(n.dacts, n.dacts[i])
			continue
		}
		if pooled(l) {
			n.acts = append(n.acts, nil)
			n.dacts = append(n.dacts, nil)
			continue
		}
		n.acts = append(n.acts, make([]float32, batch*l.Out().Size()))
		// The first layer needs no input gradient; its dacts slot stays nil.
		n.dacts = append(n.dacts, make([]float32, batch*l.Out().Size()))
	}
	for i, l := range n.Layers {
		if c, ok := l.(*Conv2D); ok && c.pool != nil {
			for j := i + 1; j < len(n.Layers); j++ {
				if n.Layers[j] == Layer(c.pool) {
					n.out[i] = j + 1
				}
			}
		}
	}
	n.probs = make([]float32, batch*n.Classes)
	n.Init(seed)
	return n, nil
}

// fuse folds a ReLU into the max-pool after it, and a max-pool (with its
// ReLU) into the convolution before it (see MaxPool2D): conv, [relu,] pool.
func fuse(ls []Layer) {
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
}

func at(ls []Layer, i int) Layer {
	if i < 0 {
		return nil
	}
	return ls[i]
}

// inPlace reports whether a layer's output is its input: a flatten, or a
// ReLU fused into the pool after it.
func inPlace(l Layer) bool {
	switch l := l.(type) {
	case *Flat:
		return true
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

func kindOf(l Layer) string {
	switch l.(type) {
	case *Conv2D:
		return "conv"
	case *Linear:
		return "fc"
	case *ReLU:
		return "relu"
	case *MaxPool2D:
		return "pool"
	case *Flat:
		return "flatten"
	}
	return "layer"
}

// Init sets every parameter from seed: He-normal weights, zero biases.
func (n *Net) Init(seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x6870637472616e)) // "hpctran"
	for _, l := range n.Layers {
		l.initParams(rng)
	}
}

// SetParallel makes the network run its work on p's workers (Serial{}
// until called). The results do not depend on the number of workers.
func (n *Net) SetParallel(p Parallel) { n.x.par = p }

// SetGradScale makes Backward's gradients those of the mean loss times s
// (1 until called): replicas that sum their gradients set s to 1/replicas
// to get the gradient of the mean over the global batch. A power of two
// scales exactly.
func (n *Net) SetGradScale(s float32) { n.scale = s }

// Batch is the largest batch the network was built for.
func (n *Net) Batch() int { return n.batch }

// Input returns the buffer Forward reads: (N, H, W, C) for up to Batch()
// samples. Callers may assemble a batch directly into it.
func (n *Net) Input() []float32 { return n.acts[0] }

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
	for i, l := range n.Layers {
		l.forward(n.acts[i], n.acts[n.out[i]], nb)
	}
	return n.acts[len(n.Layers)][:nb*n.Classes]
}

// Loss computes the mean softmax cross-entropy of the last Forward's scores
// against labels, sets up the gradient for Backward, and returns the loss
// and the number of samples whose highest score is their label.
//
// The gradient is of the mean over the local batch (times SetGradScale's
// factor): ranks that average their gradients then hold the gradient of the
// mean over the global batch.
func (n *Net) Loss(labels []int32) (loss float64, correct int) {
	nb := n.n
	if len(labels) < nb {
		panic("model: fewer labels than samples")
	}
	logits := n.acts[len(n.Layers)]
	dl := n.dacts[len(n.Layers)]
	k := n.Classes
	for i := 0; i < nb; i++ {
		z := logits[i*k : (i+1)*k]
		p := n.probs[i*k : (i+1)*k]
		y := int(labels[i])
		if y < 0 || y >= k {
			panic("model: label outside [0, Classes)")
		}
		// -log softmax(z)[y] = logsumexp(z) - z[y], exact even where p[y]
		// underflows.
		loss += softmax(p, z) - float64(z[y])
		if argmax(z) == y {
			correct++
		}
		d := dl[i*k : (i+1)*k]
		inv := n.scale / float32(nb)
		for j := range d {
			d[j] = p[j] * inv
		}
		d[y] -= inv
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
// first one with parameters (shared/BASELINES.md counts the same way).
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
// is not nil it is told, layer by layer from the last, which suffix of Grads
// is final.
func (n *Net) Backward(hook GradHook) {
	nb := n.n
	first := n.firstParam()
	for i := len(n.Layers) - 1; i >= 0; i-- {
		l := n.Layers[i]
		var dx []float32
		if i > first {
			dx = n.dacts[i]
		}
		l.backward(n.acts[i], n.acts[n.out[i]], n.dacts[n.out[i]], dx, nb)
		if hook != nil && l.NumParams() > 0 {
			hook.Ready(n.offsets[i])
		}
	}
}

// Group is one parameter tensor's range in the flat buffers.
type Group struct {
	Name     string // e.g. "conv1.weight"
	Off, Len int
	Bias     bool
}

// Groups lists the parameter tensors in buffer order, for optimizers that
// treat tensors differently (no weight decay on biases, layer-wise trust
// ratios).
func (n *Net) Groups() []Group {
	var gs []Group
	for i, l := range n.Layers {
		np := l.NumParams()
		if np == 0 {
			continue
		}
		nbias := l.Out().C
		gs = append(gs,
			Group{Name: l.Name() + ".weight", Off: n.offsets[i], Len: np - nbias},
			Group{Name: l.Name() + ".bias", Off: n.offsets[i] + np - nbias, Len: nbias, Bias: true})
	}
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
	for i, l := range n.Layers {
		t := time.Now()
		l.forward(n.acts[i], n.acts[n.out[i]], nb)
		fwd[i] += time.Since(t)
	}
	n.Loss(labels)
	first := n.firstParam()
	for i := len(n.Layers) - 1; i >= 0; i-- {
		var dx []float32
		if i > first {
			dx = n.dacts[i]
		}
		t := time.Now()
		n.Layers[i].backward(n.acts[i], n.acts[n.out[i]], n.dacts[n.out[i]], dx, nb)
		bwd[i] += time.Since(t)
	}
}
