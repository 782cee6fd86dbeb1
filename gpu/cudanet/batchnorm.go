package cudanet

import (
	"unsafe"

	"hpctrain/gpu/cuda"
	"hpctrain/model"
)

// batchNorm is batch normalisation over the channels, computed as the CPU
// network's (model.BatchNorm): per-channel sums in double over fixed
// chunks of rows, the chunks in order; y = (x-mean)*s + t; backward
// dx = a*dy + b*(x-mean) + k. With a SumReducer (SetSyncBN), training
// reduces the forward sums (x, x^2, count) and backward's (dy,
// dy*(x-mean)) over the replicas through the host.
type batchNorm struct {
	shape            model.Shape
	c                int
	momentum, eps    float64
	gamma, beta      cuda.Ptr // (C), (C) in the parameters
	dgamma, dbeta    cuda.Ptr
	rmean, rvar      cuda.Ptr // (C), (C) in the buffers
	off              int
	mean, istd, s, t cuda.Ptr // (C) float32; istd (C) float64
	a, b, k          cuda.Ptr
	fred, bred       cuda.Ptr // (2C+1) float64: forward's and backward's sums
	batch            bool     // the last forward used the batch's statistics
}

func (l *batchNorm) out() model.Shape { return l.shape }
func (l *batchNorm) numParams() int   { return 2 * l.c }

// sums sets red[:2C] to the per-channel sums of a and a*(b-mu) over m rows
// (mu 0: zero) and red[2C] to m.
func (n *Net) bnSums(red, a, b, mu cuda.Ptr, m, c int) {
	nc := chunks(m, sumRows)
	n.launch(n.f.bnPart, nc*c, n.bnPartBuf, a, b, mu, int64(m), int32(c), int32(sumRows))
	n.launch(n.f.bnTotal, 2*c, red, n.bnPartBuf, int32(nc), int32(c), float64(m))
}

// reduce sums the vals float64 values at red over the replicas with the
// synchronised batch norm's reducer, through pinned host memory. After a
// failure it reduces nothing more until Err has reported it, as the CPU
// network does.
func (n *Net) reduce(red cuda.Ptr, vals int) {
	if n.sync == nil || n.err != nil {
		return
	}
	bytes := 8 * vals
	h := n.redHost[:vals]
	p := unsafe.Pointer(&h[0])
	if err := cuda.CopyDtoH(p, red, bytes, n.stream); err != nil {
		n.check(err)
		return
	}
	if err := n.stream.Sync(); err != nil {
		n.check(err)
		return
	}
	if err := n.sync.AllreduceSum64(h); err != nil {
		n.check(err)
		return
	}
	n.check(cuda.CopyHtoD(red, p, bytes, n.stream))
}

func (l *batchNorm) forward(n *Net, x, y cuda.Ptr, nb int) {
	m, c := nb*l.shape.H*l.shape.W, l.c
	l.batch = n.train
	if l.batch {
		n.bnSums(l.fred, x, x, 0, m, c)
		n.reduce(l.fred, 2*c+1)
		n.launch(n.f.bnStatsTrain, c, l.mean, l.istd, l.s, l.t, l.rmean, l.rvar, l.fred,
			l.gamma, l.beta, int32(c), l.momentum, l.eps)
	} else {
		n.launch(n.f.bnStatsEval, c, l.mean, l.istd, l.s, l.t, l.rmean, l.rvar, l.gamma, l.beta,
			int32(c), l.eps)
	}
	n.launch(n.f.bnNorm, m*c, y, x, int64(m), int32(c), l.mean, l.s, l.t)
}

func (l *batchNorm) backward(n *Net, x, y, dy, dx cuda.Ptr, nb int) {
	m, c := nb*l.shape.H*l.shape.W, l.c
	n.bnSums(l.bred, dy, x, l.mean, m, c) // sum dy, sum dy*(x-mean)
	n.launch(n.f.bnGrads, c, l.dgamma, l.dbeta, l.bred, l.istd, int32(c))
	n.ready(l.off)
	if dx == 0 {
		return
	}
	if l.batch {
		n.reduce(l.bred, 2*c)
	}
	n.launch(n.f.bnCoef, c, l.a, l.b, l.k, l.bred, l.fred, l.istd, l.gamma, int32(c), b2i(l.batch))
	n.launch(n.f.bnBwd, m*c, dx, dy, x, int64(m), int32(c), l.mean, l.a, l.b, l.k)
}
