package model

import (
	"fmt"
	"math"
)

// Dropout zeroes each input value with probability p in training and
// scales the others by 1/(1-p) (inverted dropout, as PyTorch), so that
// evaluation passes the input through unchanged.
//
// The mask is not stored: a value's fate is a hash of the network's seed,
// the step (and the training forwards since it was set), the layer and the
// value's global position (the sample's index in the global batch, see
// Net.SetStep, and its offset in the sample), so
// backward recomputes it, and it does not depend on the number of workers
// or on how the global batch is split over replicas.
type Dropout struct {
	noParams
	name   string
	shape  Shape
	p      float64
	id     uint64  // the layer's stream
	thresh uint64  // drop when the 32-bit hash is below it: p * 2^32
	scale  float32 // 1/(1-p)
	x      *exec
	on     bool   // the last forward dropped (training, p > 0)
	key    uint64 // its key (seed, step, layer)
	first  int    // and its first global sample index

	cx, cy, cdy  []float32
	fwdTask, bwd samples
}

// dropout returns the Spec of a dropout with drop probability p in [0, 1).
func dropout(p float64) Spec {
	return Spec{prefix: "dropout", kind: "dropout", make: func(in Shape, name, path string) (Layer, error) {
		if !(p >= 0 && p < 1) {
			return nil, fmt.Errorf("bad dropout probability %v", p)
		}
		if dropsAll(p) {
			return nil, fmt.Errorf("dropout probability %v drops every value", p)
		}
		return &Dropout{name: name, shape: in, p: p, thresh: threshold(p), scale: float32(1 / (1 - p))}, nil
	}}
}

// threshold is p as a 32-bit fraction: a value is dropped when its 32-bit
// hash is below it.
func threshold(p float64) uint64 { return uint64(math.Round(p * (1 << 32))) }

// dropsAll reports whether p, below 1, still rounds to a threshold that
// drops every value (p from 1-2^-33).
func dropsAll(p float64) bool { return threshold(p) >= 1<<32 }

func (l *Dropout) Name() string { return l.name }
func (l *Dropout) Out() Shape   { return l.shape }
func (l *Dropout) bind(s slot) {
	l.x = s.x
	l.id = s.x.drops
	s.x.drops++
	l.fwdTask, l.bwd = l.fwdRange, l.bwdRange
}

// mix is SplitMix64's finaliser (Steele et al. 2014): a bijection of 64
// bits whose every output bit depends on every input bit.
func mix(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func (l *Dropout) forward(x, y []float32, n int) {
	sz := l.shape.Size()
	if l.on = l.x.train && l.p > 0; !l.on {
		copy(y[:n*sz], x[:n*sz])
		return
	}
	l.key = mix(mix(mix(mix(l.x.seed^0x64726f706f7574)+l.x.step)+l.x.pass) + l.id) // "dropout"
	l.first = l.x.first
	l.cx, l.cy = x, y
	l.x.par.Run(n, l.fwdTask)
}

// apply sets dst = src*scale where the mask keeps, 0 where it drops, for
// samples [lo, hi).
func (l *Dropout) apply(dst, src []float32, lo, hi int) {
	sz := l.shape.Size()
	for i := lo; i < hi; i++ {
		base := l.key + uint64(l.first+i)*0x9e3779b97f4a7c15
		d, s := dst[i*sz:(i+1)*sz], src[i*sz:(i+1)*sz]
		for j, v := range s {
			if mix(base+uint64(j))>>32 < l.thresh {
				d[j] = 0
			} else {
				d[j] = v * l.scale
			}
		}
	}
}

func (l *Dropout) fwdRange(lo, hi int) { l.apply(l.cy, l.cx, lo, hi) }
func (l *Dropout) bwdRange(lo, hi int) { l.apply(l.cx, l.cdy, lo, hi) }

func (l *Dropout) backward(x, y, dy, dx []float32, n int) {
	if dx == nil {
		return
	}
	sz := l.shape.Size()
	if !l.on {
		copy(dx[:n*sz], dy[:n*sz])
		return
	}
	l.cx, l.cdy = dx, dy
	l.x.par.Run(n, l.bwd)
}
