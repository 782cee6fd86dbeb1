package optim

import "hpctrain/internal/kernels"

// Adagrad adapts each parameter's step to the sum of its squared gradients
// (Duchi, Hazan and Singer 2011, "Adaptive Subgradient Methods for Online
// Learning and Stochastic Optimization", JMLR 12; PyTorch's torch.optim.Adagrad,
// https://pytorch.org/docs/stable/generated/torch.optim.Adagrad.html):
//
//	g = grad + wd*theta                 (not for NoDecay groups)
//	clr = lr / (1 + (t-1)*lr_decay)
//	sum += g^2                          (sum starts at initial_accumulator_value)
//	theta -= clr * g / (sqrt(sum) + eps)
//
// Defaults: lr 1e-2, lr_decay 0, initial_accumulator_value 0, eps 1e-10.
// The step shrinks as sum grows. State: [step, sum].
type Adagrad struct {
	base
	c   Config
	eps float64
	sum int
	clr float64
}

func newAdagrad(c Config, b base) (Optimizer, error) {
	o := &Adagrad{base: b, c: c, eps: *c.Eps}
	o.sum = o.addState(float32(c.InitialAccumulatorValue))
	o.task = taskFunc(o.kernel)
	return o, nil
}

func (o *Adagrad) Name() string { return "adagrad" }

func (o *Adagrad) Step(params, grads []float32, lr float64) {
	t := o.begin(params, grads, lr)
	o.clr = lr / (1 + float64(t-1)*o.c.LRDecay)
	o.run()
	o.end()
}

func (o *Adagrad) kernel(_, lo, hi int) { o.each(lo, hi, o.update) }

func (o *Adagrad) update(lo, hi int, grp *Group) {
	kernels.Adagrad(o.p[lo:hi], o.g[lo:hi], o.state[o.sum][lo:hi], decay(o.c.WeightDecay, grp), o.clr, o.eps)
}
