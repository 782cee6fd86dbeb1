package model

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// Shape is the shape of one sample: height, width, channels (H, W, C). A
// vector of length C is {1, 1, C}.
type Shape struct{ H, W, C int }

// Size is the number of values in one sample.
func (s Shape) Size() int { return s.H * s.W * s.C }

func (s Shape) String() string { return fmt.Sprintf("%dx%dx%d", s.H, s.W, s.C) }

// Layer is one stage of a Sequential network. Layers are created by the
// Spec constructors (Conv, Linear, ...) and wired by New.
type Layer interface {
	// Name is a short label such as "conv1" for logs and reports.
	Name() string
	// Out is the shape of one output sample.
	Out() Shape
	// NumParams is the number of parameters (weights then biases).
	NumParams() int
	// MACs is the number of multiply-adds of a forward pass per sample.
	MACs() int

	// bind gives the layer its views into the flat parameter and gradient
	// buffers, sizes its workspace for batches of up to n samples, and hands
	// it the exec its work runs on.
	bind(params, grads []float32, n int, x *exec)
	// initParams fills the layer's parameters (He initialisation).
	initParams(rng *rand.Rand)
	// forward computes y from x for n samples.
	forward(x, y []float32, n int)
	// backward computes the parameter gradients and, when dx is not nil, the
	// input gradient, from x, y and dy, for n samples. It may consume
	// workspace that forward filled, so each backward follows a forward.
	backward(x, y, dy, dx []float32, n int)
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
type Spec func(in Shape, name string) (Layer, error)
