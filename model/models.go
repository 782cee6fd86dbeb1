package model

import (
	"fmt"
	"sort"
)

// Fashion-MNIST and MNIST: 28x28 grey images, 10 classes.
var imageShape = Shape{28, 28, 1}

// builders are the named networks; each takes the input shape and classes.
var builders = map[string]func(in Shape, classes int) []Spec{
	// mlp: 784-512-10 with ReLU.
	"mlp": func(in Shape, classes int) []Spec {
		return []Spec{Flatten(), FullyConnected(512), Rectifier(), FullyConnected(classes)}
	},
	// cnn: the book's reference network (shared/SEEDS.md), 1,630,090
	// parameters on 28x28x1 input. As in the book there is no activation
	// between the two linear layers.
	"cnn": func(in Shape, classes int) []Spec {
		return []Spec{
			Conv(32, 3, 1, 1), Rectifier(), MaxPool(2, 2),
			Conv(64, 3, 1, 1), Rectifier(), MaxPool(2, 2),
			Flatten(), FullyConnected(512), FullyConnected(classes),
		}
	},
}

// Names lists the models New knows, sorted.
func Names() []string {
	var s []string
	for k := range builders {
		s = append(s, k)
	}
	sort.Strings(s)
	return s
}

// New builds the named model for input shape in (zero: 28x28x1) with
// classes outputs, batches of up to batch samples, parameters from seed.
func New(name string, in Shape, classes, batch int, seed uint64) (*Net, error) {
	b, ok := builders[name]
	if !ok {
		return nil, fmt.Errorf("unknown model %q (known: %v)", name, Names())
	}
	if in == (Shape{}) {
		in = imageShape
	}
	return NewNet(in, batch, seed, b(in, classes)...)
}
