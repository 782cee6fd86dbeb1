package kernels

import "math"

// The optimizers' element-wise updates, each in float64 and
// rounded to float32 per element, in the order of operations package
// optim documents for it (the native kernels keep that order, so both
// give the same bits). wd is the L2 coefficient added to the gradient.

// GoToBF16 writes each value of p rounded to bfloat16 into h: to nearest,
// ties to even, as oneDNN and AVX512-BF16's vcvtneps2bf16 round, with NaN
// kept a (quiet) NaN and subnormal inputs flushed to a zero of their sign,
// as that instruction does; internal/dnnl's conversion gives the same bits.
func GoToBF16(h []uint16, p []float32) {
	h = h[:len(p)]
	for i, f := range p {
		u := math.Float32bits(f)
		if u&0x7fffffff > 0x7f800000 {
			h[i] = uint16(u>>16) | 0x40
			continue
		}
		if u&0x7f800000 == 0 {
			u &= 0x80000000
		}
		h[i] = uint16((u + 0x7fff + (u>>16)&1) >> 16)
	}
}

// GoSGDMomentum is SGD's update with momentum m, dampening 1-damp, weight
// decay wd, the gradient scaled by ratio (LARS's trust ratio; 1 for SGD)
// and Nesterov's look-ahead when nesterov, in float64 and rounded to
// float32 per element:
//
//	d = (g + wd*p)*ratio;  v = m*v + damp*d
//	p -= lr*(d + m*v) with nesterov, else p -= lr*v
func GoSGDMomentum(p, g, v []float32, lr, m, damp, wd, ratio float64, nesterov bool) {
	g, v = g[:len(p)], v[:len(p)]
	for i := range p {
		d := (float64(g[i]) + wd*float64(p[i])) * ratio
		vi := m*float64(v[i]) + damp*d
		v[i] = float32(vi)
		if nesterov {
			d += m * vi
		} else {
			d = vi
		}
		p[i] = float32(float64(p[i]) - lr*d)
	}
}

// AdamArgs are one Adam (or AdamW) update's scalars: betas B1 and B2, the
// L2 coefficient added to the gradient (Adam's weight decay), the factor
// Shrink applied to p first (AdamW's 1 - lr*wd), Step = lr/(1-B1^t),
// BC2Sqrt = sqrt(1-B2^t) and Eps.
type AdamArgs struct {
	B1, B2, L2, Shrink, Step, BC2Sqrt, Eps float64
}

// GoAdam is Adam's update in float64, rounded to float32 per element, with
// AMSGrad's running maximum when vmax is not nil:
//
//	g = grad + L2*p;  m = B1*m + (1-B1)*g;  v = B2*v + (1-B2)*g*g
//	vmax = max(vmax, v), used for v below (AMSGrad)
//	p = p*Shrink - Step*m/(sqrt(v)/BC2Sqrt + Eps)
func GoAdam(p, g, m, v, vmax []float32, a AdamArgs) {
	g, m, v = g[:len(p)], m[:len(p)], v[:len(p)]
	if vmax != nil {
		vmax = vmax[:len(p)]
	}
	b1, b2 := a.B1, a.B2
	for i := range p {
		th := float64(p[i])
		gi := float64(g[i]) + a.L2*th
		mi := b1*float64(m[i]) + (1-b1)*gi
		vi := b2*float64(v[i]) + (1-b2)*gi*gi
		m[i], v[i] = float32(mi), float32(vi)
		if vmax != nil {
			vi = max(vi, float64(vmax[i]))
			vmax[i] = float32(vi)
		}
		p[i] = float32(th*a.Shrink - a.Step*mi/(math.Sqrt(vi)/a.BC2Sqrt+a.Eps))
	}
}

// LAMBArgs are one LAMB step's scalars: betas B1 and B2, the bias
// corrections BC1 = 1-B1^t and BC2 = 1-B2^t, Eps and the weight decay WD.
type LAMBArgs struct {
	B1, B2, BC1, BC2, Eps, WD float64
}

// lambU is LAMB's update direction for one element, from the stored
// (rounded) moments.
func lambU(m, v float32, th float64, a *LAMBArgs) float64 {
	return float64(m)/a.BC1/(math.Sqrt(float64(v)/a.BC2)+a.Eps) + a.WD*th
}

// GoLAMBMoments is LAMB's first pass: it updates m and v and returns the
// sums, in element order, of p^2 and of the update direction's squares:
//
//	m = B1*m + (1-B1)*g;  v = B2*v + (1-B2)*g*g  (rounded to float32)
//	u = m/BC1/(sqrt(v/BC2) + Eps) + WD*p
func GoLAMBMoments(p, g, m, v []float32, a LAMBArgs) (ws, us float64) {
	g, m, v = g[:len(p)], m[:len(p)], v[:len(p)]
	b1, b2 := a.B1, a.B2
	for i := range p {
		th, gi := float64(p[i]), float64(g[i])
		m[i] = float32(b1*float64(m[i]) + (1-b1)*gi)
		v[i] = float32(b2*float64(v[i]) + (1-b2)*gi*gi)
		u := lambU(m[i], v[i], th, &a)
		ws += th * th
		us += u * u
	}
	return ws, us
}

