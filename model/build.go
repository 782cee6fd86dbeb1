package model

import (
	"fmt"
)

// Fashion-MNIST and MNIST: 28x28 grey images, 10 classes.
var imageShape = Shape{28, 28, 1}

// Build builds the network d describes for input shape in, classes
// outputs and batches of up to batch samples, and initialises its
// parameters from seed. A description that does not fit the input (a
// kernel larger than its input, a residual block whose branches disagree,
// a last layer that is not a vector of classes scores) is an error of one
// line naming d.Name, the layer and the reason.
func Build(d Desc, in Shape, classes, batch int, seed uint64, opts ...Option) (*Net, error) {
	d, layers, err := plan(d, in, classes, batch)
	if err != nil {
		return nil, err
	}
	net, err := newNet(in, batch, seed, layers, opts...)
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", d.Name, err)
	}
	net.Desc = d
	return net, nil
}

// plan checks d for input in and classes, and lays out its layers without
// allocating their parameters or activations (Build's first half; what
// Summarize needs).
func plan(d Desc, in Shape, classes, batch int) (Desc, []Layer, error) {
	name := d.Name
	if name == "" {
		name = "(unnamed)"
	}
	// Printing and reading back checks a description made in Go as it
	// checks a file, and fills nothing in that it does not say.
	d, err := ParseDesc(name, d.TOML())
	if err != nil {
		return d, nil, err
	}
	switch {
	case in.H < 1 || in.W < 1 || in.C < 1:
		return d, nil, fmt.Errorf("model %s: input shape %v must be positive", name, in)
	case classes < 1:
		return d, nil, fmt.Errorf("model %s: %d classes", name, classes)
	case batch < 1:
		return d, nil, fmt.Errorf("model %s: batch %d < 1", name, batch)
	}
	layers, out, err := stack(in, specs(d.Layers, classes), "", "")
	if err != nil {
		return d, nil, fmt.Errorf("model %s: %w", name, err)
	}
	if (out.H == 1 && out.W == 1) && out.C != classes {
		return d, nil, fmt.Errorf("model %s: the last layer gives %d scores for %d classes (use out = \"classes\")", name, out.C, classes)
	}
	return d, layers, nil
}

// specs are the Specs of a list of layer descriptions.
func specs(ls []LayerDesc, classes int) []Spec {
	s := make([]Spec, len(ls))
	for i, l := range ls {
		s[i] = l.spec(classes)
	}
	return s
}

func (l LayerDesc) spec(classes int) Spec {
	out := l.Out
	if out == OutClasses {
		out = classes
	}
	switch l.Kind {
	case "conv":
		return conv(out, l.Kernel, l.Stride, l.Pad, l.Bias)
	case "linear":
		return linear(out, l.Bias)
	case "relu":
		return Rectifier()
	case "maxpool":
		return MaxPool(l.Kernel, l.Stride)
	case "avgpool":
		return avgPool(l.Kernel, l.Stride)
	case "globalavgpool":
		return globalAvgPool()
	case "flatten":
		return Flatten()
	case "batchnorm":
		return batchNorm(l.Momentum, l.Eps)
	case "dropout":
		return dropout(l.P)
	case "residual":
		return residual(l.Shortcut, specs(l.Layers, classes))
	}
	panic("model: unknown kind " + l.Kind) // ParseDesc let it through
}

// New builds a model by zoo name or description file (see LoadDesc) for
// input shape in (zero: 28x28x1) with classes outputs, batches of up to
// batch samples, parameters from seed.
func New(nameOrPath string, in Shape, classes, batch int, seed uint64, opts ...Option) (*Net, error) {
	d, err := LoadDesc(nameOrPath)
	if err != nil {
		return nil, err
	}
	if in == (Shape{}) {
		in = imageShape
	}
	return Build(d, in, classes, batch, seed, opts...)
}

// An Option changes how Build and New make a network.
type Option func(*options)

type options struct {
	grads []float32
}

// GradsIn makes the network keep its gradients (Net.Grads) in g, memory
// the caller owns, of exactly the network's parameter count: for example
// a buffer the ranks of a node share, which the all-reduce then sums in
// place. The network zeroes it.
func GradsIn(g []float32) Option {
	return func(o *options) { o.grads = g }
}
