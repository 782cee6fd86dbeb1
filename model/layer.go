package model

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
)

// Shape is the shape of one sample: height, width, channels (H, W, C). A
// vector of length C is {1, 1, C}.
type Shape struct{ H, W, C int }

// Size is the number of values in one sample.
func (s Shape) Size() int { return s.H * s.W * s.C }

func (s Shape) String() string { return fmt.Sprintf("%dx%dx%d", s.H, s.W, s.C) }

// Layer is one stage of a network. Layers are created by Specs (from a
// Desc, or the constructors Conv, FullyConnected, ...) and wired by Build
// or NewNet.
type Layer interface {
	// Name is a short label such as "conv1" or "res2.bn1" for logs,
	// reports and parameter names.
	Name() string
	// Out is the shape of one output sample.
	Out() Shape
	// NumParams is the number of parameters (weights then biases).
	NumParams() int
	// MACs is the number of multiply-adds of a forward pass per sample
	// (convolutions and linear layers; element-wise layers count 0).
	MACs() int

	// bind gives the layer its views into the network's flat buffers,
	// sizes its workspace for batches of up to s.n samples, and hands it
	// the exec its work runs on.
	bind(s slot)
	// initParams fills the layer's parameters (He initialisation) and
	// resets its buffers.
	initParams(rng *rand.Rand)
	// forward computes y from x for n samples.
	forward(x, y []float32, n int)
	// backward computes the parameter gradients and, when dx is not nil, the
	// input gradient, from x, y and dy, for n samples. It may consume
	// workspace that forward filled, so each backward follows a forward.
	backward(x, y, dy, dx []float32, n int)
	// tensors lists the layer's parameter tensors in buffer order, and
	// buffers its non-trainable state (running statistics).
	tensors() []tensor
	buffers() []tensor
}

// slot is what bind hands a layer: views of its share of Net.Params,
// Net.Grads and Net.Buffers, where its parameters start in Net.Params (for
// GradHook), the largest batch, and the shared exec.
type slot struct {
	p, g, buf []float32
	off       int
	n         int
	x         *exec
}

// sub is the slot of a contained layer: np parameters and nb buffers from
// parameter p and buffer b of s.
func (s slot) sub(p, np, b, nb int) slot {
	return slot{p: s.p[p : p+np], g: s.g[p : p+np], buf: s.buf[b : b+nb], off: s.off + p, n: s.n, x: s.x}
}

// tensor is one named parameter or buffer tensor of a layer.
type tensor struct {
	name string // "weight", "bias", "running_mean", ...
	len  int
	bias bool // a bias (no weight decay in the usual recipes)
	norm bool // a normalisation layer's scale or shift
}

// noParams is embedded by layers without parameters or buffers.
type noParams struct{}

func (noParams) NumParams() int            { return 0 }
func (noParams) MACs() int                 { return 0 }
func (noParams) initParams(rng *rand.Rand) {}
func (noParams) tensors() []tensor         { return nil }
func (noParams) buffers() []tensor         { return nil }

// numBuffers is the number of buffer values of l (and its children).
func numBuffers(l Layer) int {
	t := 0
	if c, ok := l.(container); ok {
		for _, k := range c.children() {
			t += numBuffers(k)
		}
		return t
	}
	for _, b := range l.buffers() {
		t += b.len
	}
	return t
}

// heNormal fills w with N(0, 2/fanIn) samples: He et al. 2015, the
// initialisation for layers followed by ReLU.
func heNormal(w []float32, fanIn int, rng *rand.Rand) {
	std := math.Sqrt(2 / float64(fanIn))
	for i := range w {
		w[i] = float32(rng.NormFloat64() * std)
	}
}

// Spec describes a layer before its input shape is known.
type Spec struct {
	prefix string // layer name prefix: conv, fc, relu, pool, bn, res, ...
	kind   string // the description's kind, for messages: conv, linear, maxpool, ...
	// make builds the layer for input shape in and the given name; path
	// is the layer's position ("5." inside block 5), for the messages of
	// contained layers.
	make func(in Shape, name, path string) (Layer, error)
}

// maxSize bounds any one layer's parameters and any one activation of a
// sample, so that absurd descriptions are refused instead of exhausting
// memory (or overflowing an int).
const maxSize = 1 << 30

func tooLarge(v ...int) bool {
	p := 1.0
	for _, x := range v {
		p *= float64(x)
	}
	return p > maxSize
}

// posError is an error of one layer of a stack, naming its position
// ("3", "5.2") and kind.
type posError struct {
	pos, kind string
	err       error
}

func (e *posError) Error() string { return fmt.Sprintf("layer %s (%s): %v", e.pos, e.kind, e.err) }
func (e *posError) Unwrap() error { return e.err }

// stack builds specs one after another from input shape in, naming each
// layer prefix+kind+count ("res2.conv1"). It returns the layers and the
// output shape; an error names the layer by its position under path.
func stack(in Shape, specs []Spec, prefix, path string) ([]Layer, Shape, error) {
	counts := map[string]int{}
	var ls []Layer
	shape := in
	for i, s := range specs {
		counts[s.prefix]++
		pos := fmt.Sprintf("%s%d", path, i+1)
		l, err := s.make(shape, fmt.Sprintf("%s%s%d", prefix, s.prefix, counts[s.prefix]), pos+".")
		if err != nil {
			var pe *posError
			if errors.As(err, &pe) {
				return nil, Shape{}, err // a contained layer's, already placed
			}
			return nil, Shape{}, &posError{pos: pos, kind: s.kind, err: err}
		}
		ls = append(ls, l)
		shape = l.Out()
	}
	return ls, shape, nil
}

// ParseShape reads a sample shape written as Shape.String does: "HxWxC",
// each an integer from 1 to 2^20.
func ParseShape(s string) (Shape, error) {
	parts := strings.Split(s, "x")
	var v [3]int
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > maxKey || len(parts) != 3 {
			return Shape{}, fmt.Errorf("shape %q: want HxWxC, each an integer from 1 to %d, e.g. 32x32x3", s, maxKey)
		}
		v[i] = n
	}
	return Shape{v[0], v[1], v[2]}, nil
}
