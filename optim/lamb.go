package optim

import (
	"math"

	"hpctrain/internal/kernels"
)

// LAMB is Adam whose update is rescaled per tensor (layer) by the trust
// ratio ||w|| / ||update|| (You et al. 2019, "Large Batch Optimization for
// Deep Learning: Training BERT in 76 minutes", arXiv:1904.00962,
// Algorithm 2, with bias correction):
//
//	g = grad
//	m = b1*m + (1-b1)*g
//	v = b2*v + (1-b2)*g^2
//	u = (m/(1-b1^t)) / (sqrt(v/(1-b2^t)) + eps) + wd*theta
//	ratio = phi(||w||) / ||u||  per group, 1 if either norm is 0
//	theta -= lr*ratio*u
//
// phi clips ||w|| to at most 10, as the paper's phi(z) = min(max(z, 0), 10)
// and the reference implementations (cybertronai/pytorch-lamb) do. NoDecay
// groups get neither weight decay nor the trust ratio (ratio 1), like
// BERT's exclude_from_layer_adaptation. Not in torch.optim; defaults:
// lr 1e-3, betas 0.9/0.999, eps 1e-6, weight_decay 0. State: [step, m, v].
type LAMB struct {
	base
	c           Config
	b1, b2, eps float64
	m, v        int
	ratio       []float64
	phase       int
	bc1, bc2    float64
}

// lambMaxNorm is phi's upper clip on ||w||.
const lambMaxNorm = 10

func newLAMB(c Config, b base) (Optimizer, error) {
	o := &LAMB{base: b, c: c, b1: *c.Beta1, b2: *c.Beta2, eps: *c.Eps}
	o.m = o.addState(0)
	o.v = o.addState(0)
	o.nnorm = 2
	o.ratio = make([]float64, len(o.groups))
	o.task = taskFunc(o.kernel)
	return o, nil
}

func (o *LAMB) Name() string { return "lamb" }

func (o *LAMB) Step(params, grads []float32, lr float64) {
	t := float64(o.begin(params, grads, lr))
	o.bc1, o.bc2 = 1-math.Pow(o.b1, t), 1-math.Pow(o.b2, t)
	o.phase = 0
	o.runNorms()
	o.reduce()
	for gi := range o.groups {
		sq := o.partial[2*gi : 2*gi+2]
		wn, un := math.Sqrt(sq[0]), math.Sqrt(sq[1])
		sq[0], sq[1] = 0, 0
		o.ratio[gi] = 1
		if !o.groups[gi].NoDecay && wn > 0 && un > 0 {
			o.ratio[gi] = min(wn, lambMaxNorm) / un
		}
	}
	o.phase = 1
	o.run()
	o.end()
}

func (o *LAMB) kernel(w, lo, hi int) {
	for gi := o.groupAt(lo); lo < hi; gi++ {
		g := &o.groups[gi]
		end := min(hi, g.Off+g.Len)
		if o.phase == 0 {
			acc := o.partial[(w*len(o.groups)+gi)*2:][:2]
			ws, us := o.moments(lo, end, decay(o.c.WeightDecay, g))
			acc[0] += ws
			acc[1] += us
		} else {
			o.apply(lo, end, decay(o.c.WeightDecay, g), o.ratio[gi])
		}
		lo = end
	}
}

// moments updates m and v on [lo, hi) and returns ||w||^2 and ||u||^2 there.
func (o *LAMB) moments(lo, hi int, wd float64) (ws, us float64) {
	return kernels.LAMBMoments(o.p[lo:hi], o.g[lo:hi], o.state[o.m][lo:hi], o.state[o.v][lo:hi], o.args(wd))
}

// args are the kernels' scalars for weight decay wd.
func (o *LAMB) args(wd float64) kernels.LAMBArgs {
	return kernels.LAMBArgs{B1: o.b1, B2: o.b2, BC1: o.bc1, BC2: o.bc2, Eps: o.eps, WD: wd}
}

func (o *LAMB) apply(lo, hi int, wd, ratio float64) {
	kernels.LAMBApply(o.p[lo:hi], o.state[o.m][lo:hi], o.state[o.v][lo:hi], o.args(wd), o.lr*ratio)
}
