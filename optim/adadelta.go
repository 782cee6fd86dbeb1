package optim

import "hpctrain/internal/kernels"

// Adadelta scales each step by the ratio of running RMS values of past
// updates and of gradients, so it needs no hand-set learning rate (Zeiler
// 2012, "ADADELTA: An Adaptive Learning Rate Method", arXiv:1212.5701;
// PyTorch's torch.optim.Adadelta, which keeps an lr factor, default 1):
//
//	g = grad + wd*theta                        (not for NoDecay groups)
//	E[g^2] = rho*E[g^2] + (1-rho)*g^2
//	dx = sqrt(E[dx^2] + eps) / sqrt(E[g^2] + eps) * g
//	E[dx^2] = rho*E[dx^2] + (1-rho)*dx^2
//	theta -= lr*dx
//
// Defaults: lr 1.0, rho 0.9, eps 1e-6. State: [step, E[g^2], E[dx^2]].
type Adadelta struct {
	base
	c        Config
	rho, eps float64
	sq, acc  int
}

func newAdadelta(c Config, b base) (Optimizer, error) {
	o := &Adadelta{base: b, c: c, rho: *c.Rho, eps: *c.Eps}
	o.sq = o.addState(0)
	o.acc = o.addState(0)
	o.task = taskFunc(o.kernel)
	return o, nil
}

func (o *Adadelta) Name() string { return "adadelta" }

func (o *Adadelta) Step(params, grads []float32, lr float64) {
	o.begin(params, grads, lr)
	o.run()
	o.end()
}

func (o *Adadelta) kernel(_, lo, hi int) { o.each(lo, hi, o.update) }

func (o *Adadelta) update(lo, hi int, grp *Group) {
	kernels.Adadelta(o.p[lo:hi], o.g[lo:hi], o.state[o.sq][lo:hi], o.state[o.acc][lo:hi], o.rho,
		decay(o.c.WeightDecay, grp), o.lr, o.eps)
}
