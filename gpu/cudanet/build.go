package cudanet

import (
	"fmt"

	"hpctrain/model"
)

// builder makes the device layers of a description, in the CPU network's
// order, giving each its views of the flat parameter, gradient and buffer
// arrays.
type builder struct {
	n              *Net
	classes, batch int
	p, b           int    // the next layer's parameter and buffer offsets
	drops          uint64 // dropout layers so far: each has its own stream, as on the CPU
}

func (bd *builder) stack(ds []model.LayerDesc, in model.Shape) ([]layer, model.Shape, error) {
	ls := make([]layer, 0, len(ds))
	shape := in
	for i, d := range ds {
		l, err := bd.layer(d, shape)
		if err != nil {
			return nil, shape, fmt.Errorf("layer %d (%s): %w", i+1, d.Kind, err)
		}
		ls = append(ls, l)
		shape = l.out()
	}
	return ls, shape, nil
}

// params takes np parameters: their offset.
func (bd *builder) params(np int) int {
	off := bd.p
	bd.p += np
	return off
}

func (bd *builder) layer(d model.LayerDesc, in model.Shape) (layer, error) {
	n, batch := bd.n, bd.batch
	out := d.Out
	if out == model.OutClasses {
		out = bd.classes
	}
	switch d.Kind {
	case "conv":
		return bd.conv(in, out, d.Kernel, d.Stride, d.Pad, d.Bias)
	case "linear":
		l := &linear{i: in.Size(), o: out, bias: d.Bias}
		l.off = bd.params(l.numParams())
		l.w, l.dw = n.param(l.off), n.grad(l.off)
		l.b, l.db = n.param(l.off+l.o*l.i), n.grad(l.off+l.o*l.i)
		n.needOp(max(batch*l.i, l.o*l.i, batch*l.o))
		n.needSum(chunks(batch, sumRows) * l.o)
		return l, nil
	case "relu":
		return &relu{shape: in}, nil
	case "maxpool", "avgpool":
		g, err := poolWindow(in, d.Kernel, d.Stride)
		if err != nil {
			return nil, err
		}
		o := model.Shape{H: g.ho, W: g.wo, C: in.C}
		if d.Kind == "avgpool" {
			return &avgpool{g: g, o: o}, nil
		}
		return &maxpool{g: g, o: o, arg: n.alloc(4 * batch * o.Size())}, nil
	case "globalavgpool":
		return &gap{in: in}, nil
	case "flatten":
		return &flat{size: in.Size()}, nil
	case "batchnorm":
		return bd.batchNorm(in, d.Momentum, d.Eps), nil
	case "dropout":
		l := newDropout(in, d.P, bd.drops)
		bd.drops++
		return l, nil
	case "residual":
		return bd.residual(in, d)
	}
	return nil, fmt.Errorf("unknown kind %q", d.Kind)
}

func poolWindow(in model.Shape, k, s int) (window, error) {
	if k < 1 || s < 1 || in.H < k || in.W < k {
		return window{}, fmt.Errorf("bad pool (kernel %d, stride %d) for input %v", k, s, in)
	}
	return window{h: in.H, w: in.W, c: in.C, k: k, s: s, ho: (in.H-k)/s + 1, wo: (in.W-k)/s + 1}, nil
}

func (bd *builder) conv(in model.Shape, o, k, s, p int, bias bool) (layer, error) {
	n, batch := bd.n, bd.batch
	if o < 1 || k < 1 || s < 1 || p < 0 || k > in.H+2*p || k > in.W+2*p {
		return nil, fmt.Errorf("bad convolution (out %d, kernel %d, stride %d, pad %d) for input %v", o, k, s, p, in)
	}
	ho, wo := (in.H+2*p-k)/s+1, (in.W+2*p-k)/s+1
	l := &conv{in: in, o: model.Shape{H: ho, W: wo, C: o}, bias: bias}
	l.g = window{h: in.H, w: in.W, c: in.C, k: k, s: s, p: p, ho: ho, wo: wo}
	l.kkc, l.hwo = k*k*in.C, ho*wo
	l.off = bd.params(l.numParams())
	nw := o * l.kkc
	l.w, l.dw = n.param(l.off), n.grad(l.off)
	l.b, l.db = n.param(l.off+nw), n.grad(l.off+nw)
	m := batch * l.hwo
	n.needCol(m * l.kkc)
	n.needOp(max(m*l.kkc, nw, m*o))
	if bias {
		n.needSum(chunks(m, sumRows) * o)
	}
	return l, nil
}

func (bd *builder) batchNorm(in model.Shape, momentum, eps float64) layer {
	n, c := bd.n, in.C
	l := &batchNorm{shape: in, c: c, momentum: momentum, eps: eps}
	l.off = bd.params(2 * c)
	l.gamma, l.beta = n.param(l.off), n.param(l.off+c)
	l.dgamma, l.dbeta = n.grad(l.off), n.grad(l.off+c)
	l.rmean, l.rvar = n.buffer(bd.b), n.buffer(bd.b+c)
	bd.b += 2 * c
	l.mean, l.istd, l.s, l.t = n.alloc(4*c), n.alloc(8*c), n.alloc(4*c), n.alloc(4*c)
	l.a, l.b, l.k = n.alloc(4*c), n.alloc(4*c), n.alloc(4*c)
	l.fred, l.bred = n.alloc(8*(2*c+1)), n.alloc(8*(2*c+1))
	n.needBN(chunks(bd.batch*in.H*in.W, sumRows)*2*c, 2*c+1)
	return l
}

func (bd *builder) residual(in model.Shape, d model.LayerDesc) (layer, error) {
	n, batch := bd.n, bd.batch
	p0 := bd.p
	body, out, err := bd.stack(d.Layers, in)
	if err != nil {
		return nil, err
	}
	r := &residual{in: in, o: out}
	var prj []layer
	switch d.Shortcut {
	case "identity":
		if out != in {
			return nil, fmt.Errorf("the body's output %v does not match its input %v", out, in)
		}
	case "projection", "conv":
		s := projStride(in, out)
		if s == 0 {
			return nil, fmt.Errorf("no 1x1 convolution maps %v to %v", in, out)
		}
		c, err := bd.conv(in, out.C, 1, s, 0, d.Shortcut == "conv")
		if err != nil {
			return nil, err
		}
		prj = append(prj, c)
		if d.Shortcut == "projection" {
			prj = append(prj, bd.batchNorm(out, 0.1, 1e-5))
		}
	default:
		return nil, fmt.Errorf("unknown shortcut %q", d.Shortcut)
	}
	r.np = bd.p - p0
	r.body.wire(n, body, batch, true)
	if len(prj) > 0 {
		r.hasPrj = true
		r.prj.wire(n, prj, batch, true)
		r.dxs = n.alloc(4 * batch * in.Size())
	}
	return r, nil
}

// projStride is the stride of a 1x1 convolution from in to out's height
// and width, or 0 if there is none (as model's).
func projStride(in, out model.Shape) int {
	for s := 1; s <= max(in.H, in.W); s++ {
		if (in.H-1)/s+1 == out.H && (in.W-1)/s+1 == out.W {
			return s
		}
	}
	return 0
}
