package model

import (
	"fmt"
	"math/rand/v2"

	"hpctrain/internal/kernels"
)

// Residual is a residual block (He et al. 2016): y = body(x) + shortcut(x),
// where the body is a sequence of layers and the shortcut is the identity
// or a projection, a 1x1 convolution with the stride that gives the body's
// output shape, followed by batch normalisation ("projection", the paper's
// option B) or with a bias and no normalisation ("conv"). The ReLU that
// usually follows the sum is a layer of its own after the block, fused
// into the block's add (see fuse): forward writes max(sum, 0), and
// backward zeroes dy where that was not positive, in place, before the
// branches read it.
//
// Its parameters are the body's, layer by layer, then the shortcut's; so
// are its buffers. Backward runs the shortcut first (its gradients come
// last in Net.Grads), then the body from its last layer, telling the
// GradHook about each layer as the network does, and adds the two input
// gradients.
type Residual struct {
	name      string
	in, out   Shape
	shortcut  string
	layers    []Layer // the body's layers, then the projection's
	nbody     int     // how many of layers are the body's
	body, prj chain
	dxs       []float32 // (N, H, W, C): the projection's input gradient
	x         *exec
	relu      bool // the ReLU after the block is fused in

	ca, cb, cc []float32 // the current add's operands and result
	csz        int       // and its values per sample
	crelu      bool      // apply max(., 0) to the sum
	addTask    samples
	maskTask   samples
}

// Shortcuts of residual blocks.
var shortcuts = []string{"identity", "projection", "conv"}

// residual returns the Spec of a residual block with the given shortcut
// ("identity", "projection" or "conv") around body.
func residual(shortcut string, body []Spec) Spec {
	return Spec{prefix: "res", kind: "residual", make: func(in Shape, name, path string) (Layer, error) {
		if len(body) == 0 {
			return nil, fmt.Errorf("no layers in the block")
		}
		bl, out, err := stack(in, body, name+".", path)
		if err != nil {
			return nil, err
		}
		r := &Residual{name: name, in: in, out: out, shortcut: shortcut, layers: bl, nbody: len(bl)}
		switch shortcut {
		case "identity":
			if out != in {
				return nil, fmt.Errorf("the body's output %v does not match its input %v, as the identity shortcut needs (use shortcut = \"projection\")", out, in)
			}
			return r, nil
		case "projection", "conv":
			s := projStride(in, out)
			if s == 0 {
				return nil, fmt.Errorf("the body's output %v is no strided 1x1 convolution's output of its input %v, as the %s shortcut needs", out, in, shortcut)
			}
			specs := []Spec{conv(out.C, 1, s, 0, shortcut == "conv")}
			if shortcut == "projection" {
				specs = append(specs, batchNorm(0.1, 1e-5))
			}
			pl, _, err := stack(in, specs, name+".proj.", path+"shortcut.")
			if err != nil {
				return nil, err
			}
			r.layers = append(r.layers, pl...)
			return r, nil
		}
		return nil, fmt.Errorf("unknown shortcut %q (shortcuts: identity, projection, conv)", shortcut)
	}}
}

// projStride is the stride s of a 1x1 convolution from in to an output of
// out's height and width, or 0 if there is none.
func projStride(in, out Shape) int {
	for s := 1; s <= max(in.H, in.W); s++ {
		if (in.H-1)/s+1 == out.H && (in.W-1)/s+1 == out.W {
			return s
		}
	}
	return 0
}

func (r *Residual) Name() string      { return r.name }
func (r *Residual) Out() Shape        { return r.out }
func (r *Residual) children() []Layer { return r.layers }
func (r *Residual) tensors() []tensor { return nil } // the children's: see container
func (r *Residual) buffers() []tensor { return nil }

func (r *Residual) NumParams() int {
	t := 0
	for _, l := range r.layers {
		t += l.NumParams()
	}
	return t
}

func (r *Residual) MACs() int {
	t := 0
	for _, l := range r.layers {
		t += l.MACs()
	}
	return t
}

func (r *Residual) bind(s slot) {
	var np, nb int
	for _, l := range r.layers[:r.nbody] {
		np, nb = np+l.NumParams(), nb+numBuffers(l)
	}
	r.body.bind(r.layers[:r.nbody], r.in, s.sub(0, np, 0, nb), true)
	if len(r.layers) > r.nbody {
		r.prj.bind(r.layers[r.nbody:], r.in, s.sub(np, len(s.p)-np, nb, len(s.buf)-nb), true)
		r.dxs = make([]float32, s.n*r.in.Size())
	}
	r.x = s.x
	r.addTask, r.maskTask = r.add, r.mask
}

func (r *Residual) initParams(rng *rand.Rand) {
	for _, l := range r.layers {
		l.initParams(rng)
	}
}

// add sets cc = ca + cb (with crelu, max(ca + cb, 0)) for samples [lo, hi).
func (r *Residual) add(lo, hi int) {
	sz := r.csz
	if r.crelu {
		kernels.AddReLU(r.cc[lo*sz:hi*sz], r.ca[lo*sz:hi*sz], r.cb[lo*sz:hi*sz])
		return
	}
	kernels.Add(r.cc[lo*sz:hi*sz], r.ca[lo*sz:hi*sz], r.cb[lo*sz:hi*sz])
}

// mask zeroes cb where ca (the fused ReLU's output) is not positive, for
// samples [lo, hi): the ReLU's backward, in place.
func (r *Residual) mask(lo, hi int) {
	sz := r.csz
	kernels.ReLUBackward(r.ca[lo*sz:hi*sz], r.cb[lo*sz:hi*sz], r.cb[lo*sz:hi*sz])
}

func (r *Residual) forward(x, y []float32, n int) {
	r.body.setInput(x, nil)
	r.body.forward(n)
	short := x
	if len(r.layers) > r.nbody {
		r.prj.setInput(x, nil)
		r.prj.forward(n)
		short = r.prj.output()
	}
	r.ca, r.cb, r.cc, r.csz, r.crelu = r.body.output(), short, y, r.out.Size(), r.relu
	r.x.par.Run(n, r.addTask)
}

// backward: dy reaches both branches unchanged; dx is the sum of their
// input gradients.
func (r *Residual) backward(x, y, dy, dx []float32, n int) {
	if r.relu {
		// dy is the fused ReLU's output gradient, the block's alone (fuse
		// leaves a ReLU that ends a branch unfused).
		r.ca, r.cb, r.csz = y, dy, r.out.Size()
		r.x.par.Run(n, r.maskTask)
	}
	dshort := dy
	if len(r.layers) > r.nbody {
		dshort = nil
		if dx != nil {
			dshort = r.dxs
		}
		r.prj.setOutGrad(dy)
		r.prj.setInput(x, dshort)
		r.prj.backward(n, -1, r.x)
	}
	r.body.setOutGrad(dy)
	r.body.setInput(x, dx)
	r.body.backward(n, -1, r.x)
	if dx != nil {
		r.ca, r.cb, r.cc, r.csz, r.crelu = dx, dshort, dx, r.in.Size(), false
		r.x.par.Run(n, r.addTask)
	}
}
