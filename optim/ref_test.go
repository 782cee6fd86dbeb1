package optim

import "math"

// This file restates every optimizer's update in plain float64, straight
// from the formulas in the papers and the torch.optim documentation,
// without sharing code with the implementation. The defaults are restated
// here too, from the PyTorch docs.

// hyper is a fully resolved hyperparameter set for the reference.
type hyper struct {
	wd, momentum, dampening              float64
	nesterov, amsgrad, centered          bool
	beta1, beta2, eps, rho, alpha        float64
	lrDecay, initAcc, momentumDecay, eta float64
}

// refDefaults are PyTorch's (and, for LARS/LAMB, timm's and the paper's)
// defaults, restated.
func refDefaults(name string) hyper {
	h := hyper{beta1: 0.9, beta2: 0.999, eps: 1e-8, rho: 0.9, alpha: 0.99, momentumDecay: 4e-3, eta: 1e-3}
	switch name {
	case "adagrad":
		h.eps = 1e-10
	case "adadelta", "lamb":
		h.eps = 1e-6
	case "adamw":
		h.wd = 1e-2
	}
	return h
}

// refOpt is the reference optimizer state: per-element buffers by name.
type refOpt struct {
	name   string
	h      hyper
	groups []Group
	t      int
	buf    map[string][]float64
	prod   float64 // Nadam's product of mu
}

func newRef(name string, h hyper, groups []Group, n int) *refOpt {
	r := &refOpt{name: name, h: h, groups: groups, buf: map[string][]float64{}, prod: 1}
	for _, k := range []string{"m", "v", "vmax", "s", "a", "b", "acc", "u"} {
		r.buf[k] = make([]float64, n)
	}
	for i := range r.buf["s"] {
		r.buf["s"][i] = h.initAcc
	}
	return r
}

func norm(x []float64) float64 {
	s := 0.0
	for _, v := range x {
		s += v * v
	}
	return math.Sqrt(s)
}

func (r *refOpt) step(p, g []float64, lr float64) {
	r.t++
	t := float64(r.t)
	h := r.h
	for _, grp := range r.groups {
		wd := h.wd
		if grp.NoDecay {
			wd = 0
		}
		lo, hi := grp.Off, grp.Off+grp.Len
		// LARS and LAMB need the group's norms first.
		ratio := 1.0
		switch r.name {
		case "lars":
			wn, gn := norm(p[lo:hi]), norm(g[lo:hi])
			if !grp.NoDecay && wn > 0 && gn > 0 {
				ratio = h.eta * wn / (gn + wd*wn + h.eps)
			}
		case "lamb":
			u := make([]float64, hi-lo)
			for i := lo; i < hi; i++ {
				m := h.beta1*r.buf["m"][i] + (1-h.beta1)*g[i]
				v := h.beta2*r.buf["v"][i] + (1-h.beta2)*g[i]*g[i]
				mhat, vhat := m/(1-math.Pow(h.beta1, t)), v/(1-math.Pow(h.beta2, t))
				u[i-lo] = mhat/(math.Sqrt(vhat)+h.eps) + wd*p[i]
			}
			wn, un := math.Min(norm(p[lo:hi]), 10), norm(u)
			if !grp.NoDecay && wn > 0 && un > 0 {
				ratio = wn / un
			}
		}
		for i := lo; i < hi; i++ {
			r.elem(i, p, g[i], lr, wd, ratio, t)
		}
	}
	if r.name == "nadam" {
		r.prod *= r.mu(r.t)
	}
}

func (r *refOpt) mu(t int) float64 {
	return r.h.beta1 * (1 - 0.5*math.Pow(0.96, float64(t)*r.h.momentumDecay))
}

