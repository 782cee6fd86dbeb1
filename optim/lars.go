package optim

import "math"

// LARS is SGD with momentum whose gradient is scaled per tensor (layer) by a
// trust ratio, so every layer moves by about the same fraction of its norm
// (You, Gitman and Ginsburg 2017, "Large Batch Training of Convolutional
// Networks", arXiv:1708.03888). The formulation follows the widely used
// one in timm (timm.optim.Lars), with lr outside the momentum as in SGD:
//
//	ratio = eta*||w|| / (||g|| + wd*||w|| + eps)   per group, 1 if ||w|| or ||g|| is 0
//	d = (grad + wd*theta) * ratio
//	v = m*v + (1-dampening)*d                       (v = d on the first step)
//	d = d + m*v if Nesterov, else v
//	theta -= lr*d
//
// NoDecay groups (biases, batch norm's scale and shift) get neither weight
// decay nor the trust ratio (ratio 1), as is common practice. The ratio
// applies whatever the weight decay, as in the paper's algorithm (timm's
// Lars applies it only with weight decay or always_adapt). The paper's update
// v = m*v + lr*ratio*(g + wd*w); w -= v is the same when lr is constant.
// Defaults (not in torch.optim; timm's): lr 1, trust_coefficient (eta)
// 1e-3, eps 1e-8, momentum as given (usually 0.9). State: [step, v (with
// momentum only)].
type LARS struct {
	base
	c        Config
	eta, eps float64
	v        int
	ratio    []float64 // per group, this step's trust ratio
	phase    int       // 0: accumulate norms, 1: update
	first    bool
}

func newLARS(c Config, b base) (Optimizer, error) {
	if err := c.checkNesterov(); err != nil {
		return nil, err
	}
	o := &LARS{base: b, c: c, eta: *c.TrustCoefficient, eps: *c.Eps}
	if c.Momentum != 0 {
		o.v = o.addState(0)
	}
	o.nnorm = 2
	o.ratio = make([]float64, len(o.groups))
	o.task = taskFunc(o.kernel)
	return o, nil
}

func (o *LARS) Name() string { return "lars" }

func (o *LARS) Step(params, grads []float32, lr float64) {
	o.first = o.begin(params, grads, lr) == 1
	o.phase = 0
	o.runNorms()
	o.reduce()
	for gi := range o.groups {
		sq := o.partial[2*gi : 2*gi+2]
		wn, gn := math.Sqrt(sq[0]), math.Sqrt(sq[1])
		sq[0], sq[1] = 0, 0
		o.ratio[gi] = 1
		if !o.groups[gi].NoDecay && wn > 0 && gn > 0 {
			o.ratio[gi] = o.eta * wn / (gn + o.c.WeightDecay*wn + o.eps)
		}
	}
	o.phase = 1
	o.run()
	o.end()
}

func (o *LARS) kernel(w, lo, hi int) {
	for gi := o.groupAt(lo); lo < hi; gi++ {
		g := &o.groups[gi]
		end := min(hi, g.Off+g.Len)
		if o.phase == 0 {
			if !g.NoDecay {
				acc := o.partial[(w*len(o.groups)+gi)*2:][:2]
				acc[0] += sumSq(o.p[lo:end])
				acc[1] += sumSq(o.g[lo:end])
			}
		} else {
			var v []float32
			if o.v != 0 {
				v = o.state[o.v][lo:end]
			}
			sgdUpdate(o.p[lo:end], o.g[lo:end], v, nil, o.lr, decay(o.c.WeightDecay, g), o.ratio[gi], o.c, o.first)
		}
		lo = end
	}
}

// sumSq is the sum of squares of x, accumulated in float64.
func sumSq(x []float32) float64 {
	s := 0.0
	for _, v := range x {
		s += float64(v) * float64(v)
	}
	return s
}
