package optim

import "hpctrain/internal/kernels"

// SGD is stochastic gradient descent with momentum, dampening, Nesterov
// momentum and L2 weight decay, in PyTorch's formulation (torch.optim.SGD,
// https://pytorch.org/docs/stable/generated/torch.optim.SGD.html; Nesterov
// as in Sutskever et al. 2013, "On the importance of initialization and
// momentum in deep learning"):
//
//	g = grad + wd*theta            (not for NoDecay groups)
//	v = m*v + (1-dampening)*g      (v = g on the first step)
//	g = g + m*v if Nesterov, else v
//	theta -= lr*g
//
// The course's form v = m*v + lr*g; theta -= v is the same update when lr is
// constant (v scaled by lr). State: [step, v (only with momentum > 0)].
type SGD struct {
	base
	c Config
	v int // index of v in state, 0 without momentum
	// this step's scalars, read by kernel
	first bool
}

func newSGD(c Config, b base) (Optimizer, error) {
	if err := c.checkNesterov(); err != nil {
		return nil, err
	}
	o := &SGD{base: b, c: c}
	if c.Momentum != 0 {
		o.v = o.addState(0)
	}
	o.task = taskFunc(o.kernel)
	o.selfCopy = true // update writes the bf16 copy
	return o, nil
}

func (o *SGD) Name() string { return "sgd" }

func (o *SGD) Step(params, grads []float32, lr float64) {
	o.first = o.begin(params, grads, lr) == 1
	o.run()
	o.end()
}

func (o *SGD) kernel(_, lo, hi int) {
	for gi := o.groupAt(lo); lo < hi; gi++ {
		g := &o.groups[gi]
		end := min(hi, g.Off+g.Len)
		o.update(lo, end, g.NoDecay)
		lo = end
	}
}

func (o *SGD) update(lo, hi int, noDecay bool) {
	wd := o.c.WeightDecay
	if noDecay {
		wd = 0
	}
	var h []uint16
	if o.h != nil {
		h = o.h[lo:hi]
	}
	sgdUpdate(o.p[lo:hi], o.g[lo:hi], o.velocity(lo, hi), h, o.lr, wd, 1, o.c, o.first)
}

func (o *SGD) velocity(lo, hi int) []float32 {
	if o.v == 0 {
		return nil
	}
	return o.state[o.v][lo:hi]
}

// sgdUpdate is the SGD update on one range, with the gradient (after weight
// decay) scaled by ratio: shared by SGD (ratio 1) and LARS. With h, it also
// writes the new p in bfloat16 into h (see BF16Copier).
func sgdUpdate(p, gr, v []float32, h []uint16, lr, wd, ratio float64, c Config, first bool) {
	m, damp := c.Momentum, 1-c.Dampening
	if v != nil && !first {
		// Every step but the first (which sets v = d), vectorised.
		v, gr = v[:len(p)], gr[:len(p)]
		if h != nil {
			kernels.SGDMomentumBF16(p, gr, v, h, lr, m, damp, wd, ratio, c.Nesterov)
		} else {
			kernels.SGDMomentum(p, gr, v, lr, m, damp, wd, ratio, c.Nesterov)
		}
		return
	}
	if v == nil {
		for i := range p {
			d := (float64(gr[i]) + wd*float64(p[i])) * ratio
			p[i] = float32(float64(p[i]) - lr*d)
		}
	} else {
		// The first step sets v = d (PyTorch's initialisation of the buffer).
		v, gr = v[:len(p)], gr[:len(p)]
		for i := range p {
			d := (float64(gr[i]) + wd*float64(p[i])) * ratio
			v[i] = float32(d)
			if c.Nesterov {
				d += m * d
			}
			p[i] = float32(float64(p[i]) - lr*d)
		}
	}
	if h != nil {
		kernels.ToBF16(h, p)
	}
}
