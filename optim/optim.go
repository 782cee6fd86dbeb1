package optim

import (
	"fmt"
	"sort"
)

// Group is one parameter tensor's range in the flat buffers.
type Group struct {
	Name     string
	Off, Len int
	// NoDecay excludes the tensor from weight decay (biases).
	NoDecay bool
}

// Optimizer updates params in place from grads (same length, the flat
// buffers the Groups index). Step allocates nothing after the first call.
type Optimizer interface {
	// Name is the optimizer's name as accepted by New.
	Name() string
	// Step applies one update with learning rate lr.
	Step(params, grads []float32, lr float64)
	// State returns the optimizer's state buffers, in a fixed order, for
	// checkpoints: the slices are the live state, so copying into them
	// restores it. Before the first Step they may be nil.
	State() [][]float32
}

// Config holds every optimizer's hyperparameters; each optimizer reads the
// fields it uses. Zero values select PyTorch's defaults where noted.
type Config struct {
	Name        string  `toml:"optimizer"`
	LR          float64 `toml:"lr"`
	Momentum    float64 `toml:"momentum"`
	Dampening   float64 `toml:"dampening"`
	Nesterov    bool    `toml:"nesterov"`
	WeightDecay float64 `toml:"weight_decay"`
}

// constructors are the known optimizers by name.
var constructors = map[string]func(c Config, groups []Group, n int) (Optimizer, error){
	"sgd": newSGD,
}

// Names lists the optimizers New knows, sorted.
func Names() []string {
	var s []string
	for k := range constructors {
		s = append(s, k)
	}
	sort.Strings(s)
	return s
}

// New returns the optimizer c.Name for n parameters laid out as groups.
func New(c Config, groups []Group, n int) (Optimizer, error) {
	f, ok := constructors[c.Name]
	if !ok {
		return nil, fmt.Errorf("unknown optimizer %q (known: %v)", c.Name, Names())
	}
	if c.LR < 0 {
		return nil, fmt.Errorf("lr %v: must be >= 0", c.LR)
	}
	if c.WeightDecay < 0 {
		return nil, fmt.Errorf("weight_decay %v: must be >= 0", c.WeightDecay)
	}
	return f(c, groups, n)
}