func (r *refOpt) elem(i int, p []float64, grad, lr, wd, ratio, t float64) {
	h := r.h
	m, v, vmax := &r.buf["m"][i], &r.buf["v"][i], &r.buf["vmax"][i]
	switch r.name {
	case "sgd", "lars":
		// PyTorch SGD: buf = g on the first step, then m*buf + (1-d)*g.
		d := (grad + wd*p[i]) * ratio
		if h.momentum != 0 {
			if t == 1 {
				*m = d
			} else {
				*m = h.momentum**m + (1-h.dampening)*d
			}
			if h.nesterov {
				d += h.momentum * *m
			} else {
				d = *m
			}
		}
		p[i] -= lr * d
	case "adagrad":
		d := grad + wd*p[i]
		s := &r.buf["s"][i]
		*s += d * d
		p[i] -= lr / (1 + (t-1)*h.lrDecay) * d / (math.Sqrt(*s) + h.eps)
	case "adadelta":
		d := grad + wd*p[i]
		s, acc := &r.buf["s"][i], &r.buf["acc"][i]
		*s = h.rho**s + (1-h.rho)*d*d
		dx := math.Sqrt(*acc+h.eps) / math.Sqrt(*s+h.eps) * d
		*acc = h.rho**acc + (1-h.rho)*dx*dx
		p[i] -= lr * dx
	case "rmsprop":
		d := grad + wd*p[i]
		s, a, b := &r.buf["s"][i], &r.buf["a"][i], &r.buf["b"][i]
		*s = h.alpha**s + (1-h.alpha)*d*d
		den := math.Sqrt(*s) + h.eps
		if h.centered {
			*a = h.alpha**a + (1-h.alpha)*d
			den = math.Sqrt(*s-*a**a) + h.eps
		}
		if h.momentum > 0 {
			*b = h.momentum**b + d/den
			p[i] -= lr * *b
		} else {
			p[i] -= lr * d / den
		}
	case "adam", "adamw":
		d := grad
		if r.name == "adamw" {
			p[i] -= lr * wd * p[i] // decoupled: theta_t = theta - lr*lambda*theta
		} else {
			d += wd * p[i]
		}
		*m = h.beta1**m + (1-h.beta1)*d
		*v = h.beta2**v + (1-h.beta2)*d*d
		vv := *v
		if h.amsgrad {
			*vmax = math.Max(*vmax, *v)
			vv = *vmax
		}
		mhat, vhat := *m/(1-math.Pow(h.beta1, t)), vv/(1-math.Pow(h.beta2, t))
		p[i] -= lr * mhat / (math.Sqrt(vhat) + h.eps)
	case "adamax":
		d := grad + wd*p[i]
		u := &r.buf["u"][i]
		*m = h.beta1**m + (1-h.beta1)*d
		*u = math.Max(h.beta2**u, math.Abs(d)+h.eps)
		p[i] -= lr / (1 - math.Pow(h.beta1, t)) * *m / *u
	case "nadam":
		// PyTorch NAdam docs: mu_t, mu_{t+1}, products over 1..t and 1..t+1.
		d := grad + wd*p[i]
		mut, mun := r.mu(r.t), r.mu(r.t+1)
		prodT := r.prod * mut
		*m = h.beta1**m + (1-h.beta1)*d
		*v = h.beta2**v + (1-h.beta2)*d*d
		vhat := *v / (1 - math.Pow(h.beta2, t))
		den := math.Sqrt(vhat) + h.eps
		p[i] -= lr*(1-mut)/(1-prodT)*d/den + lr*mun/(1-prodT*mun)**m/den
	case "lamb":
		*m = h.beta1**m + (1-h.beta1)*grad
		*v = h.beta2**v + (1-h.beta2)*grad*grad
		mhat, vhat := *m/(1-math.Pow(h.beta1, t)), *v/(1-math.Pow(h.beta2, t))
		p[i] -= lr * ratio * (mhat/(math.Sqrt(vhat)+h.eps) + wd*p[i])
	default:
		panic("ref: unknown optimizer " + r.name)
	}
}
