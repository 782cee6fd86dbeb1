package cudanet

import (
	"hpctrain/gpu/cuda"
	"hpctrain/model"
)

// chain runs layers one after another: a Net's body and a residual
// block's branches, wired as the CPU network wires its chains.
type chain struct {
	layers      []layer
	acts, dacts []cuda.Ptr // acts[0] is the input; acts[i+1] layer i's output (0 when fused away)
	out         []int      // layer i writes acts[out[i]]: i+1, or past its fused pool
}

// fuse folds a ReLU into the max-pool after it, and a max-pool (with its
// ReLU) into the convolution before it, as model's fuse does.
func fuse(ls []layer) {
	for i, l := range ls {
		p, ok := l.(*maxpool)
		if !ok {
			continue
		}
		j := i - 1
		if j >= 0 {
			if r, ok := ls[j].(*relu); ok {
				r.fused, p.relu = true, true
				j--
			}
		}
		if j >= 0 {
			if c, ok := ls[j].(*conv); ok {
				c.pool, p.inConv = p, true
			}
		}
	}
}

func inPlace(l layer) bool {
	switch l := l.(type) {
	case *flat:
		return !l.copy
	case *relu:
		return l.fused
	}
	return false
}

func pooled(l layer) bool {
	c, ok := l.(*conv)
	return ok && c.pool != nil
}

// wire fuses the layers and allocates the activations between them and
// their gradients for batches of up to batch samples. A nested chain is
// given its input, input gradient and output gradient per call.
func (c *chain) wire(n *Net, ls []layer, batch int, nested bool) {
	c.layers = ls
	fuse(ls)
	nl := len(ls)
	c.acts = make([]cuda.Ptr, nl+1)
	c.dacts = make([]cuda.Ptr, nl+1)
	c.out = make([]int, nl)
	for i, l := range ls {
		if f, ok := l.(*flat); ok && nested {
			f.copy = true
		}
		c.out[i] = i + 1
		switch {
		case inPlace(l):
			c.acts[i+1], c.dacts[i+1] = c.acts[i], c.dacts[i]
		case pooled(l):
			cv := l.(*conv)
			n.needConvOut(batch * cv.hwo * cv.o.C)
		default:
			sz := batch * l.out().Size()
			c.acts[i+1] = n.alloc(4 * sz)
			if !nested || i < nl-1 {
				c.dacts[i+1] = n.alloc(4 * sz)
			}
		}
	}
	for i, l := range ls {
		if cv, ok := l.(*conv); ok && cv.pool != nil {
			for j := i + 1; j < nl; j++ {
				if ls[j] == layer(cv.pool) {
					c.out[i] = j + 1
				}
			}
		}
	}
}

// setInput gives the chain its input and input gradient (0: none), and to
// the leading in-place layers, which share them.
func (c *chain) setInput(x, dx cuda.Ptr) {
	c.acts[0], c.dacts[0] = x, dx
	for i, l := range c.layers {
		if !inPlace(l) {
			break
		}
		c.acts[i+1], c.dacts[i+1] = c.acts[i], c.dacts[i]
	}
}

func (c *chain) setOutGrad(dy cuda.Ptr) { c.dacts[len(c.layers)] = dy }
func (c *chain) output() cuda.Ptr       { return c.acts[len(c.layers)] }
func (c *chain) outGrad() cuda.Ptr      { return c.dacts[len(c.layers)] }

func (c *chain) forward(n *Net, nb int) {
	for i, l := range c.layers {
		l.forward(n, c.acts[i], c.acts[c.out[i]], nb)
	}
}

// backward runs the layers' backward passes from the last, with input
// gradients only for layers after first.
func (c *chain) backward(n *Net, nb, first int) {
	for i := len(c.layers) - 1; i >= 0; i-- {
		var dx cuda.Ptr
		if i > first {
			dx = c.dacts[i]
		}
		c.layers[i].backward(n, c.acts[i], c.acts[c.out[i]], c.dacts[c.out[i]], dx, nb)
	}
}

// residual is y = body(x) + shortcut(x), the shortcut the identity or a
// projection chain (1x1 convolution, then batch norm or not). Backward
// runs the shortcut first (its gradients come last in the buffer), then
// the body, and adds the two input gradients.
type residual struct {
	in, o     model.Shape
	body, prj chain
	hasPrj    bool
	np        int
	dxs       cuda.Ptr // (N, H, W, C): the projection's input gradient
}

func (r *residual) out() model.Shape { return r.o }
func (r *residual) numParams() int   { return r.np }

func (r *residual) forward(n *Net, x, y cuda.Ptr, nb int) {
	r.body.setInput(x, 0)
	r.body.forward(n, nb)
	short := x
	if r.hasPrj {
		r.prj.setInput(x, 0)
		r.prj.forward(n, nb)
		short = r.prj.output()
	}
	sz := nb * r.o.Size()
	n.launch(n.f.add, sz, y, r.body.output(), short, int64(sz))
}

func (r *residual) backward(n *Net, x, y, dy, dx cuda.Ptr, nb int) {
	dshort := dy
	if r.hasPrj {
		dshort = 0
		if dx != 0 {
			dshort = r.dxs
		}
		r.prj.setOutGrad(dy)
		r.prj.setInput(x, dshort)
		r.prj.backward(n, nb, -1)
	}
	r.body.setOutGrad(dy)
	r.body.setInput(x, dx)
	r.body.backward(n, nb, -1)
	if dx != 0 {
		sz := nb * r.in.Size()
		n.launch(n.f.add, sz, dx, dx, dshort, int64(sz))
	}
}
