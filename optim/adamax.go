package optim

import (
	"math"

	"hpctrain/internal/kernels"
)

// Adamax is Adam with the infinity norm in place of the second moment
// (Kingma and Ba 2015, section 7.1, arXiv:1412.6980), in PyTorch's
// formulation (torch.optim.Adamax,
// https://pytorch.org/docs/stable/generated/torch.optim.Adamax.html):
//
//	g = grad + wd*theta                 (not for NoDecay groups)
//	m = b1*m + (1-b1)*g
//	u = max(b2*u, |g| + eps)
//	theta -= lr/(1-b1^t) * m/u
//
// Defaults: lr 2e-3, betas 0.9/0.999, eps 1e-8. State: [step, m, u].
type Adamax struct {
	base
	c           Config
	b1, b2, eps float64
	m, u        int
	step        float64 // lr/(1-b1^t)
}

func newAdamax(c Config, b base) (Optimizer, error) {
	o := &Adamax{base: b, c: c, b1: *c.Beta1, b2: *c.Beta2, eps: *c.Eps}
	o.m = o.addState(0)
	o.u = o.addState(0)
	o.task = taskFunc(o.kernel)
	return o, nil
}

func (o *Adamax) Name() string { return "adamax" }

func (o *Adamax) Step(params, grads []float32, lr float64) {
	t := float64(o.begin(params, grads, lr))
	o.step = lr / (1 - math.Pow(o.b1, t))
	o.run()
	o.end()
}

func (o *Adamax) kernel(_, lo, hi int) { o.each(lo, hi, o.update) }

func (o *Adamax) update(lo, hi int, grp *Group) {
	kernels.Adamax(o.p[lo:hi], o.g[lo:hi], o.state[o.m][lo:hi], o.state[o.u][lo:hi], o.b1, o.b2,
		decay(o.c.WeightDecay, grp), o.step, o.eps)
}
