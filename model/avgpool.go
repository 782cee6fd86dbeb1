package model

import (
	"hpctrain/internal/kernels"
)

// AvgPool2D averages k x k windows with stride s (no padding): LeNet's
// subsampling. Backward spreads each output's gradient evenly over its
// window (windows may overlap: the shares add up).
type AvgPool2D struct {
	noParams
	name             string
	in, out          Shape
	win              kernels.Window
	x                *exec
	a, b             []float32
	fwdTask, bwdTask samples
}

// avgPool returns the Spec of an average pool with a k x k window and
// stride s.
func avgPool(k, s int) Spec {
	return Spec{prefix: "avgpool", kind: "avgpool", make: func(in Shape, name, path string) (Layer, error) {
		win, err := poolWindow(in, k, s)
		if err != nil {
			return nil, err
		}
		return &AvgPool2D{name: name, in: in, out: Shape{win.Ho, win.Wo, in.C}, win: win}, nil
	}}
}

func (l *AvgPool2D) Name() string { return l.name }
func (l *AvgPool2D) Out() Shape   { return l.out }
func (l *AvgPool2D) bind(s slot) {
	l.x = s.x
	l.fwdTask, l.bwdTask = l.fwd, l.bwd
}

// forward: x (N, H, W, C), y (N, Ho, Wo, C).
func (l *AvgPool2D) forward(x, y []float32, n int) {
	l.a, l.b = x, y
	l.x.par.Run(n, l.fwdTask)
}

func (l *AvgPool2D) fwd(lo, hi int) {
	g, c := l.win, l.in.C
	inv := 1 / float32(g.K*g.K)
	for i := lo; i < hi; i++ {
		xs, ys := l.a[i*g.In():(i+1)*g.In()], l.b[i*g.Out():(i+1)*g.Out()]
		for oh := 0; oh < g.Ho; oh++ {
			for ow := 0; ow < g.Wo; ow++ {
				yr := ys[(oh*g.Wo+ow)*c:][:c]
				clear(yr)
				for kh := 0; kh < g.K; kh++ {
					row := xs[((oh*g.S+kh)*g.W+ow*g.S)*c:][:g.K*c]
					for kw := 0; kw < g.K; kw++ {
						for j, v := range row[kw*c : (kw+1)*c] {
							yr[j] += v
						}
					}
				}
				for j := range yr {
					yr[j] *= inv
				}
			}
		}
	}
}

// backward: dx = the sum over the windows holding each input of dy/(K*K).
func (l *AvgPool2D) backward(x, y, dy, dx []float32, n int) {
	if dx == nil {
		return
	}
	l.a, l.b = dy, dx
	l.x.par.Run(n, l.bwdTask)
}

func (l *AvgPool2D) bwd(lo, hi int) {
	g, c := l.win, l.in.C
	inv := 1 / float32(g.K*g.K)
	for i := lo; i < hi; i++ {
		dys, dxs := l.a[i*g.Out():(i+1)*g.Out()], l.b[i*g.In():(i+1)*g.In()]
		clear(dxs)
		for oh := 0; oh < g.Ho; oh++ {
			for ow := 0; ow < g.Wo; ow++ {
				dr := dys[(oh*g.Wo+ow)*c:][:c]
				for kh := 0; kh < g.K; kh++ {
					row := dxs[((oh*g.S+kh)*g.W+ow*g.S)*c:][:g.K*c]
					for kw := 0; kw < g.K; kw++ {
						for j, v := range dr {
							row[kw*c+j] += v * inv
						}
					}
				}
			}
		}
	}
}

// GlobalAvgPool averages each channel over the whole sample: (H, W, C) to
// (1, 1, C), the head of a residual network.
type GlobalAvgPool struct {
	noParams
	name             string
	in               Shape
	x                *exec
	a, b             []float32
	fwdTask, bwdTask samples
}

func globalAvgPool() Spec {
	return Spec{prefix: "gap", kind: "globalavgpool", make: func(in Shape, name, path string) (Layer, error) {
		return &GlobalAvgPool{name: name, in: in}, nil
	}}
}

func (l *GlobalAvgPool) Name() string { return l.name }
func (l *GlobalAvgPool) Out() Shape   { return Shape{1, 1, l.in.C} }
func (l *GlobalAvgPool) bind(s slot) {
	l.x = s.x
	l.fwdTask, l.bwdTask = l.fwd, l.bwd
}

func (l *GlobalAvgPool) forward(x, y []float32, n int) {
	l.a, l.b = x, y
	l.x.par.Run(n, l.fwdTask)
}

func (l *GlobalAvgPool) fwd(lo, hi int) {
	c, hw, sz := l.in.C, l.in.H*l.in.W, l.in.Size()
	inv := 1 / float32(hw)
	for i := lo; i < hi; i++ {
		yr := l.b[i*c : (i+1)*c]
		kernels.ColSums(yr, l.a[i*sz:(i+1)*sz], hw, c, c)
		for j := range yr {
			yr[j] *= inv
		}
	}
}

func (l *GlobalAvgPool) backward(x, y, dy, dx []float32, n int) {
	if dx == nil {
		return
	}
	l.a, l.b = dy, dx
	l.x.par.Run(n, l.bwdTask)
}

func (l *GlobalAvgPool) bwd(lo, hi int) {
	c, hw, sz := l.in.C, l.in.H*l.in.W, l.in.Size()
	inv := 1 / float32(l.in.H*l.in.W)
	for i := lo; i < hi; i++ {
		dr := l.a[i*c : (i+1)*c]
		dxs := l.b[i*sz : (i+1)*sz]
		for r := 0; r < hw; r++ {
			row := dxs[r*c : (r+1)*c]
			for j, v := range dr {
				row[j] = v * inv
			}
		}
	}
}
