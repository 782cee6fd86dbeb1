package optim

import "math"

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
	wd := decay(o.c.WeightDecay, grp)
	p, gr := o.p[lo:hi], o.g[lo:hi]
	sq, acc := o.state[o.sq][lo:hi], o.state[o.acc][lo:hi]
	rho, eps := o.rho, o.eps
	for i := range p {
		th := float64(p[i])
		g := float64(gr[i]) + wd*th
		s := rho*float64(sq[i]) + (1-rho)*g*g
		dx := math.Sqrt(float64(acc[i])+eps) / math.Sqrt(s+eps) * g
		sq[i] = float32(s)
		acc[i] = float32(rho*float64(acc[i]) + (1-rho)*dx*dx)
		p[i] = float32(th - o.lr*dx)
	}
}
