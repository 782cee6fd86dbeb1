package model

import (
	"fmt"
	"math"
	"math/rand/v2"

	"hpctrain/internal/dnnl"
	"hpctrain/internal/kernels"
)

// BatchNorm is batch normalisation (Ioffe and Szegedy 2015) over the
// channels of its input: for each channel c, over the M = N*H*W values of
// the batch,
//
//	y = (x - mean_c) / sqrt(var_c + eps) * gamma_c + beta_c
//
// with the batch's mean and (biased) variance in training, and the
// running ones in evaluation. Training updates the running statistics as
// PyTorch does: r = (1-momentum)*r + momentum*batch, the variance unbiased
// (times M/(M-1)). Parameters: gamma (C) then beta (C); buffers: running
// mean (C) then running variance (C).
//
// The statistics are sums over fixed chunks of samples (independent of the
// number of workers), each in float64, added in chunk order. Backward uses
//
//	dbeta = sum dy, dgamma = sum dy*xhat, xhat = (x - mean)/std
//	dx = gamma/std * (dy - dbeta/M - xhat*dgamma/M)
//
// and recomputes xhat from x rather than keeping it. A ReLU after it is
// fused in (see fuse): forward writes max(y, 0), and backward takes dy as
// zero wherever y was not positive, recomputing y from x, so that the ReLU
// costs no pass over memory of its own. With SetSyncBN, the
// sums of forward (x, x^2, M) and of backward (dy, dy*(x-mean)) are
// reduced over the replicas first, so every replica normalises with the
// global batch's statistics; dgamma and dbeta stay the replica's own, to be
// summed with the other gradients.
type BatchNorm struct {
	name          string
	shape         Shape
	c             int
	momentum, eps float64
	gamma, beta   []float32 // (C), (C)
	dgamma, dbeta []float32
	rmean, rvar   []float32 // running statistics (C), (C), in Net.Buffers
	relu          bool      // the ReLU after it is fused in

	x     *exec
	chunk int       // samples per chunk of the statistics
	part  []float64 // (chunks, 2C): each chunk's two sums
	red   []float64 // (2C+1): the batch's sums and count, reduced over replicas when synchronised
	batch bool      // the last forward normalised with batch statistics
	m     float64   // values per channel of the last forward (all replicas')
	mean  []float32 // (C): the mean the last forward subtracted
	istd  []float64 // (C): its 1/sqrt(var+eps)
	zero  []float32 // (C) zeros: the forward sums are not centred
	s, t  []float32 // (C): forward's y = (x-mean)*s + t
	a, b  []float32 // (C): backward's dx = a*dy + b*(x-mean) + k
	k     []float32

	cx, cy, cdy []float32 // the current call's buffers, for the tasks
	cmu         []float32
	cmask       bool // mask cdy where the fused ReLU's output was zero
	sumTask     perWorker
	normTask    perWorker
	bwdTask     perWorker

	// next is the convolution this layer's output goes to (past a fused
	// ReLU), prev the one its input comes from (see link16). Where they
	// run on bf16 kernels, this layer hands them bf16 only, computed in
	// float32 a block at a time in cache, since nothing else reads them:
	// in forward y16, the call's output, the convolution's own input
	// buffer (Conv2D.input16; see norm); in backward the input gradient,
	// which the convolution asks for chunk by chunk as its backward
	// reaches it (Conv2D.gradFrom, gradRows16), so that it goes from
	// this layer's kernel to the convolution's through the cache.
	next, prev *Conv2D
	y16        []uint16
	blocks     [][]float32 // per worker: a block of float32 values on its way to bf16
	handed     int         // calls that handed y16 or the input gradient over (tests)
}

// batchNorm returns the Spec of a batch normalisation with the given
// momentum and eps (PyTorch's defaults: 0.1 and 1e-5).
func batchNorm(momentum, eps float64) Spec {
	return Spec{prefix: "bn", kind: "batchnorm", make: func(in Shape, name, path string) (Layer, error) {
		if !(momentum >= 0 && momentum <= 1) || !(eps > 0) || math.IsInf(eps, 0) {
			return nil, fmt.Errorf("bad batch norm (momentum %v, eps %v)", momentum, eps)
		}
		return &BatchNorm{name: name, shape: in, c: in.C, momentum: momentum, eps: eps}, nil
	}}
}

func (l *BatchNorm) Name() string   { return l.name }
func (l *BatchNorm) Out() Shape     { return l.shape }
func (l *BatchNorm) NumParams() int { return 2 * l.c }
func (l *BatchNorm) MACs() int      { return 0 }

func (l *BatchNorm) tensors() []tensor {
	return []tensor{{name: "weight", len: l.c, norm: true}, {name: "bias", len: l.c, bias: true, norm: true}}
}