// GoLAMBApply is LAMB's second pass: p -= s*u, with u as in
// GoLAMBMoments and s the learning rate times the trust ratio.
func GoLAMBApply(p, m, v []float32, a LAMBArgs, s float64) {
	m, v = m[:len(p)], v[:len(p)]
	for i := range p {
		th := float64(p[i])
		p[i] = float32(th - s*lambU(m[i], v[i], th, &a))
	}
}

// GoAdagrad is Adagrad's update with learning rate clr (already decayed):
//
//	g = grad + wd*p;  s += g*g;  p -= clr*g/(sqrt(s) + eps)
func GoAdagrad(p, g, s []float32, wd, clr, eps float64) {
	g, s = g[:len(p)], s[:len(p)]
	for i := range p {
		th := float64(p[i])
		gi := float64(g[i]) + wd*th
		si := float64(s[i]) + gi*gi
		s[i] = float32(si)
		p[i] = float32(th - clr*gi/(math.Sqrt(si)+eps))
	}
}

// GoRMSprop is RMSprop's update with smoothing alpha: a (nil unless
// centered) is the running mean of the gradient, b (nil without momentum
// m) the momentum buffer:
//
//	g = grad + wd*p;  s = alpha*s + (1-alpha)*g*g
//	centered: a = alpha*a + (1-alpha)*g;  d = sqrt(max(0, s - a*a)) + eps
//	else d = sqrt(s) + eps
//	momentum: b = m*b + g/d;  p -= lr*b;  else p -= lr*g/d
func GoRMSprop(p, g, s, a, b []float32, alpha, m, wd, lr, eps float64) {
	g, s = g[:len(p)], s[:len(p)]
	for i := range p {
		th := float64(p[i])
		gi := float64(g[i]) + wd*th
		si := alpha*float64(s[i]) + (1-alpha)*gi*gi
		s[i] = float32(si)
		var d float64
		if a != nil {
			ai := alpha*float64(a[i]) + (1-alpha)*gi
			a[i] = float32(ai)
			d = math.Sqrt(max(0, si-ai*ai)) + eps // max: rounding can push the variance below 0
		} else {
			d = math.Sqrt(si) + eps
		}
		if b != nil {
			bi := m*float64(b[i]) + gi/d
			b[i] = float32(bi)
			p[i] = float32(th - lr*bi)
		} else {
			p[i] = float32(th - lr*gi/d)
		}
	}
}

// GoAdamax is Adamax's update, step = lr/(1-b1^t):
//
//	g = grad + wd*p;  m = b1*m + (1-b1)*g;  u = max(b2*u, |g| + eps)
//	p -= step*m/u
func GoAdamax(p, g, m, u []float32, b1, b2, wd, step, eps float64) {
	g, m, u = g[:len(p)], m[:len(p)], u[:len(p)]
	for i := range p {
		th := float64(p[i])
		gi := float64(g[i]) + wd*th
		mi := b1*float64(m[i]) + (1-b1)*gi
		ui := max(b2*float64(u[i]), math.Abs(gi)+eps)
		m[i], u[i] = float32(mi), float32(ui)
		p[i] = float32(th - step*mi/ui)
	}
}

// GoNadam is NAdam's update with this step's coefficients cg and cm and
// bc2inv = 1/(1-b2^t):
//
//	g = grad + wd*p;  m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g*g
//	d = sqrt(v*bc2inv) + eps;  p = p - cg*g/d - cm*m/d
func GoNadam(p, g, m, v []float32, b1, b2, wd, bc2inv, cg, cm, eps float64) {
	g, m, v = g[:len(p)], m[:len(p)], v[:len(p)]
	for i := range p {
		th := float64(p[i])
		gi := float64(g[i]) + wd*th
		mi := b1*float64(m[i]) + (1-b1)*gi
		vi := b2*float64(v[i]) + (1-b2)*gi*gi
		m[i], v[i] = float32(mi), float32(vi)
		d := math.Sqrt(vi*bc2inv) + eps
		p[i] = float32(th - cg*gi/d - cm*mi/d)
	}
}

// GoAdadelta is Adadelta's update:
//
//	g = grad + wd*p;  sq = rho*sq + (1-rho)*g*g
//	dx = sqrt(acc + eps)/sqrt(sq + eps)*g;  acc = rho*acc + (1-rho)*dx*dx
//	p -= lr*dx
func GoAdadelta(p, g, sq, acc []float32, rho, wd, lr, eps float64) {
	g, sq, acc = g[:len(p)], sq[:len(p)], acc[:len(p)]
	for i := range p {
		th := float64(p[i])
		gi := float64(g[i]) + wd*th
		s := rho*float64(sq[i]) + (1-rho)*gi*gi
		dx := math.Sqrt(float64(acc[i])+eps) / math.Sqrt(s+eps) * gi
		sq[i] = float32(s)
		acc[i] = float32(rho*float64(acc[i]) + (1-rho)*dx*dx)
		p[i] = float32(th - lr*dx)
	}
}

// checkState panics unless every buffer of bufs that is not nil is as long
// as p.
func checkBF16(p []float32, h []uint16) {
	if len(h) < len(p) {
		panic("kernels: bf16 copy shorter than p")
	}
}

func checkState(what string, p []float32, bufs ...[]float32) {
	for _, b := range bufs {
		if b != nil && len(b) < len(p) {
			panic("kernels: " + what + " buffers shorter than p")
		}
	}
}
