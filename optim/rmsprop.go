package optim

import "hpctrain/internal/kernels"

// RMSprop divides each step by a running RMS of recent gradients (Hinton,
// Srivastava and Swersky, Neural Networks for Machine Learning, lecture 6e,
// 2012; centered form from Graves 2013, arXiv:1308.0850), in PyTorch's
// formulation (torch.optim.RMSprop,
// https://pytorch.org/docs/stable/generated/torch.optim.RMSprop.html):
//
//	g = grad + wd*theta                   (not for NoDecay groups)
//	s = alpha*s + (1-alpha)*g^2
//	centered: a = alpha*a + (1-alpha)*g;  d = sqrt(s - a^2) + eps
//	otherwise:                            d = sqrt(s) + eps
//	momentum > 0: b = momentum*b + g/d;   theta -= lr*b
//	otherwise:                            theta -= lr*g/d
//
// Defaults: lr 1e-2, alpha 0.99, eps 1e-8, momentum 0, centered false.
// State: [step, s, a (centered only), b (momentum > 0 only)].
type RMSprop struct {
	base
	c          Config
	alpha, eps float64
	s, a, b    int // state indices; a, b are 0 when unused
}

func newRMSprop(c Config, b base) (Optimizer, error) {
	o := &RMSprop{base: b, c: c, alpha: *c.Alpha, eps: *c.Eps}
	o.s = o.addState(0)
	if c.Centered {
		o.a = o.addState(0)
	}
	if c.Momentum > 0 {
		o.b = o.addState(0)
	}
	o.task = taskFunc(o.kernel)
	return o, nil
}

func (o *RMSprop) Name() string { return "rmsprop" }

func (o *RMSprop) Step(params, grads []float32, lr float64) {
	o.begin(params, grads, lr)
	o.run()
	o.end()
}

func (o *RMSprop) kernel(_, lo, hi int) { o.each(lo, hi, o.update) }

func (o *RMSprop) update(lo, hi int, grp *Group) {
	var a, b []float32
	if o.a != 0 {
		a = o.state[o.a][lo:hi]
	}
	if o.b != 0 {
		b = o.state[o.b][lo:hi]
	}
	kernels.RMSprop(o.p[lo:hi], o.g[lo:hi], o.state[o.s][lo:hi], a, b, o.alpha, o.c.Momentum,
		decay(o.c.WeightDecay, grp), o.lr, o.eps)
}
