package optim

import (
	"math"

	"hpctrain/internal/kernels"
)

// Nadam is Adam with Nesterov momentum (Dozat 2016, "Incorporating Nesterov
// Momentum into Adam", ICLR workshop), in PyTorch's formulation
// (torch.optim.NAdam,
// https://pytorch.org/docs/stable/generated/torch.optim.NAdam.html) with
// the momentum schedule mu_t = b1*(1 - 0.5*0.96^(t*psi)):
//
//	g = grad + wd*theta                 (not for NoDecay groups)
//	P_t = mu_1*...*mu_t
//	m = b1*m + (1-b1)*g
//	v = b2*v + (1-b2)*g^2
//	d = sqrt(v/(1-b2^t)) + eps
//	theta -= lr*(1-mu_t)/(1-P_t) * g/d + lr*mu_{t+1}/(1-P_t*mu_{t+1}) * m/d
//
// This is the documented formula and PyTorch >= 2.0's code; PyTorch 1.13's
// code used P_t*mu_t*mu_{t+1} in the last denominator (fixed upstream), so
// testdata/gen_golden.py patches that line when it runs on 1.13.
// Defaults: lr 2e-3, betas 0.9/0.999, eps 1e-8, momentum_decay (psi) 4e-3.
// State: [step, m, v]; P_t is recomputed from the step count on Restore.
type Nadam struct {
	base
	c              Config
	b1, b2, eps    float64
	psi            float64
	m, v           int
	muProduct      float64 // P_t after the last Step
	cg, cm, bc2inv float64 // this step's coefficients
}

func newNadam(c Config, b base) (Optimizer, error) {
	o := &Nadam{base: b, c: c, b1: *c.Beta1, b2: *c.Beta2, eps: *c.Eps, psi: *c.MomentumDecay, muProduct: 1}
	o.m = o.addState(0)
	o.v = o.addState(0)
	o.task = taskFunc(o.kernel)
	return o, nil
}

func (o *Nadam) Name() string { return "nadam" }

func (o *Nadam) mu(t int) float64 {
	return o.b1 * (1 - 0.5*math.Pow(0.96, float64(t)*o.psi))
}

// Restore implements Optimizer; it also recomputes P_t from the restored
// step count.
func (o *Nadam) Restore(state [][]float32) error {
	if err := o.base.Restore(state); err != nil {
		return err
	}
	o.muProduct = 1
	for t := 1; t <= o.steps(); t++ {
		o.muProduct *= o.mu(t)
	}
	return nil
}

func (o *Nadam) Step(params, grads []float32, lr float64) {
	t := o.begin(params, grads, lr)
	mu, next := o.mu(t), o.mu(t+1)
	o.muProduct *= mu
	o.cg = lr * (1 - mu) / (1 - o.muProduct)
	o.cm = lr * next / (1 - o.muProduct*next)
	o.bc2inv = 1 / (1 - math.Pow(o.b2, float64(t)))
	o.run()
	o.end()
}

func (o *Nadam) kernel(_, lo, hi int) { o.each(lo, hi, o.update) }

func (o *Nadam) update(lo, hi int, grp *Group) {
	kernels.Nadam(o.p[lo:hi], o.g[lo:hi], o.state[o.m][lo:hi], o.state[o.v][lo:hi], o.b1, o.b2,
		decay(o.c.WeightDecay, grp), o.bc2inv, o.cg, o.cm, o.eps)
}
