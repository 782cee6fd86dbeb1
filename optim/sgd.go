package optim

import "fmt"

// SGD is stochastic gradient descent with momentum, dampening, Nesterov
// momentum and L2 weight decay, in PyTorch's formulation (torch.optim.SGD):
//
//	g = grad + wd*theta            (not for NoDecay groups)
//	v = m*v + (1-dampening)*g      (v = g on the first step)
//	g = g + m*v if Nesterov, else v
//	theta -= lr*g
//
// The course's form v = m*v + lr*g; theta -= v is the same update when lr is
// constant (v scaled by lr).
type SGD struct {
	c      Config
	decay  []bool // per parameter group: apply weight decay
	groups []Group
	v      []float32 // momentum buffer, allocated on the first step
	first  bool
}

func newSGD(c Config, groups []Group, n int) (Optimizer, error) {
	if c.Momentum < 0 {
		return nil, fmt.Errorf("momentum %v: must be >= 0", c.Momentum)
	}
	if c.Nesterov && (c.Momentum <= 0 || c.Dampening != 0) {
		return nil, fmt.Errorf("nesterov needs momentum > 0 and dampening 0")
	}
	if len(groups) == 0 {
		groups = []Group{{Name: "all", Len: n}}
	}
	return &SGD{c: c, groups: groups, first: true}, nil
}

func (o *SGD) Name() string { return "sgd" }

func (o *SGD) State() [][]float32 { return [][]float32{o.v} }

func (o *SGD) Step(params, grads []float32, lr float64) {
	if len(params) != len(grads) {
		panic("optim: params and grads of different lengths")
	}
	m, damp := float32(o.c.Momentum), float32(1-o.c.Dampening)
	if m != 0 && o.v == nil {
		o.v = make([]float32, len(params))
	}
	first := o.first
	o.first = false
	for _, g := range o.groups {
		wd := float32(o.c.WeightDecay)
		if g.NoDecay {
			wd = 0
		}
		p, gr := params[g.Off:g.Off+g.Len], grads[g.Off:g.Off+g.Len]
		if m == 0 {
			for i := range p {
				p[i] -= float32(lr) * (gr[i] + wd*p[i])
			}
			continue
		}
		v := o.v[g.Off : g.Off+g.Len]
		for i := range p {
			d := gr[i] + wd*p[i]
			if first {
				v[i] = d
			} else {
				v[i] = m*v[i] + damp*d
			}
			if o.c.Nesterov {
				d += m * v[i]
			} else {
				d = v[i]
			}
			p[i] -= float32(lr) * d
		}
	}
}