func (l *BatchNorm) buffers() []tensor {
	return []tensor{{name: "running_mean", len: l.c}, {name: "running_var", len: l.c}}
}

func (l *BatchNorm) bind(s slot) {
	c := l.c
	l.gamma, l.beta = s.p[:c], s.p[c:2*c]
	l.dgamma, l.dbeta = s.g[:c], s.g[c:2*c]
	l.rmean, l.rvar = s.buf[:c], s.buf[c:2*c]
	l.x = s.x
	// Chunks of about 1024 values per channel: enough work per task, and
	// few partial sums.
	l.chunk = chunkSize(s.n, 1024/(l.shape.H*l.shape.W))
	l.part = make([]float64, l.chunks(s.n)*2*c)
	l.red = make([]float64, 2*c+1)
	l.mean, l.istd, l.zero = make([]float32, c), make([]float64, c), make([]float32, c)
	l.s, l.t = make([]float32, c), make([]float32, c)
	l.a, l.b, l.k = make([]float32, c), make([]float32, c), make([]float32, c)
	l.sumTask, l.normTask, l.bwdTask = l.sums, l.norm, l.bwd
}

func (l *BatchNorm) initParams(rng *rand.Rand) {
	for i := range l.gamma {
		l.gamma[i], l.beta[i] = 1, 0
		l.rmean[i], l.rvar[i] = 0, 1
	}
}

func (l *BatchNorm) chunks(n int) int { return (n + l.chunk - 1) / l.chunk }

// moments sets red[:C] and red[C:2C] to the per-channel sums of a and of
// a*(b-mu) over the first n samples (chunk sums added in chunk order);
// with mask, a counts only where the fused ReLU passed its input.
func (l *BatchNorm) moments(a, b, mu []float32, n int, mask bool) {
	l.cx, l.cdy, l.cmu, l.cmask = b, a, mu, mask
	nc := l.chunks(n)
	l.x.par.Run(nc, l.sumTask)
	c := l.c
	clear(l.red[:2*c])
	for k := 0; k < nc; k++ {
		p := l.part[k*2*c:][:2*c]
		for j, v := range p {
			l.red[j] += v
		}
	}
}

// sums computes chunks [lo, hi) of moments' partial sums.
func (l *BatchNorm) sums(w, lo, hi int) {
	c, hw := l.c, l.shape.H*l.shape.W
	n := len(l.cx) / l.shape.Size()
	for k := lo; k < hi; k++ {
		s0 := k * l.chunk
		ns := min(l.chunk, n-s0)
		p := l.part[k*2*c:][:2*c]
		clear(p)
		r0, m := s0*hw, ns*hw
		if l.cmask {
			kernels.ChanMomentsReLU(l.cdy[r0*c:][:m*c], l.cx[r0*c:][:m*c], m, c, l.cmu, l.s, l.t, p[:c], p[c:])
		} else {
			kernels.ChanMoments(l.cdy[r0*c:][:m*c], l.cx[r0*c:][:m*c], m, c, l.cmu, p[:c], p[c:])
		}
	}
}

// forward: x, y (N, H, W, C).
func (l *BatchNorm) forward(x, y []float32, n int) {
	c := l.c
	x = x[:n*l.shape.Size()]
	l.batch = l.x.train
	if l.batch {
		l.moments(x, x, l.zero, n, false)
		l.red[2*c] = float64(n * l.shape.H * l.shape.W)
		l.x.reduce(l.red)
		m := l.red[2*c]
		l.m = m
		for j := 0; j < c; j++ {
			mean := l.red[j] / m
			v := max(l.red[c+j]/m-mean*mean, 0)
			l.mean[j] = float32(mean)
			l.istd[j] = 1 / math.Sqrt(v+l.eps)
			unbiased := v
			if m > 1 {
				unbiased = v * m / (m - 1)
			}
			mo := l.momentum
			l.rmean[j] = float32((1-mo)*float64(l.rmean[j]) + mo*mean)
			l.rvar[j] = float32((1-mo)*float64(l.rvar[j]) + mo*unbiased)
		}
	} else {
		for j := 0; j < c; j++ {
			l.mean[j] = l.rmean[j]
			l.istd[j] = 1 / math.Sqrt(float64(l.rvar[j])+l.eps)
		}
	}
	for j := 0; j < c; j++ {
		l.s[j] = float32(float64(l.gamma[j]) * l.istd[j])
		l.t[j] = l.beta[j]
	}
	l.cx, l.cy, l.y16 = x, y, nil
	if l.next != nil && handoff16 {
		l.y16 = l.next.input16()
	}
	if l.y16 != nil {
		l.makeBlocks()
		l.handed++
	}
	l.x.par.Run(n, l.normTask)
	l.y16 = nil
}

