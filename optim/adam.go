package optim

import (
	"math"

	"hpctrain/internal/kernels"
)

// Adam keeps running averages of the gradient and its square and steps by
// their bias-corrected ratio (Kingma and Ba 2015, "Adam: A Method for
// Stochastic Optimization", arXiv:1412.6980; AMSGrad from Reddi, Kale and
// Kumar 2018, "On the Convergence of Adam and Beyond"), in PyTorch's
// formulation (torch.optim.Adam,
// https://pytorch.org/docs/stable/generated/torch.optim.Adam.html):
//
//	g = grad + wd*theta                     (L2, not for NoDecay groups)
//	m = b1*m + (1-b1)*g
//	v = b2*v + (1-b2)*g^2
//	amsgrad: vmax = max(vmax, v), used for v below
//	theta -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
//
// Defaults: lr 1e-3, betas 0.9/0.999, eps 1e-8, amsgrad false.
// State: [step, m, v, vmax (amsgrad only)].
type Adam struct {
	base
	c             Config
	b1, b2, eps   float64
	m, v, vmax    int
	decoupled     bool    // AdamW
	step, bc2sqrt float64 // this step's lr/(1-b1^t) and sqrt(1-b2^t)
}

func newAdam(c Config, b base) (Optimizer, error) {
	o := &Adam{base: b, c: c, b1: *c.Beta1, b2: *c.Beta2, eps: *c.Eps}
	o.m = o.addState(0)
	o.v = o.addState(0)
	if c.AMSGrad {
		o.vmax = o.addState(0)
	}
	o.task = taskFunc(o.kernel)
	return o, nil
}

func (o *Adam) Name() string { return "adam" }

func (o *Adam) Step(params, grads []float32, lr float64) {
	t := float64(o.begin(params, grads, lr))
	o.step = lr / (1 - math.Pow(o.b1, t))
	o.bc2sqrt = math.Sqrt(1 - math.Pow(o.b2, t))
	o.run()
	o.end()
}

func (o *Adam) kernel(_, lo, hi int) { o.each(lo, hi, o.update) }

func (o *Adam) update(lo, hi int, grp *Group) {
	wd := decay(o.c.WeightDecay, grp)
	l2, shrink := wd, 1.0
	if o.decoupled {
		l2, shrink = 0, 1-o.lr*wd
	}
	p, gr := o.p[lo:hi], o.g[lo:hi]
	m, v := o.state[o.m][lo:hi], o.state[o.v][lo:hi]
	var vmax []float32
	if o.vmax != 0 {
		vmax = o.state[o.vmax][lo:hi]
	}
	kernels.Adam(p, gr, m, v, vmax, kernels.AdamArgs{B1: o.b1, B2: o.b2, L2: l2, Shrink: shrink, Step: o.step, BC2Sqrt: o.bc2sqrt, Eps: o.eps})
}