// makeBlocks gives every worker its block for the bf16 hand-off (once):
// whole rows of C channels, about 16 KB of float32, which stay in L1
// between the kernel that writes them and their conversion.
func (l *BatchNorm) makeBlocks() {
	for len(l.blocks) < l.x.par.Workers() {
		l.blocks = append(l.blocks, make([]float32, max(1, 4096/l.c)*l.c))
	}
}

// norm normalises samples [lo, hi). With the hand-off, the float32 output
// is only a block in cache: nothing reads it but its conversion (the
// convolution after this layer reads the bf16 copy alone), so it is not
// written to y.
func (l *BatchNorm) norm(w, lo, hi int) {
	sz := l.shape.Size()
	y, x := l.cy[lo*sz:hi*sz], l.cx[lo*sz:hi*sz]
	if l.y16 == nil {
		l.normRows(y, x)
		return
	}
	y16, b := l.y16[lo*sz:hi*sz], l.blocks[w]
	for i := 0; i < len(x); i += len(b) {
		j := min(i+len(b), len(x))
		l.normRows(b[:j-i], x[i:j])
		dnnl.ToBF16(y16[i:j], b[:j-i])
	}
}

// normRows normalises the rows of x (m, C) into y.
func (l *BatchNorm) normRows(y, x []float32) {
	if l.relu {
		kernels.ChanNormReLU(y, x, len(x)/l.c, l.c, l.mean, l.s, l.t)
		return
	}
	kernels.ChanNorm(y, x, len(x)/l.c, l.c, l.mean, l.s, l.t)
}

// backward: x, dy, dx (N, H, W, C).
func (l *BatchNorm) backward(x, y, dy, dx []float32, n int) {
	c := l.c
	x, dy = x[:n*l.shape.Size()], dy[:n*l.shape.Size()]
	l.moments(dy, x, l.mean, n, l.relu) // sum dy, sum dy*(x-mean)
	for j := 0; j < c; j++ {
		l.dbeta[j] = float32(l.red[j])
		l.dgamma[j] = float32(l.red[c+j] * l.istd[j])
	}
	if dx == nil {
		return
	}
	if l.batch {
		l.x.reduce(l.red[:2*c])
		for j := 0; j < c; j++ {
			g := float64(l.gamma[j]) * l.istd[j]
			dbeta, dgamma := l.red[j], l.red[c+j]*l.istd[j]
			l.a[j] = float32(g)
			l.b[j] = float32(-g * l.istd[j] * dgamma / l.m)
			l.k[j] = float32(-g * dbeta / l.m)
		}
	} else {
		// Evaluation: mean and std are constants.
		for j := 0; j < c; j++ {
			l.a[j], l.b[j], l.k[j] = float32(float64(l.gamma[j])*l.istd[j]), 0, 0
		}
	}
	l.cx, l.cy, l.cdy = x, dx, dy
	if l.prev != nil && handoff16 && l.prev.gradFrom(l) {
		l.makeBlocks()
		l.handed++
		return // the convolution computes dx in its backward (gradRows16)
	}
	l.x.par.Run(n, l.bwdTask)
}

// bwd computes the input gradient of samples [lo, hi).
func (l *BatchNorm) bwd(w, lo, hi int) {
	sz := l.shape.Size()
	l.bwdRows(l.cy[lo*sz:hi*sz], l.cdy[lo*sz:hi*sz], l.cx[lo*sz:hi*sz])
}

// gradRows16 writes values [i, j) (whole rows of C) of the current
// backward's input gradient to dst in bf16, on worker w, a block at a time
// in cache: the convolution before this layer calls it for each chunk of
// its backward in place of this layer's pass over the batch.
func (l *BatchNorm) gradRows16(w, i, j int, dst []uint16) {
	b := l.blocks[w]
	for k := i; k < j; k += len(b) {
		e := min(k+len(b), j)
		l.bwdRows(b[:e-k], l.cdy[k:e], l.cx[k:e])
		dnnl.ToBF16(dst[k-i:e-i], b[:e-k])
	}
}

// bwdRows computes the input gradient dx of the rows of x (m, C).
func (l *BatchNorm) bwdRows(dx, dy, x []float32) {
	if l.relu {
		kernels.ChanNormBackwardReLU(dx, dy, x, len(x)/l.c, l.c, l.mean, l.a, l.b, l.k, l.s, l.t)
		return
	}
	kernels.ChanNormBackward(dx, dy, x, len(x)/l.c, l.c, l.mean, l.a, l.b, l.k)
}

// handoff16 switches the bf16 hand-off between batch norms and the
// convolutions next to them (tests compare the two).
var handoff16 = true
